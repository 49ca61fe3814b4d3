//! One way a push starts, is watched and ends, whatever its front (RTMP, RTMPS, SRT, WHIP):
//!
//! 1. [`begin`]: the stream's push session opens (`Streams::begin_push`: one push per stream,
//!    `idle → live`); only the refusals of the stream's state are the client's business.
//! 2. [`start`]: the push joins the stream's live session (its outputs) and the front's
//!    pipeline starts; if either fails, the push session ends.
//! 3. [`watch`] (fronts without deadlines of their own: SRT, WHIP; RTMP's session keeps its
//!    own): the API's kill, the pipeline's reports and errors, the front's own end, no media or
//!    no keyframe for too long; the input the stream shows is recorded as it is learnt.
//! 4. [`end`]: the pipeline stops, telling the live session how the push ended. A push the API
//!    ended ends the session now. Any other leaves it waiting for its publisher, within the
//!    stream's reconnect window, with the slate ([`crate::media::ingest::slate`]) covering the
//!    gap; a push within it rejoins the session ([`begin`]), and when the window lapses the push
//!    session closes and the live session with it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify};

use crate::domain::stream::{InputInfo, InputRole};
use crate::media::ingest::liveness::Liveness;
use crate::media::ingest::pipeline::IngestPipeline;
use crate::media::ingest::pipeline::PipelineReport;
use crate::media::ingest::slate::picture::{Kind, Picture};
use crate::media::ingest::slate::{Format, Slate};
use crate::media::live::session::{LiveSessions, Outputs, PushEnd, ENDED_BY_API};
pub use crate::services::streams::Opened;
use crate::services::streams::{Standby, StreamError, Streams};
use crate::store::streams::StreamRow;

/// How often [`watch`] reads the liveness counters.
const TICK: Duration = Duration::from_secs(1);

/// Why a push was not opened.
#[derive(Debug)]
pub enum Refused {
    /// The stream's state refuses it (disabled, live already, unknown, no credits): the client
    /// may be told.
    State(StreamError),
    /// The database did not answer (logged); the client gets "unavailable".
    Unavailable,
}

/// Opens the push session of `stream` (or rejoins the one that waits for its publisher); its
/// kill signal ends the push (`ENDED_BY_API`).
pub async fn begin(streams: &Arc<Streams>, stream: &StreamRow) -> Result<Opened, Refused> {
    match streams.begin_push(&stream.id, &stream.project_id).await {
        Ok(opened) => {
            // The slate's picture, read now while the database answers: a slate while it
            // does not shows it all the same.
            if !opened.rejoined {
                let (streams, stream_id) = (streams.clone(), stream.id.clone());
                tokio::spawn(async move { streams.session_slate(&stream_id).await });
            }
            Ok(opened)
        }
        Err(e @ StreamError::Db(_)) => {
            tracing::error!(stream = %stream.id, error = %e, "opening the push session");
            Err(Refused::Unavailable)
        }
        Err(e) => Err(Refused::State(e)),
    }
}

/// Why [`start`] failed (logged; the push session was ended).
#[derive(Debug)]
pub enum NotStarted<E> {
    /// The live session's outputs could not be had (the stream's content key).
    Outputs,
    /// The front's pipeline did not start.
    Front(E),
}

/// Joins the stream's live session and starts the front's pipeline with `front` (which gets
/// the push's outputs). On failure the push session is ended.
pub async fn start<T, E, F, Fut>(
    streams: &Streams,
    sessions: &LiveSessions,
    stream: &StreamRow,
    opened: &Opened,
    front: F,
) -> Result<T, NotStarted<E>>
where
    E: std::fmt::Display,
    F: FnOnce(Outputs) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let (why, error) = match sessions.start(stream, opened.closed.clone()).await {
        Ok(outputs) => match front(outputs).await {
            Ok(started) => return Ok(started),
            Err(e) => {
                tracing::warn!(stream = %stream.id, error = %e, "the front's pipeline did not start");
                ("ingest pipeline failed to start", NotStarted::Front(e))
            }
        },
        Err(e) => {
            tracing::error!(stream = %stream.id, error = %e, "preparing the live output (content key)");
            ("live output failed to start", NotStarted::Outputs)
        }
    };
    streams.end_push(&stream.id, &stream.project_id, why).await;
    Err(error)
}

/// What [`watch`] knows of the publisher beyond the pipeline's reports.
#[derive(Debug, Clone, Copy)]
pub struct Publisher {
    /// Which of the stream's inputs it is.
    pub role: InputRole,
    /// The audio codec it sends, when the pipeline's is a transcode of it (WHIP's Opus).
    pub audio_codec: Option<&'static str>,
    /// It sends keyframes unasked, so a push with media but none for long is ended (WebRTC
    /// senders send one when asked, and may not for long otherwise).
    pub sends_keyframes: bool,
}

/// Watches a push until it ends, recording the input it learns; returns why it ended.
/// `front_ended` resolves with why when the front itself ends (the connection closed).
pub async fn watch(
    streams: &Streams,
    stream: &StreamRow,
    pipeline: &IngestPipeline,
    mut reports: mpsc::Receiver<PipelineReport>,
    kill: &Notify,
    publisher: Publisher,
    front_ended: impl Future<Output = String>,
) -> String {
    let mut input = InputInfo { active: Some(publisher.role), ..Default::default() };
    let mut liveness = Liveness::new(publisher.sends_keyframes);
    let mut tick = tokio::time::interval(TICK);
    tokio::pin!(front_ended);
    loop {
        tokio::select! {
            _ = kill.notified() => return ENDED_BY_API.into(),
            why = &mut front_ended => return why,
            report = reports.recv() => match report {
                Some(PipelineReport::Error(e)) => return format!("ingest pipeline failed: {e}"),
                Some(PipelineReport::Video { codec, width, height, frame_rate }) => {
                    (input.video_codec, input.width, input.height) = (Some(codec), Some(width), Some(height));
                    input.frame_rate = frame_rate;
                    streams.record_input(&stream.id, &input);
                }
                Some(PipelineReport::Audio { codec, sample_rate, channels }) => {
                    input.audio_codec = Some(publisher.audio_codec.map_or(codec, str::to_string));
                    (input.audio_sample_rate, input.audio_channels) = (Some(sample_rate), Some(channels));
                    streams.record_input(&stream.id, &input);
                }
                None => return "ingest pipeline stopped".into(),
            },
            _ = tick.tick() => match liveness.tick(pipeline) {
                Err(why) => return why,
                Ok(Some(kbps)) => {
                    input.bitrate_kbps = Some(kbps);
                    streams.record_input(&stream.id, &input);
                }
                Ok(None) => {}
            },
        }
    }
}

/// Ends a push that ended for `why`: its pipeline stops (the live session is told how it
/// ended). A push the API ended closes its push session now; any other leaves it to wait out
/// the stream's reconnect window ([`Streams::publisher_gone`]), the slate covering the gap.
pub async fn end(
    streams: &Arc<Streams>,
    sessions: &Arc<LiveSessions>,
    stream_id: &str,
    project_id: &str,
    pipeline: IngestPipeline,
    why: &str,
) {
    let end = PushEnd::of(why);
    let format = pipeline.format();
    let released = pipeline.stop(end);
    if end == PushEnd::Final {
        streams.end_push(stream_id, project_id, why).await;
        return;
    }
    let Some(closed) = streams.publisher_gone(stream_id, project_id, why).await else { return };
    // The session waits from here on: an input that stands by may take it over now. The slate
    // comes only once the push's last parts are in the channel, and only if none does.
    let (streams, sessions, stream_id) = (streams.clone(), sessions.clone(), stream_id.to_string());
    tokio::spawn(async move {
        let _ = released.await;
        cover(&streams, &sessions, &stream_id, format, closed).await;
    });
}

/// Takes the stream's session over with the input that stood by as `standby`, if nobody feeds
/// it now ([`Streams::take_over`]), and starts the front's pipeline with `front`. `None` when
/// it may not take over (yet); on a failure to start the push session is ended.
pub async fn take_over<T, E, F, Fut>(
    streams: &Streams,
    sessions: &LiveSessions,
    stream: &StreamRow,
    standby: &Arc<Standby>,
    front: F,
) -> Option<Result<(T, Opened), NotStarted<E>>>
where
    E: std::fmt::Display,
    F: FnOnce(Outputs) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let opened = streams.take_over(stream, standby).await?;
    Some(start(streams, sessions, stream, &opened, front).await.map(|started| (started, opened)))
}

/// Feeds the slate into the stream's live session while its push session waits for the
/// publisher; it stops when a push joins, or with the session when `closed` says it is over.
async fn cover(
    streams: &Arc<Streams>,
    sessions: &Arc<LiveSessions>,
    stream_id: &str,
    format: Format,
    mut closed: watch::Receiver<bool>,
) {
    // An input that stands by ready takes the session over instead.
    if !streams.sessions.is_waiting(stream_id) || streams.sessions.has_ready_standby(stream_id, None) {
        return;
    }
    let picture = picture_of(streams, stream_id).await;
    let made = tokio::task::spawn_blocking(move || match picture {
        // A picture that does not render (it was checked at upload) leaves the default card.
        Some(p) => Slate::of(&format, Some(&p)).or_else(|e| {
            tracing::warn!(error = %e, "the stream's slate picture did not render; the default card instead");
            Slate::of(&format, None)
        }),
        None => Slate::of(&format, None),
    })
    .await;
    let slate = match made.map_err(|e| e.to_string()).and_then(|made| made) {
        Ok(slate) => slate,
        Err(e) => {
            tracing::warn!(stream = %stream_id, error = %e, "the slate could not be made; players wait for the publisher");
            return;
        }
    };
    let Some((outputs, push)) = sessions.fill(stream_id, closed.clone()).await else { return };
    let ends = outputs.live.as_ref().map(|l| l.channel.media_ends()).unwrap_or_default();
    let pipeline = match IngestPipeline::start_slate(stream_id, outputs, slate, ends).await {
        Ok(pipeline) => pipeline,
        Err(e) => {
            tracing::warn!(stream = %stream_id, error = %e, "the slate did not start; players wait for the publisher");
            return;
        }
    };
    tracing::info!(stream = %stream_id, "the slate covers the publisher's absence");
    streams.record_input(stream_id, &InputInfo { active: Some(InputRole::Slate), ..Default::default() });
    sessions.hold(stream_id, push, Box::new(pipeline));
    let (sessions, stream_id) = (sessions.clone(), stream_id.to_string());
    tokio::spawn(async move {
        let _ = closed.wait_for(|over| *over).await;
        sessions.stop_filler(&stream_id, PushEnd::Final);
    });
}

/// The stream's own slate picture, if it has one and it renders (otherwise the default card):
/// `Streams::session_slate` says how long the database may take.
async fn picture_of(streams: &Streams, stream_id: &str) -> Option<Picture> {
    let found = streams.session_slate(stream_id).await?;
    let (info, image) = (&found.0, found.1.clone());
    let kind = Kind::parse(&info.content_type)?;
    let (width, height) = (u32::try_from(info.width).ok()?, u32::try_from(info.height).ok()?);
    Some(Picture::stored(kind, width, height, info.digest.clone(), image))
}
