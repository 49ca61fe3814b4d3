//! The deadlines of pushes whose front is not RTMP (the RTMP session keeps its own): no media,
//! no keyframe, and the input bitrate, read from the pipeline's counters.

use crate::media::ingest::pipeline::IngestPipeline;

/// A push that receives no media for this long ends (CONTRACT: Auto-stop).
pub const NO_MEDIA: std::time::Duration = std::time::Duration::from_secs(10);
/// A push whose video has had no keyframe for this long ends (CONTRACT: memory per stream is
/// bounded whatever the publisher sends).
pub const NO_KEYFRAME: std::time::Duration = std::time::Duration::from_secs(30);
/// How often the input bitrate is measured.
pub const RATE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The deadlines of a push whose front is not RTMP (whose session keeps its own), read from the
/// pipeline's counters once a second: no media for [`NO_MEDIA`], media but no keyframe for
/// [`NO_KEYFRAME`] (when asked for); and its input bitrate every [`RATE_EVERY`].
pub struct Liveness {
    bytes: (u64, std::time::Instant),
    /// `None`: keyframes are not watched (WebRTC senders send one when asked, and may not
    /// for long otherwise).
    keyframes: Option<(u64, std::time::Instant)>,
    rate_from: (std::time::Instant, u64),
}

impl Liveness {
    pub fn new(watch_keyframes: bool) -> Liveness {
        let now = std::time::Instant::now();
        Liveness { bytes: (0, now), keyframes: watch_keyframes.then_some((0, now)), rate_from: (now, 0) }
    }

    /// `Err(why)` when a deadline passed; `Ok(Some(kbps))` when a new bitrate was measured.
    pub fn tick(&mut self, pipeline: &IngestPipeline) -> Result<Option<i64>, String> {
        use std::sync::atomic::Ordering;
        let now = std::time::Instant::now();
        let bytes = pipeline.media_bytes.load(Ordering::Relaxed);
        if bytes != self.bytes.0 {
            self.bytes = (bytes, now);
        } else if now.duration_since(self.bytes.1) >= NO_MEDIA {
            return Err(format!("no media for {} s", NO_MEDIA.as_secs()));
        }
        if let Some((seen, at)) = &mut self.keyframes {
            let keyframes = pipeline.keyframes.load(Ordering::Relaxed);
            if keyframes != *seen {
                (*seen, *at) = (keyframes, now);
            } else if now.duration_since(*at) >= NO_KEYFRAME {
                return Err(format!("no keyframe for {} s", NO_KEYFRAME.as_secs()));
            }
        }
        let elapsed = now.duration_since(self.rate_from.0);
        if elapsed < RATE_EVERY {
            return Ok(None);
        }
        let kbps = (bytes - self.rate_from.1) as f64 * 8.0 / 1000.0 / elapsed.as_secs_f64();
        self.rate_from = (now, bytes);
        Ok(Some(kbps.round() as i64))
    }
}
