//! Clips (CONTRACT: Clips, downloads, thumbnails): a VOD cut out of another without a re-encode,
//! and where the cut falls. No IO here.

use std::ops::Range;

use chrono::{DateTime, Utc};
use poem_openapi::{Object, Union};
use serde::{Deserialize, Serialize};

/// Where a clip was cut from (the record's `clipOf`): a VOD and seconds from its start, or a
/// live stream's DVR window and instants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Union)]
#[oai(one_of)]
#[serde(untagged)]
pub enum ClipOf {
    Vod(ClipOfVod),
    Stream(ClipOfStream),
}

/// A clip of a VOD, uploaded or recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Object)]
#[serde(rename_all = "camelCase")]
#[oai(rename_all = "camelCase")]
pub struct ClipOfVod {
    /// The VOD it is cut from: uploaded or a recording.
    pub vod_id: String,
    /// Seconds from the source's start. The clip starts at the last keyframe at or before it.
    pub start_sec: f64,
    /// Seconds from the source's start, after `startSec`.
    pub end_sec: f64,
}

/// A clip of a live stream's DVR window, or of one of its complete recordings, by wall-clock
/// instants (as `EXT-X-PROGRAM-DATE-TIME` gives them). A range in a recording makes a clip of
/// that recording: the record's `clipOf` then names it, with seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Object)]
#[serde(rename_all = "camelCase")]
#[oai(rename_all = "camelCase")]
pub struct ClipOfStream {
    /// The stream whose DVR window (on the node holding its push) or recording holds the range.
    pub stream_id: String,
    /// ISO 8601. The clip starts at the last keyframe at or before it.
    pub start: String,
    /// ISO 8601, after `start`.
    pub end: String,
}

impl ClipOfStream {
    /// `start` and `end`, read.
    pub fn instants(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let read = |s: &str| DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc));
        Some((read(&self.start)?, read(&self.end)?))
    }
}

/// How far the range may reach past the source's end (its duration is rounded).
pub const END_SLACK: f64 = 0.05;

impl ClipOfVod {
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

/// What is wrong with a range `[start, end]` of a DVR window that holds `[first, last]`.
pub fn window_problem(
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    (first, last): (DateTime<Utc>, DateTime<Utc>),
) -> Option<(&'static str, String)> {
    let millis = chrono::SecondsFormat::Millis;
    if end <= start {
        return Some(("clip.end", "must be after clip.start".into()));
    }
    if start < first || start >= last {
        let (first, last) = (first.to_rfc3339_opts(millis, true), last.to_rfc3339_opts(millis, true));
        return Some(("clip.start", format!("must be inside the stream's DVR window, {first} to {last}")));
    }
    if end > last {
        let last = last.to_rfc3339_opts(millis, true);
        return Some((
            "clip.end",
            format!("must be at most the end of the DVR window's last segment, {last}"),
        ));
    }
    None
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

/// Where instant `at` (ms) lies on a recording's timeline, in seconds from its start, given its
/// segments in order as (the wall-clock time of the first frame in ms, if known, and seconds).
/// An instant in a pause of the recording (a publisher away) maps to the start of the segment
/// after it. `None` when it lies before the first dated segment or after the last one ends
/// (each by more than [`END_SLACK`]), or when no segment is dated.
pub fn seconds_at(segments: &[(Option<i64>, f64)], at: i64) -> Option<f64> {
    let slack = (END_SLACK * 1000.0) as i64;
    let mut start = 0.0;
    let mut last_end: Option<i64> = None;
    for &(date, length) in segments {
        if let Some(d) = date {
            let end = d + (length * 1000.0).round() as i64;
            if at < d {
                // Before this segment: in the pause before it, or before the recording began.
                return (last_end.is_some() || at >= d - slack).then_some(start);
            }
            if at < end {
                return Some(start + (at - d) as f64 / 1000.0);
            }
            last_end = Some(end);
        }
        start += length;
    }
    last_end.filter(|end| at <= end + slack).map(|_| start)
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
        let clip = |s, e| ClipOfVod { vod_id: "v".into(), start_sec: s, end_sec: e };
        assert_eq!(clip(1.0, 2.0).problem(60.0), None);
        assert_eq!(clip(0.0, 60.04).problem(60.0), None);
        assert_eq!(clip(2.0, 2.0).problem(60.0).map(|p| p.0), Some("clip.endSec"));
        assert_eq!(clip(3.0, 2.0).problem(60.0).map(|p| p.0), Some("clip.endSec"));
        assert_eq!(clip(0.0, 61.0).problem(60.0).map(|p| p.0), Some("clip.endSec"));
        assert_eq!(clip(60.0, 70.0).problem(60.0).map(|p| p.0), Some("clip.startSec"));
    }

    #[test]
    fn a_live_range_is_checked_against_the_window() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).expect("instant").with_timezone(&Utc);
        let window = (t("2026-12-06T10:00:00Z"), t("2026-12-06T10:10:00Z"));
        let problem = |a, b| window_problem((t(a), t(b)), window).map(|p| p.0);
        assert_eq!(problem("2026-12-06T10:01:00Z", "2026-12-06T10:02:00Z"), None);
        assert_eq!(problem("2026-12-06T10:00:00Z", "2026-12-06T10:10:00Z"), None);
        assert_eq!(problem("2026-12-06T10:02:00Z", "2026-12-06T10:01:00Z"), Some("clip.end"));
        assert_eq!(problem("2026-12-06T09:59:59Z", "2026-12-06T10:01:00Z"), Some("clip.start"));
        assert_eq!(problem("2026-12-06T10:05:00Z", "2026-12-06T10:10:01Z"), Some("clip.end"));
        let stream = ClipOfStream {
            stream_id: "s".into(),
            start: "2026-12-06T10:01:00.250+01:00".into(),
            end: "x".into(),
        };
        assert_eq!(stream.instants(), None);
        let stream = ClipOfStream { end: "2026-12-06T09:02:00Z".into(), ..stream };
        assert_eq!(stream.instants().map(|(a, _)| a), Some(t("2026-12-06T09:01:00.250Z")));
    }

    #[test]
    fn instants_map_onto_a_recordings_timeline() {
        let t = 1_796_000_000_000;
        // 2-s segments from t, a 5-s pause of the publisher after the second, then 2 more.
        let segments =
            [(Some(t), 2.0), (Some(t + 2000), 2.0), (Some(t + 9000), 2.0), (Some(t + 11_000), 2.0)];
        assert_eq!(seconds_at(&segments, t), Some(0.0));
        assert_eq!(seconds_at(&segments, t + 2500), Some(2.5));
        assert_eq!(seconds_at(&segments, t + 6000), Some(4.0), "in the pause: the next segment");
        assert_eq!(seconds_at(&segments, t + 9500), Some(4.5));
        assert_eq!(seconds_at(&segments, t + 13_000), Some(8.0), "the very end");
        assert_eq!(seconds_at(&segments, t + 13_040), Some(8.0), "within the slack");
        assert_eq!(seconds_at(&segments, t + 13_100), None, "after it");
        assert_eq!(seconds_at(&segments, t - 100), None, "before it");
        assert_eq!(seconds_at(&[(None, 2.0)], t), None, "no date");
        // Undated segments count their length.
        assert_eq!(seconds_at(&[(None, 2.0), (Some(t), 2.0)], t + 500), Some(2.5));
    }
}
