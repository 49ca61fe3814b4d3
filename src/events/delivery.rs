//! Every status change of a webhook delivery goes through [`apply`]: the move is checked against
//! the domain's state machine, which also gives the statuses the store's compare-and-set accepts,
//! and a requeued delivery wakes the sender.

use crate::domain::delivery::{DeliveryMove, DeliveryMoveError, DeliveryStatus};
use crate::store::webhooks::DeliveryWrite;
use crate::store::{Db, DbError};

use super::Outbox;

/// Why a move of a delivery was not made.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The delivery is not in a status the move applies to (409 at the API), or, for the
    /// sender's moves, its lease is no longer this process's.
    #[error("{0}")]
    Refused(#[from] DeliveryMoveError),
    #[error("database: {0}")]
    Db(#[from] DbError),
}

/// Moves delivery `id` by `mv`, writing what `write` says; `current` is the status the caller
/// read (for the refusal's message).
pub async fn apply(
    db: &Db,
    outbox: Option<&Outbox>,
    id: &str,
    current: DeliveryStatus,
    mv: DeliveryMove,
    write: &DeliveryWrite<'_>,
) -> Result<(), DeliveryError> {
    let to = current.apply(mv)?;
    let (from, _) = DeliveryStatus::move_of(mv);
    if !db.move_delivery(id, &from, to, write).await? {
        // It moved meanwhile (another redeliver, a lapsed lease): say what it is not.
        return Err(DeliveryMoveError { from: current, what: "be changed: it changed meanwhile" }.into());
    }
    if mv == DeliveryMove::Requeued {
        if let Some(outbox) = outbox {
            outbox.wake();
        }
    }
    Ok(())
}
