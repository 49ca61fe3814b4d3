//! Streams' slate pictures (migration 0018): the image a stream shows while no input feeds it,
//! replacing the default card (CONTRACT: Continuity).

use sqlx::FromRow;

use super::{Db, DbError};

/// What is known of a stream's picture without its bytes.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct SlateInfo {
    pub content_type: String,
    pub digest: String,
    pub width: i64,
    pub height: i64,
    pub size: i64,
    pub updated_at: i64,
}

impl Db {
    /// Sets (or replaces) `stream_id`'s picture.
    pub async fn put_slate(&self, stream_id: &str, info: &SlateInfo, image: &[u8]) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO stream_slates (stream_id, content_type, digest, width, height, size, image, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (stream_id) DO UPDATE SET content_type = excluded.content_type, digest = excluded.digest, \
             width = excluded.width, height = excluded.height, size = excluded.size, image = excluded.image, \
             updated_at = excluded.updated_at",
        )
        .bind(stream_id)
        .bind(&info.content_type)
        .bind(&info.digest)
        .bind(info.width)
        .bind(info.height)
        .bind(info.size)
        .bind(image)
        .bind(info.updated_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Removes `stream_id`'s picture; whether it had one.
    pub async fn delete_slate(&self, stream_id: &str) -> Result<bool, DbError> {
        let done = sqlx::query("DELETE FROM stream_slates WHERE stream_id = $1")
            .bind(stream_id)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// `stream_id`'s picture, without its bytes.
    pub async fn slate_info(&self, stream_id: &str) -> Result<Option<SlateInfo>, sqlx::Error> {
        sqlx::query_as(
            "SELECT content_type, digest, width, height, size, updated_at FROM stream_slates WHERE stream_id = $1",
        )
        .bind(stream_id)
        .fetch_optional(self.pool())
        .await
    }

    /// `stream_id`'s picture's bytes, if it is still the one of `digest`.
    pub async fn slate_image(&self, stream_id: &str, digest: &str) -> Result<Option<Vec<u8>>, DbError> {
        let row: Option<(Vec<u8>,)> =
            sqlx::query_as("SELECT image FROM stream_slates WHERE stream_id = $1 AND digest = $2")
                .bind(stream_id)
                .bind(digest)
                .fetch_optional(self.pool())
                .await?;
        Ok(row.map(|r| r.0))
    }
}
