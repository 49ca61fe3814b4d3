//! The protocol fronts of live ingest: each turns a publisher's connection into a push of the
//! stream's live session. `rtmp` (RTMP and RTMPS), `srt` and `whip` take the connection and its
//! credentials; `pipeline` is the GStreamer front their media enters (RTMP's frames through
//! `front`, MPEG-TS through `tsdemux`, WebRTC through `webrtcbin`) and hands to the session's
//! outputs; `flv` reads RTMP's tag bodies; `liveness` watches a push for media and keyframes; `limits` bounds
//! pushes per address and in all.

pub mod flv;
pub(crate) mod front;
pub mod limits;
pub mod liveness;
pub mod pipeline;
pub mod push;
pub mod rtmp;
pub mod slate;
pub mod srt;
pub mod standby;
pub mod whip;
