//! VOD records and their transcode queue.
//!
//! A job row exists from `queued` until the transcode ends. Workers lease jobs: on Postgres with
//! `FOR UPDATE SKIP LOCKED`, so several processes never take the same job; SQLite has one writer
//! at a time, which makes the single UPDATE atomic. A lease that runs out (its worker died) makes
//! the job available again; every lease counts as an attempt.

use sqlx::{AnyConnection, FromRow};

use super::{count, Backend, Db, DbError, Page};
use crate::domain::vod::{AspectRatio, ProducedRendition, RenditionSpec, VodStatus};

/// What a job of the queue does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// Transcode an uploaded file (the transcode workers).
    Transcode,
    /// Cut a clip out of another VOD (the clip workers).
    Clip,
    /// Remux a complete VOD's renditions into progressive MP4s (the download workers).
    Mp4,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Transcode => "transcode",
            JobKind::Clip => "clip",
            JobKind::Mp4 => "mp4",
        }
    }
}

#[derive(Debug, Clone, FromRow)]
pub struct VodRow {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub filename: String,
    pub output_format: String,
    pub video_codec: String,
    pub audio_codec: String,
    pub aspect_ratio: String,
    /// JSON array of [`crate::domain::vod::RenditionSpec`].
    pub ladder: String,
    pub status: String,
    pub source_size: Option<i64>,
    pub duration: Option<f64>,
    /// JSON of [`crate::media::vod::probe::SourceInfo`].
    pub source_info: Option<String>,
    /// JSON array of what was produced.
    pub renditions: Option<String>,
    pub progress: i64,
    pub error: Option<String>,
    pub signed_playback: i64,
    /// 1: segments are encrypted (AES-128) with the VOD's content key.
    pub drm_enabled: i64,
    pub upload_expires_at: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub completed_at: Option<i64>,
    pub archived_at: Option<i64>,
    /// A recording of a live stream: its stream and push session.
    pub stream_id: Option<String>,
    pub session_id: Option<String>,
    /// A clip: JSON of [`crate::domain::clip::ClipOf`], where it was cut from.
    pub clip_of: Option<String>,
    /// 1: progressive MP4 downloads are asked for.
    pub mp4: i64,
    /// JSON array of [`crate::domain::vod::Download`] once made.
    pub downloads: Option<String>,
    /// Why the downloads could not be made.
    pub downloads_error: Option<String>,
}

impl VodRow {
    /// A new record of `status` with the defaults of every other column (the one output format,
    /// codecs and fit; no ladder, nothing produced, clear, unsigned), created at `now`.
    pub fn new(
        id: String,
        project_id: String,
        (name, filename): (String, String),
        status: VodStatus,
        now: i64,
    ) -> VodRow {
        VodRow {
            id,
            project_id,
            name,
            filename,
            output_format: "hls".into(),
            video_codec: "h264".into(),
            audio_codec: "aac".into(),
            aspect_ratio: AspectRatio::Preserve.as_str().into(),
            ladder: "[]".into(),
            status: status.as_str().to_string(),
            source_size: None,
            duration: None,
            source_info: None,
            renditions: None,
            progress: 0,
            error: None,
            signed_playback: 0,
            drm_enabled: 0,
            upload_expires_at: now,
            created_at: now,
            updated_at: now,
            completed_at: None,
            archived_at: None,
            stream_id: None,
            session_id: None,
            clip_of: None,
            mp4: 0,
            downloads: None,
            downloads_error: None,
        }
    }

    pub fn status(&self) -> VodStatus {
        VodStatus::parse(&self.status).unwrap_or(VodStatus::Failed)
    }

    pub fn set_status(&mut self, status: VodStatus) {
        self.status = status.as_str().to_string();
    }

    pub fn aspect_ratio(&self) -> AspectRatio {
        AspectRatio::parse(&self.aspect_ratio).unwrap_or(AspectRatio::Preserve)
    }

    /// The ladder asked for (stored as JSON when the VOD was created from a checked request).
    pub fn ladder(&self) -> Result<Vec<RenditionSpec>, serde_json::Error> {
        serde_json::from_str(&self.ladder)
    }

    /// What the transcode produced (none before it completes).
    pub fn renditions(&self) -> Vec<ProducedRendition> {
        self.renditions.as_deref().and_then(|r| serde_json::from_str(r).ok()).unwrap_or_default()
    }
}

/// A job leased by a worker.
#[derive(Debug, Clone, FromRow)]
pub struct LeasedJob {
    pub vod_id: String,
    pub project_id: String,
    pub attempts: i64,
}

/// A worker's hold on a job: its owner and the attempt it leased. Every write a worker makes to
/// its job is fenced by both, so a worker whose lease lapsed and was taken over (by another
/// process, or another worker of its own) changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    pub attempt: i64,
}

const COLUMNS: &str =
    "id, project_id, name, filename, output_format, video_codec, audio_codec, aspect_ratio, \
     ladder, status, source_size, duration, source_info, renditions, progress, error, signed_playback, upload_expires_at, \
     created_at, updated_at, completed_at, archived_at, drm_enabled, stream_id, session_id, clip_of, mp4, \
     downloads, downloads_error";

impl Db {
    pub async fn insert_vod(conn: &mut AnyConnection, v: &VodRow) -> Result<(), DbError> {
        sqlx::query(&format!(
            "INSERT INTO vods ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, \
             $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29)"
        ))
        .bind(&v.id)
        .bind(&v.project_id)
        .bind(&v.name)
        .bind(&v.filename)
        .bind(&v.output_format)
        .bind(&v.video_codec)
        .bind(&v.audio_codec)
        .bind(&v.aspect_ratio)
        .bind(&v.ladder)
        .bind(&v.status)
        .bind(v.source_size)
        .bind(v.duration)
        .bind(&v.source_info)
        .bind(&v.renditions)
        .bind(v.progress)
        .bind(&v.error)
        .bind(v.signed_playback)
        .bind(v.upload_expires_at)
        .bind(v.created_at)
        .bind(v.updated_at)
        .bind(v.completed_at)
        .bind(v.archived_at)
        .bind(v.drm_enabled)
        .bind(&v.stream_id)
        .bind(&v.session_id)
        .bind(&v.clip_of)
        .bind(v.mp4)
        .bind(&v.downloads)
        .bind(&v.downloads_error)
        .execute(conn)
        .await
        .map(|_| ())
    }

    /// Writes every mutable column, on the caller's transaction.
    /// Moves VOD `id` from status `from` to `to` if it is still in `from` (a compare-and-set: a
    /// concurrent writer's move is never overwritten). Whether it moved.
    pub async fn move_vod_status(
        conn: &mut AnyConnection,
        id: &str,
        from: &str,
        to: &str,
        now: i64,
    ) -> Result<bool, DbError> {
        let done = sqlx::query("UPDATE vods SET status = $1, updated_at = $2 WHERE id = $3 AND status = $4")
            .bind(to)
            .bind(now)
            .bind(id)
            .bind(from)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn update_vod(conn: &mut AnyConnection, v: &VodRow) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE vods SET status = $1, source_size = $2, duration = $3, renditions = $4, progress = $5, \
             error = $6, signed_playback = $7, upload_expires_at = $8, updated_at = $9, completed_at = $10, \
             archived_at = $11, source_info = $12, name = $13 WHERE id = $14",
        )
        .bind(&v.status)
        .bind(v.source_size)
        .bind(v.duration)
        .bind(&v.renditions)
        .bind(v.progress)
        .bind(&v.error)
        .bind(v.signed_playback)
        .bind(v.upload_expires_at)
        .bind(v.updated_at)
        .bind(v.completed_at)
        .bind(v.archived_at)
        .bind(&v.source_info)
        .bind(&v.name)
        .bind(&v.id)
        .execute(conn)
        .await
        .map(|_| ())
    }

    /// A VOD of a project, read on the caller's transaction.
    pub async fn vod_in(
        conn: &mut AnyConnection,
        project_id: &str,
        id: &str,
    ) -> Result<Option<VodRow>, DbError> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM vods WHERE project_id = $1 AND id = $2"))
            .bind(project_id)
            .bind(id)
            .fetch_optional(conn)
            .await
    }

    pub async fn vod(&self, project_id: &str, id: &str) -> Result<Option<VodRow>, DbError> {
        let mut conn = self.pool().acquire().await?;
        Db::vod_in(&mut conn, project_id, id).await
    }

    /// A VOD by id alone (the upload target and the origin, which carry no project).
    pub async fn vod_by_id(&self, id: &str) -> Result<Option<VodRow>, DbError> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM vods WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await
    }

    /// A VOD by id, on the caller's transaction.
    pub async fn vod_by_id_in(conn: &mut AnyConnection, id: &str) -> Result<Option<VodRow>, DbError> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM vods WHERE id = $1"))
            .bind(id)
            .fetch_optional(conn)
            .await
    }

    pub async fn list_vods(
        &self,
        project_id: &str,
        status: Option<&str>,
        stream_id: Option<&str>,
        archived: bool,
        skip: i64,
        limit: i64,
    ) -> Result<Page<VodRow>, DbError> {
        let conditions =
            "project_id = $1 AND ($2 IS NULL OR status = $2) AND ($3 = 1 OR archived_at IS NULL) \
             AND ($4 IS NULL OR stream_id = $4)";
        let archived = i64::from(archived);
        let items = sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM vods WHERE {conditions} ORDER BY created_at DESC, id DESC LIMIT $5 OFFSET $6"
        ))
        .bind(project_id)
        .bind(status)
        .bind(archived)
        .bind(stream_id)
        .bind(limit)
        .bind(skip)
        .fetch_all(self.pool())
        .await?;
        let total = count(
            &sqlx::query(&format!("SELECT COUNT(*) FROM vods WHERE {conditions}"))
                .bind(project_id)
                .bind(status)
                .bind(archived)
                .bind(stream_id)
                .fetch_one(self.pool())
                .await?,
        )?;
        Ok(Page { items, total })
    }

    /// Records transcode progress (percent) of a VOD that is still processing.
    pub async fn set_vod_progress(&self, id: &str, percent: i64) -> Result<(), DbError> {
        sqlx::query("UPDATE vods SET progress = $1 WHERE id = $2 AND status = 'processing'")
            .bind(percent)
            .bind(id)
            .execute(self.pool())
            .await
            .map(|_| ())
    }

    /// Queues a job that no worker takes before `not_before` (ms) unless [`Db::release_job`]
    /// makes it available sooner.
    pub async fn insert_job(
        conn: &mut AnyConnection,
        vod_id: &str,
        project_id: &str,
        now: i64,
        not_before: i64,
    ) -> Result<(), DbError> {
        Db::insert_job_of(conn, (JobKind::Transcode, None), vod_id, project_id, now, not_before).await
    }

    /// [`Db::insert_job`] of a job of `kind`, for the workers of node `node` only when given.
    pub async fn insert_job_of(
        conn: &mut AnyConnection,
        (kind, node): (JobKind, Option<&str>),
        vod_id: &str,
        project_id: &str,
        now: i64,
        not_before: i64,
    ) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO transcode_jobs (vod_id, project_id, attempts, lease_owner, lease_until, created_at, kind, node_id) \
             VALUES ($1, $2, 0, NULL, $4, $3, $5, $6)",
        )
        .bind(vod_id)
        .bind(project_id)
        .bind(now)
        .bind(not_before)
        .bind(kind.as_str())
        .bind(node)
        .execute(conn)
        .await
        .map(|_| ())
    }

    /// Queues the downloads job of VOD `vod_id` if the VOD asks for MP4s (`mp4` = 1) and has no
    /// job now. Read in the statement, so that a `PATCH` committed before it counts; one that
    /// commits after finds the VOD complete and queues the job itself.
    pub async fn queue_downloads(
        conn: &mut AnyConnection,
        vod_id: &str,
        project_id: &str,
        now: i64,
    ) -> Result<bool, DbError> {
        let done = sqlx::query(
            "INSERT INTO transcode_jobs (vod_id, project_id, attempts, lease_owner, lease_until, created_at, kind, node_id) \
             SELECT $1, $2, 0, NULL, NULL, $3, $4, NULL WHERE EXISTS \
               (SELECT 1 FROM vods WHERE id = $1 AND mp4 = 1 AND downloads IS NULL) \
             ON CONFLICT (vod_id) DO NOTHING",
        )
        .bind(vod_id)
        .bind(project_id)
        .bind(now)
        .bind(JobKind::Mp4.as_str())
        .execute(conn)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Turns MP4 downloads of VOD `id` on or off (off forgets what was made, and its job); what
    /// was made stays when they were on already, and why they failed goes (on again tries again).
    pub async fn set_vod_mp4(conn: &mut AnyConnection, id: &str, on: bool, now: i64) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE vods SET downloads = CASE WHEN $1 = 1 AND mp4 = 1 THEN downloads ELSE NULL END, \
             downloads_error = NULL, mp4 = $1, updated_at = $2 WHERE id = $3",
        )
        .bind(i64::from(on))
        .bind(now)
        .bind(id)
        .execute(&mut *conn)
        .await?;
        if !on {
            sqlx::query("DELETE FROM transcode_jobs WHERE vod_id = $1 AND kind = $2")
                .bind(id)
                .bind(JobKind::Mp4.as_str())
                .execute(conn)
                .await?;
        }
        Ok(())
    }

    /// Records what the downloads job of `id` made (JSON), or why it could not.
    pub async fn set_vod_downloads(
        conn: &mut AnyConnection,
        id: &str,
        made: Result<String, String>,
        now: i64,
    ) -> Result<(), DbError> {
        let (downloads, error) = match made {
            Ok(json) => (Some(json), None),
            Err(e) => (None, Some(e)),
        };
        sqlx::query(
            "UPDATE vods SET downloads = $1, downloads_error = $2, updated_at = $3 WHERE id = $4 AND mp4 = 1",
        )
        .bind(downloads)
        .bind(error)
        .bind(now)
        .bind(id)
        .execute(conn)
        .await
        .map(|_| ())
    }

    /// Makes a job that no worker holds available now.
    pub async fn release_job(conn: &mut AnyConnection, vod_id: &str) -> Result<(), DbError> {
        sqlx::query("UPDATE transcode_jobs SET lease_until = NULL WHERE vod_id = $1 AND lease_owner IS NULL")
            .bind(vod_id)
            .execute(conn)
            .await
            .map(|_| ())
    }

    pub async fn delete_job(conn: &mut AnyConnection, vod_id: &str) -> Result<(), DbError> {
        sqlx::query("DELETE FROM transcode_jobs WHERE vod_id = $1")
            .bind(vod_id)
            .execute(conn)
            .await
            .map(|_| ())
    }

    /// Leases the oldest available transcode job for `owner` until `lease_until`, counting an
    /// attempt.
    pub async fn claim_job(
        &self,
        owner: &str,
        now: i64,
        lease_until: i64,
    ) -> Result<Option<LeasedJob>, DbError> {
        self.claim_job_of(JobKind::Transcode, owner, now, lease_until).await
    }

    /// [`Db::claim_job`] of a job of `kind` (one for any node, or for `owner`'s: the owner is the
    /// node's id).
    pub async fn claim_job_of(
        &self,
        kind: JobKind,
        owner: &str,
        now: i64,
        lease_until: i64,
    ) -> Result<Option<LeasedJob>, DbError> {
        let lock = match self.backend() {
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        sqlx::query_as(&format!(
            "UPDATE transcode_jobs SET lease_owner = $1, lease_until = $2, attempts = attempts + 1 \
             WHERE vod_id IN (SELECT vod_id FROM transcode_jobs WHERE (lease_until IS NULL OR lease_until < $3) \
               AND kind = $4 AND (node_id IS NULL OR node_id = $1) ORDER BY created_at LIMIT 1{lock}) \
             RETURNING vod_id, project_id, attempts"
        ))
        .bind(owner)
        .bind(lease_until)
        .bind(now)
        .bind(kind.as_str())
        .fetch_optional(self.pool())
        .await
    }

    /// Extends a lease; false when the job is no longer this owner's (cancelled, or taken over).
    pub async fn renew_job(&self, lease: &Lease, vod_id: &str, lease_until: i64) -> Result<bool, DbError> {
        let done = sqlx::query(
            "UPDATE transcode_jobs SET lease_until = $1 WHERE vod_id = $2 AND lease_owner = $3 AND attempts = $4",
        )
        .bind(lease_until)
        .bind(vod_id)
        .bind(&lease.owner)
        .bind(lease.attempt)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Returns a job to the queue without counting the attempt (a clean shutdown).
    pub async fn return_job(&self, lease: &Lease, vod_id: &str) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE transcode_jobs SET lease_owner = NULL, lease_until = NULL, attempts = attempts - 1 \
             WHERE vod_id = $1 AND lease_owner = $2 AND attempts = $3",
        )
        .bind(vod_id)
        .bind(&lease.owner)
        .bind(lease.attempt)
        .execute(self.pool())
        .await
        .map(|_| ())
    }

    /// Frees every lease of `owner`: a restarted process takes its jobs up again at once instead of
    /// waiting for the leases to run out. The interrupted attempts still count.
    pub async fn release_jobs(&self, owner: &str) -> Result<u64, DbError> {
        sqlx::query("UPDATE transcode_jobs SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = $1")
            .bind(owner)
            .execute(self.pool())
            .await
            .map(|r| r.rows_affected())
    }

    /// Whether `owner` still holds the job of `vod_id` (not cancelled, not taken over), on the
    /// caller's transaction.
    pub async fn job_is_ours(conn: &mut AnyConnection, lease: &Lease, vod_id: &str) -> Result<bool, DbError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT vod_id FROM transcode_jobs WHERE vod_id = $1 AND lease_owner = $2 AND attempts = $3",
        )
        .bind(vod_id)
        .bind(&lease.owner)
        .bind(lease.attempt)
        .fetch_optional(conn)
        .await?;
        Ok(row.is_some())
    }

    /// Whether the VOD still has a job in the queue (held by anyone, or waiting).
    pub async fn job_exists(&self, vod_id: &str) -> Result<bool, DbError> {
        let row: Option<(String,)> = sqlx::query_as("SELECT vod_id FROM transcode_jobs WHERE vod_id = $1")
            .bind(vod_id)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.is_some())
    }

    /// Gives a job back to be tried again after `retry_at` (ms). The attempt counts unless
    /// `counted` is false (what stopped it was not the job's: the store did not serve its source).
    pub async fn retry_job_at(
        &self,
        lease: &Lease,
        vod_id: &str,
        retry_at: i64,
        counted: bool,
    ) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE transcode_jobs SET lease_owner = NULL, lease_until = $1, \
             attempts = attempts - $5 \
             WHERE vod_id = $2 AND lease_owner = $3 AND attempts = $4",
        )
        .bind(retry_at)
        .bind(vod_id)
        .bind(&lease.owner)
        .bind(lease.attempt)
        .bind(i64::from(!counted))
        .execute(self.pool())
        .await
        .map(|_| ())
    }
}
