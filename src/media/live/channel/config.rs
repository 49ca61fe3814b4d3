//! A channel's durations, window and key, and the playlist settings they make.

use std::path::PathBuf;

use super::LIVE_WINDOW_SEGMENTS;
use crate::domain::content_key::ContentKey;
use crate::media::hls::live::{Config, Window};

/// `source`'s TARGETDURATION: cut at the publisher's keyframes (docs/live-ingest.md).
pub const SOURCE_TARGET_DURATION: u32 = 6;
/// The least every playlist lists (s): what `source` must. video.js without LL-HLS joins it 18 s
/// back, where a 16-s audio playlist had nothing (docs/live-hls.md, "Players").
const LEAST_LISTED: f64 = 3.0 * SOURCE_TARGET_DURATION as f64;

/// Durations and window of a channel.
#[derive(Debug, Clone)]
pub struct ChannelConfig {
    pub part: f64,
    pub segment: f64,
    /// DVR: seconds kept, and the folder segments are written to.
    pub dvr: Option<(f64, PathBuf)>,
    /// `drmEnabled`: parts and segments are encrypted with this key (AES-128, IV = the
    /// segment's media sequence number); the init sections stay clear.
    pub key: Option<ContentKey>,
}

/// Where a media playlist (`/live/<id>/<session>/<rendition>/index.m3u8`) finds the stream's key.
pub const KEY_URI: &str = "../../key";

/// A rendition's `EXT-X-TARGETDURATION` and `PART-TARGET`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub target_duration: u32,
    pub part_target: f64,
}

impl ChannelConfig {
    pub(super) fn playlist_config(&self, timing: Timing) -> Config {
        Config {
            target_duration: timing.target_duration,
            part_target: timing.part_target,
            window: match &self.dvr {
                Some((seconds, _)) => Window::Seconds(*seconds),
                None => Window::Segments(LIVE_WINDOW_SEGMENTS),
            },
            key_uri: self.key.map(|_| KEY_URI.to_string()),
            least_listed: LEAST_LISTED,
        }
    }
}
