//! Where the `source` variant's segments and parts begin, decided frame by frame in decode order
//! (the `source` muxer runs in `cmafmux manual-split` mode; `pipeline::split_source` turns each
//! decision into an `FMP4MuxSplitNow` event). Plain data, unit-tested without GStreamer.
//!
//! Left to itself, `cmafmux` ends a chunk at the first frame in decode order whose presentation
//! time is past the chunk's end, so a publisher's B-frames gave parts of uneven length
//! (docs/live-hls.md, "B-frames in the source"). Here a segment begins at the first keyframe at
//! least `segment` after the last one's presentation time (as `cmafmux` chose), and a part at the
//! first frame whose decode time is at least `part` after the part's first: every part but a
//! segment's last lasts `part` in decode time, which is what its `trun` adds up to.

/// What to start before a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// A segment (a CMAF fragment), at a keyframe.
    Segment,
    /// A part (a CMAF chunk) within the segment.
    Part,
}

/// The splitter's thresholds (nanoseconds) and what it has seen.
#[derive(Debug)]
pub struct Splitter {
    segment: u64,
    part: u64,
    /// The presentation time of the segment's keyframe and the decode time of the part's first
    /// frame; `None` before the first frame.
    last: Option<(u64, u64)>,
}

impl Splitter {
    /// Segments of at least `segment` ns (start to start, in presentation time) and parts of at
    /// least `part` ns (in decode time). Callers pass each less a margin for millisecond-rounded
    /// timestamps.
    pub fn new(segment: u64, part: u64) -> Splitter {
        Splitter { segment, part, last: None }
    }

    /// The split to make before a frame with these timestamps (ns), if any. Timestamps that go
    /// back by more than a segment (a publisher that restarts its clock) start a part, or a
    /// segment at a keyframe, rather than leave one open until they catch up.
    pub fn next(&mut self, pts: u64, dts: u64, keyframe: bool) -> Option<Split> {
        let Some((start, part_start)) = self.last else {
            self.last = Some((pts, dts));
            return None;
        };
        let back = |now: u64, then: u64| now.saturating_add(self.segment) < then;
        let split = if keyframe && (pts >= start.saturating_add(self.segment) || back(pts, start)) {
            Split::Segment
        } else if dts >= part_start.saturating_add(self.part) || back(dts, part_start) {
            Split::Part
        } else {
            return None;
        };
        self.last = Some(match split {
            Split::Segment => (pts, dts),
            Split::Part => (start, dts),
        });
        Some(split)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// 30 fps frames in decode order with millisecond-rounded timestamps, as FLV carries them:
    /// `(pts, dts, keyframe)` in ns; a keyframe every 60 frames; with `bframes`, each anchor is
    /// followed in decode order by two B-frames shown before it, and the presentation is delayed
    /// by two frames.
    fn frames(count: u64, bframes: bool) -> Vec<(u64, u64, bool)> {
        let at = |n: u64| (n * 1000 / 30) * MS;
        (0..count)
            .map(|n| {
                let delay = if bframes { 2 } else { 0 };
                // Display order within each mini-GOP of three after the keyframe: P B B → shown
                // as B B P, so the P is shown two frames later and each B one frame earlier.
                let shown = match (bframes, n % 60) {
                    // The keyframe, and the GOP's last two frames (no whole mini-GOP): in place.
                    (false, _) | (true, 0 | 58 | 59) => n,
                    (true, k) if (k - 1) % 3 == 0 => n + 2,
                    (true, _) => n - 1,
                };
                (at(shown + delay), at(n), n % 60 == 0)
            })
            .collect()
    }

    fn splits(splitter: &mut Splitter, frames: &[(u64, u64, bool)]) -> Vec<(usize, Split)> {
        frames
            .iter()
            .enumerate()
            .filter_map(|(i, &(pts, dts, key))| splitter.next(pts, dts, key).map(|s| (i, s)))
            .collect()
    }

    /// The thresholds `pipeline::split_source` uses for 7-frame parts of 2-s segments at 30 fps.
    fn thirty_fps() -> Splitter {
        let frame = 1e9 / 30.0;
        Splitter::new((2e9 - frame) as u64, (7.0 * frame - frame / 2.0) as u64)
    }

    #[test]
    fn parts_are_seven_frames_in_decode_order_and_segments_start_at_keyframes() {
        for bframes in [false, true] {
            let got = splits(&mut thirty_fps(), &frames(130, bframes));
            let mut want = Vec::new();
            for segment in [0, 60, 120] {
                if segment > 0 {
                    want.push((segment, Split::Segment));
                }
                // 60 frames: parts start every 7 frames; the segment's last is 4 frames.
                want.extend(
                    (1..=8)
                        .map(|k| segment + 7 * k)
                        .filter(|&i| i < segment + 60 && i < 130)
                        .map(|i| (i, Split::Part)),
                );
            }
            assert_eq!(got, want, "with B-frames: {bframes}");
        }
    }

    #[test]
    fn the_first_frame_starts_nothing_and_an_early_keyframe_no_segment() {
        let mut s = thirty_fps();
        assert_eq!(s.next(0, 0, true), None);
        // A keyframe a second in: a part (its decode time is past the part), not a segment.
        assert_eq!(s.next(1000 * MS, 1000 * MS, true), Some(Split::Part));
        // Two seconds after the segment's keyframe: a segment.
        assert_eq!(s.next(2000 * MS, 2000 * MS, true), Some(Split::Segment));
    }

    #[test]
    fn timestamps_that_go_back_by_more_than_a_segment_start_a_part_or_a_segment() {
        let mut s = thirty_fps();
        assert_eq!(s.next(60_000 * MS, 60_000 * MS, true), None);
        assert_eq!(s.next(60_033 * MS, 60_033 * MS, false), None);
        // The publisher restarts its clock: a delta frame starts a part there...
        assert_eq!(s.next(0, 0, false), Some(Split::Part));
        // ...and the parts go on from the new clock.
        assert_eq!(s.next(33 * MS, 33 * MS, false), None);
        assert_eq!(s.next(233 * MS, 233 * MS, false), Some(Split::Part));
        // A keyframe on the new clock starts a segment, since the segment's keyframe was on
        // the old one, more than a segment ahead.
        assert_eq!(s.next(267 * MS, 267 * MS, true), Some(Split::Segment));
        assert_eq!(s.next(300 * MS, 300 * MS, false), None);
        // Going back by less than a segment (a jittery clock) splits nothing.
        assert_eq!(s.next(100 * MS, 100 * MS, false), None);
        assert_eq!(s.next(100 * MS, 100 * MS, true), None);
    }
}
