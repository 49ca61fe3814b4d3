//! Simulcast targets (migration 0019; CONTRACT: Simulcast). The URL is stored sealed
//! ([`super::secrets::simulcast_context`]); the masked form beside it is what the API shows.

use sqlx::FromRow;

use super::{Db, DbError};
use crate::domain::simulcast::TargetStatus;

#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct TargetRow {
    pub id: String,
    pub stream_id: String,
    pub name: String,
    /// Sealed.
    pub url: String,
    pub masked_url: String,
    pub enabled: i64,
    pub status: String,
    pub last_error: Option<String>,
    pub connected_at: Option<i64>,
    pub bytes_sent: i64,
    pub created_at: i64,
}

impl TargetRow {
    pub fn status(&self) -> TargetStatus {
        TargetStatus::parse(&self.status)
    }
}

/// What the sending node writes as a target moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetProgress {
    pub status: TargetStatus,
    pub last_error: Option<String>,
    pub connected_at: Option<i64>,
    pub bytes_sent: i64,
}

const COLUMNS: &str =
    "id, stream_id, name, url, masked_url, enabled, status, last_error, connected_at, bytes_sent, created_at";

impl Db {
    /// Adds a target unless the stream has `max` already (`Ok(false)`). The count and the insert
    /// are one statement, so two creates racing cannot pass the cap together.
    pub async fn create_target(&self, row: &TargetRow, max: usize) -> Result<bool, DbError> {
        let done = sqlx::query(&format!(
            "INSERT INTO simulcast_targets ({COLUMNS}) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 \
             WHERE (SELECT COUNT(*) FROM simulcast_targets WHERE stream_id = $12) < $13"
        ))
        .bind(&row.id)
        .bind(&row.stream_id)
        .bind(&row.name)
        .bind(&row.url)
        .bind(&row.masked_url)
        .bind(row.enabled)
        .bind(&row.status)
        .bind(&row.last_error)
        .bind(row.connected_at)
        .bind(row.bytes_sent)
        .bind(row.created_at)
        .bind(&row.stream_id)
        .bind(max as i64)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// A stream's targets, oldest first.
    pub async fn targets(&self, stream_id: &str) -> Result<Vec<TargetRow>, DbError> {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM simulcast_targets WHERE stream_id = $1 ORDER BY created_at, id"
        ))
        .bind(stream_id)
        .fetch_all(self.pool())
        .await
    }

    /// The enabled targets of `streams` (the pushes a node holds), in one query.
    pub async fn enabled_targets_of(&self, streams: &[&str]) -> Result<Vec<TargetRow>, DbError> {
        if streams.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {COLUMNS} FROM simulcast_targets WHERE enabled = 1 AND stream_id IN ({}) \
             ORDER BY created_at, id",
            super::placeholders(1, streams.len())
        );
        let mut q = sqlx::query_as(&sql);
        for s in streams {
            q = q.bind(*s);
        }
        q.fetch_all(self.pool()).await
    }

    pub async fn target(&self, stream_id: &str, id: &str) -> Result<Option<TargetRow>, DbError> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM simulcast_targets WHERE stream_id = $1 AND id = $2"))
            .bind(stream_id)
            .bind(id)
            .fetch_optional(self.pool())
            .await
    }

    /// Sets a target's name and whether it is enabled; whether it still exists.
    pub async fn update_target(&self, row: &TargetRow) -> Result<bool, DbError> {
        let done = sqlx::query("UPDATE simulcast_targets SET name = $1, enabled = $2 WHERE id = $3")
            .bind(&row.name)
            .bind(row.enabled)
            .bind(&row.id)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn delete_target(&self, stream_id: &str, id: &str) -> Result<bool, DbError> {
        let done = sqlx::query("DELETE FROM simulcast_targets WHERE stream_id = $1 AND id = $2")
            .bind(stream_id)
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Writes where a target stands (a target deleted meanwhile is left deleted).
    pub async fn set_target_progress(&self, id: &str, p: &TargetProgress) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE simulcast_targets SET status = $1, last_error = $2, connected_at = $3, bytes_sent = $4 \
             WHERE id = $5",
        )
        .bind(p.status.as_str())
        .bind(&p.last_error)
        .bind(p.connected_at)
        .bind(p.bytes_sent)
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Removes every target of a stream (it was deleted: their sealed URLs go with it).
    pub async fn delete_targets_of(&self, stream_id: &str) -> Result<u64, DbError> {
        let done = sqlx::query("DELETE FROM simulcast_targets WHERE stream_id = $1")
            .bind(stream_id)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }
}
