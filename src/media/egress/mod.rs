//! What plays from a live session besides LL-HLS: WHEP viewers (`whep`, WebRTC) and RTSP clients
//! (`rtsp`), both fed from the session's tap.

pub mod rtsp;
pub mod whep;
