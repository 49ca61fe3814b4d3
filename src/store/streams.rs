//! Streams.

use sqlx::{AnyConnection, FromRow};

use super::{count, Db, DbError, Page};
use crate::domain::stream::{DisabledReason, Protocol, Quality, StreamState, StreamStatus};

#[derive(Debug, Clone, FromRow)]
pub struct StreamRow {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub stream_key: String,
    pub push_username: String,
    pub push_salt: String,
    pub push_verifier: String,
    /// The push password sealed under the master key (SRT's passphrase); `None` for streams
    /// created before SRT ingest, until their credentials are rotated.
    pub push_secret: Option<String>,
    pub qualities: String,
    pub protocols: String,
    pub vod_enabled: i64,
    pub dvr_enabled: i64,
    pub dvr_duration: i64,
    /// Seconds the stream stays live after its publisher went away (CONTRACT: Continuity).
    pub reconnect_window: i64,
    pub drm_enabled: i64,
    pub signed_playback: i64,
    pub status: String,
    pub disabled_reason: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_push_at: Option<i64>,
    /// JSON of [`crate::domain::stream::InputInfo`] while live.
    pub input_info: Option<String>,
}

impl StreamRow {
    /// The status (and reason) as the domain's state machine sees it.
    pub fn state(&self) -> StreamState {
        StreamState {
            status: StreamStatus::parse(&self.status).unwrap_or(StreamStatus::Pending),
            reason: self.disabled_reason.as_deref().and_then(DisabledReason::parse),
        }
    }

    pub fn set_state(&mut self, state: StreamState) {
        self.status = state.status.as_str().to_string();
        self.disabled_reason = state.reason.map(|r| r.as_str().to_string());
    }

    /// The protocols the stream offers (the column is a space-separated list of their names).
    pub fn protocols(&self) -> Vec<Protocol> {
        self.protocols.split_whitespace().filter_map(|p| Protocol::parse(p).ok()).collect()
    }

    pub fn set_protocols(&mut self, protocols: &[Protocol]) {
        self.protocols = protocols.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(" ");
    }

    /// The rungs of its live ladder, as stored (highest first).
    pub fn qualities(&self) -> Vec<Quality> {
        self.qualities.split_whitespace().filter_map(|q| Quality::parse(q).ok()).collect()
    }

    pub fn set_qualities(&mut self, qualities: &[Quality]) {
        self.qualities = qualities.iter().map(|q| q.name()).collect::<Vec<_>>().join(" ");
    }
}

/// Filters of the stream list.
#[derive(Debug, Default)]
pub struct StreamFilter {
    /// Case-insensitive substring of the name.
    pub q: Option<String>,
    pub status: Option<String>,
    /// `createdAt` range in ms, inclusive.
    pub from: Option<i64>,
    pub to: Option<i64>,
}

const COLUMNS: &str = "id, project_id, name, stream_key, push_username, push_salt, push_verifier, push_secret, \
     qualities, protocols, vod_enabled, dvr_enabled, dvr_duration, drm_enabled, signed_playback, status, disabled_reason, \
     created_at, updated_at, last_push_at, input_info, reconnect_window";

/// `LIKE` pattern for a substring, with the pattern characters escaped.
fn like_pattern(q: &str) -> String {
    let escaped = q.to_lowercase().replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
    format!("%{escaped}%")
}

impl Db {
    pub async fn insert_stream(conn: &mut AnyConnection, s: &StreamRow) -> Result<(), DbError> {
        sqlx::query(&format!(
            "INSERT INTO streams ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)"
        ))
        .bind(&s.id)
        .bind(&s.project_id)
        .bind(&s.name)
        .bind(&s.stream_key)
        .bind(&s.push_username)
        .bind(&s.push_salt)
        .bind(&s.push_verifier)
        .bind(&s.push_secret)
        .bind(&s.qualities)
        .bind(&s.protocols)
        .bind(s.vod_enabled)
        .bind(s.dvr_enabled)
        .bind(s.dvr_duration)
        .bind(s.drm_enabled)
        .bind(s.signed_playback)
        .bind(&s.status)
        .bind(&s.disabled_reason)
        .bind(s.created_at)
        .bind(s.updated_at)
        .bind(s.last_push_at)
        .bind(&s.input_info)
        .bind(s.reconnect_window)
        .execute(conn)
        .await
        .map(|_| ())
    }

    /// Records which node holds the stream's push (`None` when the push ends).
    pub async fn set_stream_live_node(
        conn: &mut AnyConnection,
        id: &str,
        node: Option<&str>,
    ) -> Result<(), DbError> {
        sqlx::query("UPDATE streams SET live_node = $1 WHERE id = $2")
            .bind(node)
            .bind(id)
            .execute(conn)
            .await
            .map(|_| ())
    }

    /// Streams `live` on `node`, or on no recorded node (a push opened before nodes were
    /// recorded): at start, the pushes a dead run of this node left open.
    pub async fn live_streams_of_node(&self, node: &str) -> Result<Vec<StreamRow>, DbError> {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM streams WHERE status = 'live' AND (live_node = $1 OR live_node IS NULL)"
        ))
        .bind(node)
        .fetch_all(self.pool())
        .await
    }

    /// Records (or, with `None`, clears) what a live push sends. A record only lands on a stream
    /// that is still live, so a late write cannot outlive the push.
    pub async fn set_stream_input(
        conn: &mut AnyConnection,
        id: &str,
        info: Option<&str>,
    ) -> Result<(), DbError> {
        sqlx::query("UPDATE streams SET input_info = $1 WHERE id = $2 AND ($1 IS NULL OR status = 'live')")
            .bind(info)
            .bind(id)
            .execute(conn)
            .await
            .map(|_| ())
    }

    /// Writes every mutable column of a stream, on the caller's transaction.
    pub async fn update_stream(conn: &mut AnyConnection, s: &StreamRow) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE streams SET name = $1, push_username = $2, push_salt = $3, push_verifier = $4, qualities = $5, \
             protocols = $6, vod_enabled = $7, dvr_enabled = $8, dvr_duration = $9, drm_enabled = $10, \
             signed_playback = $11, status = $12, disabled_reason = $13, updated_at = $14, last_push_at = $15, \
             push_secret = $16, reconnect_window = $17 WHERE id = $18 AND project_id = $19",
        )
        .bind(&s.name)
        .bind(&s.push_username)
        .bind(&s.push_salt)
        .bind(&s.push_verifier)
        .bind(&s.qualities)
        .bind(&s.protocols)
        .bind(s.vod_enabled)
        .bind(s.dvr_enabled)
        .bind(s.dvr_duration)
        .bind(s.drm_enabled)
        .bind(s.signed_playback)
        .bind(&s.status)
        .bind(&s.disabled_reason)
        .bind(s.updated_at)
        .bind(s.last_push_at)
        .bind(&s.push_secret)
        .bind(s.reconnect_window)
        .bind(&s.id)
        .bind(&s.project_id)
        .execute(conn)
        .await
        .map(|_| ())
    }

    /// A stream, read on the caller's write transaction and held by it until it ends, so a
    /// change is decided on what it sees and nothing moves the row meanwhile: a compare-and-set
    /// of its status. SQLite's `BEGIN IMMEDIATE` holds the whole database already; Postgres
    /// (read committed) locks the row (`FOR UPDATE`), and a second writer waits for the first
    /// to commit, then reads what it wrote. Every caller writes the row it read.
    pub async fn stream_in(
        conn: &mut AnyConnection,
        project_id: &str,
        id: &str,
    ) -> Result<Option<StreamRow>, DbError> {
        let lock = if super::is_postgres(conn) { " FOR UPDATE" } else { "" };
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM streams WHERE project_id = $1 AND id = $2{lock}"))
            .bind(project_id)
            .bind(id)
            .fetch_optional(conn)
            .await
    }

    pub async fn stream(&self, project_id: &str, id: &str) -> Result<Option<StreamRow>, DbError> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM streams WHERE project_id = $1 AND id = $2"))
            .bind(project_id)
            .bind(id)
            .fetch_optional(self.pool())
            .await
    }

    /// A stream by its id alone (what a node holding its push knows of it).
    pub async fn stream_by_id(&self, id: &str) -> Result<Option<StreamRow>, DbError> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM streams WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await
    }

    /// The node that holds the stream's push (`None`: no push, or one recorded before nodes
    /// were), read on the caller's transaction.
    pub async fn stream_live_node_in(conn: &mut AnyConnection, id: &str) -> Result<Option<String>, DbError> {
        let row: Option<(Option<String>,)> = sqlx::query_as("SELECT live_node FROM streams WHERE id = $1")
            .bind(id)
            .fetch_optional(conn)
            .await?;
        Ok(row.and_then(|(node,)| node))
    }

    /// Of `ids`, those whose push is not held by `node` any more (not live, live elsewhere, or
    /// gone): the sessions a missed notification left running here.
    pub async fn streams_not_live_on(&self, node: &str, ids: &[String]) -> Result<Vec<String>, DbError> {
        let mut gone = Vec::new();
        for id in ids {
            let row: Option<(String, Option<String>)> =
                sqlx::query_as("SELECT status, live_node FROM streams WHERE id = $1")
                    .bind(id)
                    .fetch_optional(self.pool())
                    .await?;
            let held_here = matches!(&row, Some((status, owner)) if status == "live" && owner.as_deref().is_none_or(|o| o == node));
            if !held_here {
                gone.push(id.clone());
            }
        }
        Ok(gone)
    }

    pub async fn stream_by_key(&self, stream_key: &str) -> Result<Option<StreamRow>, DbError> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM streams WHERE stream_key = $1"))
            .bind(stream_key)
            .fetch_optional(self.pool())
            .await
    }

    /// The streams of a project that are live, on any node.
    pub async fn live_stream_ids_of_project(&self, project_id: &str) -> Result<Vec<String>, DbError> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT id FROM streams WHERE project_id = $1 AND status = 'live'")
                .bind(project_id)
                .fetch_all(self.pool())
                .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// Idle streams untouched since `before`: every push start and end, and every change,
    /// moves `updated_at`.
    pub async fn idle_streams_since(&self, before: i64, limit: i64) -> Result<Vec<StreamRow>, DbError> {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM streams WHERE status = 'idle' AND updated_at < $1 LIMIT $2"
        ))
        .bind(before)
        .bind(limit)
        .fetch_all(self.pool())
        .await
    }

    pub async fn stream_by_push_username(&self, username: &str) -> Result<Option<StreamRow>, DbError> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM streams WHERE push_username = $1"))
            .bind(username)
            .fetch_optional(self.pool())
            .await
    }

    pub async fn list_streams(
        &self,
        project_id: &str,
        filter: &StreamFilter,
        skip: i64,
        limit: i64,
    ) -> Result<Page<StreamRow>, DbError> {
        // Fixed SQL; absent filters are NULL parameters.
        let conditions = "project_id = $1 AND ($2 IS NULL OR LOWER(name) LIKE $2 ESCAPE '\\') \
             AND ($3 IS NULL OR status = $3) AND ($4 IS NULL OR created_at >= $4) AND ($5 IS NULL OR created_at <= $5)";
        let pattern = filter.q.as_deref().map(like_pattern);
        let items = sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM streams WHERE {conditions} ORDER BY created_at DESC, id DESC LIMIT $6 OFFSET $7"
        ))
        .bind(project_id)
        .bind(pattern.clone())
        .bind(filter.status.clone())
        .bind(filter.from)
        .bind(filter.to)
        .bind(limit)
        .bind(skip)
        .fetch_all(self.pool())
        .await?;
        let total = count(
            &sqlx::query(&format!("SELECT COUNT(*) FROM streams WHERE {conditions}"))
                .bind(project_id)
                .bind(pattern)
                .bind(filter.status.clone())
                .bind(filter.from)
                .bind(filter.to)
                .fetch_one(self.pool())
                .await?,
        )?;
        Ok(Page { items, total })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(super::like_pattern("Cam_1%"), "%cam\\_1\\%%");
    }
}
