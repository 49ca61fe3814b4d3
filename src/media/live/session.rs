//! The live session of a stream: opened by its first push and kept through the stream's
//! reconnect window after each push ends (until the push session says it is over: `closed`). It holds what outlives one push: the
//! LL-HLS channel (with its DVR and recording), the ladder's encoders
//! ([`crate::media::live::encoders`]) and the tap that WHEP viewers and RTSP clients take from.
//! A push that comes back within the window, over any protocol, feeds the same session: the
//! channel continues after one discontinuity, the recording goes on, the same encoders take the
//! new push's frames (if its ladder is planned the same), and the viewers stay connected and get
//! the new push's media from its first keyframe. Meanwhile a filler (the slate,
//! `media::ingest::slate`) may feed the session as a push of its own, unrecorded; a push that
//! joins stops it. When the window passes with no push, or the API ends the push (disable,
//! delete, credits), the session ends: the playlists end, the recording completes, the viewers
//! are let go.
//!
//! The push session itself (the stream's status and events) is the stream lifecycle's, in
//! [`crate::services::streams`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use crate::domain::stream::Protocol;
use crate::media::live::channel::{Channel, ChannelConfig, Channels};
use crate::media::live::encoders::EncoderSlot;
use crate::media::live::pipeline::{Descriptions, LiveOutput};
use crate::media::live::recording::Recordings;
use crate::media::live::taps::{Tap, Taps};
use crate::metrics::{PerStream, StreamCounters};
use crate::services::policy::{KeyError, Policies, Resource};
use crate::store::streams::StreamRow;

/// How long a publisher that rejoins waits for the slate to hand the playlists over: about one
/// part (200 ms by default), or the slate has stalled.
const HAND_OVER: std::time::Duration = std::time::Duration::from_secs(1);

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

/// What feeds a live session while no publisher does (the slate): stopped when a push joins the
/// session, or with the session when its window lapses.
pub trait Filler: Send {
    fn stop(self: Box<Self>, end: PushEnd);
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
    /// One joiner of a stream's session at a time ([`SessionMap::joining`]).
    joining: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
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
        session.feeding.fetch_add(1, Ordering::SeqCst);
        (session.clone(), push)
    }

    /// Joins a filler to the stream's session, if it has one.
    fn join_filler(&self, stream_id: &str) -> Option<(Arc<LiveSession>, u64)> {
        let map = self.lock();
        let session = map.get(stream_id)?;
        let push = session.pushes.fetch_add(1, Ordering::SeqCst) + 1;
        Some((session.clone(), push))
    }

    /// Holds the stream's joining (a push's or a filler's: its channel generation and its place
    /// in the session are taken together, one joiner at a time, so the latest to join has the
    /// channel's latest generation).
    async fn joining(&self, stream_id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut joining = self.joining.lock().unwrap_or_else(|p| p.into_inner());
            joining.retain(|_, lock| Arc::strong_count(lock) > 1);
            joining.entry(stream_id.to_string()).or_default().clone()
        };
        lock.lock_owned().await
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
        let (tap, channel, filler) = {
            let mut held = session.lock();
            held.stream = None;
            (held.tap.take(), held.channel.take(), held.filler.take())
        };
        if let Some((_, filler)) = filler {
            filler.stop(PushEnd::Final);
        }
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
    /// Pushes (and fillers) that joined the session so far: a push's end ends the session only
    /// if no later push joined it.
    pushes: AtomicU64,
    /// Publishers' pushes that joined and have not ended.
    feeding: AtomicU32,
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
    /// The stream as its latest publisher's push found it (a filler's outputs are made from it).
    stream: Option<StreamRow>,
    /// What feeds the session while no publisher does.
    filler: Option<(u64, Box<dyn Filler>)>,
}

impl LiveSession {
    fn new(stream_id: &str, encoders_started: &Arc<AtomicU64>) -> LiveSession {
        LiveSession {
            stream_id: stream_id.to_string(),
            pushes: AtomicU64::new(0),
            feeding: AtomicU32::new(0),
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
    /// A publisher's push (not a filler).
    publisher: bool,
    /// Says when the stream's push session is over: a reconnectable end waits for it.
    closed: Option<watch::Receiver<bool>>,
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

    /// The push ended: the session ends now ([`PushEnd::Final`]), or once the push session is
    /// over (its reconnect window lapsed with no push) unless a later push joined it; at once
    /// without a runtime or a push session to wait for.
    pub fn ended(self, end: PushEnd) {
        let SessionPush { sessions, session, push, publisher, closed } = self;
        if publisher {
            session.feeding.fetch_sub(1, Ordering::SeqCst);
        }
        match (end, tokio::runtime::Handle::try_current(), closed) {
            (PushEnd::Reconnectable, Ok(rt), Some(mut closed)) => {
                rt.spawn(async move {
                    let _ = closed.wait_for(|over| *over).await;
                    sessions.end(&session, push);
                });
            }
            _ => sessions.end(&session, push),
        }
    }
}

impl LiveSessions {
    /// Whether a filler (the slate) feeds the stream's session now: a primary that comes back
    /// stands by until its keyframe, and the filler plays until then.
    pub fn covered(&self, stream_id: &str) -> bool {
        self.sessions.get(stream_id).is_some_and(|s| s.lock().filler.is_some())
    }

    /// The outputs of a push of `stream` whose push session is open, in the stream's live
    /// session: its channel (continued after a reconnect within the window, or a new one;
    /// `None` when the stream does not offer LL-HLS) and its tap (the same one, with its
    /// viewers, after a reconnect within the window). With `drmEnabled` the media is encrypted
    /// with the stream's content key (created on its first encrypted push); a key that cannot be
    /// had fails the push rather than sending the media clear.
    pub async fn start(
        &self,
        stream: &StreamRow,
        closed: watch::Receiver<bool>,
    ) -> Result<Outputs, KeyError> {
        let _joining = self.sessions.joining(&stream.id).await;
        // A filler stops first, once it handed the playlists over (Channel::hand_over): from
        // here on its output is an older generation's.
        let session = self.sessions.get(&stream.id);
        let held = session.map(|s| {
            let mut held = s.lock();
            (held.filler.take(), held.channel.clone())
        });
        if let Some((Some((_, filler)), channel)) = held {
            if let Some((channel, generation)) = channel {
                channel.hand_over(generation, HAND_OVER).await;
            }
            filler.stop(PushEnd::Reconnectable);
        }
        let live =
            if stream.protocols().contains(&Protocol::Llhls) { self.hls(stream, false).await? } else { None };
        let (session, push) = self.sessions.join(&stream.id);
        session.lock().stream = Some(stream.clone());
        Ok(self.outputs(stream, live, session, push, Some(closed), true))
    }

    /// The outputs of a filler of the stream's session (the slate), if the session has no
    /// publisher now: the session's channel continued after a discontinuity (its media not
    /// recorded), its tap, and a place in the session whose end waits for `closed`. Hand the
    /// filler to [`LiveSessions::hold`] once it runs.
    pub async fn fill(&self, stream_id: &str, closed: watch::Receiver<bool>) -> Option<(Outputs, u64)> {
        let _joining = self.sessions.joining(stream_id).await;
        let session = self.sessions.get(stream_id)?;
        if session.feeding.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let stream = session.lock().stream.clone()?;
        let live = match stream.protocols().contains(&Protocol::Llhls) {
            true => self.hls(&stream, true).await.ok()?,
            false => None,
        };
        // No publisher can have joined meanwhile: joining is one at a time.
        let (session, push) = self.sessions.join_filler(stream_id)?;
        Some((self.outputs(&stream, live, session, push, Some(closed), false), push))
    }

    /// Keeps the filler that joined as push `push` until a push joins the session or the
    /// session ends; one that a push overtook already stops now.
    pub fn hold(&self, stream_id: &str, push: u64, filler: Box<dyn Filler>) {
        let session = self.sessions.get(stream_id);
        let Some(session) = session.filter(|s| s.pushes() == push) else {
            filler.stop(PushEnd::Reconnectable);
            return;
        };
        let old = session.lock().filler.replace((push, filler));
        if let Some((_, old)) = old {
            old.stop(PushEnd::Reconnectable);
        }
    }

    /// Stops the stream's filler, if it has one, as `end` says.
    pub fn stop_filler(&self, stream_id: &str, end: PushEnd) {
        let filler = self.sessions.get(stream_id).and_then(|s| s.lock().filler.take());
        if let Some((_, filler)) = filler {
            filler.stop(end);
        }
    }

    fn outputs(
        &self,
        stream: &StreamRow,
        mut live: Option<LiveOutput>,
        session: Arc<LiveSession>,
        push: u64,
        closed: Option<watch::Receiver<bool>>,
        publisher: bool,
    ) -> Outputs {
        let protocols = stream.protocols();
        let (webrtc, rtsp) = (protocols.contains(&Protocol::Webrtc), protocols.contains(&Protocol::Rtsp));
        if let Some(l) = &mut live {
            l.encoders = session.encoders.clone();
        }
        // Every push has a tap: its source feeds simulcast targets, which may be added while
        // it is live.
        let tap = Some({
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
        let push = SessionPush { sessions: self.sessions.clone(), session, push, publisher, closed };
        Outputs { live, tap, counters: Some(self.per_stream.get(&stream.id)), push: Some(push) }
    }

    /// The LL-HLS output of a push (`filler`: of the slate, whose media the recording skips).
    async fn hls(&self, stream: &StreamRow, filler: bool) -> Result<Option<LiveOutput>, KeyError> {
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
        if filler {
            channel.fill_with(generation);
        }
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
        SessionPush { sessions: sessions.clone(), session, push, publisher: true, closed: None }
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
