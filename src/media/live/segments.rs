//! What the live channel hands the outputs that take its closed segments (the recorder; later
//! the simulcast senders): each rendition's initialization sections and segments, clear, in
//! order, without waiting. An output is plugged into the channel as a [`SegmentOutput`]; the
//! channel knows nothing else of it.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// What a rendition carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Kind {
    Video { width: u32, height: u32, kbps: Option<u32>, frame_rate: Option<f64> },
    Audio { channels: u32 },
}

/// What a rendition is, as the master playlist and the VOD record need it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenditionInfo {
    pub name: String,
    pub kind: Kind,
    pub codec: Option<String>,
}

/// What the channel hands the recording.
pub enum Record {
    Init {
        rendition: String,
        generation: u32,
        data: Bytes,
    },
    /// `date`: the wall-clock time of its first frame (ms), as the live playlist states it.
    Segment {
        info: RenditionInfo,
        generation: u32,
        duration: f64,
        date: Option<i64>,
        data: Bytes,
    },
}

/// An output fed by the channel. `record` is called under the channel's lock: it must not wait
/// (queue, or drop and say so). Dropping the output ends it.
pub trait SegmentOutput: Send + Sync {
    fn record(&self, item: Record);
}

/// The recorder, for what generation `generation` of a channel feeds (none for one it leaves
/// out: the slate's).
pub fn recorder_for<'a>(
    recorder: &'a Option<Box<dyn SegmentOutput>>,
    unrecorded: &std::collections::BTreeSet<u32>,
    generation: u32,
) -> Option<&'a dyn SegmentOutput> {
    recorder.as_deref().filter(|_| !unrecorded.contains(&generation))
}
