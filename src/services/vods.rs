//! The VOD lifecycle and its job queue: every status change of a VOD goes through
//! [`Vods::apply`] (the queued step, a compare-and-set that must not undo a worker's move, through
//! [`Vods::queue`]). `apply` checks the move against the domain's state machine, writes the row
//! and what the move does to the job, queues the move's event on the same transaction, commits,
//! and then wakes the sender and forgets the cached playback policy; `queue` wakes idle workers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::{Any, Transaction};
use tokio::sync::{watch, Notify};

use crate::domain::time::now_ms;
use crate::domain::vod::{VodMove, VodMoveError, VodStatus};
use crate::events::{self, payload, Event, Outbox};
use crate::services::endpoints::Endpoints;
use crate::services::policy::{Policies, Resource};
use crate::store::vods::VodRow;
use crate::store::{Db, DbError};

/// Why a change of a VOD was not made.
#[derive(Debug, thiserror::Error)]
pub enum VodError {
    /// The state machine refuses the move (409 at the API).
    #[error("{0}")]
    Refused(#[from] VodMoveError),
    #[error("database: {0}")]
    Db(#[from] DbError),
}

/// How long a job inserted with `uploaded` waits for `queue` before a worker may take it anyway.
const QUEUE_HOLD: Duration = Duration::from_secs(10);

pub struct Vods {
    db: Db,
    outbox: Outbox,
    endpoints: Arc<Endpoints>,
    policies: Arc<Policies>,
    /// Wakes idle transcode workers when a job was queued.
    wake: Arc<Notify>,
    /// Turns true when transcode workers must stop and give their jobs back (shutdown).
    stop: watch::Sender<bool>,
}

impl Vods {
    pub fn new(db: Db, outbox: Outbox, endpoints: Arc<Endpoints>, policies: Arc<Policies>) -> Vods {
        Vods { db, outbox, endpoints, policies, wake: Arc::new(Notify::new()), stop: watch::channel(false).0 }
    }

    /// The one way a VOD's status changes: `mv` is checked against the state machine, the row
    /// (read on `tx`, possibly with other edits) is written with its new status, the job is
    /// inserted (`Probed`) or removed (`Finished`, `Errored`, `Cancel`), the move's event is
    /// queued on `tx`, and `tx` commits. Then the sender wakes, and the origin forgets what it
    /// cached of a VOD that finished or was cancelled.
    pub async fn apply(
        &self,
        mut tx: Transaction<'static, Any>,
        row: &mut VodRow,
        mv: VodMove,
    ) -> Result<(), VodError> {
        let before = row.status();
        let after = before.apply(mv)?;
        let now = now_ms();
        row.set_status(after);
        row.updated_at = now;
        Db::update_vod(&mut tx, row).await?;
        match mv {
            // Held back until `queue`, so no worker moves the VOD on before it shows `queued`;
            // after a crash between the two steps a worker takes it from `uploaded` once the
            // hold lapses.
            VodMove::Probed => {
                let not_before = now + QUEUE_HOLD.as_millis() as i64;
                Db::insert_job(&mut tx, &row.id, &row.project_id, now, not_before).await?
            }
            VodMove::Finished | VodMove::Errored | VodMove::Cancel => {
                Db::delete_job(&mut tx, &row.id).await?
            }
            VodMove::Rejected | VodMove::Queued | VodMove::Started => {}
        }
        // A VOD that asks for MP4 downloads gets their job as it completes.
        let downloads =
            mv == VodMove::Finished && Db::queue_downloads(&mut tx, &row.id, &row.project_id, now).await?;
        let event =
            event_of(mv, before, after).map(|make| make(payload::vod(row, &self.endpoints.playback_base())));
        if let Some(event) = &event {
            events::emit(&mut tx, &row.project_id, event).await?;
        }
        tx.commit().await?;
        if event.is_some() {
            self.outbox.wake();
        }
        if downloads {
            self.wake.notify_waiters();
        }
        // Idle workers are woken by `queue`, the step after `Probed`, which releases the job.
        if matches!(mv, VodMove::Finished | VodMove::Cancel) {
            self.policies.forget(&Resource::Vod(&row.id));
        }
        Ok(())
    }

    /// `uploaded → queued`, as a compare-and-set (a worker that took the job on already, after
    /// a crash, keeps its move; this step fires no event), and the job `Probed` held back becomes
    /// available in the same transaction. Wakes idle workers. Returns the time of the move, or
    /// `None` when the VOD had moved on already.
    pub async fn queue(&self, vod_id: &str) -> Result<Option<i64>, VodError> {
        let queued = VodStatus::Uploaded.apply(VodMove::Queued)?;
        let now = now_ms();
        let mut tx = self.db.begin_write().await?;
        let moved =
            Db::move_vod_status(&mut tx, vod_id, VodStatus::Uploaded.as_str(), queued.as_str(), now).await?;
        Db::release_job(&mut tx, vod_id).await?;
        tx.commit().await?;
        self.wake.notify_waiters();
        Ok(moved.then_some(now))
    }

    /// Wakes transcode workers waiting for a job.
    pub fn wake(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Turns true when transcode workers must stop.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Stops the transcode workers: running jobs go back to the queue (CONTRACT: SIGTERM).
    /// Waits up to `grace` for them to let go.
    pub async fn drain(&self, grace: Duration) {
        self.stop.send_replace(true);
        let deadline = Instant::now() + grace;
        // Each worker holds a receiver; they drop them as they stop.
        while self.stop.receiver_count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The event a move fires (CONTRACT: VOD): `vod.processing` once, when the VOD leaves the queue
/// (a retried job starts again without it); the queued step fires none.
impl Vods {
    /// A completed live recording becomes VOD `row` (status `complete`) and `vod.complete`
    /// fires, in the transaction that removes the recording's rows: false when another
    /// completion took the recording first (then nothing is written).
    pub async fn recorded(&self, row: &VodRow) -> Result<bool, VodError> {
        let mut tx = self.db.begin_write().await?;
        if !Db::take_recording(&mut tx, &row.id).await? {
            return Ok(false);
        }
        Db::insert_vod(&mut tx, row).await?;
        let event = Event::VodComplete(payload::vod(row, &self.endpoints.playback_base()));
        events::emit(&mut tx, &row.project_id, &event).await?;
        tx.commit().await?;
        self.outbox.wake();
        self.policies.forget(&Resource::Vod(&row.id));
        Ok(true)
    }
}

fn event_of(
    mv: VodMove,
    before: VodStatus,
    after: VodStatus,
) -> Option<fn(crate::events::catalog::VodEventData) -> Event> {
    match mv {
        VodMove::Probed => Some(Event::VodUploaded),
        VodMove::Rejected | VodMove::Errored => Some(Event::VodFailed),
        VodMove::Started if before != after => Some(Event::VodProcessing),
        VodMove::Queued | VodMove::Started => None,
        VodMove::Finished => Some(Event::VodComplete),
        VodMove::Cancel => Some(Event::VodCancelled),
    }
}
