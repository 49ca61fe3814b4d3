//! Keeps a push's media from running ahead of the wall clock. A publisher that sends faster
//! than real time (ffmpeg without `-re`, a relay replaying a buffer) would otherwise have its
//! whole file read at network speed: the live ladder cannot encode it in time, and viewers
//! would be handed minutes of media at once. The connection stops reading while the media is
//! more than [`LEAD`] ahead of the time since its first tag, so TCP holds the publisher back
//! to real time, as `-re` would.
//!
//! Media that falls behind (a publisher's network stalled) may catch up at any speed: only the
//! lead is bounded, never the lag. A timestamp more than [`JUMP`] away from the newest one seen
//! is a discontinuity (a publisher that restarted its timeline), not media: the clock skips it.

use std::time::{Duration, Instant};

/// How far a push's media may run ahead of the wall clock before reading pauses.
pub const LEAD: Duration = Duration::from_secs(2);
/// A step in the timestamps larger than this (either way) is a discontinuity, not media.
pub const JUMP: Duration = Duration::from_secs(10);

/// A push's media clock against the wall clock.
#[derive(Debug, Default)]
pub struct Pacer {
    /// The first tag: when it was read and its place on the media clock.
    base: Option<(Instant, i64)>,
    /// Added to a tag's timestamp to put it on the media clock (the discontinuities skipped).
    offset: i64,
    /// The newest point on the media clock, in ms.
    top: i64,
}

impl Pacer {
    /// Notes a tag's timestamp (ms) read at `now`; returns when reading may go on, if not now.
    pub fn note(&mut self, now: Instant, timestamp: u32) -> Option<Instant> {
        let jump = i64::try_from(JUMP.as_millis()).unwrap_or(i64::MAX);
        let mut at = i64::from(timestamp) + self.offset;
        let Some((since, first)) = self.base else {
            self.base = Some((now, at));
            self.top = at;
            return None;
        };
        if (at - self.top).abs() > jump {
            self.offset += self.top - at;
            at = self.top;
        }
        self.top = self.top.max(at);
        let media = Duration::from_millis(u64::try_from(self.top - first).unwrap_or(0));
        let due = since + media;
        (due > now + LEAD).then(|| due - LEAD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn real_time_media_is_never_held() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        for i in 0..600u32 {
            // Video every 33 ms, read 10 ms late or 500 ms early (a jittery network).
            let at = t0 + ms(u64::from(i) * 33);
            let read = if i % 7 == 0 { at + ms(10) } else { at.checked_sub(ms(500)).unwrap_or(t0) };
            assert_eq!(p.note(read.max(t0), i * 33), None, "tag {i}");
        }
    }

    #[test]
    fn media_faster_than_real_time_waits_until_it_is_due_less_the_lead() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        assert_eq!(p.note(t0, 1_000), None);
        assert_eq!(p.note(t0 + ms(10), 2_900), None, "1.9 s ahead is within the lead");
        // 12 s of media, frame by frame, read within 20 ms.
        let mut resume = None;
        for ts in (2_920..=13_000).step_by(40) {
            resume = p.note(t0 + ms(20), ts).or(resume);
        }
        assert_eq!(resume, Some(t0 + ms(12_000) - LEAD), "held until the last frame is due, less the lead");
    }

    #[test]
    fn a_late_publisher_may_catch_up_at_any_speed() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        assert_eq!(p.note(t0, 0), None);
        // Its network stalled for 8 s; the backlog then arrives at once.
        for i in 1..=240u32 {
            assert_eq!(p.note(t0 + ms(8_000), i * 33), None, "tag {i} is behind the clock");
        }
    }

    #[test]
    fn a_jump_in_the_timestamps_is_skipped_not_waited_for() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        assert_eq!(p.note(t0, 0), None);
        assert_eq!(p.note(t0 + ms(1_000), 1_000), None);
        // The publisher restarts its timeline an hour on, then back at zero.
        assert_eq!(p.note(t0 + ms(1_033), 3_600_000), None);
        assert_eq!(p.note(t0 + ms(1_066), 3_600_033), None);
        assert_eq!(p.note(t0 + ms(1_100), 0), None);
        // The clock still runs: 5 s more of media in 100 ms is held.
        let resume = p.note(t0 + ms(1_200), 5_000).expect("held");
        assert!(resume > t0 + ms(3_000), "{:?}", resume - t0);
    }

    #[test]
    fn audio_and_video_interleaved_out_of_order_do_not_add_up() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        // Audio 200 ms behind the video it is sent with, for ten minutes of real time.
        for i in 0..18_000u32 {
            let now = t0 + ms(u64::from(i) * 33);
            assert_eq!(p.note(now, i * 33), None);
            assert_eq!(p.note(now, (i * 33).saturating_sub(200)), None);
        }
    }
}
