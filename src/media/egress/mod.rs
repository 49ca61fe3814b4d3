//! What leaves a live session besides LL-HLS: WHEP viewers (`whep`, WebRTC), RTSP clients
//! (`rtsp`) and simulcast targets (`simulcast`), all fed from the session's tap.

pub mod rtsp;
pub mod simulcast;
pub mod whep;
