//! `POST /vod` with `clip` (CONTRACT: Clips, downloads, thumbnails): the clip's record, queued
//! with its job at once; the clip workers cut it (`media::vod::clip`).

use crate::api::body::Fields;
use crate::api::error::{ApiError, ApiResult};
use crate::api::ApiState;
use crate::domain::clip::ClipOf;
use crate::domain::new_id;
use crate::domain::time::now_ms;
use crate::domain::vod::{AudioCodec, OutputFormat, VideoCodec, VodStatus};
use crate::store::vods::{JobKind, VodRow};
use crate::store::Db;

/// Longest source a clip is cut from, in seconds (the document's bound on the range).
const MAX_SECONDS: i64 = 7 * 24 * 3600;

/// The `clip` object of the body.
pub(super) fn read(f: &mut Fields) -> ClipOf {
    ClipOf {
        vod_id: f.string("vodId", 1..=64),
        start_sec: f.number("startSec", 0..=MAX_SECONDS).unwrap_or(0.0),
        end_sec: f.number("endSec", 0..=MAX_SECONDS).unwrap_or(0.0),
    }
}

/// Inserts the clip `clip` of the project as `queued`, with its job; wakes the workers.
pub(super) async fn create(
    app: &ApiState,
    project_id: &str,
    (name, filename): (String, String),
    clip: ClipOf,
    drm: Option<bool>,
) -> ApiResult<VodRow> {
    let source = app
        .db
        .vod(project_id, &clip.vod_id)
        .await?
        .ok_or_else(|| ApiError::not_found("clip.vodId names no VOD of this project"))?;
    if source.archived_at.is_some() {
        return Err(ApiError::conflict("clip.vodId names an archived VOD"));
    }
    if source.status() != VodStatus::Complete {
        return Err(ApiError::conflict(format!(
            "clip.vodId names a VOD that is {}, not complete",
            source.status().as_str()
        )));
    }
    if let Some((field, problem)) = clip.problem(source.duration.unwrap_or(0.0)) {
        return Err(ApiError::bad_request(vec![format!("{field} {problem}")]));
    }
    let now = now_ms();
    let row = VodRow {
        id: new_id(),
        project_id: project_id.to_string(),
        name,
        filename,
        output_format: OutputFormat::Hls.as_str().to_string(),
        video_codec: VideoCodec::H264.as_str().to_string(),
        audio_codec: AudioCodec::Aac.as_str().to_string(),
        aspect_ratio: source.aspect_ratio.clone(),
        ladder: "[]".into(),
        status: VodStatus::Queued.as_str().to_string(),
        source_size: None,
        duration: None,
        source_info: None,
        renditions: None,
        progress: 0,
        error: None,
        // A clip of signed or encrypted media is signed or encrypted too (its own key).
        signed_playback: source.signed_playback,
        drm_enabled: i64::from(source.drm_enabled == 1 || drm.unwrap_or(false)),
        upload_expires_at: now,
        created_at: now,
        updated_at: now,
        completed_at: None,
        archived_at: None,
        stream_id: None,
        session_id: None,
        clip_of: Some(serde_json::to_string(&clip).map_err(ApiError::internal)?),
    };
    let mut tx = app.db.begin_write().await?;
    Db::insert_vod(&mut tx, &row).await?;
    Db::insert_job_of(&mut tx, JobKind::Clip, &row.id, project_id, now, now).await?;
    tx.commit().await?;
    app.vods.wake().notify_waiters();
    Ok(row)
}
