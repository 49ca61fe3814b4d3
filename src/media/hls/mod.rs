//! HLS text, live and VOD: the master playlist (`master`), the live LL-HLS media playlist model
//! (`live`), the one writer of VOD media playlists for transcodes and recordings (`vod`), the
//! tags both write the same way (`tags`) and the URIs in playlists (`uris`). `golden` pins every
//! byte they serve.

pub mod live;
pub mod master;
pub mod tags;
pub mod uris;
pub mod vod;

#[cfg(test)]
mod golden;
