//! LL-HLS origin routes (RFC 8216bis 6.2.5): the master playlist, media playlists with
//! blocking reload (`_HLS_msn`, `_HLS_part`) and delta updates (`_HLS_skip`), and the media
//! (init sections, parts, segments) straight from the stream's in-memory channel.
//!
//! Paths: `/live/<id>/master.m3u8`, `/live/<id>/<session>/<rendition>/index.m3u8`,
//! `/live/<id>/<session>/<rendition>/<file>` and `/live/<id>/key` (`drmEnabled`). The session
//! names one channel, so a later push never serves different bytes under a URL a CDN cached as
//! immutable. A signed session's master lists its children under `/live/<id>/t/<token>/…`
//! (the same paths below a token segment), so everything a media playlist names relative to it
//! carries the token and the media playlist itself is served as rendered, shared with every
//! viewer; `?token=` in the query still works, with playlists rewritten per request.
//!
//! Responses share the channel's bytes (reference-counted); no lock is held while a body is
//! written, so a slow viewer holds up nobody else.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use poem::http::{header, HeaderMap, HeaderValue, StatusCode};
use poem::web::{Data, Path};
use poem::{get, handler, patch, post, Body, Request, Response, Route};

use super::ranges::ranged;
use super::relay::Kind;
use super::rewrite::{sign_playlist, sign_rendered, tokened_master};
use super::{authorize_carried, is_relayed, viewing, Grant, Origin, Resource};
use crate::media::live::channel::{Channel, Miss, PlaylistQuery, Rendered};
use crate::services::nodes::Holder;
use crate::services::policy::KeyError;

pub(super) const PLAYLIST_TYPE: &str = "application/vnd.apple.mpegurl";
/// Plain playlist reloads: a CDN may serve them for a second.
const PLAYLIST_CACHE: &str = "public, max-age=1";
/// Blocking requests name a future playlist: once answered it does not change for a while
/// (Apple's LL-HLS guidance: at least a few target durations).
const BLOCKING_CACHE: &str = "public, max-age=6";
/// A blocking request answered at once, its part there already: the client may ask the same
/// again for what comes next, and a kept answer would hide every newer part from it (video.js
/// saw none for 6 s after a push ended: `Rendered::held`).
pub(super) const AT_ONCE_CACHE: &str = "no-cache";
pub(super) const MEDIA_CACHE: &str = "public, max-age=31536000, immutable";
/// Playlists rewritten for one session.
const SIGNED_PLAYLIST_CACHE: &str = "private, no-store";
/// Content keys.
const KEY_CACHE: &str = "private, no-store";
/// How long the master waits for a push's first media.
const MASTER_WAIT: Duration = Duration::from_secs(10);
/// The longest a relayed request may wait on the holding node (its master wait, or three
/// target durations of a blocking reload, whichever it is).
pub(super) const RELAY_WAIT: Duration = Duration::from_secs(20);

mod live_first;
pub use live_first::LiveFirst;

pub fn routes() -> Route {
    Route::new()
        .at("/live/:id/master.m3u8", get(master).options(preflight))
        .at("/live/:id/key", get(live_key).options(preflight))
        .at("/live/:id/thumb.jpg", get(live_thumb).options(preflight))
        .at("/live/:id/", get(super::demo::page))
        .at("/live/:id/whep", post(super::whep::offer).options(super::whep::preflight))
        .at(
            "/live/:id/whep/:session",
            patch(super::whep::trickle).delete(super::whep::end).options(super::whep::preflight),
        )
        .at("/live/:id/:session/:rendition/:file", get(media).options(preflight))
        // A signed session's paths: the same, below its token (see the module's doc).
        .at("/live/:id/t/:token/key", get(live_key_under_token).options(preflight))
        .at("/live/:id/t/:token/:session/:rendition/:file", get(media_under_token).options(preflight))
        .at("/vod/:id/:file", get(super::vod::top).options(preflight))
        .at("/vod/:id/:rendition/:file", get(super::vod::media).options(preflight))
}

/// A live media path's segments: stream id, session, rendition, file.
type LivePath<'a> = (&'a str, &'a str, &'a str, &'a str);

/// Why a request gets no media.
#[derive(Debug)]
pub(crate) enum Refused {
    Denied(super::Deny),
    NotLive,
    /// No such stream or VOD (or a VOD that does not play: not complete, archived).
    NotFound,
    /// Its policy was never loaded here and the database did not answer in time.
    Unavailable,
}

impl Refused {
    pub(super) fn response(self) -> Response {
        match self {
            Refused::Denied(deny) => Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header("X-Deny-Reason", deny.reason())
                .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
                .header(header::ACCESS_CONTROL_EXPOSE_HEADERS, "X-Deny-Reason")
                .body("playback refused"),
            Refused::NotLive => status(StatusCode::NOT_FOUND, "stream is not live"),
            Refused::NotFound => status(StatusCode::NOT_FOUND, "not found"),
            Refused::Unavailable => {
                let mut resp = status(StatusCode::SERVICE_UNAVAILABLE, "unavailable; retry later");
                resp.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("2"));
                resp
            }
        }
    }
}

/// Where a live stream's media comes from: the channel of a push held here, or the node that
/// holds it ([`super::relay`]).
pub(super) enum Source {
    Local(Arc<Channel>),
    Remote(Holder),
}

/// How a request carries its token, and so how the playlists it gets name their children.
#[derive(Clone, Copy)]
pub(super) enum Carried<'a> {
    /// In the query (`?token=`), or not at all: a playlist served to a signed session gets the
    /// token spliced into each URI.
    Query,
    /// In the path (`t/<token>/`): URIs below it inherit the token, so a media playlist is
    /// served as rendered.
    Path(&'a str),
}

impl<'a> Carried<'a> {
    /// The token the path carries, if it is there.
    fn path_token(self) -> Option<&'a str> {
        match self {
            Carried::Path(token) => Some(token),
            Carried::Query => None,
        }
    }
}

/// The source of a stream, after the authorisation step.
pub(super) async fn source(
    app: &Origin,
    req: &Request,
    id: &str,
    carried: Carried<'_>,
) -> Result<(Source, Grant), Refused> {
    let grant = authorize_carried(app, req, &Resource::Stream(id), carried.path_token()).await?;
    if let Some(channel) = app.channels.get(id) {
        return Ok((Source::Local(channel), grant));
    }
    // Boxed, as `relayed`: the futures of the cluster's paths would otherwise sit inside every
    // local request's.
    match Box::pin(app.relay.holder(id, is_relayed(app, req))).await {
        Some(holder) => Ok((Source::Remote(holder), grant)),
        None => Err(Refused::NotLive),
    }
}

/// Serves what the node holding the stream answered for `path`, as this node would serve it.
async fn relayed(
    app: &Origin,
    req: &Request,
    id: &str,
    (holder, grant): (&Holder, &Grant),
    path: &str,
    (kind, listed): (Kind, Listed<'_>),
) -> Response {
    let answer = app.relay.get(holder, path, kind, RELAY_WAIT).await;
    if !answer.ok() {
        let code = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
        return Response::builder()
            .status(code)
            .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
            .header(header::CACHE_CONTROL, "no-store")
            .content_type("text/plain; charset=utf-8")
            .body(answer.body);
    }
    app.per_stream.served(id, answer.body.len());
    match kind {
        Kind::Media => ranged(req.headers(), req.method(), answer.body, "video/mp4", MEDIA_CACHE),
        Kind::Playlist | Kind::Blocking => {
            let cache = match kind {
                Kind::Blocking if !answer.kept() => AT_ONCE_CACHE,
                Kind::Blocking => BLOCKING_CACHE,
                _ => PLAYLIST_CACHE,
            };
            match (&grant.child_token, listed) {
                (None, Listed::Media(_)) | (Some(_), Listed::Media(Carried::Path(_))) => {
                    playlist_response(answer.body, cache, grant)
                }
                (_, Listed::Master(vs)) => {
                    master_playlist(String::from_utf8_lossy(&answer.body).into_owned(), cache, grant, vs)
                }
                (Some(_), Listed::Media(Carried::Query)) => {
                    playlist(String::from_utf8_lossy(&answer.body).into_owned(), cache, grant)
                }
            }
        }
    }
}

pub(super) fn status(code: StatusCode, text: &'static str) -> Response {
    Response::builder()
        .status(code)
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::CACHE_CONTROL, "no-store")
        .content_type("text/plain; charset=utf-8")
        .body(text)
}

/// A playlist; with a session token, every URI it lists carries the token and no shared cache
/// keeps it (it names one viewer's session).
pub(super) fn playlist(text: String, cache: &'static str, grant: &Grant) -> Response {
    let text = match &grant.child_token {
        Some(token) => sign_playlist(&text, token),
        None => text,
    };
    playlist_response(Bytes::from(text), cache, grant)
}

/// A live master playlist; with a session token, its children are named under the token path,
/// and with a playback session (`vs`) they carry it: then no shared cache keeps it.
fn master_playlist(text: String, cache: &'static str, grant: &Grant, vs: Option<&str>) -> Response {
    let text = match &grant.child_token {
        Some(token) => tokened_master(&text, token),
        None => text,
    };
    let (text, cache) = match vs {
        Some(vs) => (super::viewing::with_session(&text, vs), SIGNED_PLAYLIST_CACHE),
        None => (text, cache),
    };
    playlist_response(Bytes::from(text), cache, grant)
}

/// Which playlist an answer is, for how a signed session's copy names its children.
#[derive(Clone, Copy)]
enum Listed<'a> {
    /// The master: its children go under the session's token path and carry the viewer's
    /// playback session.
    Master(Option<&'a str>),
    /// A media playlist reached as the request carried its token.
    Media(Carried<'a>),
}

/// A live media playlist as the channel rendered it for its current version: shared as it is
/// (unsigned, or reached under a token path), or with a session token spliced in after each
/// URI (a token in the query).
fn rendered_playlist(r: Rendered, cache: &'static str, grant: &Grant, carried: Carried<'_>) -> Response {
    let body = match (&grant.child_token, carried) {
        (Some(token), Carried::Query) => Bytes::from(sign_rendered(&r.text, &r.uri_ends, token)),
        _ => r.text,
    };
    playlist_response(body, cache, grant)
}

fn playlist_response(body: Bytes, cache: &'static str, grant: &Grant) -> Response {
    let cache = if grant.child_token.is_some() { SIGNED_PLAYLIST_CACHE } else { cache };
    let parts = poem::ResponseParts {
        status: StatusCode::OK,
        version: poem::http::Version::default(),
        headers: playlist_headers(cache),
        extensions: poem::http::Extensions::new(),
    };
    Response::from_parts(parts, Body::from(body))
}

/// The headers of a playlist answer: for each cache policy made once, and cloned for an answer
/// (a copy, where inserting them hashed each name: every reload is a playlist answer).
fn playlist_headers(cache: &'static str) -> HeaderMap {
    static MADE: std::sync::OnceLock<[HeaderMap; 4]> = std::sync::OnceLock::new();
    let make = |cache: &'static str| {
        let mut h = HeaderMap::with_capacity(3);
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(PLAYLIST_TYPE));
        h
    };
    let made =
        MADE.get_or_init(|| [PLAYLIST_CACHE, BLOCKING_CACHE, SIGNED_PLAYLIST_CACHE, AT_ONCE_CACHE].map(make));
    match cache {
        PLAYLIST_CACHE => made[0].clone(),
        BLOCKING_CACHE => made[1].clone(),
        SIGNED_PLAYLIST_CACHE => made[2].clone(),
        AT_ONCE_CACHE => made[3].clone(),
        other => make(other),
    }
}

#[handler]
async fn master(req: &Request, app: Data<&Arc<Origin>>, Path(id): Path<String>) -> Response {
    let (c, grant) = match source(&app, req, &id, Carried::Query).await {
        Ok((Source::Local(c), grant)) => (c, grant),
        Ok((Source::Remote(holder), grant)) => {
            let path = format!("/live/{id}/master.m3u8");
            let vs = viewing::start_live(&app, req, &id);
            let listed = Listed::Master(vs.as_deref());
            return relayed(&app, req, &id, (&holder, &grant), &path, (Kind::Playlist, listed)).await;
        }
        Err(r) => return r.response(),
    };
    match c.master_waiting(MASTER_WAIT).await {
        Some(text) => {
            app.per_stream.served(&id, text.len());
            let vs = viewing::start_live(&app, req, &id);
            master_playlist(text, PLAYLIST_CACHE, &grant, vs.as_deref())
        }
        None => status(StatusCode::NOT_FOUND, "stream has no media yet"),
    }
}

/// The stream's newest picture as JPEG ([`super::stills`]).
#[handler]
async fn live_thumb(req: &Request, app: Data<&Arc<Origin>>, Path(id): Path<String>) -> Response {
    super::stills::live(req, &app, &id).await
}

#[handler]
async fn media(
    req: &Request,
    app: Data<&Arc<Origin>>,
    Path((id, session, rendition, file)): Path<(String, String, String, String)>,
) -> Response {
    live_media(req, &app, Carried::Query, (&id, &session, &rendition, &file)).await
}

/// [`media`] below a signed session's token path.
#[handler]
async fn media_under_token(
    req: &Request,
    app: Data<&Arc<Origin>>,
    Path((id, token, session, rendition, file)): Path<(String, String, String, String, String)>,
) -> Response {
    live_media(req, &app, Carried::Path(&token), (&id, &session, &rendition, &file)).await
}

/// A live media playlist, init section, part or segment.
async fn live_media(
    req: &Request,
    app: &Origin,
    carried: Carried<'_>,
    (id, session, rendition, file): LivePath<'_>,
) -> Response {
    let (c, grant) = match source(app, req, id, carried).await {
        Ok((Source::Local(c), grant)) => (c, grant),
        Ok((Source::Remote(holder), grant)) => {
            let base = format!("/live/{id}/{session}/{rendition}/{file}");
            let (path, kind) = if file == "index.m3u8" {
                viewing::touch_live(app, req, id);
                match query(req.uri().query().unwrap_or("")) {
                    Ok(q) => relayed_playlist(base, q),
                    Err(e) => return status(StatusCode::BAD_REQUEST, e),
                }
            } else {
                (base, Kind::Media)
            };
            let relaying = relayed(app, req, id, (&holder, &grant), &path, (kind, Listed::Media(carried)));
            return Box::pin(relaying).await;
        }
        Err(r) => return r.response(),
    };
    if c.session != session {
        return status(StatusCode::NOT_FOUND, "that session of the stream is over");
    }
    // Three target durations: RFC 8216bis 6.2.5.2 lets a blocking request wait that long.
    let hold = Duration::from_secs_f64(3.0 * c.config().segment.ceil());
    if file == "index.m3u8" {
        viewing::touch_live(app, req, id);
        let q = match query(req.uri().query().unwrap_or("")) {
            Ok(q) => q,
            Err(e) => return status(StatusCode::BAD_REQUEST, e),
        };
        return match c.playlist(rendition, q, hold).await {
            Ok(Some(rendered)) => {
                app.per_stream.served(id, rendered.text.len());
                let cache = match q.msn {
                    Some(_) if rendered.held => BLOCKING_CACHE,
                    Some(_) => AT_ONCE_CACHE,
                    None => PLAYLIST_CACHE,
                };
                rendered_playlist(rendered, cache, &grant, carried)
            }
            Ok(None) => status(StatusCode::SERVICE_UNAVAILABLE, "the requested part did not arrive in time"),
            Err(Miss::TooFarAhead) => {
                status(StatusCode::BAD_REQUEST, "_HLS_msn/_HLS_part too far ahead of the live edge")
            }
            Err(Miss::NotFound) => status(StatusCode::NOT_FOUND, "no such rendition"),
        };
    }
    match c.file(rendition, file, hold).await {
        Ok(bytes) => {
            app.per_stream.served(id, bytes.len());
            ranged(req.headers(), req.method(), bytes, "video/mp4", MEDIA_CACHE)
        }
        Err(_) => status(StatusCode::NOT_FOUND, "no such media"),
    }
}

#[handler]
async fn live_key(req: &Request, app: Data<&Arc<Origin>>, Path(id): Path<String>) -> Response {
    content_key(req, &app, &Resource::Stream(&id)).await
}

/// [`live_key`] below a signed session's token path (a media playlist's `../../key`).
#[handler]
async fn live_key_under_token(
    req: &Request,
    app: Data<&Arc<Origin>>,
    Path((id, token)): Path<(String, String)>,
) -> Response {
    key_response(
        authorize_carried(&app, req, &Resource::Stream(&id), Some(&token)).await,
        &app,
        &Resource::Stream(&id),
    )
    .await
}

/// The AES-128 key of an encrypted stream or VOD: the 16 bytes `EXT-X-KEY` points at, only
/// after the authorisation step (with signed playback on, only to a valid token). Served while
/// a key exists, so a session started encrypted keeps playing when `drmEnabled` is turned off.
pub(super) async fn content_key(req: &Request, app: &Origin, resource: &Resource<'_>) -> Response {
    key_response(authorize_carried(app, req, resource, None).await, app, resource).await
}

/// The key of `resource`, once `authorized`.
async fn key_response(authorized: Result<Grant, Refused>, app: &Origin, resource: &Resource<'_>) -> Response {
    if let Err(r) = authorized {
        return r.response();
    }
    match app.policies.content_key(resource, false).await {
        Ok(Some(key)) => Response::builder()
            .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
            .header(header::CACHE_CONTROL, KEY_CACHE)
            .content_type("application/octet-stream")
            .body(key.0.to_vec()),
        Ok(None) => status(StatusCode::NOT_FOUND, "not encrypted"),
        Err(KeyError::Db(e)) if crate::store::fault(&e) != crate::store::Fault::Other => {
            tracing::warn!(error = %e, "playback: reading a content key never loaded here");
            Refused::Unavailable.response()
        }
        Err(e) => {
            tracing::error!(error = %e, "playback: reading a content key");
            status(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
        }
    }
}

#[handler]
pub(super) fn preflight() -> Response {
    Response::builder()
        .status(StatusCode::NO_CONTENT)
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::ACCESS_CONTROL_ALLOW_METHODS, "GET, HEAD, OPTIONS")
        .header(header::ACCESS_CONTROL_ALLOW_HEADERS, "Range")
        .header(header::ACCESS_CONTROL_MAX_AGE, "86400")
        .finish()
}

/// The upstream path of a relayed playlist request: only the parameters that change the answer
/// (not the viewer's token), so that every viewer waiting on the same part shares one request.
fn relayed_playlist(base: String, q: PlaylistQuery) -> (String, Kind) {
    let mut params = Vec::new();
    if let Some(msn) = q.msn {
        params.push(format!("_HLS_msn={msn}"));
    }
    if let Some(part) = q.part {
        params.push(format!("_HLS_part={part}"));
    }
    if q.skip {
        params.push("_HLS_skip=YES".to_string());
    }
    let kind = if q.msn.is_some() { Kind::Blocking } else { Kind::Playlist };
    if params.is_empty() {
        (base, kind)
    } else {
        (format!("{base}?{}", params.join("&")), kind)
    }
}

/// `_HLS_msn`, `_HLS_part` and `_HLS_skip` (RFC 8216bis 6.2.5.1, 6.2.5.2). `_HLS_part`
/// without `_HLS_msn` is a client error. Public for the fuzz target.
pub fn query(q: &str) -> Result<PlaylistQuery, &'static str> {
    let mut out = PlaylistQuery::default();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "_HLS_msn" => out.msn = Some(v.parse().map_err(|_| "_HLS_msn must be a whole number")?),
            "_HLS_part" => out.part = Some(v.parse().map_err(|_| "_HLS_part must be a whole number")?),
            "_HLS_skip" => out.skip = v == "YES" || v == "v2",
            _ => {}
        }
    }
    if out.part.is_some() && out.msn.is_none() {
        return Err("_HLS_part needs _HLS_msn");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each answer gets its own copy of the headers, with the cache policy asked for (a signed
    /// session's is never stored by a cache).
    #[test]
    fn playlist_answers_carry_their_cache_policy() {
        let unsigned = Grant { child_token: None };
        let signed = Grant { child_token: Some("tok".into()) };
        for (cache, grant, want) in [
            (PLAYLIST_CACHE, &unsigned, PLAYLIST_CACHE),
            (BLOCKING_CACHE, &unsigned, BLOCKING_CACHE),
            (BLOCKING_CACHE, &signed, SIGNED_PLAYLIST_CACHE),
            (AT_ONCE_CACHE, &unsigned, AT_ONCE_CACHE),
            ("public, max-age=2", &unsigned, "public, max-age=2"),
        ] {
            let mut r = playlist_response(Bytes::from_static(b"#EXTM3U\n"), cache, grant);
            assert_eq!(r.status(), StatusCode::OK);
            let h = r.headers();
            assert_eq!(h.len(), 3);
            assert_eq!(h.get(header::CACHE_CONTROL).and_then(|v| v.to_str().ok()), Some(want));
            assert_eq!(h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()), Some(PLAYLIST_TYPE));
            assert_eq!(h.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).and_then(|v| v.to_str().ok()), Some("*"));
            r.headers_mut().insert(header::ETAG, HeaderValue::from_static("\"x\""));
        }
        let again = playlist_response(Bytes::new(), PLAYLIST_CACHE, &unsigned);
        assert!(again.headers().get(header::ETAG).is_none(), "an answer's change stays its own");
    }

    #[test]
    fn blocking_query() {
        let q = query("_HLS_msn=12&_HLS_part=3&_HLS_skip=YES").unwrap();
        assert_eq!((q.msn, q.part, q.skip), (Some(12), Some(3), true));
        assert!(query("_HLS_part=1").is_err());
        assert!(query("_HLS_msn=x").is_err());
        assert_eq!(query("").unwrap().msn, None);
    }
}
