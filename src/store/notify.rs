//! Notifications between the processes that share a Postgres database: a disable applied in
//! one process tells the process that holds the stream's push to end it (CONTRACT: Live media —
//! DELETE, disable, credit kill and auto-stop end every session "whichever process holds it").
//! The notification is sent on the disabling transaction, so Postgres delivers it at commit and
//! only if the transaction commits. SQLite is one process: nothing is sent, and the disabling
//! process ends its own session directly.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::AnyConnection;

use super::{is_postgres, Backend, Db, DbError};

/// The channel of the kills; the payload is the stream id.
pub const STREAM_KILL_CHANNEL: &str = "sluice_stream_kill";
/// The `application_name` of the listening connection, as `pg_stat_activity` shows it.
pub const KILL_LISTENER_NAME: &str = "sluice-stream-kills";

impl Db {
    /// Tells every process that the push of `stream_id` must end, on `conn`'s transaction
    /// (Postgres only; a no-op on SQLite).
    pub async fn notify_stream_kill(conn: &mut AnyConnection, stream_id: &str) -> Result<(), DbError> {
        if !is_postgres(conn) {
            return Ok(());
        }
        // `pg_notify` returns `void`, a type the `Any` driver cannot decode: the query returns
        // the count of its one row instead (a volatile call in a subquery is always evaluated).
        sqlx::query("SELECT COUNT(*) FROM (SELECT pg_notify($1, $2)) AS sent")
            .bind(STREAM_KILL_CHANNEL)
            .bind(stream_id)
            .execute(conn)
            .await
            .map(|_| ())
    }

    /// A connection listening to the kills, or `None` on SQLite (one process: no one to hear).
    pub async fn kill_listener(&self) -> Result<Option<KillListener>, DbError> {
        if self.backend != Backend::Postgres {
            return Ok(None);
        }
        let options: PgConnectOptions = self.url.parse()?;
        let options = options.application_name(KILL_LISTENER_NAME);
        // A pool of one, as `PgListener::connect` makes: the listener takes its connection and
        // keeps it for good.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_with(options)
            .await?;
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(STREAM_KILL_CHANNEL).await?;
        Ok(Some(KillListener { listener }))
    }
}

/// A connection that receives the kills.
pub struct KillListener {
    listener: PgListener,
}

impl KillListener {
    /// The next stream whose push must end. `Ok(None)`: the connection was lost, and what was
    /// sent meanwhile is lost with it; the caller connects a new listener and checks the
    /// sessions it holds against the database.
    pub async fn next(&mut self) -> Result<Option<String>, DbError> {
        Ok(self.listener.try_recv().await?.map(|n| n.payload().to_string()))
    }
}
