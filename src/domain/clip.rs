//! Clips (CONTRACT: Clips, downloads, thumbnails): a VOD cut out of another without a re-encode,
//! and where the cut falls. No IO here.

use std::ops::Range;

use poem_openapi::Object;
use serde::{Deserialize, Serialize};

/// Where a clip was cut from: the VOD and the range asked for, in seconds from its start (the
/// record's `clipOf`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Object)]
#[serde(rename_all = "camelCase")]
#[oai(rename_all = "camelCase")]
pub struct ClipOf {
    /// The VOD it is cut from: uploaded or a recording.
    pub vod_id: String,
    /// Seconds from the source's start. The clip starts at the last keyframe at or before it.
    pub start_sec: f64,
    /// Seconds from the source's start, after `startSec`.
    pub end_sec: f64,
}

/// How far the range may reach past the source's end (its duration is rounded).
pub const END_SLACK: f64 = 0.05;

impl ClipOf {
    /// What is wrong with the range of a source `duration` seconds long: `(field, problem)`.
    pub fn problem(&self, duration: f64) -> Option<(&'static str, String)> {
        if self.end_sec <= self.start_sec {
            return Some(("clip.endSec", "must be greater than clip.startSec".into()));
        }
        if self.start_sec >= duration {
            return Some(("clip.startSec", format!("must be before the source's end, {duration:.3} s")));
        }
        if self.end_sec > duration + END_SLACK {
            return Some(("clip.endSec", format!("must be at most the source's duration, {duration:.3} s")));
        }
        None
    }
}

/// A chunk (CMAF `moof` + `mdat`, a part) of a rendition, on the source's timeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chunk {
    pub start: f64,
    pub duration: f64,
    /// It starts with a sync sample: playback may begin there.
    pub independent: bool,
}

/// Within this of a chunk's start counts as at it (timestamps are rounded to a tick).
const EPSILON: f64 = 0.001;

/// The chunks a clip of `[from, to)` keeps: from the last independent chunk that starts at or
/// before `from` (the first independent one when none does) through the last chunk that starts
/// before `to`. `None` when that leaves nothing.
pub fn cut(chunks: &[Chunk], from: f64, to: f64) -> Option<Range<usize>> {
    let first = chunks
        .iter()
        .rposition(|c| c.independent && c.start <= from + EPSILON)
        .or_else(|| chunks.iter().position(|c| c.independent))?;
    let end = chunks.iter().rposition(|c| c.start < to - EPSILON)? + 1;
    (first < end).then_some(first..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(every: usize, n: usize, length: f64) -> Vec<Chunk> {
        (0..n)
            .map(|i| Chunk { start: i as f64 * length, duration: length, independent: i % every == 0 })
            .collect()
    }

    #[test]
    fn the_cut_starts_at_the_keyframe_before_and_ends_with_the_chunk_holding_the_end() {
        // Every chunk independent (a rung's parts): the chunk holding `from`.
        let parts = chunks(1, 50, 0.2);
        assert_eq!(cut(&parts, 1.0, 3.0), Some(5..15));
        assert_eq!(cut(&parts, 1.1, 3.05), Some(5..16));
        // Keyframes every 10 chunks (a publisher's 2-s GOP): back to the one before.
        let source = chunks(10, 50, 0.2);
        assert_eq!(cut(&source, 3.9, 5.0), Some(10..25));
        assert_eq!(cut(&source, 4.0, 5.0), Some(20..25));
        // Whole segments of 4 s, each one chunk.
        let vod = chunks(1, 15, 4.0);
        assert_eq!(cut(&vod, 8.0, 68.0), Some(2..15));
        assert_eq!(cut(&vod, 9.0, 20.0), Some(2..5));
        // Nothing independent before: from the first keyframe on; nothing at all: none.
        let late = vec![
            Chunk { start: 0.0, duration: 1.0, independent: false },
            Chunk { start: 1.0, duration: 1.0, independent: true },
        ];
        assert_eq!(cut(&late, 0.0, 2.0), Some(1..2));
        assert_eq!(cut(&late, 0.0, 1.0), None);
        assert_eq!(cut(&[], 0.0, 1.0), None);
    }

    #[test]
    fn a_range_is_checked_against_its_source() {
        let clip = |s, e| ClipOf { vod_id: "v".into(), start_sec: s, end_sec: e };
        assert_eq!(clip(1.0, 2.0).problem(60.0), None);
        assert_eq!(clip(0.0, 60.04).problem(60.0), None);
        assert_eq!(clip(2.0, 2.0).problem(60.0).map(|p| p.0), Some("clip.endSec"));
        assert_eq!(clip(3.0, 2.0).problem(60.0).map(|p| p.0), Some("clip.endSec"));
        assert_eq!(clip(0.0, 61.0).problem(60.0).map(|p| p.0), Some("clip.endSec"));
        assert_eq!(clip(60.0, 70.0).problem(60.0).map(|p| p.0), Some("clip.startSec"));
    }
}
