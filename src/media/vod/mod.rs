//! Video on demand: the probe of an uploaded source, the ladder transcode and its workers, and the
//! HLS playlists of the result; clips cut out of a VOD; its MP4 downloads.

pub mod clip;
pub mod downloads;
pub mod probe;
mod thumbnail;
pub mod transcode;
pub mod worker;
