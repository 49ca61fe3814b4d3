//! HLS text shared by live and VOD: the master playlist (`master`) and the media playlist tags
//! both write the same way (`tags`). The live LL-HLS media playlist model is
//! [`crate::media::live_hls::playlist`]; the VOD one, a fixed list of segments, is
//! [`crate::media::vod::hls`]. `golden` pins every byte they serve.

pub mod master;
pub mod tags;
pub mod uris;

#[cfg(test)]
mod golden;
