//! VOD playback from storage: `/vod/<id>/master.m3u8`, `/vod/<id>/thumb.jpg`, `/vod/<id>/key`
//! (an encrypted VOD's key) and `/vod/<id>/<rendition>/{index.m3u8, init.mp4, s<n>.m4s}` (a
//! recording's initialization sections are `init<generation>.mp4`), with
//! byte ranges and cache headers.
//! Only a complete, unarchived VOD plays (CONTRACT: VOD — an archived VOD's playback is 404).

use std::sync::Arc;

use poem::http::StatusCode;
use poem::web::{Data, Path};
use poem::{handler, Request, Response};

use super::origin::{playlist, ranged, status, MEDIA_CACHE, PLAYLIST_TYPE};
use super::{authorize, Origin, Resource};
use crate::storage::vod_prefix;

/// Playlists may be cached briefly: archiving a VOD takes effect within this.
const PLAYLIST_CACHE: &str = "public, max-age=60";

#[handler]
pub async fn top(
    req: &Request,
    app: Data<&Arc<Origin>>,
    Path((id, file)): Path<(String, String)>,
) -> Response {
    if file == "key" {
        return super::origin::content_key(req, &app, &Resource::Vod(&id)).await;
    }
    if file != "master.m3u8" && file != "thumb.jpg" {
        return status(StatusCode::NOT_FOUND, "no such file");
    }
    serve(req, &app, &id, &file).await
}

#[handler]
pub async fn media(
    req: &Request,
    app: Data<&Arc<Origin>>,
    Path((id, rendition, file)): Path<(String, String, String)>,
) -> Response {
    let name_ok = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    };
    // `init<g>.mp4`: a recording's initialization section of push generation g.
    let init = file
        .strip_prefix("init")
        .and_then(|f| f.strip_suffix(".mp4"))
        .is_some_and(|g| g.chars().all(|c| c.is_ascii_digit()));
    let media_file = file == "index.m3u8" || init || file.ends_with(".m4s");
    if !(name_ok(&rendition) && name_ok(&file) && media_file) {
        return status(StatusCode::NOT_FOUND, "no such file");
    }
    serve(req, &app, &id, &format!("{rendition}/{file}")).await
}

async fn serve(req: &Request, app: &Origin, id: &str, file: &str) -> Response {
    // A VOD plays only while complete and not archived: the policy says so.
    let grant = match authorize(app, req, &Resource::Vod(id)).await {
        Ok(grant) => grant,
        Err(r) => return r.response(),
    };
    let bytes = match app.storage.get(&format!("{}/{file}", vod_prefix(id)), None).await {
        Ok(Some(b)) => b,
        Ok(None) => return status(StatusCode::NOT_FOUND, "no such file"),
        Err(e) => {
            tracing::error!(error = %e, "playback: reading storage");
            return status(StatusCode::BAD_GATEWAY, "storage unavailable");
        }
    };
    let is_playlist = file.ends_with(".m3u8");
    // Only a session's playlist is rewritten; everything else is served as stored, ranges too.
    if is_playlist && grant.child_token.is_some() {
        let Ok(text) = String::from_utf8(bytes.to_vec()) else {
            return status(StatusCode::INTERNAL_SERVER_ERROR, "damaged playlist");
        };
        return playlist(text, PLAYLIST_CACHE, &grant);
    }
    let (content_type, cache) = if is_playlist {
        (PLAYLIST_TYPE, PLAYLIST_CACHE)
    } else if file.ends_with(".jpg") {
        ("image/jpeg", PLAYLIST_CACHE)
    } else {
        ("video/mp4", MEDIA_CACHE)
    };
    ranged(req.headers(), req.method(), bytes, content_type, cache)
}
