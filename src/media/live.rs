//! Live push sessions: the stream moves `idle → live → idle` with `stream.live` and
//! `stream.ended`, one session per stream, and the API can end a session at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::api::streams::event_data;
use crate::app::App;
use crate::domain::stream::{DisabledReason, Quality, StreamMove};
use crate::domain::time::now_ms;
use crate::events::{self, Event};
use crate::media::live_hls::channel::ChannelConfig;
use crate::media::live_hls::pipeline::{Descriptions, LiveOutput};
use crate::store::streams::StreamRow;
use crate::store::{Db, DbError};

/// The open push sessions of this process, by stream id.
#[derive(Default)]
pub struct LiveSessions {
    sessions: Mutex<HashMap<String, Arc<Notify>>>,
}

/// Why a push could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Refused(String),
    #[error("database: {0}")]
    Db(#[from] DbError),
}

impl LiveSessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the stream's session now, if one is open here (DELETE, disable).
    pub fn kill(&self, stream_id: &str) {
        if let Some(kill) = self.lock().get(stream_id) {
            kill.notify_one();
        }
    }

    pub fn is_live(&self, stream_id: &str) -> bool {
        self.lock().contains_key(stream_id)
    }

    /// Ends every session of this process; returns how many there were.
    pub fn kill_all(&self) -> usize {
        let sessions = self.lock();
        for kill in sessions.values() {
            kill.notify_one();
        }
        sessions.len()
    }

    fn count(&self) -> usize {
        self.lock().len()
    }
}

impl App {
    /// Shutdown (CONTRACT: `SIGTERM` drains): ends every push cleanly (`stream.ended`, the
    /// stream back to `idle`) and ends its playlists (`EXT-X-ENDLIST`) without the reconnect
    /// grace, waiting at most `within`.
    pub async fn drain_live(&self, within: Duration) {
        let pushes = self.live.kill_all();
        if pushes == 0 {
            return;
        }
        tracing::info!(pushes, "ending live pushes");
        let deadline = tokio::time::Instant::now() + within;
        while (self.live.count() > 0 || self.channels.any_live()) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.channels.finish_all();
    }

    /// The LL-HLS packaging of a push of `stream` whose session is open ([`App::begin_push`]):
    /// the stream's channel, continued after a reconnect within the grace period, or a new one.
    /// `None` when the stream does not offer LL-HLS. With `drmEnabled` the media is encrypted
    /// with the stream's content key (created on its first encrypted push); a key that cannot
    /// be had fails the push rather than sending the media clear.
    pub async fn live_output(&self, stream: &StreamRow) -> anyhow::Result<Option<LiveOutput>> {
        if !stream.protocols.split_whitespace().any(|p| p == "llhls") {
            return Ok(None);
        }
        let key = if stream.drm_enabled == 1 {
            let resource = crate::playback::Resource::Stream(&stream.id);
            self.playback.content_key(&self.db, &self.master_key, &resource, true).await?
        } else {
            None
        };
        let dvr = (stream.dvr_enabled == 1).then(|| {
            let dir = self.settings.data_dir.join("live").join(&stream.id).join(crate::domain::new_id());
            (stream.dvr_duration as f64, dir)
        });
        let config = ChannelConfig {
            part: f64::from(self.settings.llhls_part_ms) / 1000.0,
            segment: f64::from(self.settings.llhls_segment_ms) / 1000.0,
            dvr,
            key,
        };
        let (channel, generation) = self.channels.start_push(&stream.id, config);
        Ok(Some(LiveOutput {
            channel,
            generation,
            qualities: stream.qualities.split_whitespace().filter_map(|q| Quality::parse(q).ok()).collect(),
            descriptions: Descriptions::load(self.settings.pipelines_dir.as_deref()),
        }))
    }

    /// Opens a push session: `idle → live` and `stream.live`, in one transaction. Returns the
    /// signal that ends the session early.
    pub async fn begin_push(&self, stream_id: &str, project_id: &str) -> Result<Arc<Notify>, StartError> {
        let kill = Arc::new(Notify::new());
        {
            let mut sessions = self.live.lock();
            if sessions.contains_key(stream_id) {
                return Err(StartError::Refused("the stream is live already".into()));
            }
            sessions.insert(stream_id.to_string(), kill.clone());
        }
        let result = async {
            let mut tx = self.db.begin_write().await?;
            let mut row = Db::stream_in(&mut tx, project_id, stream_id)
                .await?
                .ok_or_else(|| StartError::Refused("stream not found".into()))?;
            let next =
                row.state().apply(StreamMove::PushStarted).map_err(|e| StartError::Refused(e.to_string()))?;
            row.set_state(next);
            row.last_push_at = Some(now_ms());
            row.updated_at = now_ms();
            Db::update_stream(&mut tx, &row).await?;
            Db::set_stream_live_node(&mut tx, stream_id, Some(self.node_id())).await?;
            events::emit(&mut tx, project_id, &Event::StreamLive(event_data(&row))).await?;
            tx.commit().await?;
            Ok::<_, StartError>(())
        }
        .await;
        match result {
            Ok(()) => {
                self.wake_sender();
                Ok(kill)
            }
            Err(e) => {
                self.live.lock().remove(stream_id);
                Err(e)
            }
        }
    }

    /// Records what a live push sends, off the media path: the connection never waits on the
    /// database for it.
    pub fn record_input(&self, stream_id: &str, info: &crate::domain::stream::InputInfo) {
        let json = serde_json::to_string(info).unwrap_or_default();
        let (db, stream_id) = (self.db.clone(), stream_id.to_string());
        tokio::spawn(async move {
            let result = async {
                let mut conn = db.pool().acquire().await?;
                Db::set_stream_input(&mut conn, &stream_id, Some(&json)).await
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(stream = %stream_id, error = %e, "recording input format");
            }
        });
    }

    /// Disables idle streams with no push and no change for `SLUICE_STREAM_IDLE_DISABLE` seconds
    /// (`stream.disabled`, reason `no_input`). Returns how many.
    pub async fn disable_idle_streams(&self) -> Result<usize, DbError> {
        let idle = self.settings.stream_idle_disable;
        if idle == 0 {
            return Ok(0);
        }
        let before = now_ms() - (idle as i64).saturating_mul(1000);
        let mut disabled = 0;
        for candidate in self.db.idle_streams_since(before, 500).await? {
            let mut tx = self.db.begin_write().await?;
            // Decide on what this transaction sees: a push may have started meanwhile.
            let Some(mut row) = Db::stream_in(&mut tx, &candidate.project_id, &candidate.id).await? else {
                continue;
            };
            if row.status != "idle" || row.updated_at >= before || self.live.is_live(&row.id) {
                continue;
            }
            let Ok(next) = row.state().apply(StreamMove::Disable(DisabledReason::NoInput)) else {
                continue;
            };
            row.set_state(next);
            row.updated_at = now_ms();
            Db::update_stream(&mut tx, &row).await?;
            events::emit(&mut tx, &row.project_id, &Event::StreamDisabled(event_data(&row))).await?;
            tx.commit().await?;
            disabled += 1;
            tracing::info!(stream = %row.id, "disabled after no push for {idle} s");
        }
        if disabled > 0 {
            self.wake_sender();
        }
        Ok(disabled)
    }

    /// At start, before ingest listens: every push that a previous run of this node left open
    /// (it died without ending them) ends now, `live → idle` with `stream.ended`. Returns how many.
    pub async fn end_orphaned_pushes(&self) -> Result<usize, DbError> {
        let orphans = self.db.live_streams_of_node(self.node_id()).await?;
        for row in &orphans {
            self.end_push(
                &row.id,
                &row.project_id,
                "the process that held the push stopped without ending it",
            )
            .await;
        }
        Ok(orphans.len())
    }

    /// Closes a push session: `live → idle` (a stream disabled meanwhile stays disabled) and
    /// `stream.ended`, in one transaction.
    pub async fn end_push(&self, stream_id: &str, project_id: &str, why: &str) {
        let result = async {
            let mut tx = self.db.begin_write().await?;
            let Some(mut row) = Db::stream_in(&mut tx, project_id, stream_id).await? else { return Ok(()) };
            if let Ok(next) = row.state().apply(StreamMove::PushEnded) {
                row.set_state(next);
            }
            row.updated_at = now_ms();
            Db::update_stream(&mut tx, &row).await?;
            Db::set_stream_input(&mut tx, stream_id, None).await?;
            Db::set_stream_live_node(&mut tx, stream_id, None).await?;
            events::emit(&mut tx, project_id, &Event::StreamEnded(event_data(&row))).await?;
            tx.commit().await
        }
        .await;
        self.live.lock().remove(stream_id);
        match result {
            Ok(()) => {
                self.wake_sender();
                tracing::info!(stream = %stream_id, why, "push ended");
            }
            Err(e) => tracing::error!(stream = %stream_id, error = %e, "recording the end of a push"),
        }
    }
}
