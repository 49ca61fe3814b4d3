//! One media timeline per channel, across reconnects. Each push's muxers start their decode
//! times (`tfdt`) near zero; a later push of the same playlists is moved so that its media time
//! is, as the first push's is, the wall-clock time since the session's media began: the time
//! its `EXT-X-PROGRAM-DATE-TIME`s say (never earlier than where the media so far ended). Players
//! still get the discontinuity (and a new initialization section where it differs), but one
//! that keeps its timestamp offset across it, or places segments by their dates, or maps one
//! rendition's new times by another's, finds the new push's media where the playlist says
//! (docs/live-hls.md, "The end of a push, reconnects and DVR").
//!
//! A push's renditions need not end together: a publisher's video lags its audio by its
//! encoder's delay when it goes away. So each rendition's end is kept, and a push's shift is
//! decided against the end of the rendition whose part comes first: the slate, whose tracks
//! start where each ended ([`Timeline::end_dates`]), continues every rendition with no hole.
//!
//! The push after the slate is the publisher back: it stood by until its keyframe while the
//! slate played, so its first media is dated before the slate's end, which it overlaps. It is
//! moved to start where the rendition that ended first ends, dates and media times alike (one
//! move for every rendition, so A/V sync is kept): no rendition has a hole there, and those whose
//! slate ran longer (its audio: `handover`) are overlapped by the difference, which players take
//! (MSE replaces the overlapped frames). Placed after the end of the rendition whose part came
//! first, as other pushes are, a first audio part left the video a hole as long as the slate's
//! audio outlasted its video.

use std::collections::HashMap;

use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::media::cmaf;

#[derive(Debug, Default)]
pub(super) struct Timeline {
    /// The wall-clock time of media time zero: the first push's first part's date less its
    /// decode time.
    origin: Option<DateTime<Utc>>,
    /// Where each rendition's media ends so far (seconds on the moved timeline).
    ends: HashMap<String, f64>,
    /// How far the current push is moved (seconds); decided by its first part, of whichever
    /// rendition, so that every rendition moves alike and keeps its sync.
    shift: Option<f64>,
    /// The current push is placed by its dates alone: the slate, whose tracks are dated to start
    /// where each rendition's media ended (another rendition's later end must not move them).
    by_dates: bool,
    /// The current push follows one placed by its dates (the slate).
    after_fill: bool,
    /// How far the current push's dates are moved on (seconds; see the module's doc).
    date_shift: f64,
}

impl Timeline {
    /// The wall-clock time at which each rendition's media so far ends.
    pub(super) fn end_dates(&self) -> impl Iterator<Item = (&str, DateTime<Utc>)> + '_ {
        let origin = self.origin;
        self.ends.iter().filter_map(move |(name, end)| {
            Some((name.as_str(), origin? + chrono::Duration::nanoseconds((end * 1e9) as i64)))
        })
    }

    /// A new push begins: its shift is decided by its first part.
    pub(super) fn next_push(&mut self) {
        self.after_fill = std::mem::take(&mut self.by_dates);
        self.shift = None;
        self.date_shift = 0.0;
    }

    /// The current push is placed by its dates alone (see `by_dates`).
    pub(super) fn place_by_dates(&mut self) {
        self.by_dates = true;
    }

    /// The part `data`, dated `pdt` and lasting `duration` seconds, of rendition `rendition`
    /// whose timescale is `scale`, moved onto the timeline, and its date as the playlists give
    /// it. A part that is not a chunk this can read is kept as it is.
    pub(super) fn place(
        &mut self,
        rendition: &str,
        scale: u32,
        pdt: Option<DateTime<Utc>>,
        duration: f64,
        data: Bytes,
    ) -> (Bytes, Option<DateTime<Utc>>) {
        let Some(start) = cmaf::decode_time(&data).filter(|_| scale > 0) else {
            return (data, self.dated(pdt));
        };
        let seconds = |ticks: u64| ticks as f64 / f64::from(scale);
        let at = |date: DateTime<Utc>| date - chrono::Duration::nanoseconds((seconds(start) * 1e9) as i64);
        if self.origin.is_none() {
            self.origin = pdt.map(at);
        }
        let (origin, ends, by_dates, after_fill) = (self.origin, &self.ends, self.by_dates, self.after_fill);
        let date_shift = &mut self.date_shift;
        let shift = *self.shift.get_or_insert_with(|| {
            // A rendition new to the session starts after the latest end of any.
            let latest = ends.values().fold(0.0, |a: f64, &b| a.max(b));
            let end = ends.get(rendition).copied().unwrap_or(latest);
            let after_end = end - seconds(start);
            // The renditions that go on end within a part or two of each other; one that
            // ended long before (left the ladder) is not waited for.
            let first_end = ends.values().filter(|e| latest - **e < 2.0).fold(latest, |a, &b| a.min(b));
            let by_clock = origin.zip(pdt).and_then(|(o, p)| (at(p) - o).num_nanoseconds());
            match by_clock.map(|ns| ns as f64 / 1e9) {
                Some(by_clock) if by_dates => by_clock.max(0.0),
                Some(by_clock) if after_fill => {
                    let continued = first_end - seconds(start);
                    *date_shift = (continued - by_clock).max(0.0);
                    by_clock.max(continued).max(0.0)
                }
                by_clock => by_clock.unwrap_or(after_end).max(after_end).max(0.0),
            }
        });
        let pdt = self.dated(pdt);
        let ticks = (shift * f64::from(scale)).round() as u64;
        let placed = match ticks {
            0 => data,
            _ => match cmaf::with_decode_time_shifted(&data, ticks) {
                Some(moved) => Bytes::from(moved),
                None => return (data, pdt),
            },
        };
        let placed_end = seconds(start + ticks) + duration;
        let own = self.ends.entry(rendition.to_string()).or_insert(placed_end);
        *own = own.max(placed_end);
        (placed, pdt)
    }

    /// A date of the current push as the playlists give it: moved as its media is.
    fn dated(&self, pdt: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
        pdt.map(|d| d + chrono::Duration::microseconds((self.date_shift * 1e6).round() as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::media::cmaf::tests::boxed;

    /// A chunk of `samples` samples of `each` ticks from decode time `at`.
    fn chunk(at: u32, samples: u32, each: u32) -> Bytes {
        let mut trun = [&[0, 0, 0x01, 0x00][..], &samples.to_be_bytes()].concat();
        for _ in 0..samples {
            trun.extend_from_slice(&each.to_be_bytes());
        }
        let tfdt = [&[0, 0, 0, 0][..], &at.to_be_bytes()].concat();
        let traf = [boxed(b"tfhd", &[0, 0, 0, 0, 0, 0, 0, 1]), boxed(b"tfdt", &tfdt), boxed(b"trun", &trun)]
            .concat();
        Bytes::from([boxed(b"moof", &boxed(b"traf", &traf)), boxed(b"mdat", &[0])].concat())
    }

    /// `t.place` of a chunk of `samples` samples of `each` ticks from decode time `at`.
    fn place(
        t: &mut Timeline,
        scale: u32,
        pdt: Option<DateTime<Utc>>,
        at: u32,
        samples: u32,
        each: u32,
    ) -> Bytes {
        let duration = f64::from(samples * each) / f64::from(scale);
        let rendition = if scale == 90_000 { "video" } else { "audio" };
        t.place(rendition, scale, pdt, duration, chunk(at, samples, each)).0
    }

    #[test]
    fn without_dates_a_later_push_continues_where_the_media_ended() {
        let mut t = Timeline::default();
        // First push: video (90 kHz) 0–2.0 s, audio (48 kHz) 0.021–2.069 s: nothing moves.
        assert_eq!(cmaf::decode_time(&place(&mut t, 90_000, None, 0, 60, 3000)), Some(0));
        assert_eq!(cmaf::decode_time(&place(&mut t, 48_000, None, 1008, 96, 1024)), Some(1008));
        // The next push starts near zero again; its first part (audio here) decides the shift
        // for both renditions: the media's end, 2.069 s.
        t.next_push();
        let audio = place(&mut t, 48_000, None, 0, 10, 1024);
        assert_eq!(cmaf::decode_time(&audio), Some(1008 + 96 * 1024));
        let video = place(&mut t, 90_000, None, 1890, 6, 3000);
        let end = (1008.0 + 96.0 * 1024.0) / 48_000.0;
        assert_eq!(cmaf::decode_time(&video), Some(((end * 90_000.0) as u64) + 1890));
        // A third push moves past the second's end.
        t.next_push();
        let third = place(&mut t, 90_000, None, 0, 1, 3000);
        assert!(cmaf::decode_time(&third).unwrap() as f64 / 90_000.0 >= end + 0.2);
    }

    #[test]
    fn a_later_push_is_placed_by_its_dates() {
        let d0 = DateTime::parse_from_rfc3339("2026-11-29T18:00:00Z").unwrap().with_timezone(&Utc);
        let at = |s: f64| Some(d0 + chrono::Duration::milliseconds((s * 1000.0) as i64));
        let mut t = Timeline::default();
        // First push: video from decode time 0 at d0, audio 21 ms later; 2 s of media.
        place(&mut t, 90_000, at(0.0), 0, 60, 3000);
        place(&mut t, 48_000, at(0.021), 1008, 94, 1024);
        // The publisher is away 1.4 s; the new push's audio (decode time 0) is dated 3.4 s
        // after d0, its video 21 ms later: each lands at its date's time since d0.
        t.next_push();
        let audio = place(&mut t, 48_000, at(3.4), 0, 10, 1024);
        assert_eq!(cmaf::decode_time(&audio), Some(163_200));
        let video = place(&mut t, 90_000, at(3.421), 1890, 6, 3000);
        assert_eq!(cmaf::decode_time(&video), Some(307_890));
        // A push dated before the media so far ends (a publisher that sent faster than real
        // time) goes after that end, never over it.
        t.next_push();
        let early = place(&mut t, 90_000, at(3.5), 0, 1, 3000);
        let end = (307_890.0 + 18_000.0) / 90_000.0;
        assert_eq!(cmaf::decode_time(&early), Some((end * 90_000.0_f64).round() as u64));
    }

    #[test]
    fn each_rendition_continues_from_its_own_end() {
        let d0 = DateTime::parse_from_rfc3339("2026-12-02T12:00:00Z").unwrap().with_timezone(&Utc);
        let at = |s: f64| Some(d0 + chrono::Duration::milliseconds((s * 1000.0) as i64));
        let mut t = Timeline::default();
        // A push whose video ends at 1.0 s and whose audio runs on to about 2.0 s (an encoder's
        // delay when the publisher went).
        place(&mut t, 90_000, at(0.0), 0, 30, 3000);
        place(&mut t, 48_000, at(0.0), 0, 94, 1024);
        let ends: HashMap<&str, DateTime<Utc>> = t.end_dates().collect();
        assert_eq!(ends["video"], d0 + chrono::Duration::seconds(1));
        assert!(ends["audio"] > d0 + chrono::Duration::milliseconds(2000));
        // A push dated at the video's end (audio 1.005 s of media later, at the audio's end),
        // placed by its dates: each track lands where its own media ended, no hole.
        t.next_push();
        t.place_by_dates();
        let video = place(&mut t, 90_000, at(1.0), 0, 3, 3000);
        assert_eq!(cmaf::decode_time(&video), Some(90_000));
        let audio_at: f64 = 94.0 * 1024.0 / 48_000.0 - 1.0;
        let audio = place(&mut t, 48_000, at(2.005), (audio_at * 48_000.0).round() as u32, 10, 1024);
        assert_eq!(cmaf::decode_time(&audio), Some(94 * 1024));
        // Without `place_by_dates`, a push dated before its first rendition's media ended goes
        // after that end (1.1 s), never over what was played.
        t.next_push();
        let video = place(&mut t, 90_000, at(1.0), 0, 3, 3000);
        assert_eq!(cmaf::decode_time(&video), Some(99_000));
    }

    #[test]
    fn the_publisher_back_after_the_slate_starts_where_the_first_rendition_to_end_ended() {
        let d0 = DateTime::parse_from_rfc3339("2026-12-04T18:00:00Z").unwrap().with_timezone(&Utc);
        let at = |s: f64| Some(d0 + chrono::Duration::milliseconds((s * 1000.0).round() as i64));
        let ms = |d: Option<DateTime<Utc>>| d.map(|d| (d - d0).num_milliseconds());
        let mut t = Timeline::default();
        place(&mut t, 90_000, at(0.0), 0, 60, 3000);
        place(&mut t, 48_000, at(0.0), 0, 96, 1000);
        // The slate, by its dates: video to 3.0 s, its audio on to 3.25 s.
        t.next_push();
        t.place_by_dates();
        place(&mut t, 90_000, at(2.0), 0, 30, 3000);
        place(&mut t, 48_000, at(2.0), 0, 60, 1000);
        // The publisher stood by: its keyframe came at 2.83 s, its audio 0.02 s of media later,
        // and its audio's part comes first. Both start at the video's end, not after the
        // audio's (which would leave the video a 0.25-s hole); the dates move alike.
        t.next_push();
        let (audio, date) = t.place("audio", 48_000, at(2.85), 0.2, chunk(960, 10, 1000));
        let audio_at = cmaf::decode_time(&audio).unwrap() as f64 / 48_000.0;
        assert!((audio_at - 3.0).abs() < 0.001, "{audio_at}");
        assert_eq!(ms(date), Some(3000));
        let (video, date) = t.place("video", 90_000, at(2.83), 0.2, chunk(0, 6, 3000));
        let video_at = cmaf::decode_time(&video).unwrap() as f64 / 90_000.0;
        assert!((video_at - 2.98).abs() < 0.001, "no hole in the video: {video_at}");
        assert_eq!(ms(date), Some(2980));
        let (_, date) = t.place("video", 90_000, at(3.03), 0.2, chunk(18_000, 6, 3000));
        assert_eq!(ms(date), Some(3180), "the push's later parts move alike");
        // Back after a hole (no standby: dated after the slate's end), it keeps its dates.
        t.next_push();
        t.place_by_dates();
        place(&mut t, 90_000, at(4.0), 0, 30, 3000);
        t.next_push();
        let (video, date) = t.place("video", 90_000, at(5.2), 0.2, chunk(0, 6, 3000));
        assert_eq!(date, at(5.2));
        assert_eq!(cmaf::decode_time(&video), Some((5.2_f64 * 90_000.0).round() as u64));
    }

    #[test]
    fn what_is_not_a_chunk_passes_as_it_is() {
        let mut t = Timeline::default();
        place(&mut t, 90_000, None, 0, 60, 3000);
        t.next_push();
        let bytes = Bytes::from_static(b"not a chunk");
        assert_eq!(t.place("video", 90_000, None, 0.1, bytes.clone()).0, bytes);
        // No timescale known: kept.
        let c = chunk(0, 1, 3000);
        assert_eq!(t.place("video", 0, None, 0.1, c.clone()).0, c);
    }
}
