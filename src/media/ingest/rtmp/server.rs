//! The tokio shell around [`IngestSession`]: accepts TCP connections on `SLUICE_RTMP_ADDR` (and,
//! with a TLS certificate, on `SLUICE_RTMPS_ADDR`, where TLS is a transport under the same
//! session), reads and writes bytes, decides connect and publish requests (credentials, stream state) off
//! the session, and ends pushes. Every peer is bounded (CONTRACT: Live media): connections in
//! all and per client IP (`SLUICE_RTMP_MAX_PER_IP`), one `connect` per connection, the time a
//! write may take (a peer that stops reading is cut off), bytes per read; the session bounds
//! what it parses and holds and keeps the deadlines, which this shell polls every second.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Notify};

use super::auth::{self, AdobeStage};
use super::pace::Pacer;
use super::session::{Action, IngestSession, SessionError};
use crate::domain::content_key::MasterKey;
use crate::domain::random_token;
use crate::domain::stream::{InputInfo, InputRole};
use crate::media::ingest::flv::Tag;
use crate::media::ingest::limits::Limits;
use crate::media::ingest::pipeline::{IngestPipeline, PipelineReport};
use crate::media::ingest::push::{self, Refused};
use crate::media::ingest::rtmp::challenges::Challenges;
use crate::media::live::session::{LiveSessions, ENDED_BY_API};
use crate::services::streams::{StreamError, Streams};
use crate::store::Db;
use crate::tls::Tls;

/// A write to the peer that takes longer than this ends the connection: a peer that does not
/// read cannot hold a connection (or the deadlines, which wait while a write is pending).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the session's deadlines are polled (and a push's silence, when an input stands by).
const TICK: Duration = Duration::from_millis(250);
/// How often the input bitrate is measured and recorded.
const RATE_EVERY: Duration = Duration::from_secs(5);
/// Merged reads: once a push's media flows, a read that drained the socket is followed by a wait
/// for the next tick of this period, the same ticks for every connection, before the next read
/// (the first media is read as it comes, as it sets the push's wall-clock base).
/// Each wake-up then takes what a frame's time brought (a video frame, an AAC frame or two)
/// instead of one message, and the pushes that woke on a tick are read in one go: about a
/// quarter less CPU a passthrough push, for a wait of at most this much a message (measured on
/// screen with the ladder: 73 ms more; docs/live-ingest.md, "Merged reads"). So only a push
/// that only passes through is read so ([`IngestPipeline::passthrough_only`]). A read that fills
/// the buffer is followed at once by the next, so a push above the buffer's size a tick (about
/// 16 Mbit/s) is read as it comes.
pub const MERGED_READ: Duration = Duration::from_millis(33);
/// Bytes a read takes at most.
const READ_BUFFER: usize = 64 * 1024;

/// The first tick of [`MERGED_READ`] after `now`, counted from the first time it was asked.
fn next_merge_tick(now: Instant) -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| now);
    let period = MERGED_READ.as_nanos().max(1);
    let ticks = now.saturating_duration_since(epoch).as_nanos() / period + 1;
    epoch + Duration::from_nanos(u64::try_from(ticks * period).unwrap_or(u64::MAX))
}

/// Why a connection ended early (logged; the peer only ever sees the session's own messages).
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Session(#[from] SessionError),
    #[error("the peer did not read for {} s", WRITE_TIMEOUT.as_secs())]
    WriteTimeout,
    #[error("a second connect on one connection")]
    SecondConnect,
}

/// What RTMP ingest decides pushes with, and where their media goes.
pub struct Ingest {
    /// Connections at once and per client IP (`SLUICE_RTMP_MAX_PER_IP`), over RTMP, RTMPS and
    /// SRT together.
    pub limits: Arc<Limits>,
    pub db: Db,
    /// Opens the sealed push verifiers.
    pub master_key: MasterKey,
    pub streams: Arc<Streams>,
    pub outputs: Arc<LiveSessions>,
    /// Adobe RTMP challenges handed out and not yet answered.
    pub challenges: Challenges,
}

/// Binds an RTMP listener on `addr` — RTMPS when `tls` is given — and serves until the process
/// ends. Returns the bound address.
pub async fn start(app: Arc<Ingest>, addr: SocketAddr, tls: Option<Tls>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let (socket, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "rtmp accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Some(admitted) = app.limits.admit(peer.ip()) else {
                tracing::debug!(%peer, "rtmp: too many connections (from this address or in all); closing");
                continue;
            };
            let (app, tls) = (app.clone(), tls.clone());
            tokio::spawn(async move {
                let _ = socket.set_nodelay(true);
                let result = match tls {
                    None => Connection::new(app, peer, true).run(socket).await,
                    // The handshake has its deadline; plain RTMP on this port fails it.
                    Some(tls) => match tls.accept(socket).await {
                        Ok(socket) => Connection::new(app, peer, false).run(socket).await,
                        Err(e) => Err(e.into()),
                    },
                };
                if let Err(e) = result {
                    tracing::info!(%peer, error = %e, "rtmp connection closed");
                }
                drop(admitted);
            });
        }
    });
    Ok(addr)
}

mod standby;
use standby::StandbyInput;

/// The push a connection has opened.
struct Push {
    stream_id: String,
    project_id: String,
    /// The stream as the push found it (the connection stands by with it after a step-down).
    row: crate::store::streams::StreamRow,
    kill: Arc<Notify>,
    /// Becomes `true` when an input that stands by takes over from this one.
    step_down: watch::Receiver<bool>,
    pipeline: IngestPipeline,
    reports: mpsc::Receiver<PipelineReport>,
    input: InputInfo,
    rate_from: (Instant, u64),
    /// Holds the reads back while the media runs ahead of real time.
    pacer: Pacer,
    /// Whether the push has been held back yet (said once in the log).
    paced: bool,
}

/// What woke the connection up.
enum Wake {
    Read(usize),
    /// A held-back push, or one that waited for its merge tick, may be read again.
    Resume,
    Tick,
    Killed,
    Report(Option<PipelineReport>),
    /// An input that stood by takes over: the push steps down, the connection stands by.
    StepDown,
    /// The session this connection stands by for is over.
    SessionOver,
}

struct Connection {
    app: Arc<Ingest>,
    peer: SocketAddr,
    /// The session's clock: microseconds since accept.
    origin: Instant,
    session: IngestSession,
    /// Whether the peer sent its `connect` (one per connection).
    connected: bool,
    /// The stream whose push user passed the Adobe challenge on this connection.
    adobe_stream: Option<String>,
    push: Option<Push>,
    /// The role `connect` asked for: application `live` is the primary, `backup` the backup.
    role: InputRole,
    /// The input this connection holds while it stands by instead of pushing.
    standby: Option<StandbyInput>,
    /// When the push's media last came (its silence hands over to an input that stands by).
    last_media: Instant,
    /// The publisher's latest sequence headers (sent once: a push that steps down stands by
    /// with them).
    headers: crate::media::ingest::standby::Gop,
    media_bytes: u64,
    /// No read before this: the push's media is ahead of real time ([`Pacer`]).
    hold: Option<Instant>,
    /// No read before this: the next tick of [`MERGED_READ`].
    merge: Option<Instant>,
    /// Whether reads are merged: over plain TCP. A read from TLS returns about a record's worth
    /// (16 KB) whatever is waiting, so a short read does not tell a drained socket, and waiting
    /// after each would hold an RTMPS push to a record a tick.
    merge_reads: bool,
}

impl Connection {
    fn new(app: Arc<Ingest>, peer: SocketAddr, merge_reads: bool) -> Self {
        Connection {
            app,
            peer,
            origin: Instant::now(),
            session: IngestSession::new(0),
            connected: false,
            adobe_stream: None,
            push: None,
            role: InputRole::Primary,
            standby: None,
            last_media: Instant::now(),
            headers: Default::default(),
            media_bytes: 0,
            hold: None,
            merge: None,
            merge_reads,
        }
    }

    async fn run<S: AsyncRead + AsyncWrite + Unpin>(mut self, mut socket: S) -> Result<(), ConnectionError> {
        let result = self.serve(&mut socket).await;
        // Over TLS the shutdown writes close_notify, which a peer that does not read would hold.
        let _ = tokio::time::timeout(WRITE_TIMEOUT, socket.shutdown()).await;
        if let Some(standing) = self.standby.take() {
            standing.leave(&self.app.streams);
        }
        if let Some(push) = self.push.take() {
            let why = match &result {
                Ok(why) => why.clone(),
                Err(e) => format!("connection error: {e}"),
            };
            push::end(
                &self.app.streams,
                &self.app.outputs,
                &push.stream_id,
                &push.project_id,
                push.pipeline,
                &why,
            )
            .await;
        }
        result.map(|_| ())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Returns why the session ended.
    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        socket: &mut S,
    ) -> Result<String, ConnectionError> {
        let mut buf = vec![0u8; READ_BUFFER];
        let mut tick = tokio::time::interval(TICK);
        loop {
            let kill = self.push.as_ref().map(|p| p.kill.clone());
            let mut step_down = self.push.as_ref().map(|p| p.step_down.clone());
            let mut over = self.standby.as_ref().map(|s| s.closed());
            let reports = self.push.as_mut().map(|p| &mut p.reports);
            // The later of the two (`None` is before any `Some`).
            let until = self.hold.max(self.merge);
            let wake = tokio::select! {
                r = socket.read(&mut buf), if until.is_none() => Wake::Read(r?),
                _ = tokio::time::sleep_until(until.unwrap_or_else(Instant::now).into()), if until.is_some() => Wake::Resume,
                _ = tick.tick() => Wake::Tick,
                _ = async { match kill { Some(k) => k.notified().await, None => std::future::pending().await } } => Wake::Killed,
                r = async { match reports { Some(r) => r.recv().await, None => std::future::pending().await } } => Wake::Report(r),
                _ = async { match &mut step_down { Some(s) => drop(s.wait_for(|down| *down).await), None => std::future::pending().await } } => Wake::StepDown,
                _ = async { match &mut over { Some(o) => drop(o.wait_for(|over| *over).await), None => std::future::pending().await } } => Wake::SessionOver,
            };
            match wake {
                Wake::Read(0) => return Ok("client disconnected".into()),
                Wake::Read(n) => {
                    // The first media is read as it comes: it sets the push's wall-clock base.
                    let had_media = self.media_bytes > 0;
                    let actions = self.session.feed(self.now(), &buf[..n])?;
                    if let Some(why) = self.handle(socket, actions).await? {
                        return Ok(why);
                    }
                    if let Some(why) = self.take_over_if_due().await {
                        return Ok(why);
                    }
                    if let Some(until) = self.hold {
                        let at = until.saturating_duration_since(self.origin).as_micros();
                        self.session.media_due_until(u64::try_from(at).unwrap_or(u64::MAX));
                    } else if self.merge_reads
                        && self.push.as_ref().is_some_and(|p| p.pipeline.passthrough_only())
                        && had_media
                        && n < buf.len()
                    {
                        self.merge = Some(next_merge_tick(Instant::now()));
                    }
                }
                Wake::Resume => (self.hold, self.merge) = (None, None),
                Wake::Tick => {
                    if let Some(deadline) = self.session.poll(self.now()) {
                        return Ok(deadline.to_string());
                    }
                    self.measure_rate();
                    if let Some(why) = self.silent() {
                        if let Some(why) = self.step_down(why).await {
                            return Ok(why);
                        }
                    }
                }
                Wake::StepDown => {
                    let why = format!("the {} input took over", standby::name(standby::other(self.role)));
                    if let Some(why) = self.step_down(why).await {
                        return Ok(why);
                    }
                }
                Wake::SessionOver => return Ok("the stream's session ended".into()),
                Wake::Killed => return Ok(ENDED_BY_API.into()),
                Wake::Report(Some(PipelineReport::Error(e))) => {
                    return Ok(format!("ingest pipeline failed: {e}"))
                }
                Wake::Report(Some(report)) => self.note_format(report),
                Wake::Report(None) => return Ok("ingest pipeline stopped".into()),
            }
        }
    }

    fn note_format(&mut self, report: PipelineReport) {
        let Some(push) = self.push.as_mut() else { return };
        match report {
            PipelineReport::Video { codec, width, height, frame_rate } => {
                push.input.video_codec = Some(codec);
                push.input.width = Some(width);
                push.input.height = Some(height);
                push.input.frame_rate = frame_rate;
            }
            PipelineReport::Audio { codec, sample_rate, channels } => {
                push.input.audio_codec = Some(codec);
                push.input.audio_sample_rate = Some(sample_rate);
                push.input.audio_channels = Some(channels);
            }
            PipelineReport::Error(_) => return,
        }
        self.app.streams.record_input(&push.stream_id, &push.input);
    }

    fn measure_rate(&mut self) {
        let bytes = self.media_bytes;
        let Some(push) = self.push.as_mut() else { return };
        let (since, at_bytes) = push.rate_from;
        let elapsed = since.elapsed();
        if elapsed < RATE_EVERY {
            return;
        }
        let kbps = ((bytes - at_bytes) as f64 * 8.0 / 1000.0 / elapsed.as_secs_f64()).round() as i64;
        push.rate_from = (Instant::now(), bytes);
        push.input.bitrate_kbps = Some(kbps);
        self.app.streams.record_input(&push.stream_id, &push.input);
    }

    /// Performs actions; returns why the push ends when it does (the client finished
    /// publishing, or its pipeline failed).
    async fn handle<S: AsyncWrite + Unpin>(
        &mut self,
        socket: &mut S,
        actions: Vec<Action>,
    ) -> Result<Option<String>, ConnectionError> {
        let mut pending = std::collections::VecDeque::from(actions);
        while let Some(action) = pending.pop_front() {
            match action {
                Action::Send(bytes) => tokio::time::timeout(WRITE_TIMEOUT, socket.write_all(&bytes))
                    .await
                    .map_err(|_| ConnectionError::WriteTimeout)??,
                Action::ConnectRequested { request_id, app, flash_ver } => {
                    if std::mem::replace(&mut self.connected, true) {
                        return Err(ConnectionError::SecondConnect);
                    }
                    let answer = match self.decide_connect(&app, &flash_ver).await {
                        Ok(()) => self.session.accept(self.now(), request_id)?,
                        Err(description) => {
                            tracing::info!(peer = %self.peer, "rtmp connect refused");
                            self.session.reject(request_id, "NetConnection.Connect.Rejected", &description)?
                        }
                    };
                    pending.extend(answer);
                }
                Action::PublishRequested { request_id, stream_name } => {
                    let answer = match self.decide_publish(&stream_name).await {
                        Ok(()) => self.session.accept(self.now(), request_id)?,
                        Err(description) => {
                            tracing::info!(peer = %self.peer, reason = %description, "rtmp publish refused");
                            self.session.reject(request_id, "NetStream.Publish.BadName", &description)?
                        }
                    };
                    pending.extend(answer);
                }
                Action::Video { data, timestamp } => {
                    if let Err(why) = self.media(Tag::Video, timestamp, &data) {
                        return Ok(Some(why));
                    }
                }
                Action::Audio { data, timestamp } => {
                    if let Err(why) = self.media(Tag::Audio, timestamp, &data) {
                        return Ok(Some(why));
                    }
                }
                Action::Metadata(_) => {}
                Action::PublishFinished => return Ok(Some("client finished publishing".into())),
            }
        }
        Ok(None)
    }

    /// Media of an approved push goes to its pipeline; anything before approval is ignored.
    /// Media ahead of real time holds the next read back ([`Pacer`]). Errs with why the push
    /// ends when its pipeline can take no more.
    fn media(&mut self, tag: Tag, timestamp: u32, data: &bytes::Bytes) -> Result<(), String> {
        if let Some(standing) = self.standby.as_mut() {
            self.media_bytes += data.len() as u64;
            return standing.media(&self.app.streams, tag, timestamp, data);
        }
        if let Some(push) = self.push.as_mut() {
            self.last_media = Instant::now();
            self.headers.keep_config(tag, data);
            self.media_bytes += data.len() as u64;
            push.pipeline.push(tag, timestamp, data)?;
            if let Some(until) = push.pacer.note(Instant::now(), timestamp) {
                if !std::mem::replace(&mut push.paced, true) {
                    tracing::info!(stream = %push.stream_id, peer = %self.peer, "push is faster than real time; reading it at real time");
                }
                self.hold = Some(self.hold.map_or(until, |h| h.max(until)));
            }
        }
        Ok(())
    }

    /// Connect: app `live`; Adobe rounds when asked for; a bare connect is refused with
    /// "need auth" (which starts OBS/librtmp's Adobe exchange) unless the client is ffmpeg,
    /// whose credentials come on the stream name.
    async fn decide_connect(&mut self, app: &str, flash_ver: &str) -> Result<(), String> {
        let (app_name, query) = auth::split_query(app);
        self.role = match app_name {
            "live" => InputRole::Primary,
            "backup" => InputRole::Backup,
            _ => {
                return Err(
                    "unknown application; publish to /live/<stream key> (or /backup/<stream key>)".into()
                )
            }
        };
        match auth::adobe_stage(&query) {
            AdobeStage::None if flash_ver.contains("Lavf") => Ok(()),
            AdobeStage::None => Err(auth::NEED_AUTH.into()),
            AdobeStage::Challenge { user } => {
                let salt = match self.app.db.stream_by_push_username(&user).await {
                    Ok(Some(s)) => s.push_salt,
                    // An unknown user gets a challenge all the same: nothing is revealed.
                    _ => random_token(16),
                };
                let opaque = random_token(16);
                if !self.app.challenges.remember(&opaque, &user, self.peer.ip(), Instant::now()) {
                    return Err(auth::AUTH_FAILED.into());
                }
                Err(auth::challenge_description(&user, &salt, &opaque))
            }
            AdobeStage::Response { user, client_challenge, response, opaque } => {
                if !self.app.challenges.take(&opaque, &user, Instant::now()) {
                    return Err(auth::AUTH_FAILED.into());
                }
                match self.app.db.stream_by_push_username(&user).await {
                    Ok(Some(s))
                        if self.verifier_of(&s).is_some_and(|verifier| {
                            auth::adobe_response_matches(&verifier, &opaque, &client_challenge, &response)
                        }) =>
                    {
                        self.adobe_stream = Some(s.id);
                        Ok(())
                    }
                    _ => Err(auth::AUTH_FAILED.into()),
                }
            }
        }
    }

    fn verifier_of(&self, stream: &crate::store::streams::StreamRow) -> Option<String> {
        crate::store::secrets::push_verifier(&self.app.master_key, stream)
    }

    /// Publish: the stream key names the stream; the credentials are those that passed the
    /// Adobe challenge, or `?user=&pass=` on the stream name; the stream must be idle.
    async fn decide_publish(&mut self, stream_name: &str) -> Result<(), String> {
        if self.push.is_some() {
            return Err("this connection publishes already".into());
        }
        let (key, query) = auth::split_query(stream_name);
        let stream = match self.app.db.stream_by_key(key).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err("unknown stream key".into()),
            Err(e) => {
                tracing::error!(error = %e, "rtmp: loading stream");
                return Err("ingest is unavailable".into());
            }
        };
        let authorised = match &self.adobe_stream {
            Some(id) => *id == stream.id,
            None => match (auth::get(&query, "user"), auth::get(&query, "pass")) {
                (Some(user), Some(pass)) => {
                    let user_ok: bool =
                        subtle::ConstantTimeEq::ct_eq(user.as_bytes(), stream.push_username.as_bytes())
                            .into();
                    let pass_ok =
                        crate::store::secrets::push_password_ok(&self.app.master_key, &stream, pass);
                    user_ok & pass_ok
                }
                _ => false,
            },
        };
        if !authorised {
            return Err("wrong push credentials".into());
        }
        // A backup, or the primary back within its window while the slate covers for it: that
        // one stands by until its keyframe, and the slate plays until then.
        if self.role == InputRole::Backup || self.returning(&stream.id) {
            return self.stand_by(stream);
        }
        // The session first: it admits one push per stream, and the channel relies on that.
        // Only the refusals of the stream's state reach the client, never a database error.
        let opened = match push::begin(&self.app.streams, &stream).await {
            Ok(opened) => opened,
            // The primary back while the backup feeds the stream: it stands by until its keyframe.
            Err(Refused::State(StreamError::LiveAlready))
                if self.app.streams.sessions.backup_feeds(&stream.id) =>
            {
                return self.stand_by(stream);
            }
            Err(Refused::State(e)) => return Err(e.to_string()),
            Err(Refused::Unavailable) => return Err("ingest is unavailable".into()),
        };
        let front = |outputs| IngestPipeline::start(&stream.id, outputs);
        let Ok((pipeline, reports)) =
            push::start(&self.app.streams, &self.app.outputs, &stream, &opened, front).await
        else {
            return Err("ingest is unavailable".to_string());
        };
        tracing::info!(stream = %stream.id, peer = %self.peer, "push started");
        self.feed(&stream, opened, pipeline, reports);
        Ok(())
    }

    /// The connection pushes `stream` from now on, through `pipeline`.
    fn feed(
        &mut self,
        stream: &crate::store::streams::StreamRow,
        opened: push::Opened,
        pipeline: IngestPipeline,
        reports: mpsc::Receiver<PipelineReport>,
    ) {
        self.last_media = Instant::now();
        self.push = Some(Push {
            stream_id: stream.id.clone(),
            project_id: stream.project_id.clone(),
            row: stream.clone(),
            kill: opened.kill,
            step_down: opened.step_down,
            pipeline,
            reports,
            input: InputInfo { active: Some(self.role), ..Default::default() },
            rate_from: (Instant::now(), self.media_bytes),
            pacer: Pacer::default(),
            paced: false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_ticks_are_shared_and_come_within_a_period() {
        let first = next_merge_tick(Instant::now());
        for wait in [0, 1, 7, 20, 33, 40] {
            let now = Instant::now() + Duration::from_millis(wait);
            let tick = next_merge_tick(now);
            assert!(tick > now && tick <= now + MERGED_READ, "{wait} ms: {:?} after", tick - now);
            let apart = tick.max(first) - tick.min(first);
            assert_eq!(apart.as_nanos() % MERGED_READ.as_nanos(), 0, "ticks of every connection line up");
        }
    }
}
