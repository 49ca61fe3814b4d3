//! The kills from other processes (CONTRACT: Live media — DELETE, disable, credit kill and
//! auto-stop end every session of the stream "whichever process holds it"): on Postgres every
//! process listens to the notifications that [`Streams::apply`] sends when it disables a live
//! stream, and ends its own session of that stream (a no-op where it holds none). SQLite is one
//! process, whose disables end its sessions directly.
//!
//! The listener runs on its own task and only signals sessions, so nothing waits on it. A lost
//! connection is reconnected with a growing pause; notifications sent while it was down are
//! lost with it, so each (re)connection is followed by a check of the sessions this process
//! holds against the database, which ends those whose stream was ended meanwhile.

use std::sync::Weak;
use std::time::{Duration, Instant};

use crate::services::streams::Streams;
use crate::store::Db;

/// The first pause before reconnecting, doubled after each failure up to [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Listens until `streams` goes; returns at once on SQLite.
pub async fn listen(streams: Weak<Streams>, db: Db) {
    let mut backoff = BACKOFF_FIRST;
    loop {
        match db.kill_listener().await {
            Ok(None) => return,
            Ok(Some(mut listener)) => {
                let connected = Instant::now();
                let Some(held) = streams.upgrade() else { return };
                if let Err(e) = held.end_stale_sessions().await {
                    tracing::warn!(error = %e, "checking the pushes held here against the database");
                }
                drop(held);
                let lost = loop {
                    match listener.next().await {
                        Ok(Some(stream_id)) => {
                            let Some(held) = streams.upgrade() else { return };
                            held.sessions.kill(&stream_id);
                        }
                        Ok(None) => break "the connection closed".to_string(),
                        Err(e) => break e.to_string(),
                    }
                };
                tracing::warn!(error = %lost, "the connection that hears stream kills was lost; reconnecting");
                // A connection that held a while was a good one: start the pauses over.
                if connected.elapsed() > 2 * BACKOFF_MAX {
                    backoff = BACKOFF_FIRST;
                }
            }
            Err(e) => tracing::warn!(error = %e, retry_in = ?backoff, "connecting to hear stream kills"),
        }
        if streams.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}
