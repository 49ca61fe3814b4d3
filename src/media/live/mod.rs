//! A live stream's session and its outputs. `outputs` opens what a push feeds (the LL-HLS
//! channel, the recorder, the tap); `pipeline` attaches the packaging branches to a push's tees
//! and hands its video to the session's `encoders` (the ladder's decoder and rung encoders,
//! kept through a reconnect), `pack` packages the `source` and `audio` renditions on the push's
//! own thread, `mux` moves the rungs' muxer output into the channel, `cut` telling each rung's
//! muxer where to cut and `split` where segments and parts begin; `ladder` plans the rungs;
//! `channel` is the live edge in memory that the origin serves, with its media playlist model
//! (`crate::media::hls::live`) and DVR writer (`dvr`); `segments` is what it hands the outputs
//! that take its segments, such as `recording`, which stores a `vodEnabled` session as a VOD;
//! `taps` feeds WHEP viewers and RTSP clients; `threads` schedules the muxers' threads.

pub mod channel;
mod cut;
pub mod dvr;
pub mod encoders;
pub mod ladder;
mod mux;
mod pack;
pub mod pipeline;
pub mod recording;
pub mod segments;
pub mod session;
pub mod split;
pub mod taps;
pub mod threads;
