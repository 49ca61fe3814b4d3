//! VOD playback from storage: `/vod/<id>/master.m3u8`, `/vod/<id>/thumb.jpg` (also at any time:
//! [`super::stills`]), `/vod/<id>/storyboard.{vtt,jpg}` ([`super::storyboard`]), `/vod/<id>/key`
//! (an encrypted VOD's key), `/vod/<id>/<rendition>/{index.m3u8, init.mp4, s<n>.m4s}` (a
//! recording's initialization sections are `init<generation>.mp4`) and the MP4 downloads
//! `/vod/<id>/download/{<rendition>.mp4, audio.m4a}`, with
//! byte ranges and cache headers. Media and thumbnails are streamed from storage, only the
//! range asked for read ([`super::ranges`]); playlists are read whole.
//! Only a complete, unarchived VOD plays (CONTRACT: VOD — an archived VOD's playback is 404).

use std::sync::Arc;

use poem::http::StatusCode;
use poem::web::{Data, Path};
use poem::{handler, Request, Response};

use super::origin::{playlist, status, MEDIA_CACHE, PLAYLIST_TYPE};
use super::ranges::{self, ranged};
use super::rewrite::sign_playlist;
use super::{authorize, viewing, Grant, Origin, Resource};
use crate::storage::vod_prefix;

/// Playlists may be cached briefly: archiving a VOD takes effect within this.
const PLAYLIST_CACHE: &str = "public, max-age=60";
/// How long the read of a media playlist for a segment's duration may take (off the request).
const PLAYLIST_READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);
/// Playlists naming one viewer's playback session or token.
const SESSION_CACHE: &str = "private, no-store";

#[handler]
pub async fn top(
    req: &Request,
    app: Data<&Arc<Origin>>,
    Path((id, file)): Path<(String, String)>,
) -> Response {
    if file == "key" {
        return super::origin::content_key(req, &app, &Resource::Vod(&id)).await;
    }
    if file == "storyboard.vtt" || file == "storyboard.jpg" {
        return super::storyboard::serve(req, &app, &id, &file).await;
    }
    if file != "master.m3u8" && file != "thumb.jpg" {
        return status(StatusCode::NOT_FOUND, "no such file");
    }
    if file == "thumb.jpg" {
        // A picture at a time or width: made (and kept) on demand.
        match super::stills::StillQuery::parse(req.uri().query().unwrap_or("")) {
            Ok(Some(ask)) => return super::stills::vod(req, &app, &id, ask).await,
            Ok(None) => {}
            Err(message) => return super::stills::bad_request(message),
        }
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
    // `download/<rendition>.mp4` and `download/audio.m4a`: the MP4 downloads.
    let download = rendition == "download" && (file.ends_with(".mp4") || file == "audio.m4a");
    let media_file = file == "index.m3u8" || init || file.ends_with(".m4s") || download;
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
    let key = format!("{}/{file}", vod_prefix(id));
    if !file.ends_with(".m3u8") {
        // Media and the thumbnail: only the range asked for is read, and streamed.
        let stored = match ranges::stored(req, &app.storage, &key).await {
            Ok(stored) => stored,
            Err(r) => return r,
        };
        session(app, req, id, file);
        let (content_type, cache) = match file {
            _ if file.ends_with(".jpg") => ("image/jpeg", PLAYLIST_CACHE),
            // Turning downloads off removes them: kept no longer than a playlist.
            _ if file.ends_with(".m4a") => ("audio/mp4", PLAYLIST_CACHE),
            _ if file.starts_with("download/") => ("video/mp4", PLAYLIST_CACHE),
            _ => ("video/mp4", MEDIA_CACHE),
        };
        return stored.answer(content_type, cache);
    }
    // Playlists are small, and a session's is rewritten: read whole.
    let bytes = match ranges::in_time(&key, app.storage.get(&key, None)).await {
        Ok(Some(b)) => b,
        Ok(None) => return status(StatusCode::NOT_FOUND, "no such file"),
        Err(e) => {
            tracing::error!(error = %e, "playback: reading storage");
            return status(StatusCode::BAD_GATEWAY, "storage unavailable");
        }
    };
    let vs = session(app, req, id, file);
    // Only a session's playlist is rewritten; everything else is served as stored, ranges too.
    if grant.child_token.is_some() || vs.is_some() {
        let Ok(text) = String::from_utf8(bytes.to_vec()) else {
            return status(StatusCode::INTERNAL_SERVER_ERROR, "damaged playlist");
        };
        if let (Some(_), Some((rendition, _))) = (&vs, file.split_once('/')) {
            app.viewers.learn_durations(&format!("{id}/{rendition}"), viewing::segment_durations(&text));
        }
        // The token first, then the session: `index.m3u8?token=…&vs=…`.
        let text = match &grant.child_token {
            Some(token) => sign_playlist(&text, token),
            None => text,
        };
        let text = match &vs {
            Some(vs) => viewing::with_session(&text, vs),
            None => text,
        };
        return playlist(text, SESSION_CACHE, &Grant { child_token: None });
    }
    ranged(req.headers(), req.method(), bytes, PLAYLIST_TYPE, PLAYLIST_CACHE)
}

/// The viewer's playback session of `file`, once it was found: a viewer's master starts one (a
/// view), the files below it carry it, and a segment it fetches counts as watched.
fn session(app: &Origin, req: &Request, id: &str, file: &str) -> Option<String> {
    let vs = if file == "master.m3u8" {
        let vs = viewing::mint(app, req, &format!("vod:{id}"));
        if vs.is_some() {
            app.viewers.vod_viewed(id);
        }
        vs
    } else {
        viewing::vs_of(req.uri().query().unwrap_or("")).map(str::to_string)
    };
    if let (Some(vs), Some((rendition, segment))) = (&vs, file.split_once('/')) {
        if segment.ends_with(".m4s") {
            watched(app, req, id, (rendition, segment), vs);
        }
    }
    vs
}

/// A segment fetched by VOD session `vs`: its duration goes to the VOD's watch time, once per
/// session and position (`s<n>.m4s`: the renditions share their segments' times), for the
/// video renditions only (the audio plays beside them) and from a fetch of the segment's start
/// (a later byte range of it adds nothing).
fn watched(app: &Origin, req: &Request, id: &str, (rendition, segment): (&str, &str), vs: &str) {
    let from_start = req
        .headers()
        .get(poem::http::header::RANGE)
        .and_then(|r| r.to_str().ok())
        .is_none_or(|r| r.trim().starts_with("bytes=0-"));
    if rendition == "audio" || !from_start {
        return;
    }
    // A session this service did not mint costs no playlist read.
    let Some(session) = app.viewers.vod_session(id, vs) else { return };
    let Some(index) =
        segment.strip_prefix('s').and_then(|s| s.strip_suffix(".m4s")).and_then(|n| n.parse().ok())
    else {
        return;
    };
    let key = format!("{id}/{rendition}");
    if let Some(duration) = app.viewers.segment_duration(&key, segment) {
        if let Some(d) = duration {
            app.viewers.vod_watched(&session, index, d);
        }
        return;
    }
    // Not learnt here (another node served the playlist, or this one restarted): read in a task
    // of its own with a deadline, so that the viewer's segment never waits on the store twice.
    let (viewers, storage) = (app.viewers.clone(), app.storage.clone());
    let (path, segment) = (format!("{}/{rendition}/index.m3u8", vod_prefix(id)), segment.to_string());
    tokio::spawn(async move {
        let read = tokio::time::timeout(PLAYLIST_READ_DEADLINE, storage.get(&path, None)).await;
        let Ok(Ok(Some(bytes))) = read else { return };
        let durations = viewing::segment_durations(&String::from_utf8_lossy(&bytes));
        let d = durations.iter().find(|(f, _)| *f == segment).map(|(_, d)| *d);
        viewers.learn_durations(&key, durations);
        if let Some(d) = d {
            viewers.vod_watched(&session, index, d);
        }
    });
}
