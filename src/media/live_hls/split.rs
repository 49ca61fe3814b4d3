//! Where segments and parts begin, decided frame by frame, and how long parts are. Plain data,
//! unit-tested without GStreamer; `pipeline` turns each decision into an `FMP4MuxSplitNow` event
//! for a `cmafmux` in `manual-split` mode (every muxer of a push: the `source` variant's, the
//! rungs', the audio's) and, for the rungs, into a keyframe request.
//!
//! Left to itself, `cmafmux` ends a chunk at the first frame in decode order whose presentation
//! time is past the chunk's end, so a publisher's B-frames gave parts of uneven length, and every
//! segment ended in whatever was left over: at 200-ms parts, a 4-frame video part and a 3-frame
//! audio one (docs/live-hls.md, "Segment ends"). Here a segment begins at the first keyframe at
//! least `segment` after the last one's presentation time, and its parts are laid out in advance
//! ([`layout`]) for as many frames as the last segment held: about the configured part each,
//! within RFC 8216bis's bounds for PART-TARGET, the longer ones last, so that the segment's last
//! part lasts longer than a player's lookup tolerance ([`SHORTEST_LAST_PART`]). A part begins at
//! the first frame whose decode time is at least its planned offset (less half a frame) after the
//! segment's first.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// hls.js (`maxFragLookUpTolerance`, 0.25 s by default) takes the next segment once 0.25 s or
/// less of the current one is left after its buffer's end, and so skips a segment's last part
/// that short when it has fallen behind the edge (docs/live-hls.md, "Segment ends"). A last part
/// is planned longer than this: the tolerance and 5 ms for millisecond-rounded timestamps.
pub const SHORTEST_LAST_PART: f64 = 0.255;

/// The frame (seconds) a video plan is made for, from the caps' frame rate: unknown rates are
/// taken as 30 fps. The rate comes through [`crate::media::frame_rate_of`], which already drops
/// rates outside 1–240 fps that a publisher's stream can claim; they are held here too, so a plan
/// never has more than 240 frames a second to lay out whoever calls it.
fn video_frame(rate: Option<f64>) -> f64 {
    1.0 / rate.filter(|r| (1.0..=crate::media::MAX_FRAME_RATE).contains(r)).unwrap_or(30.0)
}

/// An AAC frame (1024 samples, in seconds) at `rate` Hz, held to AAC's 8–96 kHz: an
/// AudioSpecificConfig can state any 24-bit rate.
fn aac_frame(rate: i32) -> f64 {
    1024.0 / f64::from(rate.clamp(8_000, 96_000))
}

/// The frames a segment of `segment` seconds holds when it starts at the first frame at least
/// `segment` less half a frame after the last one's start (frames of `frame` seconds).
fn segment_frames(segment: f64, frame: f64) -> u32 {
    (segment / frame - 0.5).ceil().max(1.0) as u32
}

/// The fewest frames of `frame` seconds that last at least `seconds`.
fn frames_for(seconds: f64, frame: f64) -> u32 {
    (seconds / frame - 1e-9).ceil().max(1.0) as u32
}

/// The part sizes (frames, in order) of a segment of `frames` frames whose parts are about `c`
/// frames, within RFC 8216bis 4.4.4.9 for [`part_target`]`(c)` (none longer; each but the last
/// at least 85 % of it, with 2 ms to spare for rounded timestamps) and with a last part longer
/// than [`SHORTEST_LAST_PART`]; `None` if there is no such layout. Of the layouts, the one whose
/// parts are nearest `c` on average, the longest last part, and the others as even as can be,
/// the longer ones last.
pub fn layout(frames: u32, c: u32, frame: f64) -> Option<Vec<u32>> {
    let longest = c + 1;
    let shortest = frames_for(0.85 * part_target(c, frame) + 0.002, frame);
    let last_least = frames_for(SHORTEST_LAST_PART + 1e-6, frame);
    if c == 0 || last_least > longest || shortest > longest {
        return None;
    }
    let mut counts: Vec<u32> = (1..=frames / shortest + 1).collect();
    let off = |parts: u32| (f64::from(frames) / f64::from(parts) - f64::from(c)).abs();
    counts.sort_by(|a, b| off(*a).total_cmp(&off(*b)));
    counts.into_iter().find_map(|parts| {
        let others = parts - 1;
        (last_least..=longest.min(frames)).rev().find_map(|last| {
            let rest = frames - last;
            let fits =
                if others == 0 { rest == 0 } else { others * shortest <= rest && rest <= others * longest };
            fits.then(|| {
                let base = rest.checked_div(others).unwrap_or(0);
                let longer = rest - base * others;
                let mut sizes = vec![base; (others - longer) as usize];
                sizes.resize(others as usize, base + 1);
                sizes.push(last);
                sizes
            })
        })
    })
}

/// Whether parts of `c` frames of `frame` seconds are at least 85 % of [`part_target`], as RFC
/// 8216bis 4.4.4.9 asks of every part but a segment's last.
fn long_enough(c: u32, frame: f64) -> bool {
    f64::from(c) * frame >= 0.85 * part_target(c, frame)
}

/// The frames in a regular part, at least `least`: the fewest that are [`long_enough`] and give a
/// segment of `frames` frames a [`layout`]; failing that, the fewest that are long enough.
fn part_frames(least: u32, frames: u32, frame: f64) -> u32 {
    let least = least.max(1);
    let legal = || (least..=frames.max(least)).filter(|&c| long_enough(c, frame));
    legal().find(|&c| layout(frames, c, frame).is_some()).or_else(|| legal().next()).unwrap_or(least)
}

/// `PART-TARGET` for parts of about `c` frames of `frame` seconds: a [`layout`] makes none longer
/// than `c + 1` frames, and timestamps carry a millisecond or two of rounding, so a frame and 2 ms
/// more. Every part then fits within it.
fn part_target(c: u32, frame: f64) -> f64 {
    f64::from(c + 1) * frame + 0.002
}

/// What a rendition's parts are planned from, as `pipeline` makes it for each muxer: the frame
/// (seconds), the frames a segment holds and the frames in a regular part.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    pub frame: f64,
    pub frames: u32,
    pub part_frames: u32,
}

impl Plan {
    /// A video rendition at the rate its caps state ([`video_frame`]: unknown and absurd rates
    /// as 30 fps), with segments of `segment` seconds: parts of whole frames, at least seven,
    /// about `part` seconds, and a segment's last part long enough that a player does not skip
    /// it ([`part_frames`]).
    pub fn video(segment: f64, part: f64, rate: Option<f64>) -> Plan {
        let frame = video_frame(rate);
        Plan::new(segment, frame, ((part / frame).round() as u32).max(7))
    }

    /// An AAC rendition at `rate` Hz ([`aac_frame`]), with segments of `segment` seconds: no
    /// keyframes to wait for, and no least part but the configured one.
    pub fn aac(segment: f64, part: f64, rate: i32) -> Plan {
        let frame = aac_frame(rate);
        Plan::new(segment, frame, (part / frame).ceil() as u32)
    }

    fn new(segment: f64, frame: f64, least: u32) -> Plan {
        let frames = segment_frames(segment, frame);
        Plan { frame, frames, part_frames: part_frames(least, frames, frame) }
    }

    /// The rendition's `PART-TARGET` ([`part_target`]).
    pub fn part_target(&self) -> f64 {
        part_target(self.part_frames, self.frame)
    }
}

/// Where a grid's lines start from.
#[derive(Debug)]
enum Origin {
    /// The splitter's own first frame (the rungs: the decoded frames and each encoder's output,
    /// whose clocks differ, x264 adding 1000 hours, but not their steps).
    Own(Option<u64>),
    /// The video's first frame, as the `source` splitter publishes it (the audio: same clock);
    /// 0 until it is known.
    Video(Arc<AtomicU64>),
}

/// What to start before a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// A segment (a CMAF fragment), at a keyframe.
    Segment,
    /// A part (a CMAF chunk) within the segment.
    Part,
}

/// The splitter's thresholds (nanoseconds), its plan for the segment and what it has seen.
#[derive(Debug)]
pub struct Splitter {
    segment: u64,
    /// For frames any of which may start a segment: the nominal segment and an offset (ns) of
    /// a grid of timestamps, `k × segment + offset`, each segment laid out to end on its next
    /// line as near as whole frames allow. Segments then average exactly the configured
    /// duration, and the renditions of a push keep the same media sequence numbers for the same
    /// moments (AAC at 48 kHz: 94, 94, 94, 93 frames, where 94 each drifted 5.3 ms a segment
    /// from the video). `None` for the `source` variant, whose segments follow the publisher's
    /// keyframes.
    grid: Option<(f64, f64)>,
    /// Where the grid's lines start from.
    origin: Origin,
    /// The `source` variant's splitter tells the audio's where the video's grid starts: its
    /// first frame's presentation time (ns; `u64::MAX` until then).
    publish: Option<Arc<AtomicU64>>,
    frame: f64,
    part_frames: u32,
    /// The frames a segment is expected to hold: the last one's, the nominal at first.
    expected: u32,
    /// The most frames planned for: a publisher that sends a keyframe once a minute gets a plan
    /// for the first few seconds of each segment and parts of `part_frames` after it.
    most: u32,
    /// Where the segment's parts start, ns after its first decode time less half a frame, its
    /// expected end last.
    cuts: Vec<u64>,
    state: Option<State>,
}

#[derive(Debug)]
struct State {
    /// The presentation time of the segment's first frame, the decode times of it and of the
    /// part's first, and the next cut to make.
    start: u64,
    start_dts: u64,
    part_dts: u64,
    next: usize,
}

impl Splitter {
    /// For frames whose keyframes the stream chose (the `source` variant): a segment at the
    /// first keyframe a `segment` (seconds) less a frame after the last one's start, so that a
    /// keyframe stamped a millisecond early is still on time. Parts as [`layout`] lays out
    /// `plan`, for its segment's frames at first.
    pub fn at_keyframes(segment: f64, plan: Plan) -> Splitter {
        Splitter::new(segment - plan.frame, plan.frame, plan.part_frames, plan.frames)
    }

    /// For frames any of which may start a segment (the rungs, whose keyframes are forced where
    /// this says; AAC): a segment at the first frame a `segment` (seconds) less half a frame
    /// after the last one's start, which millisecond-rounded timestamps cannot tip either way.
    /// Parts as [`layout`] lays out `plan`, for its segment's frames at first.
    /// Segments keep to a grid of timestamps (`grid`), each laid out in advance for the frames
    /// that bring it nearest its line.
    pub fn at_any_frame(segment: f64, plan: Plan) -> Splitter {
        let mut s = Splitter::new(segment - plan.frame / 2.0, plan.frame, plan.part_frames, plan.frames);
        s.grid = Some((segment.max(1e-3) * 1e9, 0.0));
        s
    }

    /// The grid's lines `offset` seconds after the video's, from the video's first frame as
    /// `video` holds it (the audio's: `cut`).
    pub fn on_the_videos_grid(mut self, video: Arc<AtomicU64>, offset: f64) -> Splitter {
        self.grid = self.grid.map(|(segment, _)| (segment, offset * 1e9));
        self.origin = Origin::Video(video);
        self
    }

    /// Stores its first frame's presentation time in `origin` (the `source` splitter's, for
    /// the audio's grid).
    pub fn publishing_origin(mut self, origin: Arc<AtomicU64>) -> Splitter {
        self.publish = Some(origin);
        self
    }

    /// Segments of at least `segment` seconds (start to start, in presentation time) and parts
    /// of about `part_frames` frames of `frame` seconds, laid out ([`layout`]) for segments of
    /// `expected` frames at first and then of as many frames as the last segment held.
    fn new(segment: f64, frame: f64, part_frames: u32, expected: u32) -> Splitter {
        let ns = |seconds: f64| (seconds * 1e9).round().max(0.0) as u64;
        let (segment, frame) = (ns(segment), ns(frame));
        let expected = expected.max(1);
        let mut s = Splitter {
            segment,
            grid: None,
            origin: Origin::Own(None),
            publish: None,
            frame: frame.max(1) as f64,
            part_frames: part_frames.max(1),
            expected,
            most: expected.saturating_mul(4),
            cuts: Vec::new(),
            state: None,
        };
        s.plan(expected);
        s
    }

    /// On a grid, lays out the segment that just began for the whole frames from its start to
    /// the line after the one nearest it (the one before, should that be more than a segment and
    /// a half away: a first frame just past the middle of a segment).
    fn plan_on_grid(&mut self) {
        let (Some((segment, offset)), Some(s)) = (self.grid, self.state.as_ref()) else { return };
        let origin = match &self.origin {
            Origin::Own(origin) => origin.unwrap_or(s.start),
            Origin::Video(video) => {
                Some(video.load(Ordering::Relaxed)).filter(|&v| v != u64::MAX).unwrap_or(0)
            }
        } as f64;
        let start = s.start as f64;
        let mut next = origin + (((start - origin - offset) / segment).round() + 1.0) * segment + offset;
        if next - start > 1.5 * segment {
            next -= segment;
        }
        let frames = ((next - start) / self.frame - 1e-3).ceil().clamp(1.0, f64::from(u32::MAX)) as u32;
        // The nearest count that can be laid out (a first segment, say, of 99 AAC frames has no
        // layout in parts of 11 and 12 ending in a 12): off the line by a frame or two.
        let (c, frame) = (self.part_frames, self.frame / 1e9);
        let near = [0, -1, 1, -2, 2].into_iter().map(|d: i64| (i64::from(frames) + d).max(1) as u32);
        let frames = near.clone().find(|&n| layout(n, c, frame).is_some()).unwrap_or(frames);
        self.plan(frames);
    }

    fn plan(&mut self, frames: u32) {
        let frames = frames.clamp(1, self.most);
        let (c, frame) = (self.part_frames, self.frame);
        let sizes = layout(frames, c, frame / 1e9).unwrap_or_else(|| {
            let mut sizes = vec![c; (frames / c) as usize];
            sizes.extend((frames % c > 0).then_some(frames % c));
            sizes
        });
        self.cuts.clear();
        let mut at = 0;
        for size in sizes {
            at += size;
            self.cuts.push((f64::from(at) * frame - frame / 2.0).round() as u64);
        }
    }

    /// The split to make before a frame with these timestamps (ns), if any. Timestamps that go
    /// back by more than a segment (a publisher that restarts its clock) start a part, or a
    /// segment at a keyframe, rather than leave one open until they catch up.
    pub fn next(&mut self, pts: u64, dts: u64, keyframe: bool) -> Option<Split> {
        let segment = self.segment;
        let back = |now: u64, then: u64| now.saturating_add(segment) < then;
        let Some(s) = self.state.as_mut() else {
            self.state = Some(State { start: pts, start_dts: dts, part_dts: dts, next: 0 });
            if let Some(p) = &self.publish {
                let _ = p.compare_exchange(u64::MAX, pts, Ordering::Relaxed, Ordering::Relaxed);
            }
            if let Origin::Own(origin) = &mut self.origin {
                *origin = Some(pts);
            }
            self.plan_on_grid();
            return None;
        };
        // On a grid, a segment ends when its planned frames are in (its last cut, half a frame
        // early); otherwise a segment after the last one's start.
        let end = match (self.grid, self.cuts.last()) {
            (Some(_), Some(&last)) => s.start.saturating_add(last),
            _ => s.start.saturating_add(segment),
        };
        if keyframe && (pts >= end || back(pts, s.start)) {
            if !back(pts, s.start) {
                self.expected = ((pts - s.start) as f64 / self.frame).round() as u32;
            } else if let Origin::Own(origin) = &mut self.origin {
                // A new clock: a new grid from here.
                *origin = Some(pts);
            }
            *s = State { start: pts, start_dts: dts, part_dts: dts, next: 0 };
            if self.grid.is_some() {
                self.plan_on_grid();
            } else {
                let expected = self.expected;
                self.plan(expected);
            }
            return Some(Split::Segment);
        }
        let due = match self.cuts.get(s.next) {
            Some(&at) => dts >= s.start_dts.saturating_add(at),
            None => {
                let regular = f64::from(self.part_frames) * self.frame - self.frame / 2.0;
                dts >= s.part_dts.saturating_add(regular.round() as u64)
            }
        };
        if back(dts, s.part_dts) {
            // A new clock: parts of the regular length from here until the next segment.
            s.next = self.cuts.len();
        } else if due {
            let into = dts.saturating_sub(s.start_dts);
            s.next = self.cuts.iter().position(|&at| at > into).unwrap_or(self.cuts.len()).max(s.next + 1);
        } else {
            return None;
        }
        s.part_dts = dts;
        Some(Split::Part)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// 30 fps frames in decode order with millisecond-rounded timestamps, as FLV carries them:
    /// `(pts, dts, keyframe)` in ns; a keyframe every `gop` frames; with `bframes`, each anchor
    /// is followed in decode order by two B-frames shown before it, and the presentation is
    /// delayed by two frames.
    fn frames(count: u64, gop: u64, bframes: bool) -> Vec<(u64, u64, bool)> {
        let at = |n: u64| (n * 1000 / 30) * MS;
        (0..count)
            .map(|n| {
                let delay = if bframes { 2 } else { 0 };
                // Display order within each mini-GOP of three after the keyframe: P B B → shown
                // as B B P, so the P is shown two frames later and each B one frame earlier.
                let k = n % gop;
                let shown = match (bframes, k) {
                    // The keyframe, and the GOP's last frames (no whole mini-GOP): in place.
                    (false, _) | (true, 0) => n,
                    (true, k) if k + 2 >= gop => n,
                    (true, k) if (k - 1) % 3 == 0 => n + 2,
                    (true, _) => n - 1,
                };
                (at(shown + delay), at(n), k == 0)
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

    /// What `pipeline` makes for the `source` variant at 30 fps, 200-ms parts, 2-s segments.
    fn thirty_fps() -> Splitter {
        Splitter::at_keyframes(2.0, Plan::video(2.0, 0.2, Some(30.0)))
    }

    /// The splits a segment starting at frame `start` laid out as `sizes` makes.
    fn segment(start: usize, sizes: &[usize], first: bool) -> Vec<(usize, Split)> {
        let mut at = start;
        let mut want = Vec::new();
        if !first {
            want.push((start, Split::Segment));
        }
        for size in &sizes[..sizes.len() - 1] {
            at += size;
            want.push((at, Split::Part));
        }
        want
    }

    #[test]
    fn a_segment_ends_in_a_part_longer_than_hls_js_skips() {
        let fps = |f: f64| 1.0 / f;
        // 30 fps, 200-ms parts: four of 7 frames, four of 8; the last 0.267 s.
        assert_eq!(layout(60, 7, fps(30.0)), Some(vec![7, 7, 7, 7, 8, 8, 8, 8]));
        // 25 fps: 333-ms parts (8 frames) end in two of 9; 200-ms ones (7 at least) in one of 8.
        assert_eq!(layout(50, 8, fps(25.0)), Some(vec![8, 8, 8, 8, 9, 9]));
        assert_eq!(layout(50, 7, fps(25.0)), Some(vec![7, 7, 7, 7, 7, 7, 8]));
        // 30 fps, 333-ms parts: six of 10 frames, each 0.333 s.
        assert_eq!(layout(60, 10, fps(30.0)), Some(vec![10; 6]));
        // No layout: 60 fps in parts of 12 or 13 frames (0.217 s at most).
        assert_eq!(layout(120, 12, fps(60.0)), None);
        // So 200-ms parts at 60 fps become about 15 frames (0.25 s), the last 16 ...
        assert_eq!(part_frames(12, 120, fps(60.0)), 15);
        assert_eq!(layout(120, 15, fps(60.0)), Some(vec![14, 15, 15, 15, 15, 15, 15, 16]));
        // ... and AAC at 48 kHz (94 frames a segment) 11 or 12 frames (0.235 s, 0.256 s).
        let aac = 1024.0 / 48_000.0;
        assert_eq!(segment_frames(2.0, aac), 94);
        assert_eq!(part_frames(10, 94, aac), 11);
        assert_eq!(layout(94, 11, aac), Some(vec![11, 11, 12, 12, 12, 12, 12, 12]));
        // Low-rate audio whose parts would be too short for PART-TARGET's slack gets longer
        // parts, laid out or not.
        let coarse = 1024.0 / 8_000.0;
        assert!(long_enough(part_frames(2, 16, coarse), coarse));
    }

    #[test]
    fn audio_segments_keep_to_the_videos_grid() {
        // AAC at 48 kHz with millisecond-rounded timestamps, as FLV carries them: 93.75 frames a
        // segment. Each segment starts within a frame of its place on the 2-s grid the rungs
        // keep (0.1 s after it), however long the push, and ends in a part hls.js does not skip.
        let plan = Plan::aac(2.0, 0.2, 48_000);
        let video = Arc::new(AtomicU64::new(0));
        let mut s = Splitter::at_any_frame(2.0, plan).on_the_videos_grid(video, 0.1);
        let at = |n: u64| (n * 1024 * 1000 / 48_000) * MS;
        let (mut starts, mut last_cut) = (vec![0u64], 0u64);
        let mut shortest_last = u64::MAX;
        for n in 0..94 * 400 {
            match s.next(at(n), at(n), true) {
                Some(Split::Segment) => {
                    shortest_last = shortest_last.min(at(n) - last_cut);
                    starts.push(at(n));
                    last_cut = at(n);
                }
                Some(Split::Part) => last_cut = at(n),
                None => {}
            }
        }
        assert!(starts.len() > 390, "{} segments", starts.len());
        for (k, start) in starts.iter().enumerate().skip(1) {
            let off = (*start as f64 - k as f64 * 2e9 - 1e8).abs() / 1e6;
            // Within a frame; the first segment's end within two (it is laid out as it can be).
            let frames = if k == 1 { 2.0 } else { 1.0 };
            assert!(off <= frames * 1024.0 / 48.0, "segment {k} starts {off} ms off the grid");
        }
        assert!(shortest_last as f64 / 1e9 > SHORTEST_LAST_PART, "a last part of {shortest_last} ns");
        // A rung at 30 fps keeps 60 frames a segment, as before.
        let mut rung = Splitter::at_any_frame(2.0, Plan::video(2.0, 0.2, Some(30.0)));
        let got = splits(&mut rung, &frames(181, 1, false));
        let mut want = segment(0, &[7, 7, 7, 7, 8, 8, 8, 8], true);
        want.extend(segment(60, &[7, 7, 7, 7, 8, 8, 8, 8], false));
        want.extend(segment(120, &[7, 7, 7, 7, 8, 8, 8, 8], false));
        want.push((180, Split::Segment));
        assert_eq!(got, want);
    }

    #[test]
    fn rates_a_stream_claims_are_held_to_what_a_plan_can_take() {
        assert_eq!(video_frame(Some(60.0)), 1.0 / 60.0);
        for claimed in [None, Some(1e6), Some(0.01), Some(f64::NAN), Some(f64::INFINITY)] {
            assert_eq!(video_frame(claimed), 1.0 / 30.0, "{claimed:?}");
        }
        assert_eq!(aac_frame(48_000), 1024.0 / 48_000.0);
        assert_eq!(aac_frame(i32::MAX), 1024.0 / 96_000.0);
        assert_eq!(aac_frame(-1), 1024.0 / 8_000.0);
        // The longest plan within those bounds: 240 fps, 6-s segments, 1-s parts.
        let frame = video_frame(Some(240.0));
        let n = segment_frames(6.0, frame);
        assert!(layout(n, part_frames(240, n, frame), frame).is_some());
    }

    #[test]
    fn every_layout_keeps_the_rfc_bounds() {
        // Each muxer's plan as `pipeline` makes it: video at common rates, AAC at 44.1/48 kHz.
        let plans = |segment, part| {
            let video = [24.0, 25.0, 30_000.0 / 1001.0, 30.0, 50.0, 60.0]
                .map(|fps| Plan::video(segment, part, Some(fps)));
            video.into_iter().chain([44_100, 48_000].map(|rate| Plan::aac(segment, part, rate)))
        };
        for part in [0.2, 0.25, 0.333, 0.5, 1.0] {
            for segment in [1.0, 2.0, 4.0, 6.0] {
                if segment < 3.0 * part {
                    continue;
                }
                for plan in plans(segment, part) {
                    let Plan { frame, frames: n, part_frames: c } = plan;
                    let target = plan.part_target();
                    let case = format!("{frame} s frames, {part} s parts, {segment} s segments");
                    let sizes = layout(n, c, frame).unwrap_or_else(|| panic!("no layout: {case}"));
                    assert_eq!(sizes.iter().sum::<u32>(), n, "{case}");
                    let (last, others) = sizes.split_last().unwrap_or_else(|| panic!("{case}"));
                    assert!(f64::from(*last) * frame > SHORTEST_LAST_PART, "{case}: {sizes:?}");
                    // Every part within PART-TARGET, give or take 2 ms; all but the last at least
                    // 85 % of it, less 2 ms.
                    for &size in &sizes {
                        assert!(f64::from(size) * frame + 0.002 <= target + 1e-9, "{case}: {sizes:?}");
                    }
                    for &size in others {
                        assert!(f64::from(size) * frame - 0.002 >= 0.85 * target, "{case}: {sizes:?}");
                    }
                    // Near the configured part (or seven frames): at most 0.1 s longer.
                    let near = part.max(7.0 * frame) + 0.1;
                    assert!(f64::from(c) * frame <= near, "{case}: {c} frames");
                }
            }
        }
    }

    #[test]
    fn parts_are_laid_out_in_decode_order_and_segments_start_at_keyframes() {
        for bframes in [false, true] {
            let got = splits(&mut thirty_fps(), &frames(130, 60, bframes));
            let mut want = Vec::new();
            let sizes = [7, 7, 7, 7, 8, 8, 8, 8];
            for start in [0, 60, 120] {
                want.extend(segment(start, &sizes, start == 0).into_iter().filter(|&(i, _)| i < 130));
            }
            assert_eq!(got, want, "with B-frames: {bframes}");
        }
    }

    #[test]
    fn a_late_keyframe_gets_a_part_of_its_own_and_an_irregular_gop_is_learned() {
        // Keyframes every 1.5 s: a segment holds two GOPs (90 frames). The first was planned
        // for 60: laid out to 60, then parts of 7.
        let got = splits(&mut thirty_fps(), &frames(181, 45, false));
        let mut want = segment(0, &[7, 7, 7, 7, 8, 8, 8, 8, 7, 7, 7, 7, 2], true);
        // The second is planned for the 90 it learned: six of 7, six of 8.
        want.extend(segment(90, &[7, 7, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8], false));
        want.push((180, Split::Segment));
        assert_eq!(got, want);
    }

    #[test]
    fn the_first_frame_starts_nothing_and_an_early_keyframe_no_segment() {
        let mut s = thirty_fps();
        assert_eq!(s.next(0, 0, true), None);
        // A keyframe a second in: a part (its decode time is past the first part), not a
        // segment.
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
        // ...and parts of 7 frames go on from the new clock.
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

    /// Checks a plan's layout, when it has one, against the bounds [`layout`] promises.
    fn check_plan(plan: Plan) {
        let Plan { frame, frames, part_frames: c } = plan;
        let target = plan.part_target();
        if let Some(sizes) = layout(frames, c, frame) {
            assert_eq!(sizes.iter().sum::<u32>(), frames, "{sizes:?}");
            let (last, others) = sizes.split_last().expect("a part");
            assert!(f64::from(*last) * frame > SHORTEST_LAST_PART, "{sizes:?}");
            assert!(sizes.iter().all(|&n| f64::from(n) * frame <= target + 1e-9), "{sizes:?} > {target}");
            assert!(
                others.iter().all(|&n| f64::from(n) * frame >= 0.85 * target),
                "{sizes:?} < 85 % of {target}"
            );
        }
    }

    proptest::proptest! {
        // What a push controls (claimed rates, every frame's timestamps and keyframe flag), with
        // settings the configuration accepts: no panic, plans within their bounds, and a segment
        // only at a keyframe. `fuzz/fuzz_targets/live_split.rs` runs the same for longer.
        #[test]
        fn any_stream_gets_a_bounded_plan_and_segments_only_at_keyframes(
            part_ms in 200u32..=1000,
            segment_ms in 1000u32..=6000,
            fps in proptest::num::f64::ANY,
            aac in proptest::num::i32::ANY,
            at_keyframes in proptest::bool::ANY,
            steps in proptest::collection::vec((-40_000i32..=200_000, -500i16..=500, proptest::bool::ANY), 0..400),
        ) {
            proptest::prop_assume!(segment_ms >= 3 * part_ms);
            let (part, segment) = (f64::from(part_ms) / 1e3, f64::from(segment_ms) / 1e3);
            let video = Plan::video(segment, part, Some(fps));
            check_plan(video);
            check_plan(Plan::aac(segment, part, aac));
            let mut s = if at_keyframes {
                Splitter::at_keyframes(segment, video)
            } else {
                Splitter::at_any_frame(segment, video)
            };
            let mut dts = 10_000 * MS;
            for (step_us, cts_ms, keyframe) in steps {
                dts = dts.saturating_add_signed(i64::from(step_us) * 1_000);
                let pts = dts.saturating_add_signed(i64::from(cts_ms) * MS as i64);
                if s.next(pts, dts, keyframe) == Some(Split::Segment) {
                    proptest::prop_assert!(keyframe, "a segment at a frame that is not a keyframe");
                }
            }
        }
    }
}
