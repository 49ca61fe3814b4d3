//! `POST /vod` with `clip` (CONTRACT: Clips, downloads, thumbnails): the clip's record, queued
//! with its job at once; the clip workers cut it (`media::vod::clip`). A clip of a VOD may be
//! cut by any node; a clip of a live stream's DVR window is asked of the node holding the push,
//! and cut there.

use crate::api::body::Fields;
use crate::api::error::{ApiError, ApiResult};
use crate::api::ApiState;
use crate::domain::clip::{window_problem, ClipOf, ClipOfStream, ClipOfVod};
use crate::domain::new_id;
use crate::domain::time::now_ms;
use crate::domain::vod::VodStatus;
use crate::store::vods::{JobKind, VodRow};
use crate::store::Db;

/// Longest source a clip is cut from, in seconds (the document's bound on the range).
const MAX_SECONDS: i64 = 7 * 24 * 3600;

/// The `clip` object of the body: a VOD's range, or a live stream's.
pub(super) fn read(f: &mut Fields) -> Option<ClipOf> {
    let vod = |f: &mut Fields| {
        ClipOf::Vod(ClipOfVod {
            vod_id: f.string("vodId", 1..=64),
            start_sec: f.number("startSec", 0..=MAX_SECONDS).unwrap_or(0.0),
            end_sec: f.number("endSec", 0..=MAX_SECONDS).unwrap_or(0.0),
        })
    };
    let instant = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|_| s.to_string())
            .map_err(|_| "must be an ISO 8601 instant such as 2026-12-06T10:00:00.000Z".to_string())
    };
    let stream = |f: &mut Fields| {
        let stream_id = f.string("streamId", 1..=64);
        let start = f.parsed("start", instant).unwrap_or_default();
        f.document("start", |r| r.formats = vec!["date-time"]);
        let end = f.parsed("end", instant).unwrap_or_default();
        f.document("end", |r| r.formats = vec!["date-time"]);
        ClipOf::Stream(ClipOfStream { stream_id, start, end })
    };
    f.opt_one_of("clip", &[("ClipOfVod", "vodId", &vod), ("ClipOfStream", "streamId", &stream)])
}

/// Inserts the clip `clip` of the project as `queued`, with its job; wakes the workers.
pub(super) async fn create(
    app: &ApiState,
    project_id: &str,
    names: (String, String),
    clip: ClipOf,
    (drm, mp4): (Option<bool>, Option<bool>),
) -> ApiResult<VodRow> {
    // A DVR window is cut by the node that holds it.
    let (node, (signed, encrypted)) = match &clip {
        ClipOf::Vod(c) => (None, of_vod(app, project_id, c).await?),
        ClipOf::Stream(c) => (Some(app.streams.node_id().to_string()), of_stream(app, project_id, c).await?),
    };
    let encrypted = encrypted || drm.unwrap_or(false);
    super::downloads::check_create(mp4, encrypted)?;
    let now = now_ms();
    let row = VodRow {
        // A clip of signed or encrypted media is signed or encrypted too (its own key).
        signed_playback: i64::from(signed),
        drm_enabled: i64::from(encrypted),
        mp4: i64::from(mp4.unwrap_or(false)),
        clip_of: Some(serde_json::to_string(&clip).map_err(ApiError::internal)?),
        ..VodRow::new(new_id(), project_id.to_string(), names, VodStatus::Queued, now)
    };
    let mut tx = app.db.begin_write().await?;
    Db::insert_vod(&mut tx, &row).await?;
    Db::insert_job_of(&mut tx, (JobKind::Clip, node.as_deref()), &row.id, project_id, now, now).await?;
    tx.commit().await?;
    app.vods.wake().notify_waiters();
    Ok(row)
}

/// A VOD's range: the source is complete, not archived, and holds it. Whether the source plays
/// signed and is encrypted (its clip is too).
async fn of_vod(app: &ApiState, project_id: &str, clip: &ClipOfVod) -> ApiResult<(bool, bool)> {
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
    Ok((source.signed_playback == 1, source.drm_enabled == 1))
}

/// A live stream's range: the stream's DVR window, held by this node, holds it. Whether the
/// stream plays signed and is encrypted.
async fn of_stream(app: &ApiState, project_id: &str, clip: &ClipOfStream) -> ApiResult<(bool, bool)> {
    let stream = app
        .db
        .stream(project_id, &clip.stream_id)
        .await?
        .ok_or_else(|| ApiError::not_found("clip.streamId names no stream of this project"))?;
    let Some(channel) = app.channels.get(&clip.stream_id) else {
        return Err(ApiError::conflict(
            "clip.streamId names a stream whose DVR window is not on this node: it is not live, or \
             another node holds its push (ask that node's API)",
        ));
    };
    if app.settings.transcode_workers == 0 {
        return Err(ApiError::conflict(
            "clip.streamId: this node runs no clip worker (SLUICE_TRANSCODE_WORKERS=0) to cut its DVR window",
        ));
    }
    if channel.config().dvr.is_none() {
        return Err(ApiError::conflict("clip.streamId names a stream that keeps no DVR window (dvrEnabled)"));
    }
    let Some(window) = channel.dvr_window() else {
        return Err(ApiError::conflict("clip.streamId: the DVR window holds no whole segment yet"));
    };
    // The reader checked both instants.
    let Some(range) = clip.instants() else {
        return Err(ApiError::bad_request(vec!["clip.start is not an instant".into()]));
    };
    if let Some((field, problem)) = window_problem(range, window) {
        return Err(ApiError::bad_request(vec![format!("{field} {problem}")]));
    }
    Ok((stream.signed_playback == 1, channel.config().key.is_some()))
}
