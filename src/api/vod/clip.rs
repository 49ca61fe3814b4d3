//! `POST /vod` with `clip` (CONTRACT: Clips, downloads, thumbnails): the clip's record, queued
//! with its job at once; the clip workers cut it (`media::vod::clip`). A clip of a VOD may be
//! cut by any node; a clip of a live stream's DVR window is asked of the node holding the push,
//! and cut there. Instants of a stream that lie in one of its complete recordings instead make
//! a clip of that recording, by seconds.

use crate::api::body::Fields;
use crate::api::error::{ApiError, ApiResult};
use crate::api::ApiState;
use crate::domain::clip::{seconds_at, window_problem, ClipOf, ClipOfStream, ClipOfVod};
use crate::domain::new_id;
use crate::domain::time::now_ms;
use crate::domain::vod::VodStatus;
use crate::media::hls::master::read_variants;
use crate::media::hls::vod as hls;
use crate::storage::vod_prefix;
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
    // A DVR window is cut by the node that holds it. Instants outside it may lie in one of the
    // stream's recordings: the clip is then that recording's range in seconds.
    let (clip, node, (signed, encrypted)) = match clip {
        ClipOf::Vod(c) => {
            let flags = of_vod(app, project_id, &c).await?;
            (ClipOf::Vod(c), None, flags)
        }
        ClipOf::Stream(c) => match of_stream(app, project_id, &c).await {
            Ok(flags) => (ClipOf::Stream(c), Some(app.streams.node_id().to_string()), flags),
            Err(live) => match in_recording(app, project_id, &c).await? {
                Some(range) => {
                    let flags = of_vod(app, project_id, &range).await?;
                    (ClipOf::Vod(range), None, flags)
                }
                None => return Err(live),
            },
        },
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

/// How long a read of a recording's playlists may take.
const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// The range of `clip`'s instants in one of the stream's complete recordings, in seconds of its
/// timeline (its playlists' `EXT-X-PROGRAM-DATE-TIME`), if one holds both.
async fn in_recording(app: &ApiState, project_id: &str, clip: &ClipOfStream) -> ApiResult<Option<ClipOfVod>> {
    let Some((start, end)) = clip.instants() else { return Ok(None) };
    let (start, end) = (start.timestamp_millis(), end.timestamp_millis());
    let complete = Some(VodStatus::Complete.as_str());
    let recordings = app.db.list_vods(project_id, complete, Some(&clip.stream_id), false, 0, 100).await?;
    // Those that ran over the range (a recording's record is created as its session starts).
    let candidates = recordings.items.into_iter().filter(|v| {
        let ran = v.created_at - 60_000..=v.completed_at.unwrap_or(v.updated_at) + 60_000;
        ran.contains(&start) && ran.contains(&end)
    });
    for vod in candidates {
        let prefix = vod_prefix(&vod.id);
        let Some(master) = read_text(app, &format!("{prefix}/master.m3u8")).await? else { continue };
        let Some((uri, _, _)) = read_variants(&master).into_iter().next() else { continue };
        let Some(playlist) = read_text(app, &format!("{prefix}/{uri}")).await? else { continue };
        let Some(listed) = hls::read(&playlist) else { continue };
        let dated: Vec<(Option<i64>, f64)> = listed.iter().map(|l| (l.date, l.duration)).collect();
        if let (Some(from), Some(to)) = (seconds_at(&dated, start), seconds_at(&dated, end)) {
            let ms = |s: f64| (s * 1000.0).round() / 1000.0;
            return Ok(Some(ClipOfVod { vod_id: vod.id, start_sec: ms(from), end_sec: ms(to) }));
        }
    }
    Ok(None)
}

/// A text object of the store, or `None` when it is not there; 503 when the store fails.
async fn read_text(app: &ApiState, key: &str) -> ApiResult<Option<String>> {
    match tokio::time::timeout(READ_DEADLINE, app.storage.get(key, None)).await {
        Ok(Ok(b)) => Ok(b.map(|b| String::from_utf8_lossy(&b).into_owned())),
        Ok(Err(e)) => Err(ApiError::unavailable(format!("storage: {e}"))),
        Err(_) => Err(ApiError::unavailable("storage: no answer in time")),
    }
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
            "clip.streamId names a stream whose DVR window is not on this node (it is not live, or \
             another node holds its push: ask that node's API), and none of its complete \
             recordings holds the range",
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
