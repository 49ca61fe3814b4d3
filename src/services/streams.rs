//! The stream lifecycle: every status change of a stream goes through [`Streams::apply`], which
//! checks the move against the domain's state machine, writes the row, queues the move's events
//! on the same transaction, commits, and then wakes what must act (the webhook sender; a push that
//! a disable ends, here or, through a Postgres notification, in the process that holds it). The
//! push sessions of this process are kept here too, so the API can end one without knowing
//! anything of RTMP.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Any, Transaction};
use tokio::sync::watch;

use crate::config::{Billing, Settings};
use crate::domain::credits;
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
    /// Billing is on and the project's balance of live seconds is not positive (409 at the API;
    /// a push is refused).
    #[error("insufficient credits: the project has no live seconds left")]
    NoCredits,
    #[error("database: {0}")]
    Db(#[from] DbError),
}

/// How `apply` writes the row: a new stream is inserted, every other change updates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    Insert,
    Update,
}

mod sessions;
use sessions::Waiting;
pub use sessions::{LiveSessions, Opened, SlatePicture, Standby, StandingBy};

/// How long a slate waits for the database to give the stream's picture.
const SLATE_READ: Duration = Duration::from_secs(1);

pub(super) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub struct Streams {
    pub(super) db: Db,
    outbox: Outbox,
    /// This process's identity: the owner recorded on the streams it holds live.
    node_id: String,
    /// `SLUICE_STREAM_IDLE_DISABLE` seconds (0: never).
    idle_disable: u64,
    /// `SLUICE_BILLING=on`: live time draws on each project's credits, and a project with none
    /// cannot go live (`services::credits`).
    pub(super) billing: bool,
    pub sessions: LiveSessions,
    /// Pushes ended late by [`Streams::reconcile`].
    reconciled: std::sync::atomic::AtomicU64,
}

impl Streams {
    /// This process's node id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    pub fn new(db: Db, outbox: Outbox, node_id: String, settings: &Settings) -> Streams {
        Streams {
            db,
            outbox,
            node_id,
            idle_disable: settings.stream_idle_disable,
            billing: settings.billing == Billing::On,
            sessions: LiveSessions::default(),
            reconciled: std::sync::atomic::AtomicU64::new(0),
        }
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
        mut tx: Transaction<'static, Any>,
        row: &mut StreamRow,
        mv: StreamMove,
    ) -> Result<(), StreamError> {
        // Re-enabling waits for a positive balance (CONTRACT: Recording and credits).
        if mv == StreamMove::Enable && row.state().status == StreamStatus::Disabled {
            self.check_credits(&mut tx, &row.project_id).await?;
        }
        self.commit_move(tx, row, mv, Write::Update).await
    }

    /// With billing on, refuses when the project's balance is not positive.
    async fn check_credits(
        &self,
        tx: &mut Transaction<'static, Any>,
        project_id: &str,
    ) -> Result<(), StreamError> {
        if self.billing && !credits::allows_push(Db::credit_balance_in(tx, project_id).await?) {
            return Err(StreamError::NoCredits);
        }
        Ok(())
    }

    /// The stream's own slate picture, if it has one: what is known of it, and its bytes.
    pub async fn slate_picture(&self, stream_id: &str) -> Result<Option<SlatePicture>, DbError> {
        let Some(info) = self.db.slate_info(stream_id).await? else { return Ok(None) };
        let image = self.db.slate_image(stream_id, &info.digest).await?;
        Ok(image.map(|image| Arc::new((info, Arc::new(image)))))
    }

    /// The stream's slate picture for a slate of its live session (`None`: the default card):
    /// read from the database, or, when that fails or takes longer than [`SLATE_READ`] (a
    /// quarter of it when the session read it before), what the session read last. Kept with
    /// the session for the next time.
    pub async fn session_slate(&self, stream_id: &str) -> Option<SlatePicture> {
        let known = self.sessions.known_slate(stream_id);
        let deadline = if known.is_some() { SLATE_READ / 4 } else { SLATE_READ };
        let why = match tokio::time::timeout(deadline, self.slate_picture(stream_id)).await {
            Ok(Ok(found)) => {
                self.sessions.note_slate(stream_id, found.clone());
                return found;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {deadline:?}"),
        };
        let fallback = if known.is_some() { "the picture read before" } else { "the default card" };
        tracing::warn!(stream = %stream_id, error = %why, "reading the slate picture; {fallback} instead");
        known.flatten()
    }

    /// Whether the project may go live now, as far as credits go (SRT decides in its handshake,
    /// before a session exists; `begin_push` decides again).
    pub async fn may_push(&self, project_id: &str) -> Result<bool, DbError> {
        Ok(!self.billing || credits::allows_push(self.db.credit_balance(project_id).await?))
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
            // The caller answers with `row`: it must show the input gone, as the table does.
            row.input_info = None;
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
    /// session early and the one that says it is over. A push to a stream whose session here
    /// waits out its reconnect window rejoins it: the stream is live already, nothing is written.
    pub async fn begin_push(&self, stream_id: &str, project_id: &str) -> Result<Opened, StreamError> {
        let opened = self.sessions.open(stream_id, project_id).ok_or(StreamError::LiveAlready)?;
        if opened.rejoined {
            tracing::info!(stream = %stream_id, "the publisher is back within the reconnect window");
            return Ok(opened);
        }
        let result = async {
            let mut tx = self.db.begin_write().await?;
            let mut row =
                Db::stream_in(&mut tx, project_id, stream_id).await?.ok_or(StreamError::NotFound)?;
            // The state first: a disabled stream says so, whatever the balance.
            row.state().apply(StreamMove::PushStarted)?;
            self.check_credits(&mut tx, project_id).await?;
            row.last_push_at = Some(now_ms());
            let window = Duration::from_secs(u64::try_from(row.reconnect_window).unwrap_or(0));
            self.commit_move(tx, &mut row, StreamMove::PushStarted, Write::Update).await?;
            Ok::<_, StreamError>(window)
        }
        .await;
        match result {
            Ok(window) => {
                self.sessions.started(stream_id, window);
                Ok(opened)
            }
            Err(e) => {
                self.sessions.close(stream_id);
                Err(e)
            }
        }
    }

    /// The publisher of a push session went away for `why`, the API not having ended it. With a
    /// reconnect window the session waits it out: the stream stays `live` with no
    /// `stream.ended`, and a push within it rejoins the session ([`Streams::begin_push`]); when
    /// the window lapses with no push (or a kill comes meanwhile) the push ends as
    /// [`Streams::end_push`] ends it. Without a window it ends now. Returns, while it waits,
    /// what says it is over.
    pub async fn publisher_gone(
        self: &Arc<Self>,
        stream_id: &str,
        project_id: &str,
        why: &str,
    ) -> Option<watch::Receiver<bool>> {
        let Some(waiting) = self.sessions.wait(stream_id) else {
            self.end_push(stream_id, project_id, why).await;
            return None;
        };
        tracing::info!(stream = %stream_id, why, window_s = waiting.window.as_secs(), "the publisher went away; waiting for it");
        let (this, stream_id, project_id) = (self.clone(), stream_id.to_string(), project_id.to_string());
        let why = format!("{why}, and did not come back within the reconnect window");
        let Waiting { window, pushes, lapse, closed } = waiting;
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(window) => {}
                _ = lapse.notified() => {}
            }
            if this.sessions.lapsed(&stream_id, pushes) {
                this.end_push(&stream_id, &project_id, &why).await;
            }
        });
        Some(closed)
    }

    /// Closes a push session of this process: `live → idle` and `stream.ended`, once. A stream
    /// that is no longer live here was ended already, by the disable that killed this session
    /// (which sent `stream.ended` before `stream.disabled`), or is live on another node now
    /// (disabled, re-enabled and pushed there): nothing more is written or sent.
    pub async fn end_push(&self, stream_id: &str, project_id: &str, why: &str) {
        let result = self.end_held(stream_id, project_id, &self.node_id).await;
        self.sessions.close(stream_id);
        match result {
            Ok(true) => tracing::info!(stream = %stream_id, why, "push ended"),
            Ok(false) => {
                tracing::info!(stream = %stream_id, why, "push ended (the stream was ended already)")
            }
            // The heartbeat's `reconcile` writes it once the database answers again.
            Err(e) => {
                tracing::error!(stream = %stream_id, error = %e, "recording the end of a push (written later)")
            }
        }
    }

    /// Ends the pushes that dead node `node` held (docs/scale-out.md): `live → idle` and
    /// `stream.ended` once each, decided per stream in its own locked transaction, so a survivor
    /// racing another, or a publisher already back on another node, changes nothing twice.
    /// Returns how many ended.
    pub async fn end_pushes_of_dead_node(&self, node: &str) -> Result<usize, StreamError> {
        let mut ended = 0;
        for (stream_id, project_id) in self.db.live_streams_held_by(node).await? {
            if self.end_held(&stream_id, &project_id, node).await? {
                tracing::warn!(stream = %stream_id, node, "push ended: the node holding it stopped answering");
                ended += 1;
            }
        }
        Ok(ended)
    }

    /// `PushEnded` of `stream_id` when it is live on `node` (or on no recorded node).
    async fn end_held(&self, stream_id: &str, project_id: &str, node: &str) -> Result<bool, StreamError> {
        let mut tx = self.db.begin_write().await?;
        // Locked until the commit: the status cannot move between this check and the write.
        let Some(mut row) = Db::stream_in(&mut tx, project_id, stream_id).await? else {
            return Ok(false);
        };
        let holder = Db::stream_live_node_in(&mut tx, stream_id).await?;
        let held = holder.as_deref().is_none_or(|holder| holder == node);
        if row.state().status != StreamStatus::Live || !held {
            return Ok(false);
        }
        self.commit_move(tx, &mut row, StreamMove::PushEnded, Write::Update).await?;
        Ok(true)
    }

    /// Ends the pushes the database shows live on this node that no session of this process
    /// holds: a push whose end could not be written (the database was away when it ended) is
    /// written now, `live → idle` with its one `stream.ended`, oldest first (CONTRACT: Faults).
    /// Run on every heartbeat; returns how many it ended.
    pub async fn reconcile(&self) -> Result<usize, StreamError> {
        let mut ended = 0;
        for (stream_id, project_id) in self.db.live_streams_held_by(&self.node_id).await? {
            // A session that is opening or open here holds it (it is in the map from before its
            // stream goes live until after its end is written or given up).
            if self.sessions.is_live(&stream_id) {
                continue;
            }
            if self.end_held(&stream_id, &project_id, &self.node_id).await? {
                tracing::warn!(stream = %stream_id, "push ended late: its end could not be written when it ended");
                self.reconciled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                ended += 1;
            }
        }
        Ok(ended)
    }

    /// How many pushes [`Streams::reconcile`] has ended (`sluice_reconciled_total`).
    pub fn reconciled(&self) -> u64 {
        self.reconciled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Ends the sessions of this process whose stream is not live here any more: after the
    /// listener of kills (re)connects, for the notifications sent while it was not listening.
    /// Sessions still opening are left alone: their stream is not live in the database yet.
    pub async fn end_stale_sessions(&self) -> Result<usize, StreamError> {
        let held = self.sessions.started_sessions();
        let ids: Vec<String> = held.iter().map(|(id, _)| id.clone()).collect();
        let stale = self.db.streams_not_live_on(&self.node_id, &ids).await?;
        for (id, kill) in held.iter().filter(|(id, _)| stale.contains(id)) {
            tracing::info!(stream = %id, "ending a push whose stream was ended while no kill could reach this process");
            self.sessions.kill_exactly(id, kill);
        }
        Ok(stale.len())
    }

    /// The input that stood by as `standby` takes the stream's session over when nobody feeds
    /// it ([`LiveSessions::take_over`]); a switch between the primary and the backup is
    /// `stream.input_switched` (`{from, to}`). Returns its push.
    pub async fn take_over(&self, stream: &StreamRow, standby: &Arc<Standby>) -> Option<Opened> {
        let (opened, before) = self.sessions.take_over(&stream.id, standby)?;
        let to = standby.role;
        tracing::info!(stream = %stream.id, from = ?before, to = ?to, "an input that stood by takes over");
        if before != to {
            let event = Event::StreamInputSwitched(payload::input_switched(stream, before, to));
            let (outbox, project_id, stream_id) =
                (self.outbox.clone(), stream.project_id.clone(), stream.id.clone());
            // Off the media path: a database that does not answer delays only the event.
            tokio::spawn(async move {
                if let Err(e) = outbox.emit(&project_id, &event).await {
                    tracing::error!(stream = %stream_id, error = %e, "queueing stream.input_switched");
                }
            });
        }
        Some(opened)
    }

    /// The inputs that stand by changed (one is ready, or left): the input is recorded again.
    pub fn standby_changed(&self, stream_id: &str) {
        if let Some(info) = self.sessions.last_input(stream_id) {
            self.write_input(stream_id, &info);
        }
    }

    /// Records what a live push sends, with the inputs that stand by ready, off the media path:
    /// the connection never waits on the database for it.
    pub fn record_input(&self, stream_id: &str, info: &InputInfo) {
        if info.active != Some(crate::domain::stream::InputRole::Slate) && info.video_codec.is_some() {
            self.sessions.note_audio(stream_id, info.audio_codec.is_some());
        }
        let info = self.sessions.with_standby(stream_id, info);
        self.write_input(stream_id, &info);
    }

    fn write_input(&self, stream_id: &str, info: &InputInfo) {
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
