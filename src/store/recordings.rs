//! Recordings in progress: the row of each, and the segments already in storage. Completing a
//! recording removes them in the transaction that inserts its VOD ([`Db::take_recording`]), so a
//! recording becomes a VOD once, whichever process completes it.

use sqlx::{AnyConnection, FromRow};

use super::{Db, DbError};

#[derive(Debug, Clone, FromRow)]
pub struct RecordingRow {
    /// The id of the VOD it becomes.
    pub id: String,
    pub project_id: String,
    pub stream_id: String,
    pub session_id: String,
    pub name: String,
    pub drm_enabled: i64,
    pub signed_playback: i64,
    pub node: String,
    /// JSON array of the renditions seen so far.
    pub renditions: Option<String>,
    pub started_at: i64,
    pub updated_at: i64,
}

/// A segment of a recording: in storage, or `lost` (the store did not take it; `bytes` 0).
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct RecordedSegmentRow {
    pub rendition: String,
    pub idx: i64,
    pub generation: i64,
    pub duration: f64,
    pub bytes: i64,
    pub lost: i64,
    /// The wall-clock time of its first frame (ms), as the live playlist stated it.
    pub pdt: Option<i64>,
}

const COLUMNS: &str =
    "id, project_id, stream_id, session_id, name, drm_enabled, signed_playback, node, renditions, started_at, updated_at";

impl Db {
    pub async fn insert_recording(&self, r: &RecordingRow) -> Result<(), DbError> {
        sqlx::query(&format!(
            "INSERT INTO recordings ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        ))
        .bind(&r.id)
        .bind(&r.project_id)
        .bind(&r.stream_id)
        .bind(&r.session_id)
        .bind(&r.name)
        .bind(r.drm_enabled)
        .bind(r.signed_playback)
        .bind(&r.node)
        .bind(&r.renditions)
        .bind(r.started_at)
        .bind(r.updated_at)
        .execute(self.pool())
        .await
        .map(|_| ())
    }

    /// Notes stored segments (kept once if noted again) and, when given, the renditions seen
    /// so far, in one transaction.
    pub async fn note_recorded_segments(
        &self,
        id: &str,
        rows: &[RecordedSegmentRow],
        renditions: Option<&str>,
        now: i64,
    ) -> Result<(), DbError> {
        let mut tx = self.begin_write().await?;
        if let Some(renditions) = renditions {
            sqlx::query("UPDATE recordings SET renditions = $1, updated_at = $2 WHERE id = $3")
                .bind(renditions)
                .bind(now)
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        for s in rows {
            sqlx::query(
                "INSERT INTO recording_segments (recording_id, rendition, idx, generation, duration, bytes, lost, pdt) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (recording_id, rendition, idx) DO NOTHING",
            )
            .bind(id)
            .bind(&s.rendition)
            .bind(s.idx)
            .bind(s.generation)
            .bind(s.duration)
            .bind(s.bytes)
            .bind(s.lost)
            .bind(s.pdt)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await
    }

    pub async fn recording(&self, id: &str) -> Result<Option<RecordingRow>, DbError> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM recordings WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await
    }

    /// A recording's segments, by rendition and position.
    pub async fn recorded_segments(&self, id: &str) -> Result<Vec<RecordedSegmentRow>, DbError> {
        sqlx::query_as(
            "SELECT rendition, idx, generation, duration, bytes, lost, pdt FROM recording_segments \
             WHERE recording_id = $1 ORDER BY rendition, idx",
        )
        .bind(id)
        .fetch_all(self.pool())
        .await
    }

    /// The recordings a node left in progress (at its start: those a dead run of it left).
    pub async fn recordings_of_node(&self, node: &str) -> Result<Vec<RecordingRow>, DbError> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM recordings WHERE node = $1 ORDER BY started_at"))
            .bind(node)
            .fetch_all(self.pool())
            .await
    }

    /// Removes a recording's rows on the caller's transaction; false when another completion
    /// took it first.
    pub async fn take_recording(conn: &mut AnyConnection, id: &str) -> Result<bool, DbError> {
        sqlx::query("DELETE FROM recording_segments WHERE recording_id = $1")
            .bind(id)
            .execute(&mut *conn)
            .await?;
        let done = sqlx::query("DELETE FROM recordings WHERE id = $1").bind(id).execute(&mut *conn).await?;
        Ok(done.rows_affected() == 1)
    }

    /// Forgets a recording that became nothing (no segment was ever written).
    pub async fn drop_recording(&self, id: &str) -> Result<(), DbError> {
        let mut tx = self.begin_write().await?;
        Db::take_recording(&mut tx, id).await?;
        tx.commit().await?;
        Ok(())
    }
}
