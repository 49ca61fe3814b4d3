//! The handle that state changes use to queue events: [`crate::events::emit`] on the caller's
//! transaction, then [`Outbox::wake`] after the commit so the sender does not wait for its next
//! poll. Cloned into every service that emits; the sender holds the other end of the wake.

use std::sync::Arc;

use tokio::sync::{watch, Notify};

use super::Event;
use crate::store::{Db, DbError};

#[derive(Clone)]
pub struct Outbox {
    db: Db,
    wake: Arc<Notify>,
    /// Bumped at every [`Outbox::wake`]: followers of the event log on this node read again.
    logged: Arc<watch::Sender<u64>>,
}

impl Outbox {
    pub fn new(db: Db) -> Outbox {
        Outbox { db, wake: Arc::new(Notify::new()), logged: Arc::new(watch::channel(0).0) }
    }

    /// Tells the sender that deliveries were queued, and the event log's followers that events
    /// were logged (call after the commit).
    pub fn wake(&self) {
        self.wake.notify_one();
        self.logged.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// What the event log's followers wait on: changes when this node logged events (other
    /// nodes' events are found by reading again after a while).
    pub fn logged(&self) -> watch::Receiver<u64> {
        self.logged.subscribe()
    }

    /// What the sender waits on.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Emits an event that goes with no state change, in a transaction of its own, and wakes
    /// the sender. State changes emit on their own transaction instead (their aggregate's `apply`).
    pub async fn emit(&self, project_id: &str, event: &Event) -> Result<usize, DbError> {
        let mut tx = self.db.begin_write().await?;
        let queued = super::emit(&mut tx, project_id, event).await?;
        tx.commit().await?;
        self.wake();
        Ok(queued)
    }
}
