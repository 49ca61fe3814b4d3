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

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Channel, Rendition};

/// Where a rendition is in a hand-over.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum HandOver {
    #[default]
    No,
    /// The next part is this generation's last.
    AfterNextPart,
    /// The last part came; the rest of this generation is dropped.
    Done,
}

impl Rendition {
    /// A part of generation `generation` was added: the last of a hand-over hints the section of
    /// the generation after it.
    pub(super) fn part_added(&mut self, generation: u32) {
        if self.hand_over == HandOver::AfterNextPart {
            self.hand_over = HandOver::Done;
            self.playlist.set_map_hint(Some(format!("init{}.mp4", generation + 1)));
        }
    }
}

impl Channel {
    /// The recording leaves generation `generation` out (the slate's media is not recorded).
    pub fn skip_recording(&self, generation: u32) {
        self.lock().unrecorded.insert(generation);
    }

    /// The wall-clock time at which the media so far ends (the latest end of any rendition's
    /// part), once any part came.
    pub fn media_end(&self) -> Option<DateTime<Utc>> {
        self.lock().timeline.end_date()
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
