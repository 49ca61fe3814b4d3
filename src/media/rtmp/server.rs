//! The tokio shell around [`IngestSession`]: accepts TCP connections on `SLUICE_RTMP_ADDR`,
//! reads and writes bytes, decides connect and publish requests (credentials, stream state) off
//! the session, and ends pushes. Every peer is bounded: connections in all, time to start
//! publishing, idle media, bytes per read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify, Semaphore};

use super::auth::{self, AdobeStage};
use super::session::{Action, IngestSession};
use crate::app::App;
use crate::domain::random_token;
use crate::domain::stream::{push_password_matches, InputInfo};
use crate::media::ingest::{IngestPipeline, PipelineReport, Tag};

/// Connections served at once; more are closed on accept.
const MAX_CONNECTIONS: usize = 512;
/// From accept to an approved publish.
const START_DEADLINE: Duration = Duration::from_secs(10);
/// A live push with no audio or video for this long is ended (CONTRACT: Streams — auto-stop).
const NO_MEDIA: Duration = Duration::from_secs(10);
/// Bytes a peer may send before its publish is approved. A handshake, connect and publish
/// take a few KiB; the cap keeps an unauthenticated peer from making the chunk parser buffer
/// messages of up to 16 MiB (it may raise its chunk size first).
const MAX_BYTES_BEFORE_PUBLISH: u64 = 1024 * 1024;
/// How often the input bitrate is measured and recorded.
const RATE_EVERY: Duration = Duration::from_secs(5);
/// How long an Adobe challenge stays valid.
const CHALLENGE_TTL: Duration = Duration::from_secs(60);

/// Binds the RTMP listener and serves until the task is dropped. Returns the bound address.
pub async fn start(app: Arc<App>) -> anyhow::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind(app.settings.rtmp_addr).await?;
    let addr = listener.local_addr()?;
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
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
            let Ok(permit) = limit.clone().try_acquire_owned() else {
                tracing::warn!(%peer, "rtmp: too many connections; closing");
                continue;
            };
            let app = app.clone();
            tokio::spawn(async move {
                let _ = socket.set_nodelay(true);
                if let Err(e) = Connection::new(app, peer.to_string()).run(socket).await {
                    tracing::info!(%peer, error = %e, "rtmp connection closed");
                }
                drop(permit);
            });
        }
    });
    Ok(addr)
}

/// The push a connection has opened.
struct Push {
    stream_id: String,
    project_id: String,
    kill: Arc<Notify>,
    pipeline: IngestPipeline,
    reports: mpsc::Receiver<PipelineReport>,
    input: InputInfo,
    rate_from: (Instant, u64),
}

/// What woke the connection up.
enum Wake {
    Read(usize),
    Tick,
    Killed,
    Report(Option<PipelineReport>),
}

struct Connection {
    app: Arc<App>,
    peer: String,
    session: IngestSession,
    /// The stream whose push user passed the Adobe challenge on this connection.
    adobe_stream: Option<String>,
    push: Option<Push>,
    media_bytes: u64,
}

impl Connection {
    fn new(app: Arc<App>, peer: String) -> Self {
        Connection {
            app,
            peer,
            session: IngestSession::new(),
            adobe_stream: None,
            push: None,
            media_bytes: 0,
        }
    }

    async fn run(mut self, mut socket: TcpStream) -> anyhow::Result<()> {
        let result = self.serve(&mut socket).await;
        let _ = socket.shutdown().await;
        if let Some(push) = self.push.take() {
            let why = match &result {
                Ok(why) => why.clone(),
                Err(e) => format!("connection error: {e}"),
            };
            push.pipeline.stop();
            self.app.end_push(&push.stream_id, &push.project_id, &why).await;
        }
        result.map(|_| ())
    }

    /// Returns why the session ended.
    async fn serve(&mut self, socket: &mut TcpStream) -> anyhow::Result<String> {
        let started = Instant::now();
        let mut last_media = Instant::now();
        let mut received: u64 = 0;
        let mut buf = vec![0u8; 64 * 1024];
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            let kill = self.push.as_ref().map(|p| p.kill.clone());
            let reports = self.push.as_mut().map(|p| &mut p.reports);
            let wake = tokio::select! {
                r = socket.read(&mut buf) => Wake::Read(r?),
                _ = tick.tick() => Wake::Tick,
                _ = async { match kill { Some(k) => k.notified().await, None => std::future::pending().await } } => Wake::Killed,
                r = async { match reports { Some(r) => r.recv().await, None => std::future::pending().await } } => Wake::Report(r),
            };
            match wake {
                Wake::Read(0) => return Ok("client disconnected".into()),
                Wake::Read(n) => {
                    received += n as u64;
                    if self.push.is_none() && received > MAX_BYTES_BEFORE_PUBLISH {
                        return Ok("too much data before publishing".into());
                    }
                    let actions = self.session.feed(&buf[..n])?;
                    if self.handle(socket, actions, &mut last_media).await? {
                        return Ok("client finished publishing".into());
                    }
                }
                Wake::Tick => match &self.push {
                    None if started.elapsed() > START_DEADLINE => return Ok("no publish within 10 s".into()),
                    Some(_) if last_media.elapsed() > NO_MEDIA => return Ok("no media for 10 s".into()),
                    Some(_) => self.measure_rate(),
                    None => {}
                },
                Wake::Killed => return Ok("ended by the API".into()),
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
        self.app.record_input(&push.stream_id, &push.input);
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
        self.app.record_input(&push.stream_id, &push.input);
    }

    /// Performs actions; returns true when the client finished publishing.
    async fn handle(
        &mut self,
        socket: &mut TcpStream,
        actions: Vec<Action>,
        last_media: &mut Instant,
    ) -> anyhow::Result<bool> {
        let mut pending = std::collections::VecDeque::from(actions);
        while let Some(action) = pending.pop_front() {
            match action {
                Action::Send(bytes) => socket.write_all(&bytes).await?,
                Action::ConnectRequested { request_id, app, flash_ver } => {
                    let answer = match self.decide_connect(&app, &flash_ver).await {
                        Ok(()) => self.session.accept(request_id)?,
                        Err(description) => {
                            tracing::info!(peer = %self.peer, "rtmp connect refused");
                            self.session.reject(request_id, "NetConnection.Connect.Rejected", &description)?
                        }
                    };
                    pending.extend(answer);
                }
                Action::PublishRequested { request_id, stream_name } => {
                    let answer = match self.decide_publish(&stream_name).await {
                        Ok(()) => {
                            *last_media = Instant::now();
                            self.session.accept(request_id)?
                        }
                        Err(description) => {
                            tracing::info!(peer = %self.peer, reason = %description, "rtmp publish refused");
                            self.session.reject(request_id, "NetStream.Publish.BadName", &description)?
                        }
                    };
                    pending.extend(answer);
                }
                Action::Video { data, timestamp } => self.media(Tag::Video, timestamp, &data, last_media),
                Action::Audio { data, timestamp } => self.media(Tag::Audio, timestamp, &data, last_media),
                Action::Metadata(_) => {}
                Action::PublishFinished => return Ok(true),
            }
        }
        Ok(false)
    }

    /// Media of an approved push goes to its pipeline; anything before approval is ignored.
    fn media(&mut self, tag: Tag, timestamp: u32, data: &[u8], last_media: &mut Instant) {
        if let Some(push) = self.push.as_mut() {
            *last_media = Instant::now();
            self.media_bytes += data.len() as u64;
            push.pipeline.push(tag, timestamp, data);
        }
    }

    /// Connect: app `live`; Adobe rounds when asked for; a bare connect is refused with
    /// "need auth" (which starts OBS/librtmp's Adobe exchange) unless the client is ffmpeg,
    /// whose credentials come on the stream name.
    async fn decide_connect(&mut self, app: &str, flash_ver: &str) -> Result<(), String> {
        let (app_name, query) = auth::split_query(app);
        if app_name != "live" {
            return Err("unknown application; publish to /live/<stream key>".into());
        }
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
                self.app.remember_challenge(&opaque, &user, CHALLENGE_TTL);
                Err(auth::challenge_description(&user, &salt, &opaque))
            }
            AdobeStage::Response { user, client_challenge, response, opaque } => {
                if !self.app.take_challenge(&opaque, &user) {
                    return Err(auth::AUTH_FAILED.into());
                }
                match self.app.db.stream_by_push_username(&user).await {
                    Ok(Some(s))
                        if auth::adobe_response_matches(
                            &s.push_verifier,
                            &opaque,
                            &client_challenge,
                            &response,
                        ) =>
                    {
                        self.adobe_stream = Some(s.id);
                        Ok(())
                    }
                    _ => Err(auth::AUTH_FAILED.into()),
                }
            }
        }
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
                return Err("internal error".into());
            }
        };
        let authorised = match &self.adobe_stream {
            Some(id) => *id == stream.id,
            None => match (auth::get(&query, "user"), auth::get(&query, "pass")) {
                (Some(user), Some(pass)) => {
                    let user_ok: bool =
                        subtle::ConstantTimeEq::ct_eq(user.as_bytes(), stream.push_username.as_bytes())
                            .into();
                    let pass_ok = push_password_matches(
                        &stream.push_username,
                        &stream.push_salt,
                        pass,
                        &stream.push_verifier,
                    );
                    user_ok & pass_ok
                }
                _ => false,
            },
        };
        if !authorised {
            return Err("wrong push credentials".into());
        }
        // The session first: it admits one push per stream, and the channel relies on that.
        let kill = self.app.begin_push(&stream.id, &stream.project_id).await.map_err(|e| e.to_string())?;
        let live = match self.app.live_output(&stream).await {
            Ok(live) => live,
            Err(e) => {
                tracing::error!(stream = %stream.id, error = %e, "preparing the live output (content key)");
                self.app.end_push(&stream.id, &stream.project_id, "live output failed to start").await;
                return Err("ingest is unavailable".to_string());
            }
        };
        let (pipeline, reports) = match IngestPipeline::start(&stream.id, live) {
            Ok(started) => started,
            Err(e) => {
                tracing::error!(stream = %stream.id, error = %e, "starting the ingest pipeline");
                self.app.end_push(&stream.id, &stream.project_id, "ingest pipeline failed to start").await;
                return Err("ingest is unavailable".to_string());
            }
        };
        tracing::info!(stream = %stream.id, peer = %self.peer, "push started");
        self.push = Some(Push {
            stream_id: stream.id,
            project_id: stream.project_id,
            kill,
            pipeline,
            reports,
            input: InputInfo::default(),
            rate_from: (Instant::now(), self.media_bytes),
        });
        Ok(())
    }
}
