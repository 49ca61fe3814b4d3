//! Video on demand: the probe of an uploaded source, the ladder transcode and its workers, and the
//! HLS playlists of the result.

pub mod probe;
mod thumbnail;
pub mod transcode;
pub mod worker;
