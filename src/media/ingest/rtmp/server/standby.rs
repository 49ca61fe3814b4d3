//! An RTMP connection that stands by (CONTRACT: Continuity, backup ingest): a backup while the
//! primary is live, or the primary back (or gone quiet) while the backup feeds the stream. Its
//! media goes into a [`Gop`] (nothing decoded), and it takes the stream's session over, from
//! its last keyframe, as soon as nobody feeds it; a primary with a keyframe first tells the
//! backup to step down. A push that steps down (an input took over, or it went quiet while one
//! stood by ready) leaves its connection standing by.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::watch;

use super::Connection;
use crate::domain::stream::InputInfo;
use crate::media::ingest::flv::Tag;
use crate::media::ingest::pipeline::IngestPipeline;
use crate::media::ingest::push;
use crate::media::ingest::standby::{publisher_returns, Gop, Readiness};
use crate::services::streams::{StandingBy, Streams};
use crate::store::streams::StreamRow;

/// A push that sends nothing this long while another input stands by ready hands over to it.
pub(super) const SILENCE: Duration = Duration::from_secs(1);

pub(super) use crate::media::ingest::standby::{other_role as other, role_name as name};

/// What a connection that stands by holds.
pub(super) struct StandbyInput {
    stream: StreamRow,
    standing: StandingBy,
    gop: Gop,
    /// What the session was told of it.
    readiness: Readiness,
    /// Nobody feeds the session and this input is ready: it takes over after this read.
    due: bool,
    /// When its newest message came: the push is dated by it, not by when it takes over (the
    /// take-over, waiting for the slate's hand-over and the pipeline, reads nothing meanwhile).
    newest_at: Option<Instant>,
}

impl StandbyInput {
    pub(super) fn closed(&self) -> watch::Receiver<bool> {
        self.standing.closed.clone()
    }

    pub(super) fn leave(self, streams: &Streams) {
        streams.sessions.leave(&self.stream.id, &self.standing.standby);
        if self.readiness.noted() {
            streams.standby_changed(&self.stream.id);
        }
    }

    /// Keeps one message. Errs with why the connection ends: a codec the stream cannot take, or
    /// not the tracks of the input that feeds it (the two inputs need the same codecs).
    pub(super) fn media(
        &mut self,
        streams: &Streams,
        tag: Tag,
        timestamp: u32,
        data: &Bytes,
    ) -> Result<(), String> {
        let (id, role, standby) = (&self.stream.id, self.standing.standby.role, &self.standing.standby);
        if !streams.sessions.is_standing(id, standby) {
            return Err(format!("another {} input took its place", name(role)));
        }
        self.newest_at = Some(Instant::now());
        if let Err(e) = self.gop.add(tag, timestamp, data) {
            tracing::warn!(stream = %id, role = name(role), error = %e, "an input that stands by sends what the stream cannot take; refused");
            return Err(format!("the {} input is refused: {e}", name(role)));
        }
        self.due = self.readiness.look(streams, id, standby, self.gop.ready(), self.gop.has_audio())?;
        Ok(())
    }
}

impl Connection {
    /// Whether the stream's publisher comes back while the slate covers for it
    /// ([`publisher_returns`]).
    pub(super) fn returning(&self, stream_id: &str) -> bool {
        publisher_returns(&self.app.streams, &self.app.outputs, stream_id)
    }

    /// Stands this connection by for `stream`'s session. Errs with why not, for the publisher.
    pub(super) fn stand_by(&mut self, stream: StreamRow) -> Result<(), String> {
        let readiness = Readiness::of(self.role, self.returning(&stream.id));
        let standing = self.app.streams.sessions.stand_by(&stream.id, self.role).map_err(str::to_string)?;
        tracing::info!(stream = %stream.id, peer = %self.peer, role = name(self.role), "an input stands by");
        let gop = self.headers.configs();
        self.standby = Some(StandbyInput { stream, standing, gop, readiness, due: false, newest_at: None });
        Ok(())
    }

    /// Takes the session over when the standby input is due to; returns why the connection
    /// ends when that failed.
    pub(super) async fn take_over_if_due(&mut self) -> Option<String> {
        let standing = self.standby.as_mut().filter(|s| s.due)?;
        standing.due = false;
        let (stream, standby) = (standing.stream.clone(), standing.standing.standby.clone());
        let front = |outputs| IngestPipeline::start(&stream.id, outputs);
        let started = push::take_over(&self.app.streams, &self.app.outputs, &stream, &standby, front).await?;
        let mut standing = self.standby.take()?;
        let Ok(((mut pipeline, reports), opened)) = started else {
            return Some("ingest is unavailable".into());
        };
        let tags = standing.gop.take();
        self.headers = standing.gop.configs();
        tracing::info!(stream = %stream.id, peer = %self.peer, role = name(self.role), buffered = tags.len(), "the input that stood by takes over");
        if let Some(newest) = tags.last().map(|t| t.1) {
            pipeline.date_from(newest, standing.newest_at.map(|at| at.elapsed()).unwrap_or_default());
        }
        let mut failed = None;
        for (tag, timestamp, body) in &tags {
            if let Err(why) = pipeline.push(*tag, *timestamp, body) {
                failed = Some(why);
                break;
            }
        }
        self.feed(&stream, opened, pipeline, reports);
        self.app
            .streams
            .record_input(&stream.id, &InputInfo { active: Some(self.role), ..Default::default() });
        failed
    }

    /// Why the push steps down for its silence: no media for [`SILENCE`] while another input
    /// stands by ready.
    pub(super) fn silent(&self) -> Option<String> {
        let push = self.push.as_ref()?;
        if self.hold.is_some() || self.last_media.elapsed() < SILENCE {
            return None;
        }
        let sessions = &self.app.streams.sessions;
        sessions.has_ready_standby(&push.row.id, Some(self.role)).then(|| {
            format!("no media for {} s; the {} input takes over", SILENCE.as_secs(), name(other(self.role)))
        })
    }

    /// Ends the push for `why` and stands the connection by; returns why the connection ends
    /// when it may not stand by.
    pub(super) async fn step_down(&mut self, why: String) -> Option<String> {
        let push = self.push.take()?;
        let row = push.row.clone();
        tracing::info!(stream = %row.id, peer = %self.peer, role = name(self.role), why, "the push steps down");
        push::end(&self.app.streams, &self.app.outputs, &row.id, &row.project_id, push.pipeline, &why).await;
        self.last_media = Instant::now();
        self.stand_by(row).err().map(|e| format!("{why}; {e}"))
    }
}
