//! Signed playback (interface: Playback ticket request; CONTRACT: Signed playback):
//! `PATCH …/signed-playback` switches enforcement for a stream or VOD, `POST …/playback-ticket`
//! hands out signed URLs. The origin checks them ([`crate::playback::authorize`]).

use std::net::IpAddr;
use std::sync::Arc;

use chrono::{TimeZone, Utc};
use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};

use super::body::{Fields, FromJsonBody, JsonBody};
use super::error::{ApiError, ApiResult};
use super::security::{need, Authorized};
use super::streams::{move_error, stream_not_found, Stream};
use super::vod::{vod_not_found, Vod};
use super::ApiTags;
use crate::api::vod::Download;
use crate::api::ApiState;
use crate::client_ip::canonical_ip;
use crate::domain::stream::{DisabledReason, MoveError};
use crate::domain::time::now_ms;
use crate::domain::vod::VodStatus;
use crate::playback::rewrite::with_token as signed;
use crate::playback::token::Claims;
use crate::playback::Resource;
use crate::store::Db;

/// Body of `POST …/playback-ticket` (`{}` takes every default).
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct TicketRequest {
    /// How long the URLs can start playback, seconds: 10–604800, default 3600.
    pub expires_in_sec: Option<i64>,
    /// The only client address the URLs work from (IPv4 or IPv6).
    pub allow_ip: Option<String>,
    /// How long a started session's playlists, parts, segments and keys stay fetchable,
    /// seconds: 10–604800, default 14400.
    pub stream_expire_sec: Option<i64>,
}

/// A ticket's limits, checked.
struct Ticket {
    expires_in: i64,
    session: i64,
    ip: Option<IpAddr>,
}

impl FromJsonBody for TicketRequest {
    fn from_fields(f: &mut Fields) -> Self {
        let expires_in_sec = f.opt_int("expiresInSec", 10..=604_800);
        let allow_ip = f.opt_parsed("allowIp", |s| {
            s.parse::<IpAddr>().map(|_| s.to_string()).map_err(|_| "must be an IPv4 or IPv6 address".into())
        });
        f.document("allowIp", |r| r.formats = vec!["ipv4", "ipv6"]);
        TicketRequest {
            expires_in_sec,
            allow_ip,
            stream_expire_sec: f.opt_int("streamExpireSec", 10..=604_800),
        }
    }
}

impl TicketRequest {
    fn ticket(&self) -> Ticket {
        Ticket {
            expires_in: self.expires_in_sec.unwrap_or(3600),
            session: self.stream_expire_sec.unwrap_or(14_400),
            // As the origin sees clients: an IPv4-mapped IPv6 address is its IPv4 address.
            ip: self.allow_ip.as_deref().and_then(|ip| ip.parse().ok()).map(canonical_ip),
        }
    }
}

/// Body of `PATCH …/signed-playback`.
#[derive(Debug, Object)]
pub struct SignedPlaybackSwitch {
    /// `true`: playback needs a signed URL from a ticket, from the next request on.
    pub enabled: bool,
}

impl FromJsonBody for SignedPlaybackSwitch {
    fn from_fields(f: &mut Fields) -> Self {
        let enabled = f.opt_bool("enabled");
        if enabled.is_none() && !f.has_error("enabled") {
            f.error("enabled", "is required");
        }
        SignedPlaybackSwitch { enabled: enabled.unwrap_or(false) }
    }
}

/// A stream's signed playback URLs, each present for a protocol the stream offers.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct StreamTicket {
    /// The LL-HLS master playlist; the playlists it leads to carry the session's token.
    #[oai(skip_serializing_if_is_none)]
    pub hls: Option<String>,
    /// WHEP: `POST` an SDP offer (`application/sdp`) here; the token is checked on the offer.
    #[oai(skip_serializing_if_is_none)]
    pub webrtc: Option<String>,
    /// RTSP (`rtsp://…/live/<id>?token=…`), over UDP or TCP.
    #[oai(skip_serializing_if_is_none)]
    pub rtsp: Option<String>,
    /// When the URLs stop starting playback.
    pub expires_at: String,
}

/// A VOD's signed playback URLs.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct VodTicket {
    pub playback_url: String,
    pub thumbnail_url: String,
    /// The VOD's MP4 downloads, signed (empty unless `downloadsStatus` is `ready`).
    pub downloads: Vec<Download>,
    pub expires_at: String,
}

/// The token of a ticket for `resource`, and when it expires.
async fn issue(app: &ApiState, resource: &Resource<'_>, ticket: &Ticket) -> (String, String) {
    let expires = Utc::now().timestamp() + ticket.expires_in;
    let claims = Claims { resource: resource.name(), expires, session: Some(ticket.session), ip: ticket.ip };
    let at = Utc.timestamp_opt(expires, 0).single().unwrap_or_else(Utc::now);
    // `ring_for` keeps the ring fresh, so a rotated key starts signing here too.
    (claims.sign(&*app.keys.ring_for(None).await), at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

pub struct PlaybackApi;

#[OpenApi]
impl PlaybackApi {
    /// Turn signed playback of a stream on or off
    ///
    /// Takes effect on the next playback request, also for viewers already watching: with it
    /// on, requests without a valid token get 401 with `X-Deny-Reason`.
    #[oai(
        path = "/v1/projects/:slug/streams/:id/signed-playback",
        method = "patch",
        operation_id = "setStreamSignedPlayback",
        tag = "ApiTags::Streams"
    )]
    async fn stream_switch(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
        body: JsonBody<SignedPlaybackSwitch>,
    ) -> ApiResult<Json<Stream>> {
        let mut tx = app.db.begin_write().await?;
        let mut row = Db::stream_in(&mut tx, &p.project.id, &id).await?.ok_or_else(stream_not_found)?;
        if row.state().reason == Some(DisabledReason::Deleted) {
            return Err(move_error(MoveError::Deleted));
        }
        row.signed_playback = i64::from(body.0.enabled);
        row.updated_at = now_ms();
        Db::update_stream(&mut tx, &row).await?;
        tx.commit().await?;
        app.policies.forget(&Resource::Stream(&row.id));
        tracing::info!(stream = %row.id, enabled = body.0.enabled, "stream signed playback switched");
        Ok(Json(super::viewers::stream_record(&app, &row).await?))
    }

    /// Signed playback URLs of a stream
    ///
    /// URLs for each protocol the stream offers, carrying a token bound to the stream, an
    /// expiry (`expiresInSec`), a session length (`streamExpireSec`) and optionally one client
    /// address (`allowIp`). They work whether or not signed playback is on.
    #[oai(
        path = "/v1/projects/:slug/streams/:id/playback-ticket",
        method = "post",
        operation_id = "createStreamPlaybackTicket",
        tag = "ApiTags::Streams"
    )]
    async fn stream_ticket(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
        body: JsonBody<TicketRequest>,
    ) -> ApiResult<Json<StreamTicket>> {
        let row = app.db.stream(&p.project.id, &id).await?.ok_or_else(stream_not_found)?;
        if row.state().reason == Some(DisabledReason::Deleted) {
            return Err(move_error(MoveError::Deleted));
        }
        let (token, expires_at) = issue(&app, &Resource::Stream(&row.id), &body.0.ticket()).await;
        let urls = Stream::from_row(&row, &app).playback_urls;
        Ok(Json(StreamTicket {
            hls: urls.hls.map(|u| signed(&u, &token)),
            webrtc: urls.webrtc.map(|u| signed(&u, &token)),
            rtsp: urls.rtsp.map(|u| signed(&u, &token)),
            expires_at,
        }))
    }

    /// Turn signed playback of a VOD on or off
    ///
    /// Takes effect on the next playback request, also for viewers already watching.
    #[oai(
        path = "/v1/projects/:slug/vod/:id/signed-playback",
        method = "patch",
        operation_id = "setVodSignedPlayback",
        tag = "ApiTags::Vod"
    )]
    async fn vod_switch(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::VodWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
        body: JsonBody<SignedPlaybackSwitch>,
    ) -> ApiResult<Json<Vod>> {
        let mut tx = app.db.begin_write().await?;
        let mut row = Db::vod_in(&mut tx, &p.project.id, &id).await?.ok_or_else(vod_not_found)?;
        row.signed_playback = i64::from(body.0.enabled);
        row.updated_at = now_ms();
        Db::update_vod(&mut tx, &row).await?;
        tx.commit().await?;
        app.policies.forget(&Resource::Vod(&row.id));
        tracing::info!(vod = %row.id, enabled = body.0.enabled, "VOD signed playback switched");
        Ok(Json(super::viewers::vod_record(&app, &row).await?))
    }

    /// Signed playback URLs of a VOD
    ///
    /// 409 until the VOD is complete, and once it is archived.
    #[oai(
        path = "/v1/projects/:slug/vod/:id/playback-ticket",
        method = "post",
        operation_id = "createVodPlaybackTicket",
        tag = "ApiTags::Vod"
    )]
    async fn vod_ticket(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::VodRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
        body: JsonBody<TicketRequest>,
    ) -> ApiResult<Json<VodTicket>> {
        let row = app.db.vod(&p.project.id, &id).await?.ok_or_else(vod_not_found)?;
        if row.status() != VodStatus::Complete || row.archived_at.is_some() {
            return Err(ApiError::conflict("the VOD does not play: it is not complete, or it is archived"));
        }
        let (token, expires_at) = issue(&app, &Resource::Vod(&row.id), &body.0.ticket()).await;
        let base = format!("{}/vod/{}", app.endpoints.playback_base(), row.id);
        Ok(Json(VodTicket {
            playback_url: signed(&format!("{base}/master.m3u8"), &token),
            thumbnail_url: signed(&format!("{base}/thumb.jpg"), &token),
            downloads: crate::api::vod::downloads_of(&row, &base, Some(&token)),
            expires_at,
        }))
    }
}
