//! The live session of a stream: opened by its first push and kept through the reconnect
//! window ([`RECONNECT_GRACE`]) after each push ends. It holds what outlives one push: the
//! LL-HLS channel (with its DVR and recording), the ladder's encoders
//! ([`crate::media::live::encoders`]) and the tap that WHEP viewers and RTSP clients take from.
//! A push that comes back within the window, over any protocol, feeds the same session: the
//! channel continues after one discontinuity, the recording goes on, the same encoders take the
//! new push's frames (if its ladder is planned the same), and the viewers stay connected and get
//! the new push's media from its first keyframe. When the window
//! passes with no push, or the API ends the push (disable, delete, credits), the session ends:
//! the playlists end, the recording completes, the viewers are let go.
//!
//! The push session itself (the stream's status and events) is the stream lifecycle's, in
//! [`crate::services::streams`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::domain::stream::Protocol;
use crate::media::live::channel::{Channel, ChannelConfig, Channels, RECONNECT_GRACE};
use crate::media::live::encoders::EncoderSlot;
use crate::media::live::pipeline::{Descriptions, LiveOutput};
use crate::media::live::recording::Recordings;
use crate::media::live::taps::{Tap, Taps};
use crate::metrics::{PerStream, StreamCounters};
use crate::services::policy::{KeyError, Policies, Resource};
use crate::store::streams::StreamRow;

/// What one push feeds: LL-HLS packaging (streams that list `llhls`) and the tap that WHEP
/// viewers and RTSP sessions take from (streams that list `webrtc` or `rtsp`), and its place in
/// the stream's live session.
#[derive(Default)]
pub struct Outputs {
    pub live: Option<LiveOutput>,
    pub tap: Option<Arc<Tap>>,
    /// The stream's byte counters (`/metrics`): the ingest pipeline adds what reaches it.
    pub counters: Option<Arc<StreamCounters>>,
    /// The push's place in its live session; told when the push ends.
    pub push: Option<SessionPush>,
}

/// How a push ended, for its live session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushEnd {
    /// The publisher went away or the push failed: a push within the window continues the session.
    Reconnectable,
    /// The API ended the push (the stream was disabled or deleted, or its credits ran out): the
    /// session ends now.
    Final,
}

/// Why a push ends when the API ended it (a disable, a delete, credits run out), as the push
/// session records it.
pub const ENDED_BY_API: &str = "ended by the API";

impl PushEnd {
    /// How a push that ended for `why` leaves its session: one the API ended ([`ENDED_BY_API`])
    /// ends it now.
    pub fn of(why: &str) -> PushEnd {
        if why == ENDED_BY_API {
            PushEnd::Final
        } else {
            PushEnd::Reconnectable
        }
    }
}

/// What the live sessions are made with, and the sessions of this process by stream id.
pub struct LiveSessions {
    pub channels: Arc<Channels>,
    pub taps: Arc<Taps>,
    pub policies: Arc<Policies>,
    /// Where DVR segments are kept: `<data dir>/live`.
    pub live_dir: PathBuf,
    pub part_ms: u32,
    pub segment_ms: u32,
    /// Operators' pipeline descriptions (`SLUICE_PIPELINES_DIR`).
    pub pipelines_dir: Option<PathBuf>,
    /// Where `vodEnabled` streams' sessions are recorded.
    pub recordings: Arc<Recordings>,
    /// Per-stream byte counters (`/metrics`).
    pub per_stream: Arc<PerStream>,
    pub sessions: Arc<SessionMap>,
}

/// The live sessions of this process, by stream id.
#[derive(Default)]
pub struct SessionMap {
    map: Mutex<HashMap<String, Arc<LiveSession>>>,
    /// Encoders the sessions started (`sluice_live_encoders_started_total`).
    encoders_started: Arc<AtomicU64>,
}

impl SessionMap {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<LiveSession>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stream's session (a new one when it has none) and the number of the push it starts.
    fn join(&self, stream_id: &str) -> (Arc<LiveSession>, u64) {
        let mut map = self.lock();
        let session = map
            .entry(stream_id.to_string())
            .or_insert_with(|| Arc::new(LiveSession::new(stream_id, &self.encoders_started)));
        let push = session.pushes.fetch_add(1, Ordering::SeqCst) + 1;
        (session.clone(), push)
    }

    /// Ends `session` unless a push after `push` joined it: its tap closes (the viewers are let
    /// go), the channel's playlists end, and the session leaves the map.
    fn end(&self, session: &Arc<LiveSession>, push: u64) {
        {
            let mut map = self.lock();
            if session.pushes.load(Ordering::SeqCst) != push {
                return;
            }
            if map.get(&session.stream_id).is_some_and(|s| Arc::ptr_eq(s, session)) {
                map.remove(&session.stream_id);
            }
        }
        let (tap, channel) = {
            let mut held = session.lock();
            (held.tap.take(), held.channel.take())
        };
        // The encoders stop (off the runtime: stopping a pipeline waits on its threads).
        if let Some(encoders) = session.encoders.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn_blocking(move || drop(encoders))),
                Err(_) => drop(encoders),
            }
        }
        if let Some((taps, tap)) = tap {
            taps.close(&tap);
        }
        if let Some((channel, generation)) = channel {
            channel.finish(generation);
        }
    }

    /// The encoders the sessions of this process started: a publisher that reconnects within
    /// its session's window starts none.
    pub fn encoders_started(&self) -> u64 {
        self.encoders_started.load(Ordering::Relaxed)
    }

    /// The stream's session, if it has one.
    pub fn get(&self, stream_id: &str) -> Option<Arc<LiveSession>> {
        self.lock().get(stream_id).cloned()
    }
}

/// One stream's live session.
pub struct LiveSession {
    pub stream_id: String,
    /// Pushes that joined the session so far: a push's end ends the session only if no later
    /// push joined it.
    pushes: AtomicU64,
    held: Mutex<Held>,
    /// The ladder's decoder and encoders, kept from push to push ([`crate::media::live::encoders`]).
    encoders: EncoderSlot,
}

/// What a session holds for its pushes.
#[derive(Default)]
struct Held {
    tap: Option<(Arc<Taps>, Arc<Tap>)>,
    /// The channel and the generation of its latest push.
    channel: Option<(Arc<Channel>, u32)>,
}

impl LiveSession {
    fn new(stream_id: &str, encoders_started: &Arc<AtomicU64>) -> LiveSession {
        LiveSession {
            stream_id: stream_id.to_string(),
            pushes: AtomicU64::new(0),
            held: Mutex::default(),
            encoders: EncoderSlot::new(encoders_started.clone()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pushes that joined the session so far.
    pub fn pushes(&self) -> u64 {
        self.pushes.load(Ordering::SeqCst)
    }
}

/// A push's place in its live session.
pub struct SessionPush {
    sessions: Arc<SessionMap>,
    session: Arc<LiveSession>,
    push: u64,
}

impl SessionPush {
    /// Closes the session's tap now (its WHEP viewers and RTSP clients end), unless a later push
    /// joined the session.
    pub fn let_viewers_go(&self) {
        let tap = {
            let mut held = self.session.lock();
            if self.session.pushes() != self.push {
                return;
            }
            held.tap.take()
        };
        if let Some((taps, tap)) = tap {
            taps.close(&tap);
        }
    }

    /// The push ended: the session ends now ([`PushEnd::Final`]) or when the reconnect window
    /// passes with no push (on the runtime's timer; at once without a runtime).
    pub fn ended(self, end: PushEnd) {
        let SessionPush { sessions, session, push } = self;
        match (end, tokio::runtime::Handle::try_current()) {
            (PushEnd::Reconnectable, Ok(rt)) => {
                rt.spawn(async move {
                    tokio::time::sleep(RECONNECT_GRACE).await;
                    sessions.end(&session, push);
                });
            }
            _ => sessions.end(&session, push),
        }
    }
}

impl LiveSessions {
    /// The outputs of a push of `stream` whose push session is open, in the stream's live
    /// session: its channel (continued after a reconnect within the window, or a new one;
    /// `None` when the stream does not offer LL-HLS) and its tap (the same one, with its
    /// viewers, after a reconnect within the window). With `drmEnabled` the media is encrypted
    /// with the stream's content key (created on its first encrypted push); a key that cannot be
    /// had fails the push rather than sending the media clear.
    pub async fn start(&self, stream: &StreamRow) -> Result<Outputs, KeyError> {
        let protocols = stream.protocols();
        let (webrtc, rtsp) = (protocols.contains(&Protocol::Webrtc), protocols.contains(&Protocol::Rtsp));
        let mut live = if protocols.contains(&Protocol::Llhls) { self.hls(stream).await? } else { None };
        let (session, push) = self.sessions.join(&stream.id);
        if let Some(l) = &mut live {
            l.encoders = session.encoders.clone();
        }
        let tap = (webrtc || rtsp).then(|| {
            let mut held = session.lock();
            match &held.tap {
                Some((_, tap)) if !tap.is_closed() && tap.webrtc == webrtc && tap.rtsp == rtsp => {
                    tap.next_push();
                    tap.clone()
                }
                _ => {
                    let tap = self.taps.open(&stream.id, webrtc, rtsp);
                    held.tap = Some((self.taps.clone(), tap.clone()));
                    tap
                }
            }
        });
        if let Some(l) = &live {
            session.lock().channel = Some((l.channel.clone(), l.generation));
        }
        let push = SessionPush { sessions: self.sessions.clone(), session, push };
        Ok(Outputs { live, tap, counters: Some(self.per_stream.get(&stream.id)), push: Some(push) })
    }

    async fn hls(&self, stream: &StreamRow) -> Result<Option<LiveOutput>, KeyError> {
        let key = if stream.drm_enabled == 1 {
            self.policies.content_key(&Resource::Stream(&stream.id), true).await?
        } else {
            None
        };
        let dvr = (stream.dvr_enabled == 1).then(|| {
            let dir = self.live_dir.join(&stream.id).join(crate::domain::new_id());
            (stream.dvr_duration as f64, dir)
        });
        let config = ChannelConfig {
            part: f64::from(self.part_ms) / 1000.0,
            segment: f64::from(self.segment_ms) / 1000.0,
            dvr,
            key,
        };
        let (channel, generation) = self.channels.start_push(&stream.id, config);
        // A new session of a `vodEnabled` stream is recorded; a reconnect within the grace
        // period continues the channel, and with it the recording it has.
        if stream.vod_enabled == 1 && generation == 0 && !channel.is_recording() {
            match self.recordings.start(stream, &channel.session).await {
                Ok(recorder) => channel.record(Box::new(recorder)),
                Err(e) => {
                    tracing::error!(stream = %stream.id, error = %e, "recording could not start; the push goes on unrecorded")
                }
            }
        }
        Ok(Some(LiveOutput {
            channel,
            generation,
            qualities: stream.qualities(),
            descriptions: Descriptions::load(self.pipelines_dir.as_deref()),
            transcodes: Default::default(),
            // The session's, given when the push joins it (`start`).
            encoders: Default::default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session with a tap, as `LiveSessions::start` leaves it.
    fn joined(sessions: &Arc<SessionMap>, taps: &Arc<Taps>) -> SessionPush {
        let (session, push) = sessions.join("st");
        let mut held = session.lock();
        if held.tap.is_none() {
            held.tap = Some((taps.clone(), taps.open("st", true, false)));
        }
        drop(held);
        SessionPush { sessions: sessions.clone(), session, push }
    }

    #[test]
    fn a_push_ends_its_session_only_when_no_later_push_joined_it() {
        let (sessions, taps) = (Arc::new(SessionMap::default()), Arc::new(Taps::default()));
        let first = joined(&sessions, &taps);
        let tap = taps.get("st").expect("a tap");
        let second = joined(&sessions, &taps);
        assert!(Arc::ptr_eq(&first.session, &second.session), "the same session");
        // The first push's window passes after the second joined: nothing ends.
        first.ended(PushEnd::Reconnectable);
        assert!(!tap.is_closed());
        assert!(sessions.get("st").is_some());
        // The latest push's end (here without a runtime: at once) ends the session.
        second.ended(PushEnd::Reconnectable);
        assert!(tap.is_closed(), "its viewers are let go");
        assert!(sessions.get("st").is_none());
        // A later push opens a new session with a new tap.
        let third = joined(&sessions, &taps);
        assert_eq!(third.push, 1);
        assert!(!taps.get("st").expect("a new tap").is_closed());
    }

    #[test]
    fn the_api_ending_a_push_lets_the_viewers_go_at_once() {
        let (sessions, taps) = (Arc::new(SessionMap::default()), Arc::new(Taps::default()));
        let push = joined(&sessions, &taps);
        let tap = taps.get("st").expect("a tap");
        push.let_viewers_go();
        assert!(tap.is_closed());
        assert!(sessions.get("st").is_some(), "the session itself ends when the push has drained");
        push.ended(PushEnd::Final);
        assert!(sessions.get("st").is_none());
        assert_eq!(PushEnd::of(ENDED_BY_API), PushEnd::Final);
        assert_eq!(PushEnd::of("client disconnected"), PushEnd::Reconnectable);
    }
}
