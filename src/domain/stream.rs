//! Streams: qualities, protocols, push credentials and the status machine
//! (interface: Stream, Stream moves; CONTRACT: Streams).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use md5::{Digest, Md5};
use poem_openapi::Enum;
use subtle::ConstantTimeEq;

use super::closed_string_set;

/// A rendition height, written `<height>p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quality(pub u32);

impl Quality {
    pub const HEIGHTS: [u32; 7] = [2160, 1440, 1080, 720, 480, 360, 240];

    pub fn parse(s: &str) -> Result<Quality, String> {
        s.strip_suffix('p')
            .and_then(|h| h.parse::<u32>().ok())
            .filter(|h| Quality::HEIGHTS.contains(h) && s == format!("{h}p"))
            .map(Quality)
            .ok_or_else(|| "must be one of 2160p, 1440p, 1080p, 720p, 480p, 360p, 240p".to_string())
    }

    pub fn name(self) -> String {
        format!("{}p", self.0)
    }
}

closed_string_set!(
    Quality,
    "Quality",
    "A rendition height: `<height>p`.",
    Quality::HEIGHTS.iter().map(|h| Quality(*h).name()).collect::<Vec<_>>(),
    |q: &Quality| q.name(),
    Quality::parse
);

/// How viewers play a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Enum)]
#[oai(rename_all = "lowercase")]
pub enum Protocol {
    /// LL-HLS from the playback origin.
    Llhls,
    /// WebRTC over WHEP.
    Webrtc,
    /// RTSP.
    Rtsp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Llhls => "llhls",
            Protocol::Webrtc => "webrtc",
            Protocol::Rtsp => "rtsp",
        }
    }

    pub fn parse(s: &str) -> Result<Protocol, String> {
        match s {
            "llhls" => Ok(Protocol::Llhls),
            "webrtc" => Ok(Protocol::Webrtc),
            "rtsp" => Ok(Protocol::Rtsp),
            _ => Err("must be one of llhls, webrtc, rtsp".into()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum StreamStatus {
    /// Media resources are being prepared.
    Pending,
    /// Ready; no push.
    Idle,
    /// A push session is open.
    Live,
    /// Refuses pushes; see `disabledReason`.
    Disabled,
}

impl StreamStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StreamStatus::Pending => "pending",
            StreamStatus::Idle => "idle",
            StreamStatus::Live => "live",
            StreamStatus::Disabled => "disabled",
        }
    }

    pub fn parse(s: &str) -> Option<StreamStatus> {
        match s {
            "pending" => Some(StreamStatus::Pending),
            "idle" => Some(StreamStatus::Idle),
            "live" => Some(StreamStatus::Live),
            "disabled" => Some(StreamStatus::Disabled),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum DisabledReason {
    Deleted,
    Manual,
    NoInput,
    InsufficientCredits,
}

impl DisabledReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DisabledReason::Deleted => "deleted",
            DisabledReason::Manual => "manual",
            DisabledReason::NoInput => "no_input",
            DisabledReason::InsufficientCredits => "insufficient_credits",
        }
    }

    pub fn parse(s: &str) -> Option<DisabledReason> {
        match s {
            "deleted" => Some(DisabledReason::Deleted),
            "manual" => Some(DisabledReason::Manual),
            "no_input" => Some(DisabledReason::NoInput),
            "insufficient_credits" => Some(DisabledReason::InsufficientCredits),
            _ => None,
        }
    }
}

/// A new stream's `reconnectWindow`, seconds (CONTRACT: Continuity).
pub const DEFAULT_RECONNECT_WINDOW: i64 = 10;

/// What feeds a live stream's outputs now (CONTRACT: Continuity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum, serde::Serialize, serde::Deserialize)]
#[oai(rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum InputRole {
    /// The publisher.
    Primary,
    /// The backup publisher, while the primary is away.
    Backup,
    /// No publisher: the slate, within the reconnect window.
    Slate,
}

/// What a live push sends, recorded on the stream while it is live.
#[derive(Debug, Clone, Default, PartialEq, poem_openapi::Object, serde::Serialize, serde::Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct InputInfo {
    /// What feeds the outputs now: `slate` while the publisher is away within the reconnect
    /// window (the other fields are then null).
    pub active: Option<InputRole>,
    pub video_codec: Option<String>,
    pub width: Option<i32>,
    pub height: Option<i32>,
    pub frame_rate: Option<f64>,
    pub audio_codec: Option<String>,
    pub audio_sample_rate: Option<i32>,
    pub audio_channels: Option<i32>,
    /// Measured over the last few seconds, audio and video together.
    pub bitrate_kbps: Option<i64>,
    /// The other inputs that stand by ready to take over (`backup`; `primary` while the backup
    /// feeds the stream).
    #[serde(default)]
    #[oai(default)]
    pub standing_by: Vec<InputRole>,
}

/// Where a stream is: its status, with the reason when disabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamState {
    pub status: StreamStatus,
    pub reason: Option<DisabledReason>,
}

/// What can happen to a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamMove {
    /// Media resources are ready.
    Prepared,
    /// A push opened a session.
    PushStarted,
    /// The push session ended (disconnect, no media, or killed).
    PushEnded,
    Disable(DisabledReason),
    Enable,
}

/// Why a move is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveError {
    /// A deleted stream refuses every change.
    Deleted,
    /// The move does not apply in this state.
    NotAllowed { from: &'static str, what: &'static str },
}

impl std::fmt::Display for MoveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MoveError::Deleted => f.write_str("stream is deleted"),
            MoveError::NotAllowed { from, what } => write!(f, "a {from} stream cannot {what}"),
        }
    }
}

impl std::error::Error for MoveError {}

impl StreamState {
    pub const fn new(status: StreamStatus) -> Self {
        StreamState { status, reason: None }
    }

    /// The one place that says which moves are allowed (CONTRACT: Streams — Status).
    pub fn apply(self, m: StreamMove) -> Result<StreamState, MoveError> {
        use StreamStatus::*;
        if self.reason == Some(DisabledReason::Deleted) {
            return Err(MoveError::Deleted);
        }
        let refuse = |what| Err(MoveError::NotAllowed { from: self.status.as_str(), what });
        match (self.status, m) {
            (Pending, StreamMove::Prepared) => Ok(StreamState::new(Idle)),
            (Idle, StreamMove::PushStarted) => Ok(StreamState::new(Live)),
            (_, StreamMove::PushStarted) => refuse("go live"),
            (Live, StreamMove::PushEnded) => Ok(StreamState::new(Idle)),
            (_, StreamMove::PushEnded) => refuse("end a push"),
            (_, StreamMove::Disable(reason)) => Ok(StreamState { status: Disabled, reason: Some(reason) }),
            (Disabled, StreamMove::Enable) => Ok(StreamState::new(Idle)),
            (_, StreamMove::Enable) => Ok(self),
            (_, StreamMove::Prepared) => Ok(self),
        }
    }

    /// Whether `m`, from this state, closes the open push session: its end, and any disable
    /// of a live stream (CONTRACT: Recording and credits — `stream.ended` comes first, from the
    /// same move, whatever the reason of the disable).
    pub fn ends_push(self, m: StreamMove) -> bool {
        self.status == StreamStatus::Live && matches!(m, StreamMove::PushEnded | StreamMove::Disable(_))
    }
}

/// Push credentials are checked in three ways (the `?user=&pass=` query, OBS's Adobe
/// challenge, WHIP's bearer token); Adobe's challenge needs `base64(md5(user + salt + password))`,
/// so that is what is stored, with a per-stream random salt. The password itself is never stored.
pub fn push_verifier(username: &str, salt: &str, password: &str) -> String {
    let mut h = Md5::new();
    h.update(username.as_bytes());
    h.update(salt.as_bytes());
    h.update(password.as_bytes());
    STANDARD.encode(h.finalize())
}

/// Constant-time check of a presented password against the stored verifier.
pub fn push_password_matches(username: &str, salt: &str, password: &str, stored: &str) -> bool {
    push_verifier(username, salt, password).as_bytes().ct_eq(stored.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use StreamStatus::*;

    #[test]
    fn qualities() {
        assert_eq!(Quality::parse("720p"), Ok(Quality(720)));
        assert!(Quality::parse("721p").is_err());
        assert!(Quality::parse("0720p").is_err());
        assert!(Quality::parse("720").is_err());
        assert_eq!(Quality(1080).name(), "1080p");
    }

    #[test]
    fn moves() {
        let idle = StreamState::new(Idle);
        assert_eq!(StreamState::new(Pending).apply(StreamMove::Prepared), Ok(idle));
        let live = idle.apply(StreamMove::PushStarted).unwrap();
        assert_eq!(live.status, Live);
        assert!(live.apply(StreamMove::PushStarted).is_err(), "one session at a time");
        assert_eq!(live.apply(StreamMove::PushEnded), Ok(idle));
        assert!(idle.apply(StreamMove::PushEnded).is_err());
        let off = live.apply(StreamMove::Disable(DisabledReason::Manual)).unwrap();
        assert_eq!((off.status, off.reason), (Disabled, Some(DisabledReason::Manual)));
        assert!(off.apply(StreamMove::PushStarted).is_err(), "a disabled stream never goes live");
        assert_eq!(off.apply(StreamMove::Enable), Ok(idle));
        let deleted = off.apply(StreamMove::Disable(DisabledReason::Deleted)).unwrap();
        for m in [StreamMove::Enable, StreamMove::PushStarted, StreamMove::Disable(DisabledReason::Manual)] {
            assert_eq!(deleted.apply(m), Err(MoveError::Deleted));
        }
        assert_eq!(idle.apply(StreamMove::Enable), Ok(idle));
    }

    #[test]
    fn only_a_live_stream_has_a_push_to_end() {
        let live = StreamState::new(Live);
        for reason in [DisabledReason::Deleted, DisabledReason::Manual, DisabledReason::InsufficientCredits] {
            assert!(live.ends_push(StreamMove::Disable(reason)), "a disable ends the push");
            assert!(!StreamState::new(Idle).ends_push(StreamMove::Disable(reason)));
        }
        assert!(live.ends_push(StreamMove::PushEnded));
        assert!(!live.ends_push(StreamMove::Enable) && !live.ends_push(StreamMove::PushStarted));
        let off = StreamState { status: Disabled, reason: Some(DisabledReason::Manual) };
        assert!(!off.ends_push(StreamMove::PushEnded), "a killed push was ended by its disable");
    }

    #[test]
    fn push_verifier_matches_only_the_password() {
        let v = push_verifier("user", "salt", "secret");
        assert!(push_password_matches("user", "salt", "secret", &v));
        assert!(!push_password_matches("user", "salt", "Secret", &v));
        assert!(!push_password_matches("usr", "salt", "secret", &v));
        // Adobe's form: base64 of the raw MD5 digest.
        assert_eq!(push_verifier("", "", ""), "1B2M2Y8AsgTpgAmY7PhCfg==");
    }
}
