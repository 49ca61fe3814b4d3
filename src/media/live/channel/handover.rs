//! What the slate needs of a channel: its media left out of the recording, where the media so
//! far ends, and a hand-over to the publisher that rejoins, announced in the playlists before
//! it happens.
//!
//! A publisher that goes away gives no notice: a player holding a blocking request for the part
//! the playlist hinted gets, once the next push's media comes, a playlist whose first new part
//! has another name and section (`push_ended` moves the hint past it). The slate's end is
//! known in advance: each rendition's next slate part comes with the hint of the part after it
//! and of the next push's section (`EXT-X-PRELOAD-HINT:TYPE=MAP`), and nothing of the slate is
//! added after it; so what a player was told to wait for is what comes.
//!
//! The slate's audio runs on [`AUDIO_PAST_VIDEO`] beyond its video: video.js (VHS) places the
//! media after a discontinuity where the video playlist's durations say, and the audio by the
//! video's offset, so a slate whose audio ended before its video (each stops after its next part,
//! and audio parts are longer) left that difference as a hole in the audio, where VHS stalled.
//! Overlapping silence is replaced by the new push's audio.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::timeline::Timeline;
use super::{Channel, Kind, Rendition, SegmentOutput, Writer};

/// How far past the slate's video its audio runs at a hand-over (seconds).
const AUDIO_PAST_VIDEO: f64 = 0.15;

/// Where a channel's media so far ends, per track, as wall-clock times: the video's (the latest
/// end of its video renditions) and the audio's.
///
/// The latest, because a player starts the media after a discontinuity where its playlist says
/// the last segment ended and maps the other track by it: hls.js on `source`, whose last part
/// ended one frame after the rung's, with the slate started at the rung's end, placed the audio
/// after it one frame late and stalled at that hole. Started at the latest end, the other
/// renditions' audio overlaps by as much instead, which plays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MediaEnds {
    pub video: Option<DateTime<Utc>>,
    pub audio: Option<DateTime<Utc>>,
}

impl MediaEnds {
    /// The earlier of the two: where a continuation that starts each track at its end begins.
    pub fn base(&self) -> Option<DateTime<Utc>> {
        match (self.video, self.audio) {
            (Some(v), Some(a)) => Some(v.min(a)),
            (v, a) => v.or(a),
        }
    }
}

/// Where a rendition is in a hand-over.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum HandOver {
    #[default]
    No,
    /// The next part is this generation's last (an audio rendition's: the next that ends
    /// [`AUDIO_PAST_VIDEO`] after the video renditions' last).
    AfterNextPart,
    /// The last part came; the rest of this generation is dropped.
    Done,
}

impl Channel {
    /// A part of generation `generation` was added to rendition `name`: in a hand-over, a video
    /// rendition's is its last; an audio rendition's is once every video rendition had its last
    /// and this one ends [`AUDIO_PAST_VIDEO`] after theirs. The last closes its segment, as the
    /// end of a push does, and hints the section of the generation after it: a segment still
    /// open with a `TYPE=MAP` hint is one VHS drops from its list (its parts may not be used,
    /// `getAllSegments`), and then it failed on the part it was at ("reading 'parts'").
    pub(super) fn part_added(
        &self,
        renditions: &mut BTreeMap<String, Rendition>,
        timeline: &Timeline,
        writer: Option<&Writer>,
        recorder: Option<&dyn SegmentOutput>,
        name: &str,
        generation: u32,
    ) {
        let Some(r) = renditions.get(name).filter(|r| r.hand_over == HandOver::AfterNextPart) else { return };
        let last = match r.kind {
            Kind::Video { .. } => true,
            Kind::Audio { .. } => {
                let video = || {
                    renditions
                        .iter()
                        .filter(|(_, v)| matches!(v.kind, Kind::Video { .. }) && !v.playlist.is_ended())
                };
                let ends: HashMap<&str, DateTime<Utc>> = timeline.end_dates().collect();
                let video_end = video().filter_map(|(n, _)| ends.get(n.as_str()).copied()).max();
                let past = chrono::Duration::milliseconds((AUDIO_PAST_VIDEO * 1e3) as i64);
                !video().any(|(_, v)| v.hand_over == HandOver::AfterNextPart)
                    && video_end.zip(ends.get(name)).is_none_or(|(v, a)| *a >= v + past)
            }
        };
        if let Some(r) = renditions.get_mut(name).filter(|_| last) {
            r.hand_over = HandOver::Done;
            self.close_segment(name, r, writer, recorder, generation, false);
            r.playlist.set_map_hint(Some(format!("init{}.mp4", generation + 1)));
        }
    }

    /// Generation `generation` is the slate's: the recording leaves it out, and its media is
    /// placed by its dates alone (each of its tracks is dated to start where that kind of media
    /// ended: [`Channel::media_ends`]).
    pub fn fill_with(&self, generation: u32) {
        let mut s = self.lock();
        s.unrecorded.insert(generation);
        if s.generation == generation {
            s.timeline.place_by_dates();
        }
    }

    /// Where the media so far ends, per track, once any part came (renditions that ended
    /// are left out).
    pub fn media_ends(&self) -> MediaEnds {
        let s = self.lock();
        let mut ends = MediaEnds::default();
        for (name, end) in s.timeline.end_dates() {
            let Some(r) = s.renditions.get(name).filter(|r| !r.playlist.is_ended()) else { continue };
            let track = match r.kind {
                Kind::Video { .. } => &mut ends.video,
                Kind::Audio { .. } => &mut ends.audio,
            };
            *track = Some(track.map_or(end, |t| t.max(end)));
        }
        ends
    }

    /// Ends generation `generation` after each rendition's next part (see the module's doc);
    /// returns once every rendition had it, or after `timeout`. Call it while that generation
    /// still feeds the channel, then stop its feed.
    pub async fn hand_over(&self, generation: u32, timeout: Duration) {
        {
            let mut s = self.lock();
            if s.generation != generation || s.ended {
                return;
            }
            for r in s.renditions.values_mut().filter(|r| !r.playlist.is_ended()) {
                r.hand_over = HandOver::AfterNextPart;
            }
        }
        let done = || {
            let s = self.lock();
            let waiting = s.renditions.values().any(|r| r.hand_over == HandOver::AfterNextPart);
            Ok((s.generation != generation || s.ended || !waiting).then_some(()))
        };
        if self.wait(timeout, done).await != Ok(Some(())) {
            tracing::debug!(session = %self.session, "a rendition had no part to hand over with");
        }
    }
}
