//! Media: ingest and (later) packaging and playback. GStreamer pipelines live here; the
//! protocol state machines beside them do no IO.

pub mod ingest;
pub mod live;
pub mod live_hls;
pub mod rtmp;
pub mod vod;
