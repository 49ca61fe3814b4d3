//! `/v1/projects/<slug>/vod` (interface: VOD, VOD moves; CONTRACT: VOD).

use std::sync::Arc;
use std::time::Duration;

use poem::http::Method;
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::body::{Fields, FromJsonBody, JsonBody};
use super::error::{ApiError, ApiResult};
use super::pagination::{Limit, PageQuery, Paginated, Skip};
use super::security::{need, Authorized};
use super::ApiTags;
use crate::api::ApiState;
use crate::domain::clip::ClipOf;
use crate::domain::new_id;
use crate::domain::time::{iso, now_ms};
use crate::domain::vod::{
    default_ladder, AspectRatio, AudioCodec, Bitrate, DownloadsStatus, OutputFormat, ProducedRendition,
    RenditionSpec, VideoCodec, VodMove, VodMoveError, VodStatus,
};
use crate::media::vod::probe::probe;
use crate::services::vods::VodError;
use crate::storage::{source_key, vod_prefix};
use crate::store::vods::VodRow;
use crate::store::Db;

mod clip;
mod downloads;

pub use downloads::{downloads_of, Download, UpdateVod};

/// How long an upload URL (and a heartbeat's extension) lives.
pub const UPLOAD_TTL: Duration = Duration::from_secs(3600);

/// The VOD record.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase", example)]
pub struct Vod {
    #[oai(rename = "_id")]
    pub id: String,
    pub name: String,
    pub filename: String,
    pub status: VodStatus,
    pub output_format: OutputFormat,
    pub video_codec: VideoCodec,
    pub audio_codec: AudioCodec,
    pub aspect_ratio: AspectRatio,
    /// The rungs asked for.
    pub ladder: Vec<RenditionSpec>,
    /// What was produced (rungs above the source are left out); empty until complete.
    pub renditions: Vec<ProducedRendition>,
    /// Transcode progress, 0–100.
    pub progress: i64,
    /// Bytes of the source file, once uploaded.
    pub source_size: Option<i64>,
    /// Seconds.
    pub duration: Option<f64>,
    /// `{playback_base}/vod/<id>/master.m3u8`, once complete (null when archived).
    pub playback_url: Option<String>,
    /// `{playback_base}/vod/<id>/thumb.jpg`, once complete.
    pub thumbnail_url: Option<String>,
    /// Why the VOD failed.
    pub error: Option<String>,
    /// Whether playback needs a signed URL from a playback ticket.
    pub signed_playback: bool,
    /// Whether the segments are encrypted (AES-128; the key is served to authorised playback).
    pub drm_enabled: bool,
    pub created_at: String,
    pub updated_at: String,
    pub completed_at: Option<String>,
    pub archived_at: Option<String>,
    /// The live stream this VOD recorded (`vodEnabled`); null for an uploaded file.
    pub stream_id: Option<String>,
    /// The push session it recorded (a reconnect within the grace period continues it).
    pub session_id: Option<String>,
    /// Playback sessions started (master playlist fetches by viewers; CONTRACT: Viewers).
    pub views: i64,
    /// Seconds of video the playback sessions fetched, summed (written every 2 s).
    pub watch_seconds: f64,
    /// A recording: the most viewers at once of the live session it recorded; null otherwise.
    pub peak_viewers: Option<i64>,
    /// A clip: the VOD it was cut from and the range asked for; null otherwise.
    pub clip_of: Option<ClipOf>,
    /// Whether progressive MP4 downloads are asked for.
    pub mp4: bool,
    /// Null when not asked for; `preparing` until the VOD is complete and they are made.
    pub downloads_status: Option<DownloadsStatus>,
    /// A progressive MP4 (`moov` first) of each video rendition with the audio, and an M4A of
    /// the audio; empty until `downloadsStatus` is `ready`.
    pub downloads: Vec<Download>,
    /// Why the downloads could not be made.
    pub downloads_error: Option<String>,
}

/// Where to send the source file.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct UploadTarget {
    /// Presigned: no other credential is needed. Sluice's own upload target also takes
    /// `Content-Range` chunks (see the VOD guide).
    pub url: String,
    /// Always `PUT`.
    pub method: String,
    pub expires_at: String,
}

/// A VOD and where to upload its source.
#[derive(Debug, Object)]
#[oai(example)]
pub struct VodWithUpload {
    pub vod: Vod,
    /// Null for a clip, which has nothing to upload.
    pub upload: Option<UploadTarget>,
}

/// Body of `POST /vod`.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase", example)]
pub struct CreateVod {
    /// 1–100 characters.
    pub name: String,
    /// Name of the file to be uploaded, 1–255 characters; default: `name`.
    pub filename: Option<String>,
    /// `hls` (default).
    pub output_format: Option<OutputFormat>,
    /// `h264` (default).
    pub video_codec: Option<VideoCodec>,
    /// `aac` (default).
    pub audio_codec: Option<AudioCodec>,
    /// `preserve` (default), `pad`, `crop` or `stretch`.
    pub aspect_ratio: Option<AspectRatio>,
    /// 1–8 rungs with unique names. Default: 1080p 1920×1080 5M, 720p 1280×720 3M,
    /// 480p 854×480 1500k, 360p 640×360 800k.
    pub ladder: Option<Vec<RenditionSpec>>,
    /// Encrypt the segments (AES-128 HLS); default false (a clip: its source's). Pair it with
    /// signed playback, or the key is as public as the playlist.
    pub drm_enabled: Option<bool>,
    /// Cut this VOD out of another (uploaded or recorded), without a re-encode: nothing is
    /// uploaded, the clip is queued at once and completes like a transcode (`vod.processing`,
    /// `vod.complete`). The ladder fields do not apply.
    pub clip: Option<ClipOf>,
    /// Progressive MP4 downloads of each rendition and an M4A, made once the VOD is complete;
    /// default false. Not for encrypted media.
    pub mp4: Option<bool>,
}

fn rung(f: &mut Fields) -> RenditionSpec {
    let spec = RenditionSpec {
        name: f.string("name", 1..=32),
        width: f.int("width", 0..=100_000).unwrap_or(0) as u32,
        height: f.int("height", 0..=100_000).unwrap_or(0) as u32,
        video_bitrate: f.string("videoBitrate", 1..=16),
    };
    // What `RenditionSpec::problems` checks, as the document states it.
    f.document("name", |r| r.pattern = Some(RenditionSpec::NAME_PATTERN));
    f.document("width", |r| (r.range, r.multiple_of) = (Some((16, 7680)), Some(2)));
    f.document("height", |r| (r.range, r.multiple_of) = (Some((16, 4320)), Some(2)));
    f.document("videoBitrate", |r| r.pattern = Some(Bitrate::PATTERN));
    for problem in spec.problems() {
        if let Some((field, rest)) = problem.split_once(' ') {
            // A missing or mistyped field already has its problem.
            if !f.has_error(field) {
                f.error(field, rest);
            }
        }
    }
    spec
}

impl FromJsonBody for CreateVod {
    fn from_fields(f: &mut Fields) -> Self {
        let ladder = f.opt_objects("ladder", 1..=8, rung);
        // Unique by name, which JSON Schema cannot say; no two equal rungs is as near as it gets.
        f.document("ladder", |r| r.unique = true);
        if let Some(l) = &ladder {
            let mut names: Vec<&str> = l.iter().map(|r| r.name.as_str()).collect();
            names.sort_unstable();
            if names.windows(2).any(|w| w[0] == w[1]) {
                f.error("ladder", "must have unique rung names");
            }
        }
        CreateVod {
            name: f.string("name", 1..=100),
            filename: f.opt_string("filename", 1..=255),
            output_format: f.opt_enum("outputFormat"),
            video_codec: f.opt_enum("videoCodec"),
            audio_codec: f.opt_enum("audioCodec"),
            aspect_ratio: f.opt_parsed("aspectRatio", AspectRatio::parse),
            ladder,
            drm_enabled: f.opt_bool("drmEnabled"),
            clip: clip::read(f),
            mp4: f.opt_bool("mp4"),
        }
    }
}

#[derive(ApiResponse)]
pub enum CreateVodResponse {
    /// Created; send the source file to `upload.url`.
    #[oai(status = 201)]
    Created(Json<VodWithUpload>),
}

impl Vod {
    pub fn from_row(row: &VodRow, app: &ApiState) -> Vod {
        let status = row.status();
        let urls = status == VodStatus::Complete && row.archived_at.is_none();
        let base = format!("{}/vod/{}", app.endpoints.playback_base(), row.id);
        let (downloads, downloads_status) = downloads::of_row(row, &base, None);
        Vod {
            id: row.id.clone(),
            name: row.name.clone(),
            filename: row.filename.clone(),
            status,
            // Each has one value so far.
            output_format: OutputFormat::Hls,
            video_codec: VideoCodec::H264,
            audio_codec: AudioCodec::Aac,
            aspect_ratio: row.aspect_ratio(),
            ladder: row.ladder().unwrap_or_default(),
            renditions: row.renditions(),
            progress: row.progress,
            source_size: row.source_size,
            duration: row.duration,
            playback_url: urls.then(|| format!("{base}/master.m3u8")),
            thumbnail_url: urls.then(|| format!("{base}/thumb.jpg")),
            error: row.error.clone(),
            signed_playback: row.signed_playback == 1,
            drm_enabled: row.drm_enabled == 1,
            created_at: iso(row.created_at),
            updated_at: iso(row.updated_at),
            completed_at: row.completed_at.map(iso),
            archived_at: row.archived_at.map(iso),
            stream_id: row.stream_id.clone(),
            session_id: row.session_id.clone(),
            views: 0,
            watch_seconds: 0.0,
            peak_viewers: None,
            clip_of: row.clip_of.as_deref().and_then(|j| serde_json::from_str(j).ok()),
            mp4: row.mp4 == 1,
            downloads_status,
            downloads: if urls { downloads } else { Vec::new() },
            downloads_error: row.downloads_error.clone(),
        }
    }
}

/// The `data` of a VOD event.
/// A fresh upload target valid for [`UPLOAD_TTL`]; returns it with its expiry (ms).
async fn upload_target(app: &ApiState, id: &str) -> ApiResult<(UploadTarget, i64)> {
    let expires_ms = now_ms() + UPLOAD_TTL.as_millis() as i64;
    let url = match app.storage.presigned(Method::PUT, &source_key(id), UPLOAD_TTL).await {
        Ok(Some(url)) => url,
        Ok(None) => app.uploads.url(id, expires_ms / 1000).await,
        Err(e) => return Err(ApiError::internal(e)),
    };
    Ok((UploadTarget { url, method: "PUT".into(), expires_at: iso(expires_ms) }, expires_ms))
}

pub(super) fn vod_not_found() -> ApiError {
    ApiError::not_found("VOD not found")
}

fn move_error(e: VodMoveError) -> ApiError {
    ApiError::conflict(e.to_string())
}

fn vod_error(e: VodError) -> ApiError {
    match e {
        VodError::Refused(e) => move_error(e),
        VodError::Db(e) => e.into(),
    }
}

pub struct VodApi;

#[OpenApi(tag = "ApiTags::Vod")]
impl VodApi {
    /// List VODs, newest first
    #[oai(path = "/v1/projects/:slug/vod", method = "get", operation_id = "listVods")]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::VodRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        /// Items to skip (default 0).
        skip: Query<Option<Skip>>,
        /// Page size (default 20, at most 100).
        limit: Query<Option<Limit<100>>>,
        /// Only VODs with this status.
        status: Query<Option<VodStatus>>,
        /// Include archived VODs (default false).
        archived: Query<Option<bool>>,
        /// Only the recordings of this live stream.
        #[oai(name = "streamId")]
        stream_id: Query<Option<String>>,
    ) -> ApiResult<Json<Paginated<Vod>>> {
        let page = PageQuery::list(skip.0, limit.0)?;
        let rows = app
            .db
            .list_vods(
                &p.project.id,
                status.0.map(VodStatus::as_str),
                stream_id.0.as_deref(),
                archived.0.unwrap_or(false),
                page.skip,
                page.limit,
            )
            .await?;
        let mut items: Vec<Vod> = rows.items.iter().map(|r| Vod::from_row(r, &app)).collect();
        super::viewers::fill_vods(&app, &mut items).await?;
        Ok(Json(Paginated::new(items, rows.total, page)))
    }

    /// Create a VOD; returns the presigned URL to PUT the source file to
    ///
    /// With `clip`, the VOD is cut out of another instead (no upload; `upload` is null): 404
    /// when `clip.vodId` is not a VOD of the project, 409 when it is not complete or archived,
    /// 400 naming the field when the range is not inside it. `clip.streamId` instants outside the
    /// live DVR window (on this node) that one of the stream's complete recordings holds make a
    /// clip of that recording (`clipOf` names it, with seconds). `mp4: true` with encrypted media
    /// (`drmEnabled`, or a clip of an encrypted source) is 409.
    #[oai(path = "/v1/projects/:slug/vod", method = "post", operation_id = "createVod")]
    async fn create(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::VodWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        body: JsonBody<CreateVod>,
    ) -> ApiResult<CreateVodResponse> {
        let b = body.0;
        if let Some(c) = b.clip {
            let filename = b.filename.unwrap_or_else(|| b.name.clone());
            let row =
                clip::create(&app, &p.project.id, (b.name, filename), c, (b.drm_enabled, b.mp4)).await?;
            tracing::info!(project = %p.project.slug, vod = %row.id, "clip queued");
            let vod = Vod::from_row(&row, &app);
            return Ok(CreateVodResponse::Created(Json(VodWithUpload { vod, upload: None })));
        }
        let id = new_id();
        let (upload, expires_ms) = upload_target(&app, &id).await?;
        let now = now_ms();
        let ladder = b.ladder.unwrap_or_else(default_ladder);
        let drm = b.drm_enabled.unwrap_or(false);
        downloads::check_create(b.mp4, drm)?;
        let filename = b.filename.unwrap_or_else(|| b.name.clone());
        let row = VodRow {
            output_format: b.output_format.unwrap_or(OutputFormat::Hls).as_str().to_string(),
            video_codec: b.video_codec.unwrap_or(VideoCodec::H264).as_str().to_string(),
            audio_codec: b.audio_codec.unwrap_or(AudioCodec::Aac).as_str().to_string(),
            aspect_ratio: b.aspect_ratio.unwrap_or(AspectRatio::Preserve).as_str().to_string(),
            ladder: serde_json::to_string(&ladder).map_err(ApiError::internal)?,
            drm_enabled: i64::from(drm),
            mp4: i64::from(b.mp4.unwrap_or(false)),
            upload_expires_at: expires_ms,
            ..VodRow::new(id, p.project.id.clone(), (b.name, filename), VodStatus::PendingUpload, now)
        };
        let mut tx = app.db.begin_write().await?;
        Db::insert_vod(&mut tx, &row).await?;
        tx.commit().await?;
        tracing::info!(project = %p.project.slug, vod = %row.id, "VOD created");
        Ok(CreateVodResponse::Created(Json(VodWithUpload {
            vod: Vod::from_row(&row, &app),
            upload: Some(upload),
        })))
    }

    /// Get a VOD
    #[oai(path = "/v1/projects/:slug/vod/:id", method = "get", operation_id = "getVod")]
    async fn get(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::VodRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<Vod>> {
        let row = app.db.vod(&p.project.id, &id).await?.ok_or_else(vod_not_found)?;
        Ok(Json(super::viewers::vod_record(&app, &row).await?))
    }

    /// Change a VOD: its name, and MP4 downloads on or off
    ///
    /// `mp4: true` queues the downloads of a complete VOD at once (`downloadsStatus`
    /// `preparing`, then `ready`), and of one still on its way when it completes; 409 for an
    /// encrypted, archived, failed or cancelled VOD. `mp4: false` removes them.
    #[oai(path = "/v1/projects/:slug/vod/:id", method = "patch", operation_id = "updateVod")]
    async fn update(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::VodWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
        body: JsonBody<UpdateVod>,
    ) -> ApiResult<Json<Vod>> {
        let row = downloads::update(&app, &p.project.id, &id, body.0).await?;
        Ok(Json(super::viewers::vod_record(&app, &row).await?))
    }

    /// Mark the source uploaded: probes it and queues the transcode
    ///
    /// 409 when nothing has landed yet or the VOD is past `pending_upload`. A file that is not
    /// playable video moves the VOD to `failed` (with `error`) and fires `vod.failed`.
    #[oai(path = "/v1/projects/:slug/vod/:id/uploaded", method = "post", operation_id = "markVodUploaded")]
    async fn uploaded(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::VodWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<Vod>> {
        let row = app.db.vod(&p.project.id, &id).await?.ok_or_else(vod_not_found)?;
        row.status().apply(VodMove::Probed).map_err(move_error)?;
        let size = app.storage.size(&source_key(&id)).await.map_err(ApiError::internal)?;
        let Some(size) = size else {
            return Err(ApiError::conflict("no file has been uploaded for this VOD yet"));
        };
        let max = app.settings.max_upload_bytes;
        let probed = if size > max {
            Err(format!("the file is larger than the {max}-byte limit"))
        } else {
            let uri = app
                .storage
                .read_uri(&source_key(&id), Duration::from_secs(600))
                .await
                .map_err(ApiError::internal)?;
            probe(uri).await
        };

        // Two writes, so that `uploaded` is stored (and seen by a client polling) before
        // `queued`. The job is inserted with the first, held back until the second releases it
        // (so no worker moves the VOD on before it shows `queued`); after a crash between the
        // two, a worker takes the VOD on from `uploaded` once the hold lapses.
        let mut tx = app.db.begin_write().await?;
        let mut row = Db::vod_in(&mut tx, &p.project.id, &id).await?.ok_or_else(vod_not_found)?;
        row.source_size = Some(size as i64);
        let mv = match &probed {
            Ok(info) => {
                row.duration = info.duration;
                row.source_info = serde_json::to_string(info).ok();
                VodMove::Probed
            }
            Err(error) => {
                row.error = Some(error.clone());
                VodMove::Rejected
            }
        };
        app.vods.apply(tx, &mut row, mv).await.map_err(vod_error)?;
        if probed.is_ok() {
            // The answer is the VOD as this call left it, `queued`, even when a worker has
            // taken the job since (a GET shows `processing` then).
            match app.vods.queue(&id).await.map_err(vod_error)? {
                Some(at) => {
                    row.set_status(VodStatus::Queued);
                    row.updated_at = at;
                }
                None => {
                    let mut conn = app.db.pool().acquire().await?;
                    row = Db::vod_in(&mut conn, &p.project.id, &id).await?.ok_or_else(vod_not_found)?;
                }
            }
        }
        match &probed {
            Ok(_) => tracing::info!(vod = %id.0, bytes = size, "source accepted; transcode queued"),
            Err(e) => tracing::info!(vod = %id.0, error = %e, "source refused"),
        }
        Ok(Json(super::viewers::vod_record(&app, &row).await?))
    }

    /// Keep the upload session alive: returns a fresh upload URL
    #[oai(
        path = "/v1/projects/:slug/vod/:id/heartbeat",
        method = "post",
        operation_id = "vodUploadHeartbeat"
    )]
    async fn heartbeat(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::VodWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<VodWithUpload>> {
        let (upload, expires_ms) = upload_target(&app, &id).await?;
        let mut tx = app.db.begin_write().await?;
        let mut row = Db::vod_in(&mut tx, &p.project.id, &id).await?.ok_or_else(vod_not_found)?;
        if row.status() != VodStatus::PendingUpload {
            return Err(ApiError::conflict("this VOD is not waiting for an upload"));
        }
        row.upload_expires_at = expires_ms;
        row.updated_at = now_ms();
        Db::update_vod(&mut tx, &row).await?;
        tx.commit().await?;
        Ok(Json(VodWithUpload { vod: Vod::from_row(&row, &app), upload: Some(upload) }))
    }

    /// Cancel an unfinished VOD, or archive a complete one
    ///
    /// `pending_upload`, `uploaded`, `queued`, `processing` → `cancelled` (`vod.cancelled`; a
    /// running transcode stops and its output is removed). `complete` → archived (`archivedAt`
    /// set; left out of lists; playback 404). Otherwise 409.
    #[oai(path = "/v1/projects/:slug/vod/:id", method = "delete", operation_id = "deleteVod")]
    async fn delete(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::VodWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<Vod>> {
        let mut tx = app.db.begin_write().await?;
        let mut row = Db::vod_in(&mut tx, &p.project.id, &id).await?.ok_or_else(vod_not_found)?;
        let now = now_ms();
        let cancelled = match row.status() {
            VodStatus::Complete if row.archived_at.is_some() => {
                return Err(ApiError::conflict("this VOD is already archived"))
            }
            VodStatus::Complete => {
                row.archived_at = Some(now);
                false
            }
            _ => true,
        };
        if cancelled {
            app.vods.apply(tx, &mut row, VodMove::Cancel).await.map_err(vod_error)?;
            // A running transcode notices at its next lease renewal and removes what it wrote since.
            if let Err(e) = app.storage.delete_prefix(&vod_prefix(&id), &[]).await {
                tracing::warn!(vod = %id.0, error = %e, "removing a cancelled VOD's files");
            }
            tracing::info!(vod = %id.0, "VOD cancelled");
        } else {
            row.updated_at = now;
            Db::update_vod(&mut tx, &row).await?;
            tx.commit().await?;
            // An archived VOD stops playing at its next request.
            app.policies.forget(&crate::services::policy::Resource::Vod(&id));
            tracing::info!(vod = %id.0, "VOD archived");
        }
        Ok(Json(super::viewers::vod_record(&app, &row).await?))
    }
}
