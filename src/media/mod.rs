//! Media: GStreamer pipelines and the protocol state machines beside them, in rooms that point
//! one way (docs/architecture.md: Media's rooms; `tests/layers.rs` checks it):
//!
//! - `gst`: GStreamer set-up shared by every pipeline;
//! - `cmaf`, `hls`, `webrtc`: what media is made of (ISO-BMFF boxes, HLS playlists, SDP and peers);
//! - `still`: one picture out of a CMAF segment, as JPEG, and the bound on decoding them;
//! - `live`: a live stream's session and its outputs (LL-HLS channel, DVR, recording, taps);
//! - `ingest`: the protocol fronts that feed a session (RTMP, SRT, WHIP);
//! - `egress`: what plays from a session besides HLS (WHEP, RTSP);
//! - `vod`: transcode, probe and thumbnails of uploaded files.

pub mod cmaf;
pub mod egress;
pub mod gst;
pub mod hls;
pub mod ingest;
pub mod live;
pub mod still;
pub mod vod;
pub mod webrtc;
