//! The node registry (migration 0012): one row per `sluice serve` process sharing the database,
//! its heartbeat, and the claim a surviving node takes on a dead one.

use sqlx::FromRow;

use super::{Db, DbError};

#[derive(Debug, Clone, FromRow)]
pub struct NodeRow {
    pub id: String,
    pub internal_url: String,
    pub rtsp_url: Option<String>,
    pub started_at: i64,
    pub heartbeat_at: i64,
    /// JSON of the node's last reported load.
    pub load: Option<String>,
    /// When a surviving node (or the node itself, stopping) declared it gone.
    pub reaped_at: Option<i64>,
    pub reaped_by: Option<String>,
}

/// A live push and the node holding it.
#[derive(Debug, Clone, FromRow)]
pub struct HeldPush {
    pub node: String,
    pub stream_id: String,
    pub project_id: String,
}

impl Db {
    /// Records this node as alive (a restart of the same data dir takes its row back).
    pub async fn register_node(&self, id: &str, internal_url: &str, now: i64) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO nodes (id, internal_url, started_at, heartbeat_at) VALUES ($1, $2, $3, $3) \
             ON CONFLICT (id) DO UPDATE SET internal_url = excluded.internal_url, \
             started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, load = NULL, \
             reaped_at = NULL, reaped_by = NULL",
        )
        .bind(id)
        .bind(internal_url)
        .bind(now)
        .execute(self.pool())
        .await
        .map(|_| ())
    }

    /// The node's heartbeat. `false` when another node declared it dead meanwhile: its pushes
    /// were ended and its recordings taken over, so it must not go on serving them.
    pub async fn node_heartbeat(
        &self,
        id: &str,
        now: i64,
        load: &str,
        rtsp_url: Option<&str>,
    ) -> Result<bool, DbError> {
        let done = sqlx::query(
            "UPDATE nodes SET heartbeat_at = $2, load = $3, rtsp_url = $4 WHERE id = $1 AND reaped_at IS NULL",
        )
        .bind(id)
        .bind(now)
        .bind(load)
        .bind(rtsp_url)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// A node stopping cleanly says so: it is listed as gone at once.
    pub async fn node_stopped(&self, id: &str, now: i64) -> Result<(), DbError> {
        sqlx::query("UPDATE nodes SET reaped_at = $2, reaped_by = $1 WHERE id = $1 AND reaped_at IS NULL")
            .bind(id)
            .bind(now)
            .execute(self.pool())
            .await
            .map(|_| ())
    }

    /// Nodes whose last heartbeat is older than `before` and that nobody has claimed yet.
    pub async fn silent_nodes(&self, before: i64) -> Result<Vec<String>, DbError> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT id FROM nodes WHERE heartbeat_at < $1 AND reaped_at IS NULL ORDER BY id")
                .bind(before)
                .fetch_all(self.pool())
                .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// Claims a dead node for `by`: one compare-and-set, so exactly one survivor takes it over.
    pub async fn claim_dead_node(&self, id: &str, before: i64, by: &str, now: i64) -> Result<bool, DbError> {
        let done = sqlx::query(
            "UPDATE nodes SET reaped_at = $4, reaped_by = $3 \
             WHERE id = $1 AND reaped_at IS NULL AND heartbeat_at < $2",
        )
        .bind(id)
        .bind(before)
        .bind(by)
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Every node, newest first.
    pub async fn nodes(&self) -> Result<Vec<NodeRow>, DbError> {
        sqlx::query_as(
            "SELECT id, internal_url, rtsp_url, started_at, heartbeat_at, load, reaped_at, reaped_by FROM nodes \
             ORDER BY started_at DESC, id",
        )
        .fetch_all(self.pool())
        .await
    }

    /// Forgets nodes gone before `before` (housekeeping).
    pub async fn forget_nodes(&self, before: i64) -> Result<u64, DbError> {
        let done = sqlx::query("DELETE FROM nodes WHERE reaped_at IS NOT NULL AND reaped_at < $1")
            .bind(before)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }

    /// The node holding `stream_id`'s live push and the address it is reached at, when that node
    /// is alive (heartbeat at or after `alive_after`).
    pub async fn live_holder(
        &self,
        stream_id: &str,
        alive_after: i64,
    ) -> Result<Option<(String, String, Option<String>)>, DbError> {
        sqlx::query_as(
            "SELECT n.id, n.internal_url, n.rtsp_url FROM streams s JOIN nodes n ON n.id = s.live_node \
             WHERE s.id = $1 AND s.status = 'live' AND n.reaped_at IS NULL AND n.heartbeat_at >= $2",
        )
        .bind(stream_id)
        .bind(alive_after)
        .fetch_optional(self.pool())
        .await
    }

    /// Every live push with the node holding it (the operator's view).
    pub async fn held_pushes(&self) -> Result<Vec<HeldPush>, DbError> {
        sqlx::query_as(
            "SELECT live_node AS node, id AS stream_id, project_id FROM streams \
             WHERE status = 'live' AND live_node IS NOT NULL ORDER BY live_node, id",
        )
        .fetch_all(self.pool())
        .await
    }

    /// Streams live on `node` (a dead node's, which a survivor ends).
    pub async fn live_streams_held_by(&self, node: &str) -> Result<Vec<(String, String)>, DbError> {
        sqlx::query_as("SELECT id, project_id FROM streams WHERE status = 'live' AND live_node = $1")
            .bind(node)
            .fetch_all(self.pool())
            .await
    }

    /// Hands the recordings in progress of dead node `from` to `to`, which completes them.
    pub async fn take_recordings(&self, from: &str, to: &str) -> Result<u64, DbError> {
        let done = sqlx::query("UPDATE recordings SET node = $2 WHERE node = $1")
            .bind(from)
            .bind(to)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }
}
