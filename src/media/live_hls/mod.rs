//! LL-HLS packaging of live sessions (issue 5): the ladder plan and master playlist
//! (`ladder`), the media playlist model (`playlist`), the live edge in memory (`channel`), what
//! a part's `moof` says of its first sample (`moof`) and where the `source` variant's segments
//! and parts begin (`split`) are plain data, unit-tested without GStreamer; `dvr` writes a
//! channel's DVR segments off its locks; `pipeline` attaches the transcode and packaging
//! branches to a push's ingest pipeline and feeds the channel, `cut` telling each muxer where
//! to cut; `threads` schedules the muxers' threads.

pub mod channel;
mod cut;
pub mod dvr;
pub mod ladder;
pub mod moof;
pub mod pipeline;
pub mod playlist;
pub mod split;
pub mod threads;
