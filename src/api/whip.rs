//! WHIP ingest (RFC 9725, CONTRACT: Live media): `POST <base_url>/v1/whip/<streamKey>` with
//! `Content-Type: application/sdp` and `Authorization: Bearer <pushPassword>` → 201 with the SDP
//! answer, the session's `Location` and `ETag`; `PATCH` of the location with trickled
//! candidates (`If-Match`: the ETag) → 204; `DELETE` → 200 ends the push. Unknown key: 404
//! whatever the bearer; a bad or missing bearer: 401 (counted by the failed-authentication
//! limit like every 401 under `/v1`); a disabled or live stream: 409.
//!
//! These routes take SDP, not JSON, and are not part of the OpenAPI document.

use std::sync::Arc;

use poem::http::{header, StatusCode};
use poem::web::{Data, Path};
use poem::{handler, patch, post, Body, EndpointExt, Request, Response, Route};

use crate::media::ingest::whip::{Whip, WhipError};
use crate::media::webrtc::WebrtcError;
use crate::playback::whep::{media_type, read_bounded};

pub fn routes(whip: Arc<Whip>) -> impl poem::Endpoint {
    Route::new()
        .at("/:key", post(publish).options(crate::playback::whep::preflight))
        .at("/:key/:session", patch(trickle).delete(end).options(crate::playback::whep::preflight))
        .data(whip)
}

fn text(code: StatusCode, text: impl Into<String>) -> Response {
    Response::builder()
        .status(code)
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::CACHE_CONTROL, "no-store")
        .content_type("text/plain; charset=utf-8")
        .body(text.into())
}

fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

#[handler]
async fn publish(req: &Request, body: Body, whip: Data<&Arc<Whip>>, Path(key): Path<String>) -> Response {
    if media_type(req) != "application/sdp" {
        return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, "send the offer as application/sdp");
    }
    let offer = match read_bounded(body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    match whip.publish(&key, bearer(req), &offer).await {
        Ok(published) => Response::builder()
            .status(StatusCode::CREATED)
            .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
            .header(header::ACCESS_CONTROL_EXPOSE_HEADERS, "Location, ETag")
            .header(header::CACHE_CONTROL, "no-store")
            .header(
                header::LOCATION,
                format!("{}/{}", req.original_uri().path().trim_end_matches('/'), published.peer.id),
            )
            .header(header::ETAG, published.peer.etag.clone())
            .content_type("application/sdp")
            .body(published.answer),
        Err(WhipError::UnknownKey) => text(StatusCode::NOT_FOUND, "unknown stream key"),
        Err(e @ WhipError::Unauthorized) => Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header(header::WWW_AUTHENTICATE, "Bearer")
            .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
            .content_type("text/plain; charset=utf-8")
            .body(e.to_string()),
        Err(WhipError::Refused(e)) => text(StatusCode::CONFLICT, e),
        Err(WhipError::Webrtc(WebrtcError::BadOffer(e))) => text(StatusCode::BAD_REQUEST, e),
        Err(WhipError::Webrtc(WebrtcError::Media(e))) => {
            tracing::error!(error = %e, "WHIP: setting up a push");
            text(StatusCode::INTERNAL_SERVER_ERROR, "the WebRTC session could not be set up")
        }
        Err(WhipError::Unavailable) => text(StatusCode::SERVICE_UNAVAILABLE, "ingest is unavailable"),
    }
}

/// The session, if `key` names its stream (a session's URL is its only credential after the
/// POST: its id is random and never listed).
async fn session(whip: &Whip, key: &str, id: &str) -> Option<Arc<crate::media::webrtc::Peer>> {
    let peer = whip.publishers.get(id)?;
    let stream = whip.db.stream_by_key(key).await.ok().flatten()?;
    (stream.id == peer.stream_id).then_some(peer)
}

#[handler]
async fn trickle(
    req: &Request,
    body: Body,
    whip: Data<&Arc<Whip>>,
    Path((key, id)): Path<(String, String)>,
) -> Response {
    match session(&whip, &key, &id).await {
        Some(peer) => crate::playback::whep::patch(req, body, &peer).await,
        None => text(StatusCode::NOT_FOUND, "no such session"),
    }
}

#[handler]
async fn end(whip: Data<&Arc<Whip>>, Path((key, id)): Path<(String, String)>) -> Response {
    match session(&whip, &key, &id).await {
        Some(peer) => {
            peer.end();
            text(StatusCode::OK, "session ended")
        }
        None => text(StatusCode::NOT_FOUND, "no such session"),
    }
}
