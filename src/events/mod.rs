//! Events and webhooks: the catalog, envelopes, signing, the outbox and its sender.
//!
//! An event is written as one delivery row per subscribed, enabled webhook in the same
//! transaction as the state change that caused it (`emit`); the sender leases due rows and sends
//! them, so a crash or restart loses none. Emitting never waits on the network.

pub mod catalog;
pub mod delivery;
pub mod guard;
pub mod outbox;
pub mod payload;
pub mod sender;
pub mod signing;

use std::sync::atomic::{AtomicI64, Ordering};

use sqlx::AnyConnection;

pub use catalog::{Event, EventFilter, EventName};
pub use outbox::Outbox;

use crate::domain::{new_id, time::iso, time::now_ms};
use crate::store::webhooks::NewDelivery;
use crate::store::{Db, DbError};

/// A position in event order: microseconds since the epoch, made strictly increasing within
/// the process so events of one millisecond keep the order they were emitted in.
pub fn next_seq() -> i64 {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = chrono::Utc::now().timestamp_micros();
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// The exact body of a delivery: `{id, event, createdAt, data}` (interface: Delivery).
pub fn envelope(delivery_id: &str, event: &str, created_at_ms: i64, data: serde_json::Value) -> String {
    serde_json::json!({
        "id": delivery_id,
        "event": event,
        "createdAt": iso(created_at_ms),
        "data": data,
    })
    .to_string()
}

/// Fans `event` out to the project's enabled webhooks that subscribe to it and appends it to
/// the project's event log, on the caller's transaction. Returns how many deliveries were
/// queued. Call [`Outbox::wake`] after the commit. The log's append takes the project's event
/// counter, whose row stays locked until the commit: emit as the transaction's last writes.
pub async fn emit(conn: &mut AnyConnection, project_id: &str, event: &Event) -> Result<usize, DbError> {
    let name = event.name().as_str();
    let hooks = Db::enabled_webhooks(&mut *conn, project_id).await?;
    let data = event.data();
    let created_at = now_ms();
    let seq = next_seq();
    let mut queued = 0;
    for (webhook_id, _) in hooks.iter().filter(|(_, events)| catalog::subscribed(events, name)) {
        let id = new_id();
        let body = envelope(&id, name, created_at, data.clone());
        Db::insert_delivery(
            &mut *conn,
            &NewDelivery { id: &id, project_id, webhook_id, event: name, body: &body, created_at, seq },
        )
        .await?;
        queued += 1;
    }
    let body = envelope(&new_id(), name, created_at, data);
    Db::append_event(&mut *conn, project_id, event.name().kind(), name, created_at, &body).await?;
    Ok(queued)
}

/// Queues the signed test ping for one webhook. Returns the delivery id.
pub async fn queue_test(db: &Db, project_id: &str, webhook_id: &str) -> Result<String, DbError> {
    let id = new_id();
    let created_at = now_ms();
    let data = serde_json::json!({
        "webhookId": webhook_id,
        "projectId": project_id,
        "message": "This is a test delivery from Sluice.",
    });
    let body = envelope(&id, catalog::TEST_EVENT, created_at, data);
    let mut conn = db.pool().acquire().await?;
    Db::insert_delivery(
        &mut conn,
        &NewDelivery {
            id: &id,
            project_id,
            webhook_id,
            event: catalog::TEST_EVENT,
            body: &body,
            created_at,
            seq: next_seq(),
        },
    )
    .await?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    #[test]
    fn seq_is_strictly_increasing() {
        let a = super::next_seq();
        let b = super::next_seq();
        assert!(b > a);
    }

    #[test]
    fn envelope_has_the_four_members() {
        let body = super::envelope("d1", "vod.failed", 0, serde_json::json!({"error": "x"}));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["id"], "d1");
        assert_eq!(v["event"], "vod.failed");
        assert_eq!(v["createdAt"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v["data"]["error"], "x");
        assert_eq!(v.as_object().unwrap().len(), 4);
    }
}
