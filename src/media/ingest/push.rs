//! One way a push starts, is watched and ends, whatever its front (RTMP, RTMPS, SRT, WHIP):
//!
//! 1. [`begin`]: the stream's push session opens (`Streams::begin_push`: one push per stream,
//!    `idle → live`); only the refusals of the stream's state are the client's business.
//! 2. [`start`]: the push joins the stream's live session (its outputs) and the front's
//!    pipeline starts; if either fails, the push session ends.
//! 3. [`watch`] (fronts without deadlines of their own: SRT, WHIP; RTMP's session keeps its
//!    own): the API's kill, the pipeline's reports and errors, the front's own end, no media or
//!    no keyframe for too long; the input the stream shows is recorded as it is learnt.
//! 4. [`end`]: the pipeline stops, telling the live session how the push ended (a push the API
//!    ended ends it now; any other waits for a reconnect), and the push session closes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use crate::domain::stream::InputInfo;
use crate::media::ingest::liveness::Liveness;
use crate::media::ingest::pipeline::{IngestPipeline, PipelineReport};
use crate::media::live::session::{LiveSessions, Outputs, PushEnd, ENDED_BY_API};
use crate::services::streams::{StreamError, Streams};
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

/// Opens the push session of `stream`; its kill signal ends the push (`ENDED_BY_API`).
pub async fn begin(streams: &Streams, stream: &StreamRow) -> Result<Arc<Notify>, Refused> {
    match streams.begin_push(&stream.id, &stream.project_id).await {
        Ok(kill) => Ok(kill),
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
    front: F,
) -> Result<T, NotStarted<E>>
where
    E: std::fmt::Display,
    F: FnOnce(Outputs) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let (why, error) = match sessions.start(stream).await {
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
#[derive(Debug, Clone, Copy, Default)]
pub struct Publisher {
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
    let mut input = InputInfo::default();
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
/// ended) and its push session closes.
pub async fn end(streams: &Streams, stream_id: &str, project_id: &str, pipeline: IngestPipeline, why: &str) {
    pipeline.stop(PushEnd::of(why));
    streams.end_push(stream_id, project_id, why).await;
}
