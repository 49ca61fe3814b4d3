//! The playback origin under `{playback_base}` (served at `/play`): live LL-HLS and VOD.
//! Every request passes [`authorize`] first, so no path serves media around it.
//!
//! Signed playback (CONTRACT: Signed playback): when a stream or VOD requires it, every request
//! under it — playlists, init sections, parts, segments, thumbnails, keys — needs a valid
//! `?token=` (see [`token`]), or, below a live signed session's master, a `t/<token>/` path
//! segment. Playlists name their children so that every URI carries the session's token (a
//! live master by the token path, which the media playlists' relative URIs inherit; the rest
//! by rewriting), so a stock player needs only the master URL.

pub mod demo;
pub mod origin;
pub mod ranges;
pub mod relay;
pub mod rewrite;
pub mod stills;
pub mod storyboard;
pub mod token;
pub mod viewing;
pub mod vod;
pub mod whep;

use poem::Request;

use std::sync::Arc;

pub use crate::services::policy::{Policies, Resource};
pub use origin::routes;

use crate::client_ip;
use crate::media::live::channel::Channels;
use crate::storage::Storage;
use crate::store::keys::SigningKeys;
use origin::Refused;

/// What the origin serves from and authorises with; the routes of [`routes`] read it as data.
pub struct Origin {
    pub policies: Arc<Policies>,
    /// Keys of signed playback tokens.
    pub keys: Arc<SigningKeys>,
    /// The live edge of each stream pushed to this process.
    pub channels: Arc<Channels>,
    /// VOD outputs.
    pub storage: Storage,
    /// WHEP viewers.
    pub whep: Arc<crate::media::egress::whep::Whep>,
    /// Per-stream byte counters: what the origin serves of each live stream.
    pub per_stream: Arc<crate::metrics::PerStream>,
    /// Live streams held by another node are relayed from it.
    pub relay: Arc<relay::Relay>,
    /// The HLS playback sessions of this node, and its VOD views (`vs=`).
    pub viewers: Arc<crate::services::viewers::Viewers>,
    /// Thumbnails made on demand: the decode bound and each live stream's newest.
    pub stills: stills::Stills,
}

/// The relay's bearer header, its name parsed once: a lookup by `&str` parses the name again on
/// every request, and every playback request asks.
static RELAY_HEADER_NAME: poem::http::HeaderName =
    poem::http::HeaderName::from_static(crate::services::nodes::RELAY_HEADER);

/// Whether `req` comes from another node of this service (the relay's bearer).
pub(crate) fn is_relayed(app: &Origin, req: &Request) -> bool {
    let presented = req.headers().get(&RELAY_HEADER_NAME).and_then(|v| v.to_str().ok());
    app.relay.nodes.is_relay(presented)
}

/// The viewer's address: on a relayed request, the one the relaying node saw.
pub(crate) fn viewer_ip(app: &Origin, req: &Request) -> Option<std::net::IpAddr> {
    if is_relayed(app, req) {
        let header = req.headers().get(crate::services::nodes::CLIENT_HEADER);
        return header.and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    }
    client_ip::of_request(req)
}

/// The check RTSP playback runs on DESCRIBE and SETUP: the same as every HLS request.
pub fn rtsp_authorize(origin: Arc<Origin>) -> crate::media::egress::rtsp::Authorize {
    use crate::media::egress::rtsp::Verdict;
    Arc::new(move |stream: String, token: Option<String>, client: Option<std::net::IpAddr>| {
        let origin = origin.clone();
        Box::pin(async move {
            match authorize_token(&origin, token, client, &Resource::Stream(&stream)).await {
                // Held by another node: a DESCRIBE goes there (docs/scale-out.md).
                Ok(_) => match origin.relay.holder(&stream, false).await.and_then(|h| h.rtsp) {
                    Some(base) => Verdict::Elsewhere(base),
                    None => Verdict::Allowed,
                },
                Err(Refused::Denied(_)) => Verdict::Unauthorized,
                Err(Refused::NotFound | Refused::NotLive) => Verdict::NotFound,
                Err(Refused::Unavailable) => Verdict::Unavailable,
            }
        })
    })
}

/// Why playback was refused (401 with `X-Deny-Reason`, CONTRACT: Signed playback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deny {
    MissingToken,
    BadSignature,
    Expired,
    IpMismatch,
    WrongResource,
}

impl Deny {
    pub fn reason(self) -> &'static str {
        match self {
            Deny::MissingToken => "missing_token",
            Deny::BadSignature => "bad_signature",
            Deny::Expired => "expired",
            Deny::IpMismatch => "ip_mismatch",
            Deny::WrongResource => "wrong_resource",
        }
    }
}

/// What an authorised request may do.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The token the URIs of a served playlist carry: the session's, when the request came with
    /// a valid token (also while signing is off, so a session keeps working when it is turned
    /// on); `None` leaves playlists as they are.
    pub child_token: Option<String>,
}

/// The `token` query parameter, percent-decoded: players that add `_HLS_msn` through
/// `URLSearchParams` (hls.js) re-encode the whole query, `~` and `:` included.
fn token_of(req: &Request) -> Option<String> {
    let query = req.uri().query()?;
    url::form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "token").map(|(_, v)| v.into_owned())
}

/// The one authorisation step of every playback request: the resource must exist (a VOD must
/// be playable) and, when it requires signed playback, `req` must carry a valid token for it.
/// The switch is read through [`Policies`], which the API clears when it changes, so turning it
/// on or off takes effect on the next request.
pub(crate) async fn authorize(
    app: &Origin,
    req: &Request,
    resource: &Resource<'_>,
) -> Result<Grant, Refused> {
    authorize_carried(app, req, resource, None).await
}

/// [`authorize`] with the token the request's path carries (`/live/<id>/t/<token>/…`), which
/// is taken over one in its query.
pub(crate) async fn authorize_carried(
    app: &Origin,
    req: &Request,
    resource: &Resource<'_>,
    path_token: Option<&str>,
) -> Result<Grant, Refused> {
    if is_relayed(app, req) {
        // The relaying node authorised the viewer; this node only checks the resource.
        return check(app, None, None, resource, true).await;
    }
    let token = path_token.map(str::to_string).or_else(|| token_of(req));
    authorize_token(app, token, client_ip::of_request(req), resource).await
}

/// [`authorize`] of a request that is not HTTP (RTSP): its token and client address.
pub(crate) async fn authorize_token(
    app: &Origin,
    token: Option<String>,
    client: Option<std::net::IpAddr>,
    resource: &Resource<'_>,
) -> Result<Grant, Refused> {
    check(app, token, client, resource, false).await
}

async fn check(
    app: &Origin,
    token: Option<String>,
    client: Option<std::net::IpAddr>,
    resource: &Resource<'_>,
    relayed: bool,
) -> Result<Grant, Refused> {
    let policy = app.policies.policy(resource).await.map_err(|e| {
        tracing::warn!(error = %e, "playback: reading a playback policy never loaded here");
        Refused::Unavailable
    })?;
    let Some(policy) = policy else { return Err(Refused::NotFound) };
    // No token and nothing to enforce: no key ring, nor the time, is needed (the common unsigned
    // request).
    let child_token = if relayed || (token.is_none() && !policy.signed) {
        None
    } else {
        let now = chrono::Utc::now().timestamp();
        let keys = app.keys.ring_for(token.as_deref().and_then(token::kid)).await;
        match token::verify(&keys, token.as_deref(), &resource.name(), client, now) {
            // A ticket starts a session; a session token is passed on as it is.
            Ok(claims) => claims.session_token(&keys, now).or(token),
            Err(deny) if policy.signed => return Err(Refused::Denied(deny)),
            // Signing is off: a bad token is ignored, as if there were none.
            Err(_) => None,
        }
    };
    if !policy.playable {
        return Err(Refused::NotFound);
    }
    Ok(Grant { child_token })
}
