//! The handle that state changes use to queue events: [`crate::events::emit`] on the caller's
//! transaction, then [`Outbox::wake`] after the commit so the sender does not wait for its next
//! poll. Cloned into every service that emits; the sender holds the other end of the wake.

use std::sync::Arc;

use tokio::sync::Notify;

use super::Event;
use crate::store::{Db, DbError};

#[derive(Clone)]
pub struct Outbox {
    db: Db,
    wake: Arc<Notify>,
}

impl Outbox {
    pub fn new(db: Db) -> Outbox {
        Outbox { db, wake: Arc::new(Notify::new()) }
    }

    /// Tells the sender that deliveries were queued (call after the commit).
    pub fn wake(&self) {
        self.wake.notify_one();
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
