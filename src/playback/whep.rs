//! WHEP (CONTRACT: Live media): `POST <playback_base>/live/<id>/whep` with an SDP offer → 201
//! with the answer, `Location` of the viewer's session and its `ETag`; `PATCH` of the location
//! with `application/trickle-ice-sdpfrag` and `If-Match` → 204; `DELETE` → 200. The offer passes
//! the same authorisation as HLS playback (`?token=` for signed streams: 401 with
//! `X-Deny-Reason` without one). A stream that is not live: 409. Cross-origin, for browsers.

use std::sync::Arc;

use poem::http::{header, StatusCode};
use poem::web::{Data, Path};
use poem::{handler, Body, Request, Response};

use super::{authorize, is_relayed, viewer_ip, Origin, Resource};
use crate::media::egress::whep::WhepError;
use crate::media::webrtc::sdp::MAX_SDP_BYTES;
use crate::media::webrtc::{TrickleError, WebrtcError};
use crate::services::nodes::{Holder, CLIENT_HEADER};

const SDP: &str = "application/sdp";
const TRICKLE: &str = "application/trickle-ice-sdpfrag";

fn text(code: StatusCode, text: impl Into<String>) -> Response {
    Response::builder()
        .status(code)
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::CACHE_CONTROL, "no-store")
        .content_type("text/plain; charset=utf-8")
        .body(text.into())
}

/// The media type of a request, without parameters.
pub fn media_type(req: &Request) -> String {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Reads a body of at most [`MAX_SDP_BYTES`].
pub async fn read_bounded(body: Body) -> Result<Vec<u8>, Response> {
    let mut reader = body.into_async_read();
    let mut buf = Vec::new();
    let mut limited = tokio::io::AsyncReadExt::take(&mut reader, MAX_SDP_BYTES as u64 + 1);
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio::io::AsyncReadExt::read_to_end(&mut limited, &mut buf),
    )
    .await;
    match read {
        Ok(Ok(_)) if buf.len() <= MAX_SDP_BYTES => Ok(buf),
        Ok(Ok(_)) => {
            Err(text(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is larger than {MAX_SDP_BYTES} bytes")))
        }
        _ => Err(text(StatusCode::BAD_REQUEST, "the body could not be read")),
    }
}

#[handler]
pub async fn offer(req: &Request, body: Body, app: Data<&Arc<Origin>>, Path(id): Path<String>) -> Response {
    if let Err(r) = authorize(&app, req, &Resource::Stream(&id)).await {
        return r.response();
    }
    if media_type(req) != SDP {
        return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, "send the offer as application/sdp");
    }
    let offer = match read_bounded(body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    // Held by another node: its answer (and its ICE candidates: the media flows from there). A
    // push held here needs no lookup (nor the database it asks).
    if !app.whep.holds(&id) {
        if let Some(holder) = app.relay.holder(&id, is_relayed(&app, req)).await {
            return forward(&app, req, &holder, reqwest::Method::POST, &format!("/live/{id}/whep"), offer)
                .await;
        }
    }
    match app.whep.play(&id, viewer_ip(&app, req), &offer).await {
        Ok(admitted) => {
            let location =
                format!("{}/{}", req.original_uri().path().trim_end_matches('/'), admitted.peer.id);
            Response::builder()
                .status(StatusCode::CREATED)
                .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
                .header(header::ACCESS_CONTROL_EXPOSE_HEADERS, "Location, ETag")
                .header(header::CACHE_CONTROL, "no-store")
                .header(header::LOCATION, location)
                .header(header::ETAG, admitted.peer.etag.clone())
                .content_type(SDP)
                .body(admitted.answer)
        }
        Err(WhepError::NotLive) => text(StatusCode::CONFLICT, "stream is not live"),
        Err(WhepError::Full) => text(StatusCode::SERVICE_UNAVAILABLE, "too many viewers"),
        Err(e @ WhepError::TooManyFromHere) => text(StatusCode::TOO_MANY_REQUESTS, e.to_string()),
        Err(WhepError::Webrtc(WebrtcError::BadOffer(e))) => text(StatusCode::BAD_REQUEST, e),
        Err(WhepError::Webrtc(WebrtcError::Media(e))) => {
            tracing::error!(stream = %id, error = %e, "WHEP: setting up a viewer");
            text(StatusCode::INTERNAL_SERVER_ERROR, "the WebRTC session could not be set up")
        }
    }
}

#[handler]
pub async fn trickle(
    req: &Request,
    body: Body,
    app: Data<&Arc<Origin>>,
    Path((id, session)): Path<(String, String)>,
) -> Response {
    let Some(peer) = app.whep.viewers.get(&session).filter(|p| p.stream_id == id) else {
        if let Some(holder) = app.relay.holder(&id, is_relayed(&app, req)).await {
            let fragment = match read_bounded(body).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let path = format!("/live/{id}/whep/{session}");
            return forward(&app, req, &holder, reqwest::Method::PATCH, &path, fragment).await;
        }
        return text(StatusCode::NOT_FOUND, "no such session");
    };
    patch(req, body, &peer).await
}

/// Hands a WHEP request to the node holding the stream and its answer back: status, body and
/// the headers a WHEP client reads. The `Location` it gives is the same path on every node.
async fn forward(
    app: &Origin,
    req: &Request,
    holder: &Holder,
    method: reqwest::Method,
    path: &str,
    body: Vec<u8>,
) -> Response {
    let mut upstream = app.relay.request(method, holder, path).body(body);
    for name in [header::CONTENT_TYPE, header::IF_MATCH] {
        if let Some(v) = req.headers().get(&name).and_then(|v| v.to_str().ok()) {
            upstream = upstream.header(name.as_str(), v);
        }
    }
    if let Some(ip) = viewer_ip(app, req) {
        upstream = upstream.header(CLIENT_HEADER, ip.to_string());
    }
    let answer = match upstream.send().await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(node = %holder.node, error = %e, "WHEP: the node holding the stream did not answer");
            return text(StatusCode::BAD_GATEWAY, "the node holding the stream did not answer");
        }
    };
    let code = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut out = Response::builder()
        .status(code)
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::ACCESS_CONTROL_EXPOSE_HEADERS, "Location, ETag")
        .header(header::CACHE_CONTROL, "no-store");
    for name in ["content-type", "location", "etag"] {
        if let Some(v) = answer.headers().get(name).and_then(|v| v.to_str().ok()) {
            out = out.header(name, v.to_string());
        }
    }
    match answer.bytes().await {
        Ok(bytes) if bytes.len() <= MAX_SDP_BYTES => out.body(bytes),
        _ => text(StatusCode::BAD_GATEWAY, "the node holding the stream sent an unusable answer"),
    }
}

/// A trickle PATCH of a WHIP or WHEP session: 204, 412 without the session's ETag, 415 for
/// another media type, 400 for a body that has no valid candidate lines.
pub async fn patch(req: &Request, body: Body, peer: &crate::media::webrtc::Peer) -> Response {
    if media_type(req) != TRICKLE {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send candidates as application/trickle-ice-sdpfrag",
        );
    }
    let fragment = match read_bounded(body).await {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(r) => return r,
    };
    let if_match = req.headers().get(header::IF_MATCH).and_then(|v| v.to_str().ok());
    match peer.trickle(if_match, &fragment) {
        Ok(_) => Response::builder()
            .status(StatusCode::NO_CONTENT)
            .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
            .finish(),
        Err(e @ TrickleError::PreconditionFailed) => text(StatusCode::PRECONDITION_FAILED, e.to_string()),
        Err(TrickleError::Bad(e)) => text(StatusCode::BAD_REQUEST, e),
    }
}

#[handler]
pub async fn end(
    req: &Request,
    app: Data<&Arc<Origin>>,
    Path((id, session)): Path<(String, String)>,
) -> Response {
    match app.whep.viewers.get(&session).filter(|p| p.stream_id == id) {
        Some(peer) => {
            peer.end();
            text(StatusCode::OK, "session ended")
        }
        None => match app.relay.holder(&id, is_relayed(&app, req)).await {
            Some(holder) => {
                let path = format!("/live/{id}/whep/{session}");
                forward(&app, req, &holder, reqwest::Method::DELETE, &path, Vec::new()).await
            }
            None => text(StatusCode::NOT_FOUND, "no such session"),
        },
    }
}

#[handler]
pub fn preflight() -> Response {
    Response::builder()
        .status(StatusCode::NO_CONTENT)
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::ACCESS_CONTROL_ALLOW_METHODS, "POST, PATCH, DELETE, OPTIONS")
        .header(header::ACCESS_CONTROL_ALLOW_HEADERS, "Content-Type, If-Match, Authorization")
        .header(header::ACCESS_CONTROL_EXPOSE_HEADERS, "Location, ETag")
        .header(header::ACCESS_CONTROL_MAX_AGE, "86400")
        .finish()
}
