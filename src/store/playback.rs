//! What the playback origin reads on its hot path: whether a stream or VOD plays and requires
//! signed playback, and its wrapped content key.

use super::{Db, DbError};
use crate::domain::time::now_ms;
use crate::domain::vod::VodStatus;

/// The playback side of a stream or VOD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaybackRow {
    /// A VOD plays only when complete and not archived; a stream always "plays" (its channel
    /// says whether it is live).
    pub playable: bool,
    pub signed: bool,
}

impl Db {
    pub async fn stream_playback(&self, id: &str) -> Result<Option<PlaybackRow>, DbError> {
        let signed: Option<i64> = sqlx::query_scalar("SELECT signed_playback FROM streams WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        Ok(signed.map(|signed| PlaybackRow { playable: true, signed: signed == 1 }))
    }

    pub async fn vod_playback(&self, id: &str) -> Result<Option<PlaybackRow>, DbError> {
        let row: Option<(String, Option<i64>, i64)> =
            sqlx::query_as("SELECT status, archived_at, signed_playback FROM vods WHERE id = $1")
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
        Ok(row.map(|(status, archived, signed)| PlaybackRow {
            playable: VodStatus::parse(&status) == Some(VodStatus::Complete) && archived.is_none(),
            signed: signed == 1,
        }))
    }

    /// The wrapped content key of `resource` (`stream:<id>`, `vod:<id>`).
    pub async fn content_key(&self, resource: &str) -> Result<Option<String>, DbError> {
        sqlx::query_scalar("SELECT wrapped FROM content_keys WHERE resource = $1")
            .bind(resource)
            .fetch_optional(self.pool())
            .await
    }

    /// Stores `wrapped` unless the resource has a key already; returns the one that is stored
    /// (two processes creating a key at once agree on the first).
    pub async fn insert_content_key(&self, resource: &str, wrapped: &str) -> Result<String, DbError> {
        sqlx::query(
            "INSERT INTO content_keys (resource, wrapped, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (resource) DO NOTHING",
        )
        .bind(resource)
        .bind(wrapped)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(self.content_key(resource).await?.unwrap_or_else(|| wrapped.to_string()))
    }
}
