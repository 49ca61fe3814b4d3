//! Where segments and parts begin, decided frame by frame, and how long parts are. Plain data,
//! unit-tested without GStreamer; `pack` cuts the `source` and `audio` renditions by it, `cut`
//! turns each decision into an `FMP4MuxSplitNow` event for a rung's `cmafmux` in `manual-split`
//! mode, and the encoders into a keyframe request.
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

/// Whether a part's last frame, lasting `own` ns by its own word (if it says), is taken to last
/// the `gap` ns until the next frame's decode time: a gap of a few frames is its length (a
/// publisher's millisecond-rounded timestamps: 33, 33, 34 ms at 30 fps); a longer one (a stall,
/// a new clock) is not stretched into it. The rungs' cut ([`super::cut`]) and the packager
/// ([`super::pack`]) time a part's last frame by it.
pub fn lasts_until_next(gap: u64, own: Option<u64>) -> bool {
    own.is_none_or(|d| gap <= d.saturating_mul(4))
}

/// The frame (seconds) a video plan is made for, from the caps' frame rate: unknown rates are
/// taken as 30 fps. The rate comes through [`crate::media::gst::frame_rate_of`], which already drops
/// rates outside 1–240 fps that a publisher's stream can claim; they are held here too, so a plan
/// never has more than 240 frames a second to lay out whoever calls it.
fn video_frame(rate: Option<f64>) -> f64 {
    1.0 / rate.filter(|r| (1.0..=crate::media::gst::MAX_FRAME_RATE).contains(r)).unwrap_or(30.0)
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

    /// A regular part's duration (seconds): what `cmafmux` is told a chunk lasts.
    pub fn chunk(&self) -> f64 {
        f64::from(self.part_frames) * self.frame
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
mod tests;
