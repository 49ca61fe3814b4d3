//! An accepted SRT caller, from its accept to its end (CONTRACT: Continuity, backup ingest). It
//! either feeds the stream's session (the primary, or an input that took over) or stands by:
//! a backup while the primary is live, or the primary back while the backup feeds the stream.
//! One receive thread reads the caller for the whole connection into its [`Mode`]: the
//! pipeline's `appsrc` ([`Feeder`]) while it feeds, a [`TsGop`] (nothing demuxed) while it
//! stands by. The task here moves it between the two as the RTMP connection does
//! (`rtmp/server/standby.rs`): an input that stands by ready takes over as soon as nobody feeds
//! the session, from its buffered keyframe; a primary ready tells the backup to step down; a
//! push silent for [`SILENCE`] while another input stands by ready steps down; one that steps
//! down stands by again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::ffi::{Opt, Socket};
use super::{Srt, MESSAGE};
use crate::domain::stream::{InputInfo, InputRole};
use crate::media::ingest::pipeline::{Feeder, IngestPipeline, PipelineReport};
use crate::media::ingest::push::{self, Opened, Publisher, Refused};
use crate::media::ingest::standby::ts::TsGop;
use crate::media::ingest::standby::{other_role as other, publisher_returns, role_name as name, Readiness};
use crate::services::streams::{StandingBy, StreamError};
use crate::store::streams::StreamRow;

/// A push that sends nothing this long while another input stands by ready hands over to it.
const SILENCE: Duration = Duration::from_secs(1);
/// How often an input that stands by looks at its buffer and the session.
const STANDBY_TICK: Duration = Duration::from_millis(100);

/// Where the receive thread puts what the caller sends.
enum Mode {
    Standby(TsGop),
    Feed(Feeder),
}

/// What the receive thread and the connection's task share.
struct Shared {
    mode: Mutex<Mode>,
    /// When the last message came, in ms since `epoch`.
    last: AtomicU64,
    epoch: Instant,
}

impl Shared {
    fn mode(&self) -> MutexGuard<'_, Mode> {
        self.mode.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
}

/// A push under way: what [`push::watch`] and [`push::end`] need.
struct Feeding {
    opened: Opened,
    pipeline: IngestPipeline,
    reports: mpsc::Receiver<PipelineReport>,
}

/// Runs the connection of `stream`'s caller of `role` to its end.
pub(super) async fn run(
    srt: &Srt,
    socket: Arc<Socket>,
    peer: SocketAddr,
    stream: StreamRow,
    role: InputRole,
) {
    let streams = &srt.streams;
    // The primary opens the push session (or rejoins the one that waits for it); a backup, or
    // the primary back while the backup feeds the stream, stands by.
    let mut feeding = None;
    // The primary back within its window while the slate covers for it stands by too, until its
    // keyframe: the slate plays until then.
    if role == InputRole::Primary && !publisher_returns(streams, &srt.outputs, &stream.id) {
        match push::begin(streams, &stream).await {
            Ok(opened) => match start(srt, &stream, opened).await {
                Some(started) => feeding = Some(started),
                None => return,
            },
            Err(Refused::State(StreamError::LiveAlready)) if streams.sessions.backup_feeds(&stream.id) => {}
            Err(e) => {
                tracing::info!(stream = %stream.id, %peer, error = ?e, "srt push refused");
                return;
            }
        }
    }
    let first = match &feeding {
        Some(f) => f.pipeline.feeder().map(Mode::Feed),
        None => Some(Mode::Standby(TsGop::default())),
    };
    let Some(first) = first else {
        tracing::warn!(stream = %stream.id, "srt: the ingest pipeline has no source");
        if let Some(f) = feeding {
            end(srt, &stream, f.pipeline, NO_SOURCE).await;
        }
        return;
    };
    let shared = Arc::new(Shared { mode: Mutex::new(first), last: AtomicU64::new(0), epoch: Instant::now() });
    let (done_tx, mut done) = watch::channel(None::<String>);
    let (receiving, sharing) = (socket.clone(), shared.clone());
    let started = std::thread::Builder::new()
        .name("srt-recv".into())
        .spawn(move || receive(&receiving, &sharing, &done_tx));
    if let Err(e) = started {
        tracing::error!(stream = %stream.id, error = %e, "srt: starting the receive thread");
        if let Some(f) = feeding {
            end(srt, &stream, f.pipeline, "the receive thread did not start").await;
        }
        return;
    }
    tracing::info!(stream = %stream.id, %peer, role = name(role), "SRT push started");
    let why = loop {
        let Some(f) = feeding.take() else {
            match stand_by(srt, &stream, role, &shared, &mut done).await {
                Ok(took_over) => feeding = Some(took_over),
                Err(why) => break why,
            }
            continue;
        };
        let stepped = AtomicBool::new(false);
        let ended = front_ended(srt, &stream, role, &shared, &f.opened, &mut done, &stepped);
        let publisher = Publisher { role, audio_codec: None, sends_keyframes: true };
        let why =
            push::watch(streams, &stream, &f.pipeline, f.reports, &f.opened.kill, publisher, ended).await;
        if !stepped.load(Ordering::Relaxed) {
            // Wakes the receive thread, which ends with the socket.
            socket.close();
            end(srt, &stream, f.pipeline, &why).await;
            break why;
        }
        // It steps down: from now on what it sends is kept, and the other input takes over.
        tracing::info!(stream = %stream.id, %peer, role = name(role), why, "the push steps down");
        *shared.mode() = Mode::Standby(TsGop::default());
        end(srt, &stream, f.pipeline, &why).await;
    };
    socket.close();
    tracing::info!(stream = %stream.id, %peer, role = name(role), why, "SRT push ended");
}

/// Why a push ends whose pipeline has no `appsrc` to feed.
const NO_SOURCE: &str = "ingest pipeline has no source";

/// Ends the push of `stream` whose pipeline is `pipeline`, for `why`.
async fn end(srt: &Srt, stream: &StreamRow, pipeline: IngestPipeline, why: &str) {
    push::end(&srt.streams, &srt.outputs, &stream.id, &stream.project_id, pipeline, why).await;
}

/// Starts the pipeline of a push just opened.
async fn start(srt: &Srt, stream: &StreamRow, opened: Opened) -> Option<Feeding> {
    let front = |outputs| IngestPipeline::start_ts(&stream.id, outputs);
    let (pipeline, reports) = push::start(&srt.streams, &srt.outputs, stream, &opened, front).await.ok()?;
    Some(Feeding { opened, pipeline, reports })
}

/// What ends a push besides what [`push::watch`] watches: the connection's end, and (setting
/// `stepped`) the other input taking over or this one's silence while another stands by ready.
async fn front_ended(
    srt: &Srt,
    stream: &StreamRow,
    role: InputRole,
    shared: &Shared,
    opened: &Opened,
    done: &mut watch::Receiver<Option<String>>,
    stepped: &AtomicBool,
) -> String {
    let mut step_down = opened.step_down.clone();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            why = done.wait_for(Option::is_some) => {
                return why.map(|w| w.clone().unwrap_or_default()).unwrap_or_else(|_| "the receive thread ended".into());
            }
            _ = step_down.wait_for(|down| *down) => {
                stepped.store(true, Ordering::Relaxed);
                return format!("the {} input took over", name(other(role)));
            }
            _ = tick.tick() => {
                let quiet = shared.silent_for() >= SILENCE;
                if quiet && srt.streams.sessions.has_ready_standby(&stream.id, Some(role)) {
                    stepped.store(true, Ordering::Relaxed);
                    return format!("no media for {} s; the {} input takes over", SILENCE.as_secs(), name(other(role)));
                }
            }
        }
    }
}

/// Stands the connection by until it takes the session over (its push) or ends (why).
async fn stand_by(
    srt: &Srt,
    stream: &StreamRow,
    role: InputRole,
    shared: &Shared,
    done: &mut watch::Receiver<Option<String>>,
) -> Result<Feeding, String> {
    let sessions = &srt.streams.sessions;
    let StandingBy { standby, mut closed } = sessions.stand_by(&stream.id, role).map_err(str::to_string)?;
    tracing::info!(stream = %stream.id, role = name(role), "an input stands by");
    let mut readiness = Readiness::of(role, publisher_returns(&srt.streams, &srt.outputs, &stream.id));
    let mut tick = tokio::time::interval(STANDBY_TICK);
    let outcome = loop {
        tokio::select! {
            why = done.wait_for(Option::is_some) => {
                break Err(why.map(|w| w.clone().unwrap_or_default()).unwrap_or_else(|_| "the receive thread ended".into()));
            }
            _ = closed.wait_for(|over| *over) => break Err("the stream's session ended".into()),
            _ = tick.tick() => {}
        }
        if !sessions.is_standing(&stream.id, &standby) {
            break Err(format!("another {} input took its place", name(role)));
        }
        let (ready, audio) = match &*shared.mode() {
            Mode::Standby(gop) => (gop.ready(), gop.has_audio()),
            Mode::Feed(_) => (false, false),
        };
        let ready = ready && shared.silent_for() < SILENCE;
        match readiness.look(&srt.streams, &stream.id, &standby, ready, audio) {
            Err(why) => break Err(why),
            Ok(false) => continue,
            Ok(true) => {}
        }
        let front = |outputs| IngestPipeline::start_ts(&stream.id, outputs);
        let Some(started) = push::take_over(&srt.streams, &srt.outputs, stream, &standby, front).await else {
            continue;
        };
        let Ok(((mut pipeline, reports), opened)) = started else {
            return Err("ingest is unavailable".into());
        };
        let Some(mut feeder) = pipeline.feeder() else {
            end(srt, stream, pipeline, NO_SOURCE).await;
            return Err(NO_SOURCE.into());
        };
        {
            let mut mode = shared.mode();
            if let Mode::Standby(gop) = &mut *mode {
                if let Some((start, at)) = gop.take() {
                    let ago = chrono::Duration::from_std(at.elapsed()).unwrap_or_default();
                    pipeline.date_ts_from(chrono::Utc::now() - ago);
                    tracing::info!(stream = %stream.id, role = name(role), buffered = start.len(), "the input that stood by takes over");
                    feeder.feed(&start);
                }
            }
            *mode = Mode::Feed(feeder);
        }
        srt.streams.record_input(&stream.id, &InputInfo { active: Some(role), ..Default::default() });
        return Ok(Feeding { opened, pipeline, reports });
    };
    sessions.leave(&stream.id, &standby);
    if readiness.noted() {
        srt.streams.standby_changed(&stream.id);
    }
    outcome
}

/// The receive thread: the caller's messages into its [`Mode`] until the connection ends, the
/// socket is closed (the connection's task ended), the pipeline takes nothing more, or what it
/// stands by with is refused.
fn receive(socket: &Socket, shared: &Shared, done: &watch::Sender<Option<String>>) {
    // A receive waits at most this long, so a connection that ended is noticed.
    if let Err(e) = socket.set_i32(Opt::RcvTimeo, 250) {
        done.send_replace(Some(format!("SRT socket: {e}")));
        return;
    }
    let mut buf = vec![0u8; MESSAGE];
    let why = loop {
        match socket.recv(&mut buf) {
            Ok(Some(n)) => {
                let since = shared.epoch.elapsed().as_millis();
                shared.last.store(u64::try_from(since).unwrap_or(u64::MAX), Ordering::Relaxed);
                match &mut *shared.mode() {
                    Mode::Feed(feeder) => {
                        if !feeder.feed(&buf[..n]) {
                            break "ingest pipeline stopped".to_string();
                        }
                    }
                    Mode::Standby(gop) => {
                        if let Err(e) = gop.add(&buf[..n]) {
                            tracing::warn!(error = %e, "an SRT input that stands by sends what the stream cannot take; refused");
                            break format!("the input is refused: {e}");
                        }
                    }
                }
            }
            Ok(None) if done.is_closed() => break String::new(),
            Ok(None) => {}
            Err(e) => break format!("the publisher disconnected ({})", e.text),
        }
    };
    done.send_replace(Some(why));
}
