//! What an input that stands by holds (CONTRACT: Continuity, backup ingest): its RTMP tags back
//! to its last video keyframe and its latest sequence headers, nothing decoded or encoded, so
//! that when it takes the stream's session over its pipeline starts from that keyframe at once.
//! The buffer is bounded in bytes and in tags; a GOP longer than that is let go, and the input
//! is not ready again until its next keyframe. [`Readiness`] is what each front (RTMP, SRT)
//! tells the stream's session of such an input as its media comes.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::domain::stream::InputRole;
use crate::media::ingest::flv::{self, Audio, Tag, Video};
use crate::media::live::session::LiveSessions;
use crate::services::streams::{Standby, Streams};

pub mod ts;

/// The most a standby input's buffer holds: a 2-s GOP at 30 Mbit/s, or 10 s of 30-fps video
/// with its audio.
const MAX_BYTES: usize = 8 << 20;
const MAX_TAGS: usize = 800;

/// One RTMP media message: its tag type, timestamp (ms) and body.
pub type Message = (Tag, u32, Bytes);

/// An RTMP input's media since its last keyframe, with the sequence headers that decode it.
#[derive(Debug, Default)]
pub struct Gop {
    video_config: Option<Bytes>,
    audio_config: Option<Bytes>,
    /// From the last video keyframe on (empty until one came).
    tags: VecDeque<Message>,
    bytes: usize,
    /// Keyframes seen since the buffer was made.
    keyframes: u64,
    /// GOPs let go for being over the bounds.
    pub overflows: u64,
}

impl Gop {
    /// Takes one message. Errs, naming it, on a codec the stream's outputs cannot take (only
    /// H.264 and AAC are: those the primary sends).
    pub fn add(&mut self, tag: Tag, timestamp: u32, body: &Bytes) -> Result<(), String> {
        let key = match tag {
            Tag::Video => match flv::video(body)? {
                Video::Config(_) => {
                    self.video_config = Some(body.clone());
                    return Ok(());
                }
                Video::Frame { key, .. } => key,
                Video::Skip => return Ok(()),
            },
            Tag::Audio => match flv::audio(body)? {
                Audio::Config(_) => {
                    self.audio_config = Some(body.clone());
                    return Ok(());
                }
                Audio::Frame(_) => false,
                Audio::Skip => return Ok(()),
            },
        };
        if key {
            self.tags.clear();
            self.bytes = 0;
            self.keyframes += 1;
        } else if self.tags.is_empty() {
            // Nothing before the first keyframe decodes.
            return Ok(());
        }
        if self.bytes + body.len() > MAX_BYTES || self.tags.len() >= MAX_TAGS {
            self.tags.clear();
            self.bytes = 0;
            self.overflows += 1;
            return Ok(());
        }
        self.bytes += body.len();
        self.tags.push_back((tag, timestamp, body.clone()));
        Ok(())
    }

    /// Keeps `body` if it is a sequence header (of a push under way: the input may stand by
    /// later, and its publisher sends them once).
    pub fn keep_config(&mut self, tag: Tag, body: &Bytes) {
        match tag {
            Tag::Video if matches!(flv::video(body), Ok(Video::Config(_))) => {
                self.video_config = Some(body.clone())
            }
            Tag::Audio if matches!(flv::audio(body), Ok(Audio::Config(_))) => {
                self.audio_config = Some(body.clone())
            }
            _ => {}
        }
    }

    /// A buffer with this one's sequence headers and nothing else.
    pub fn configs(&self) -> Gop {
        Gop {
            video_config: self.video_config.clone(),
            audio_config: self.audio_config.clone(),
            ..Gop::default()
        }
    }

    /// Whether it holds a keyframe (with the H.264 configuration) to start from.
    pub fn ready(&self) -> bool {
        self.video_config.is_some() && !self.tags.is_empty()
    }

    /// Keyframes seen so far.
    pub fn keyframes(&self) -> u64 {
        self.keyframes
    }

    /// Whether it sends audio (an AAC configuration came).
    pub fn has_audio(&self) -> bool {
        self.audio_config.is_some()
    }

    /// The timestamp of its newest message.
    pub fn newest(&self) -> Option<u32> {
        self.tags.back().map(|t| t.1)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// What a pipeline starts from: the sequence headers, then the tags from the keyframe on.
    /// The buffer is left empty (the configurations stay).
    pub fn take(&mut self) -> Vec<Message> {
        let at = self.tags.front().map_or(0, |t| t.1);
        let configs = [(Tag::Video, &self.video_config), (Tag::Audio, &self.audio_config)];
        let mut out: Vec<Message> =
            configs.into_iter().filter_map(|(tag, c)| c.clone().map(|c| (tag, at, c))).collect();
        out.extend(self.tags.drain(..));
        self.bytes = 0;
        out
    }
}

/// The role's name in logs and reasons.
pub fn role_name(role: InputRole) -> &'static str {
    match role {
        InputRole::Primary => "primary",
        InputRole::Backup => "backup",
        InputRole::Slate => "slate",
    }
}

/// The other publisher's role.
pub fn other_role(role: InputRole) -> InputRole {
    match role {
        InputRole::Primary => InputRole::Backup,
        _ => InputRole::Primary,
    }
}

/// What an input that stands by has told the stream's session so far: whether it shows as
/// ready, whether its codecs were checked against the input that feeds the stream, and
/// (a primary) whether it told the backup to step down.
#[derive(Debug, Default)]
pub struct Readiness {
    noted: bool,
    checked: bool,
    claimed: bool,
}

/// Whether the stream's publisher comes back within its window while the slate covers for it:
/// it stands by until its keyframe, and the slate plays until then (docs/live-ingest.md, "The
/// slate").
pub fn publisher_returns(streams: &Streams, outputs: &LiveSessions, stream_id: &str) -> bool {
    outputs.covered(stream_id) && streams.sessions.awaits_publisher(stream_id)
}

impl Readiness {
    /// For an input of `role` that stands by: the primary back while the slate covers for it
    /// ([`publisher_returns`]) has its tracks not checked (the slate's discontinuities lie
    /// between it and the push before, which may have sent other tracks, as a rejoin may).
    pub fn of(role: InputRole, returning: bool) -> Self {
        Self { checked: role == InputRole::Primary && returning, ..Self::default() }
    }

    /// One look at the input, `ready` (a keyframe to start from, and media lately) and sending
    /// `audio` or not: the session learns whether it is ready; once ready, its tracks are
    /// checked (once), and a primary claims the session from the backup. Errs with why the
    /// input is refused (not the tracks of the input that feeds the stream: the two need the
    /// same codecs); otherwise says whether it is due to take over (ready, and nobody feeds
    /// the session).
    pub fn look(
        &mut self,
        streams: &Streams,
        stream_id: &str,
        standby: &Standby,
        ready: bool,
        audio: bool,
    ) -> Result<bool, String> {
        let role = role_name(standby.role);
        if !ready {
            standby.note_unready();
            if std::mem::replace(&mut self.noted, false) {
                streams.standby_changed(stream_id);
            }
            return Ok(false);
        }
        if !std::mem::replace(&mut self.checked, true) {
            if let Some(theirs) = streams.sessions.audio(stream_id).filter(|a| *a != audio) {
                let (ours, theirs) = if theirs { ("no audio", "AAC") } else { ("AAC", "no audio") };
                tracing::warn!(stream = %stream_id, role, "an input that stands by sends {ours}, the stream's input {theirs}; refused");
                return Err(format!(
                    "the {role} input is refused: it sends {ours} and the stream's input {theirs} (the two inputs need the same codecs)"
                ));
            }
        }
        standby.note_ready();
        if !std::mem::replace(&mut self.noted, true) {
            streams.standby_changed(stream_id);
        }
        if standby.role == InputRole::Primary && !self.claimed {
            self.claimed = streams.sessions.claim(stream_id, standby);
        }
        Ok(streams.sessions.is_waiting(stream_id))
    }

    /// Whether the stream's input shows it standing by ready (to be told again when it leaves).
    pub fn noted(&self) -> bool {
        self.noted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn video(key: bool, config: bool, len: usize) -> Bytes {
        let first = if key { 0x17 } else { 0x27 };
        let kind = if config { 0 } else { 1 };
        Bytes::from([&[first, kind, 0, 0, 0][..], &vec![0xAB; len]].concat())
    }

    fn audio(config: bool) -> Bytes {
        Bytes::from(vec![0xAF, if config { 0 } else { 1 }, 0x12, 0x10])
    }

    #[test]
    fn it_keeps_the_configurations_and_the_tags_since_the_last_keyframe() {
        let mut gop = Gop::default();
        gop.add(Tag::Video, 0, &video(false, false, 10)).expect("taken");
        assert!(!gop.ready(), "nothing before a keyframe");
        gop.add(Tag::Video, 0, &video(true, true, 30)).expect("the configuration");
        gop.add(Tag::Audio, 0, &audio(true)).expect("the audio configuration");
        gop.add(Tag::Audio, 10, &audio(false)).expect("taken");
        assert!(!gop.ready(), "audio before the first keyframe is not kept");
        for (i, key) in [true, false, false, true, false].into_iter().enumerate() {
            gop.add(Tag::Video, 33 * i as u32, &video(key, false, 100)).expect("taken");
            gop.add(Tag::Audio, 33 * i as u32 + 5, &audio(false)).expect("taken");
        }
        assert!(gop.ready() && gop.has_audio());
        assert_eq!((gop.keyframes(), gop.newest()), (2, Some(137)));
        let taken = gop.take();
        let what: Vec<(Tag, u32)> = taken.iter().map(|t| (t.0, t.1)).collect();
        assert_eq!(
            what,
            [
                (Tag::Video, 99),
                (Tag::Audio, 99),
                (Tag::Video, 99),
                (Tag::Audio, 104),
                (Tag::Video, 132),
                (Tag::Audio, 137)
            ],
            "the configurations, stamped as the keyframe, then the last keyframe on"
        );
        assert_eq!(taken[0].2, video(true, true, 30));
        assert!(!gop.ready() && gop.bytes() == 0, "taken: empty until the next keyframe");
        let mut again = gop.configs();
        again.add(Tag::Video, 200, &video(true, false, 100)).expect("taken");
        assert!(again.ready() && again.has_audio(), "the sequence headers carry over");
        let mut kept = Gop::default();
        kept.keep_config(Tag::Video, &video(true, false, 100));
        kept.keep_config(Tag::Video, &video(true, true, 30));
        kept.keep_config(Tag::Audio, &audio(false));
        assert_eq!((kept.configs().video_config, kept.has_audio()), (Some(video(true, true, 30)), false));
    }

    #[test]
    fn other_codecs_are_refused_and_a_long_gop_is_let_go() {
        let mut gop = Gop::default();
        let hevc = Bytes::from_static(&[0x9C, 1, 0, 0, 0, 1]);
        assert!(gop.add(Tag::Video, 0, &hevc).expect_err("refused").contains("only H.264"));
        let mp3 = Bytes::from_static(&[0x2F, 1, 2]);
        assert!(gop.add(Tag::Audio, 0, &mp3).expect_err("refused").contains("only AAC"));
        gop.add(Tag::Video, 0, &video(true, true, 30)).expect("the configuration");
        gop.add(Tag::Video, 0, &video(true, false, 100)).expect("taken");
        for i in 0..MAX_TAGS as u32 {
            gop.add(Tag::Video, i, &video(false, false, 100)).expect("taken");
        }
        assert_eq!(gop.overflows, 1, "over its bound the GOP is let go");
        assert!(!gop.ready());
        assert!(gop.bytes() <= MAX_BYTES);
        gop.add(Tag::Video, 0, &video(true, false, MAX_BYTES)).expect("taken");
        assert!(!gop.ready(), "a keyframe bigger than the bound is not kept");
        assert_eq!(gop.overflows, 2);
    }
}
