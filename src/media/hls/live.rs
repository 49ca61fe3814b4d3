//! The LL-HLS media playlist of one rendition, as plain data: parts and segments go in, the
//! playlist text comes out (RFC 8216bis: 4.4.3.7 EXT-X-PART-INF, 4.4.3.8 EXT-X-SERVER-CONTROL,
//! 4.4.4.9 EXT-X-PART, 4.4.5.2 EXT-X-SKIP, 4.4.5.3 EXT-X-PRELOAD-HINT, 4.4.5.4
//! EXT-X-RENDITION-REPORT; 6.2.5.2 blocking reload; 6.2.5.1 delta updates). No GStreamer here
//! (STYLE habit 2; anchor gst-plugins-rs `net/hlssink3/src/playlist.rs`).

use std::collections::VecDeque;
use std::fmt::Write;

use chrono::{DateTime, Utc};

use crate::media::hls::tags::{write_map, write_part, write_pdt, write_segment};

/// Parts more than this many target durations from the end of the playlist are listed no more
/// (RFC 8216bis 4.4.4.9: they SHOULD be removed once older than three target durations).
const PART_WINDOW_TARGETS: f64 = 3.0;
/// How many part targets a player holds back from the live edge (PART-HOLD-BACK; RFC 8216bis
/// 4.4.3.8: at least two, three recommended).
const PART_HOLD_BACK_PARTS: f64 = 3.0;
/// Durations are sums of floating-point seconds: boundaries are compared within a millisecond.
const EPSILON: f64 = 1e-3;
/// How far ahead of the newest part a blocking request may point before it is refused
/// (RFC 8216bis 6.2.5.2: the Advance Part Limit is 3).
const ADVANCE_PART_LIMIT: u64 = 3;

#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub duration: f64,
    pub independent: bool,
    pub uri: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub msn: u64,
    pub duration: f64,
    pub uri: String,
    pub parts: Vec<Part>,
    pub program_date_time: Option<DateTime<Utc>>,
    /// A discontinuity (reconnect) comes before this segment.
    pub discontinuity: bool,
    /// Its initialization section (`EXT-X-MAP`); a reconnect brings a new one.
    pub init_uri: String,
    /// It is listed but cannot be had (`EXT-X-GAP`): a DVR segment the disk did not take.
    pub gap: bool,
}

/// How long the playlist keeps segments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Window {
    /// The last `n` segments (a short live window).
    Segments(usize),
    /// The last `seconds` (DVR).
    Seconds(f64),
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Upper bound of every segment's duration (seconds, an integer per the spec).
    pub target_duration: u32,
    /// Upper bound of every part's duration (seconds).
    pub part_target: f64,
    pub window: Window,
    /// The key's URI when the media is encrypted (`METHOD=AES-128`, IV from the sequence number).
    pub key_uri: Option<String>,
    /// The least the playlist lists, in seconds, besides three target durations (RFC 8216bis
    /// 6.2.2): the siblings of a rendition with a longer target keep as much, so that every
    /// rendition's window starts at about the same moment (see `Channel`'s config).
    pub least_listed: f64,
}

/// A rendition's latest position, for `EXT-X-RENDITION-REPORT` in its siblings' playlists.
#[derive(Debug, Clone, PartialEq)]
pub struct RenditionReport {
    pub uri: String,
    pub last_msn: u64,
    pub last_part: u64,
}

/// What a blocking playlist request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The playlist already has it: answer now.
    Ready,
    /// Hold the request until it appears.
    Hold,
    /// Too far ahead: 400 now.
    TooFarAhead,
}

#[derive(Debug, Clone)]
pub struct MediaPlaylist {
    config: Config,
    segments: VecDeque<Segment>,
    /// The segment being built: its parts so far.
    open_parts: Vec<Part>,
    open_discontinuity: bool,
    open_pdt: Option<DateTime<Utc>>,
    /// The initialization section of the segments published from now on.
    init_uri: String,
    next_msn: u64,
    /// Segments removed from the front (EXT-X-MEDIA-SEQUENCE is the msn of the first kept).
    discontinuity_sequence: u64,
    preload_uri: Option<String>,
    /// The initialization section the hinted part will need, when it is a new one (a push that
    /// ended and may be followed by another: `EXT-X-PRELOAD-HINT:TYPE=MAP`).
    map_hint: Option<String>,
    ended: bool,
}

impl MediaPlaylist {
    pub fn new(config: Config, init_uri: String) -> Self {
        MediaPlaylist {
            init_uri,
            config,
            segments: VecDeque::new(),
            open_parts: Vec::new(),
            open_discontinuity: false,
            open_pdt: None,
            next_msn: 0,
            discontinuity_sequence: 0,
            preload_uri: None,
            map_hint: None,
            ended: false,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Adds a part to the open segment; returns its (msn, part index). `pdt` is the wall-clock
    /// time of its first sample, kept for the segment's first part.
    pub fn push_part(&mut self, part: Part, pdt: Option<DateTime<Utc>>) -> (u64, u64) {
        // The hinted section is listed with this part from now on.
        self.map_hint = None;
        if self.open_parts.is_empty() {
            self.open_pdt = pdt;
        }
        self.open_parts.push(part);
        (self.next_msn, self.open_parts.len() as u64 - 1)
    }

    /// Marks segment `msn` as a gap (`EXT-X-GAP`): it stays listed, so the timeline and the
    /// media sequence do not move, and players skip it. `false` when it is not listed.
    pub fn mark_gap(&mut self, msn: u64) -> bool {
        match self.segments.iter_mut().find(|s| s.msn == msn) {
            Some(segment) => {
                segment.gap = true;
                true
            }
            None => false,
        }
    }

    /// Closes the open segment under `uri` (its duration is the sum of its parts).
    pub fn close_segment(&mut self, uri: String) -> Option<u64> {
        if self.open_parts.is_empty() {
            return None;
        }
        let parts = std::mem::take(&mut self.open_parts);
        let msn = self.next_msn;
        self.segments.push_back(Segment {
            msn,
            duration: parts.iter().map(|p| p.duration).sum(),
            uri,
            parts,
            program_date_time: self.open_pdt.take(),
            discontinuity: std::mem::take(&mut self.open_discontinuity),
            init_uri: self.init_uri.clone(),
            gap: false,
        });
        self.next_msn += 1;
        self.slide();
        Some(msn)
    }

    /// The next segment follows a discontinuity (the publisher reconnected) and has a new
    /// initialization section. Parts of a segment left open are closed first.
    pub fn discontinuity(&mut self, init_uri: String, segment_uri: impl FnOnce(u64) -> String) {
        let msn = self.next_msn;
        self.close_segment(segment_uri(msn));
        self.open_discontinuity = true;
        self.init_uri = init_uri;
    }

    /// The initialization section of the open (or next) segment.
    pub fn init_uri(&self) -> &str {
        &self.init_uri
    }

    /// The open segment's parts so far.
    pub fn open_parts(&self) -> &[Part] {
        &self.open_parts
    }

    /// The msn the open (or next) segment gets.
    pub fn next_msn(&self) -> u64 {
        self.next_msn
    }

    /// The segments in the window, oldest first.
    pub fn segments(&self) -> impl DoubleEndedIterator<Item = &Segment> {
        self.segments.iter()
    }

    /// Where the next part will be published (`EXT-X-PRELOAD-HINT`).
    pub fn set_preload_hint(&mut self, uri: Option<String>) {
        self.preload_uri = uri;
    }

    /// The initialization section the hinted part will need, when it is a new one
    /// (`EXT-X-PRELOAD-HINT:TYPE=MAP`, RFC 8216bis B.1); cleared when that part comes.
    pub fn set_map_hint(&mut self, uri: Option<String>) {
        self.map_hint = uri;
    }

    pub fn has_map_hint(&self) -> bool {
        self.map_hint.is_some()
    }

    /// The section hinted by `EXT-X-PRELOAD-HINT:TYPE=MAP`, if any.
    pub fn map_hint(&self) -> Option<&str> {
        self.map_hint.as_deref()
    }

    /// The stream ended: `EXT-X-ENDLIST`, no more hints.
    pub fn end(&mut self) {
        self.ended = true;
        self.preload_uri = None;
        self.map_hint = None;
    }

    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Drops segments that left the window, counting discontinuities that go with them. None
    /// is dropped that would leave less than three target durations listed (RFC 8216bis 6.2.2:
    /// the `source` variant's 6-s target and 2-s segments keep nine, not eight).
    fn slide(&mut self) {
        let least = (3.0 * f64::from(self.config.target_duration)).max(self.config.least_listed);
        loop {
            let total: f64 = self.segments.iter().map(|s| s.duration).sum();
            let first = self.segments.front().map(|s| s.duration).unwrap_or(0.0);
            let left = total - first;
            let too_many = self.segments.len() > 1
                && left >= least - EPSILON
                && match self.config.window {
                    Window::Segments(n) => self.segments.len() > n.max(1),
                    Window::Seconds(s) => left >= s - EPSILON,
                };
            if !too_many {
                return;
            }
            if let Some(gone) = self.segments.pop_front() {
                if gone.discontinuity {
                    self.discontinuity_sequence += 1;
                }
            }
        }
    }

    pub fn media_sequence(&self) -> u64 {
        self.segments.front().map(|s| s.msn).unwrap_or(self.next_msn)
    }

    /// The newest part: (msn, part index), if any.
    pub fn last_part(&self) -> Option<(u64, u64)> {
        if !self.open_parts.is_empty() {
            return Some((self.next_msn, self.open_parts.len() as u64 - 1));
        }
        self.segments.back().map(|s| (s.msn, s.parts.len().saturating_sub(1) as u64))
    }

    /// This rendition's report for its siblings.
    pub fn report(&self, uri: &str) -> Option<RenditionReport> {
        self.last_part().map(|(last_msn, last_part)| RenditionReport {
            uri: uri.to_string(),
            last_msn,
            last_part,
        })
    }

    /// Whether a request blocking on `_HLS_msn` (and `_HLS_part`) can be answered
    /// (RFC 8216bis 6.2.5.2). A part index past the last part of a complete segment means the
    /// first part of the next one.
    pub fn wait_for(&self, msn: u64, part: Option<u64>) -> Wait {
        if self.ended {
            return Wait::Ready;
        }
        let complete = |m: u64| self.segments.iter().rev().find(|s| s.msn == m);
        // A part past the last of a complete segment is the next segment's first (a segment a
        // reconnect closed early has fewer parts than a player counted on).
        let wanted = part.map(|p| match complete(msn) {
            Some(s) if p >= s.parts.len() as u64 => (msn + 1, 0),
            _ => (msn, p),
        });
        let ready = match wanted {
            None => self.segments.back().is_some_and(|s| msn <= s.msn),
            Some(wanted) => self.last_part().is_some_and(|last| wanted <= last),
        };
        if ready {
            return Wait::Ready;
        }
        // The segment being built (or the next one) is the newest.
        let newest = self.next_msn;
        if msn > newest + 2 {
            return Wait::TooFarAhead;
        }
        if let Some((msn, p)) = wanted {
            let built = if msn == newest { self.open_parts.len() as u64 } else { 0 };
            if p >= built + ADVANCE_PART_LIMIT {
                return Wait::TooFarAhead;
            }
        }
        Wait::Hold
    }

    /// The playlist text. With `skip` (a client's `_HLS_skip=YES`), segments older than the
    /// skip boundary are replaced by `EXT-X-SKIP` (a delta update).
    pub fn render(&self, skip: bool, reports: &[RenditionReport]) -> String {
        let c = &self.config;
        let can_skip_until = 6.0 * f64::from(c.target_duration);
        let mut out = String::with_capacity(4096);
        let _ = writeln!(out, "#EXTM3U");
        let _ = writeln!(out, "#EXT-X-VERSION:9");
        let _ = writeln!(out, "#EXT-X-TARGETDURATION:{}", c.target_duration);
        // Rounded up at the precision parts are written with, so no part exceeds it as written.
        let part_target = (c.part_target * 1e5).ceil() / 1e5;
        // At least three times the PART-TARGET as written (Apple's LL-HLS rules check the
        // written figures): rounded up, not to nearest.
        let hold_back = (PART_HOLD_BACK_PARTS * part_target * 1e3).ceil() / 1e3;
        let _ = writeln!(
            out,
            "#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK={hold_back:.3},CAN-SKIP-UNTIL={can_skip_until:.1}"
        );
        let _ = writeln!(out, "#EXT-X-PART-INF:PART-TARGET={part_target:.5}");
        let _ = writeln!(out, "#EXT-X-MEDIA-SEQUENCE:{}", self.media_sequence());
        // Stated whenever a discontinuity is listed or has left the window (RFC 8216bis 6.2.2:
        // a client that joins later counts discontinuities from it).
        let discontinuities = self.open_discontinuity || self.segments.iter().any(|s| s.discontinuity);
        if self.discontinuity_sequence > 0 || discontinuities {
            let _ = writeln!(out, "#EXT-X-DISCONTINUITY-SEQUENCE:{}", self.discontinuity_sequence);
        }
        let complete: f64 = self.segments.iter().map(|s| s.duration).sum();
        let total = complete + self.open_parts.iter().map(|p| p.duration).sum::<f64>();
        // Delta update: skip every segment that ends at least CAN-SKIP-UNTIL before the end of
        // the last complete segment (RFC 8216bis 6.2.5.1: all of them, a discontinuity's too;
        // the client has them from its last full reload). From the complete segments' end, not
        // the parts', so that what is skipped is beyond the boundary whichever end it is read
        // from.
        let mut skipped = 0;
        if skip {
            let mut end = 0.0;
            for s in &self.segments {
                end += s.duration;
                if complete - end >= can_skip_until - EPSILON {
                    skipped += 1;
                } else {
                    break;
                }
            }
        }
        if skipped > 0 {
            let _ = writeln!(out, "#EXT-X-SKIP:SKIPPED-SEGMENTS={skipped}");
        }
        let part_cutoff = total - PART_WINDOW_TARGETS * f64::from(c.target_duration);
        // EXT-X-MAP before the first listed segment and wherever the section changes (a
        // reconnect), RFC 8216bis 4.4.4.5.
        let mut map: Option<&str> = None;
        let mut start = 0.0;
        for (i, s) in self.segments.iter().enumerate() {
            let seg_start = start;
            start += s.duration;
            if i < skipped {
                continue;
            }
            if s.discontinuity {
                let _ = writeln!(out, "#EXT-X-DISCONTINUITY");
            }
            write_map(&mut out, &mut map, &s.init_uri, c.key_uri.as_deref());
            write_pdt(&mut out, s.program_date_time);
            if seg_start + s.duration > part_cutoff + EPSILON {
                write_parts(&mut out, &s.parts);
            }
            if s.gap {
                let _ = writeln!(out, "#EXT-X-GAP");
            }
            write_segment(&mut out, s.duration, &s.uri);
        }
        if !self.open_parts.is_empty() {
            if self.open_discontinuity {
                let _ = writeln!(out, "#EXT-X-DISCONTINUITY");
            }
            write_map(&mut out, &mut map, &self.init_uri, c.key_uri.as_deref());
            write_pdt(&mut out, self.open_pdt);
            write_parts(&mut out, &self.open_parts);
        }
        if self.ended {
            let _ = writeln!(out, "#EXT-X-ENDLIST");
        } else if let Some(uri) = &self.preload_uri {
            let _ = writeln!(out, "#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"{uri}\"");
            if let Some(map) = &self.map_hint {
                let _ = writeln!(out, "#EXT-X-PRELOAD-HINT:TYPE=MAP,URI=\"{map}\"");
            }
        }
        for r in reports {
            let _ = writeln!(
                out,
                "#EXT-X-RENDITION-REPORT:URI=\"{}\",LAST-MSN={},LAST-PART={}",
                r.uri, r.last_msn, r.last_part
            );
        }
        out
    }
}

fn write_parts(out: &mut String, parts: &[Part]) {
    for p in parts {
        write_part(out, p.duration, &p.uri, p.independent);
    }
}

#[cfg(test)]
mod tests;
