//! MP4 downloads of a VOD (CONTRACT: Clips, downloads, thumbnails): `mp4` on create and on
//! `PATCH /vod/<id>`, and what the record and a playback ticket say of them. The download
//! workers make them (`media::vod::downloads`); the origin serves them with byte ranges.

use poem_openapi::Object;

use crate::api::body::{Fields, FromJsonBody};
use crate::api::error::{ApiError, ApiResult};
use crate::api::ApiState;
use crate::domain::time::now_ms;
use crate::domain::vod::{DownloadsStatus, MadeDownload, VodStatus};
use crate::media::vod::downloads::download_prefix;
use crate::playback::rewrite::with_token;
use crate::store::vods::VodRow;
use crate::store::Db;

/// A progressive download of a VOD.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct Download {
    /// A video rendition's name (with the audio beside it), or `audio` for the M4A.
    pub rendition: String,
    /// `{playback_base}/vod/<id>/download/<rendition>.mp4` (`audio.m4a`); with signed playback,
    /// add a playback ticket's token (a ticket lists them signed).
    pub url: String,
    /// Bytes.
    pub size: i64,
}

/// A complete VOD's downloads at `base` (its playback folder), signed with `token` when given.
pub fn downloads_of(row: &VodRow, base: &str, token: Option<&str>) -> Vec<Download> {
    of_row(row, base, token).0
}

/// What a record says of its downloads: the list (empty until made) and where they stand (null
/// when not asked for).
pub(super) fn of_row(
    row: &VodRow,
    base: &str,
    token: Option<&str>,
) -> (Vec<Download>, Option<DownloadsStatus>) {
    let made: Option<Vec<MadeDownload>> = row.downloads.as_deref().and_then(|j| serde_json::from_str(j).ok());
    let status = DownloadsStatus::of(row.mp4 == 1, made.is_some(), row.downloads_error.is_some());
    let list = made
        .unwrap_or_default()
        .into_iter()
        .map(|d| {
            let url = format!("{base}/download/{}", d.file);
            Download {
                rendition: d.rendition,
                url: match token {
                    Some(t) => with_token(&url, t),
                    None => url,
                },
                size: d.size as i64,
            }
        })
        .collect();
    (list, status)
}

/// Why a VOD cannot have downloads now, if it cannot.
fn refusal(row: &VodRow) -> Option<&'static str> {
    if row.drm_enabled == 1 {
        return Some("downloads are not made of an encrypted (drmEnabled) VOD");
    }
    if row.archived_at.is_some() {
        return Some("this VOD is archived");
    }
    match row.status() {
        VodStatus::Failed | VodStatus::Cancelled => Some("this VOD has no media to download"),
        _ => None,
    }
}

/// Body of `PATCH /vod/<id>`.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase", example)]
pub struct UpdateVod {
    /// 1–100 characters.
    pub name: Option<String>,
    /// Progressive MP4 downloads of each rendition and an M4A: made once the VOD is complete
    /// (`downloadsStatus` turns `ready`). False removes them.
    pub mp4: Option<bool>,
}

impl FromJsonBody for UpdateVod {
    fn from_fields(f: &mut Fields) -> Self {
        UpdateVod { name: f.opt_string("name", 1..=100), mp4: f.opt_bool("mp4") }
    }
}

/// Applies `body` to VOD `id` of the project: its name, and downloads on (queued at once for a
/// complete VOD, else when it completes) or off (forgotten, and their files removed). 409 for
/// downloads of a VOD that cannot have them.
pub(super) async fn update(app: &ApiState, project_id: &str, id: &str, body: UpdateVod) -> ApiResult<VodRow> {
    let now = now_ms();
    let mut tx = app.db.begin_write().await?;
    let mut row = Db::vod_in(&mut tx, project_id, id).await?.ok_or_else(super::vod_not_found)?;
    if body.mp4 == Some(true) {
        if let Some(why) = refusal(&row) {
            return Err(ApiError::conflict(why));
        }
    }
    if let Some(name) = body.name {
        row.name = name;
        row.updated_at = now;
        Db::update_vod(&mut tx, &row).await?;
    }
    let removed = body.mp4 == Some(false) && row.mp4 == 1;
    let mut queued = false;
    if let Some(on) = body.mp4 {
        Db::set_vod_mp4(&mut tx, id, on, now).await?;
        // Read again: a transcode that completed meanwhile is seen (it queued the job then).
        row = Db::vod_in(&mut tx, project_id, id).await?.ok_or_else(super::vod_not_found)?;
        if on && row.status() == VodStatus::Complete {
            queued = Db::queue_downloads(&mut tx, id, project_id, now).await?;
        }
    }
    tx.commit().await?;
    if queued {
        app.vods.wake().notify_waiters();
    }
    if removed {
        if let Err(e) = app.storage.delete_prefix(&download_prefix(id), &[]).await {
            tracing::warn!(vod = %id, error = %e, "removing downloads");
        }
    }
    Ok(row)
}

/// 409 when a new VOD asks for downloads it cannot have: encrypted media (`drmEnabled`, or a
/// clip of an encrypted source), which the body's schema cannot rule out.
pub(super) fn check_create(mp4: Option<bool>, encrypted: bool) -> ApiResult<()> {
    if mp4 == Some(true) && encrypted {
        return Err(ApiError::conflict("mp4 cannot be true for encrypted (drmEnabled) media"));
    }
    Ok(())
}
