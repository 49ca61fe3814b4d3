//! The stream lifecycle: every status change of a stream goes through [`Streams::apply`], which
//! checks the move against the domain's state machine, writes the row, queues the move's events
//! on the same transaction, commits, and then wakes what must act (the webhook sender; a push that
//! a disable ends, here or, through a Postgres notification, in the process that holds it). The
//! push sessions of this process are kept here too, so the API can end one without knowing
//! anything of RTMP.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use sqlx::{Any, Transaction};
use tokio::sync::Notify;

use crate::domain::stream::{DisabledReason, InputInfo, MoveError, StreamMove, StreamState, StreamStatus};
use crate::domain::time::now_ms;
use crate::events::{self, payload, Event, Outbox};
use crate::store::streams::StreamRow;
use crate::store::{Db, DbError};

/// Why a change of a stream was not made.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The state machine refuses the move (409 at the API).
    #[error("{0}")]
    Refused(#[from] MoveError),
    #[error("the stream is live already")]
    LiveAlready,
    #[error("stream not found")]
    NotFound,
    #[error("database: {0}")]
    Db(#[from] DbError),
}

/// How `apply` writes the row: a new stream is inserted, every other change updates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    Insert,
    Update,
}

/// The open push sessions of this process, by stream id: each holds the signal that ends it.
#[derive(Default)]
pub struct LiveSessions {
    sessions: Mutex<HashMap<String, Arc<Notify>>>,
}

impl LiveSessions {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the stream's session now, if one is open here (DELETE, disable). `notify_one`
    /// keeps the signal for a session that does not wait on it yet.
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

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// The streams whose sessions are open here.
    pub fn stream_ids(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

pub struct Streams {
    db: Db,
    outbox: Outbox,
    /// This process's identity: the owner recorded on the streams it holds live.
    node_id: String,
    /// `SLUICE_STREAM_IDLE_DISABLE` seconds (0: never).
    idle_disable: u64,
    pub sessions: LiveSessions,
}

impl Streams {
    pub fn new(db: Db, outbox: Outbox, node_id: String, idle_disable: u64) -> Streams {
        Streams { db, outbox, node_id, idle_disable, sessions: LiveSessions::default() }
    }

    /// Creates `row` (in status `pending`) ready for a push: `pending → idle` and `stream.created`.
    pub async fn create(&self, row: &mut StreamRow) -> Result<(), StreamError> {
        let tx = self.db.begin_write().await?;
        self.commit_move(tx, row, StreamMove::Prepared, Write::Insert).await
    }

    /// The one way a stream's status changes: `mv` is checked against the state machine, the
    /// row (read on `tx` with [`Db::stream_in`], possibly with other edits) is written with its
    /// new state, the move's events are queued on `tx`, `tx` commits, then the sender wakes and
    /// a push the move ends is told to stop. A disable of a live stream ends its push in this
    /// move (`stream.ended`, then `stream.disabled`); the session's own `end_push` then finds
    /// nothing left to do.
    pub async fn apply(
        &self,
        tx: Transaction<'static, Any>,
        row: &mut StreamRow,
        mv: StreamMove,
    ) -> Result<(), StreamError> {
        self.commit_move(tx, row, mv, Write::Update).await
    }

    async fn commit_move(
        &self,
        mut tx: Transaction<'static, Any>,
        row: &mut StreamRow,
        mv: StreamMove,
        write: Write,
    ) -> Result<(), StreamError> {
        let before = row.state();
        let after = before.apply(mv)?;
        row.set_state(after);
        match write {
            Write::Insert => Db::insert_stream(&mut tx, row).await?,
            Write::Update => {
                row.updated_at = now_ms();
                Db::update_stream(&mut tx, row).await?
            }
        }
        let ends_push = before.ends_push(mv);
        if mv == StreamMove::PushStarted {
            Db::set_stream_live_node(&mut tx, &row.id, Some(&self.node_id)).await?
        }
        if ends_push {
            Db::set_stream_input(&mut tx, &row.id, None).await?;
            Db::set_stream_live_node(&mut tx, &row.id, None).await?;
        }
        // A disable of a live stream ends its push wherever it is held: Postgres hands the
        // other processes the notification at commit (this one ends its own below).
        let kills = ends_push && mv != StreamMove::PushEnded;
        if kills {
            Db::notify_stream_kill(&mut tx, &row.id).await?;
        }
        let events = events_of(mv, before, row);
        for event in &events {
            events::emit(&mut tx, &row.project_id, event).await?;
        }
        tx.commit().await?;
        if !events.is_empty() {
            self.outbox.wake();
        }
        if kills {
            self.sessions.kill(&row.id);
        }
        Ok(())
    }

    /// Opens a push session: `idle → live` and `stream.live`. Returns the signal that ends the
    /// session early.
    pub async fn begin_push(&self, stream_id: &str, project_id: &str) -> Result<Arc<Notify>, StreamError> {
        let kill = Arc::new(Notify::new());
        {
            let mut sessions = self.sessions.lock();
            if sessions.contains_key(stream_id) {
                return Err(StreamError::LiveAlready);
            }
            sessions.insert(stream_id.to_string(), kill.clone());
        }
        let result = async {
            let mut tx = self.db.begin_write().await?;
            let mut row =
                Db::stream_in(&mut tx, project_id, stream_id).await?.ok_or(StreamError::NotFound)?;
            row.last_push_at = Some(now_ms());
            self.commit_move(tx, &mut row, StreamMove::PushStarted, Write::Update).await
        }
        .await;
        if let Err(e) = result {
            self.sessions.lock().remove(stream_id);
            return Err(e);
        }
        Ok(kill)
    }

    /// Closes a push session of this process: `live → idle` and `stream.ended`, once. A stream
    /// that is no longer live here was ended already, by the disable that killed this session
    /// (which sent `stream.ended` before `stream.disabled`), or is live on another node now
    /// (disabled, re-enabled and pushed there): nothing more is written or sent.
    pub async fn end_push(&self, stream_id: &str, project_id: &str, why: &str) {
        let result = async {
            let mut tx = self.db.begin_write().await?;
            // Locked until the commit: the status cannot move between this check and the write.
            let Some(mut row) = Db::stream_in(&mut tx, project_id, stream_id).await? else {
                return Ok::<bool, StreamError>(false);
            };
            let holder = Db::stream_live_node_in(&mut tx, stream_id).await?;
            let ours = holder.as_deref().is_none_or(|node| node == self.node_id);
            if row.state().status != StreamStatus::Live || !ours {
                return Ok(false);
            }
            self.commit_move(tx, &mut row, StreamMove::PushEnded, Write::Update).await?;
            Ok(true)
        }
        .await;
        self.sessions.lock().remove(stream_id);
        match result {
            Ok(true) => tracing::info!(stream = %stream_id, why, "push ended"),
            Ok(false) => {
                tracing::info!(stream = %stream_id, why, "push ended (the stream was ended already)")
            }
            Err(e) => tracing::error!(stream = %stream_id, error = %e, "recording the end of a push"),
        }
    }

    /// Ends the sessions of this process whose stream is not live here any more: after the
    /// listener of kills (re)connects, for the notifications sent while it was not listening.
    pub async fn end_stale_sessions(&self) -> Result<usize, StreamError> {
        let stale = self.db.streams_not_live_on(&self.node_id, &self.sessions.stream_ids()).await?;
        for id in &stale {
            tracing::info!(stream = %id, "ending a push whose stream was ended while no kill could reach this process");
            self.sessions.kill(id);
        }
        Ok(stale.len())
    }

    /// Records what a live push sends, off the media path: the connection never waits on the
    /// database for it.
    pub fn record_input(&self, stream_id: &str, info: &InputInfo) {
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
    pub async fn disable_idle_streams(&self) -> Result<usize, StreamError> {
        let idle = self.idle_disable;
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
            if row.state().status != StreamStatus::Idle
                || row.updated_at >= before
                || self.sessions.is_live(&row.id)
            {
                continue;
            }
            match self.apply(tx, &mut row, StreamMove::Disable(DisabledReason::NoInput)).await {
                Ok(()) => {}
                Err(StreamError::Refused(_)) => continue,
                Err(e) => return Err(e),
            }
            disabled += 1;
            tracing::info!(stream = %row.id, "disabled after no push for {idle} s");
        }
        Ok(disabled)
    }

    /// At start, before ingest listens: every push that a previous run of this node left open
    /// (it died without ending them) ends now, `live → idle` with `stream.ended`. Returns how many.
    pub async fn end_orphaned_pushes(&self) -> Result<usize, StreamError> {
        let orphans = self.db.live_streams_of_node(&self.node_id).await?;
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
}

/// The events a move fires, in order (CONTRACT: Streams — Status; Recording and credits): a
/// move that ends a live push fires `stream.ended` first, then a disable fires
/// `stream.disabled`. `Enable` fires none, and neither does a disable of a stream that was
/// disabled already, unless it is the delete. `stream.ended` carries no reason: the interface
/// gives one to the disabled event only.
fn events_of(mv: StreamMove, before: StreamState, row: &StreamRow) -> Vec<Event> {
    let data = payload::stream(row);
    let mut events = Vec::with_capacity(2);
    if before.ends_push(mv) {
        events.push(Event::StreamEnded(crate::events::catalog::StreamEventData {
            reason: None,
            ..data.clone()
        }));
    }
    match mv {
        StreamMove::Prepared => events.push(Event::StreamCreated(data)),
        StreamMove::PushStarted => events.push(Event::StreamLive(data)),
        StreamMove::Disable(DisabledReason::Deleted) => events.push(Event::StreamDisabled(data)),
        StreamMove::Disable(_) if before.status != StreamStatus::Disabled => {
            events.push(Event::StreamDisabled(data))
        }
        StreamMove::PushEnded | StreamMove::Disable(_) | StreamMove::Enable => {}
    }
    events
}
