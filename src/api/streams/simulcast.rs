//! A stream's simulcast targets (CONTRACT: Simulcast): `/streams/<id>/simulcast-targets`.
//! The URL is checked ([`TargetUrl::parse`]; in production its host must be public, as a
//! webhook's), sealed under the master key and shown masked. The node holding the push sends
//! to the targets ([`crate::media::egress::simulcast`]); a change here reaches it within a
//! second.

use std::sync::Arc;

use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::{move_error, stream_not_found};
use crate::api::body::{Fields, FromJsonBody, JsonBody};
use crate::api::error::{ApiError, ApiResult};
use crate::api::security::{need, Authorized};
use crate::api::{ApiState, ApiTags};
use crate::domain::new_id;
use crate::domain::simulcast::{TargetStatus, TargetUrl, MAX_TARGETS, MAX_URL_LEN, URL_PATTERN};
use crate::domain::stream::{DisabledReason, MoveError, StreamStatus};
use crate::domain::time::{iso, now_ms};
use crate::events::guard::{is_public, resolves_public};
use crate::store::simulcast::TargetRow;
use crate::store::streams::StreamRow;

/// A simulcast target.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase", example)]
pub struct SimulcastTarget {
    #[oai(rename = "_id")]
    pub id: String,
    pub stream_id: String,
    pub name: String,
    /// The target's URL with its stream key, `streamid` and `passphrase` masked (`****` after
    /// the first 4 characters).
    pub url: String,
    pub enabled: bool,
    pub status: TargetStatus,
    /// Why the last try failed (while `error`, and after until the next failure clears it).
    pub last_error: Option<String>,
    /// When the current (or last) connection was made.
    pub connected_at: Option<String>,
    /// Bytes sent to the target in its current (or last) live session.
    pub bytes_sent: i64,
    pub created_at: String,
}

impl SimulcastTarget {
    /// The record of `row` under `stream`: a target of a stream that is not live reads `idle`
    /// whatever its node last wrote (a node that stopped cannot write its targets' end).
    fn of(row: TargetRow, stream: &StreamRow) -> SimulcastTarget {
        let live = stream.state().status == StreamStatus::Live;
        SimulcastTarget {
            status: if live { row.status() } else { TargetStatus::Idle },
            id: row.id,
            stream_id: row.stream_id,
            name: row.name,
            url: row.masked_url,
            enabled: row.enabled == 1,
            last_error: row.last_error,
            connected_at: row.connected_at.map(iso),
            bytes_sent: row.bytes_sent,
            created_at: iso(row.created_at),
        }
    }
}

/// A stream's targets, oldest first (at most 10).
#[derive(Debug, Object)]
pub struct SimulcastTargetList {
    pub items: Vec<SimulcastTarget>,
}

/// Body of `POST /streams/<id>/simulcast-targets`.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase", example)]
pub struct CreateSimulcastTarget {
    /// `rtmp://host[:port]/app/<stream key>` or `rtmps://…` as the platform hands it out, or
    /// `srt://host:port[?streamid=…&passphrase=…&latency=<ms>]`.
    pub url: String,
    /// 1–100 characters (default: the URL's host).
    pub name: Option<String>,
    /// Default `true`.
    pub enabled: Option<bool>,
}

impl FromJsonBody for CreateSimulcastTarget {
    fn from_fields(f: &mut Fields) -> Self {
        let url = f.string("url", 1..=MAX_URL_LEN);
        f.document("url", |r| r.pattern = Some(URL_PATTERN));
        if !url.is_empty() && !f.has_error("url") {
            if let Err(problem) = TargetUrl::parse(&url) {
                f.error("url", problem);
            }
        }
        CreateSimulcastTarget { url, name: f.opt_string("name", 1..=100), enabled: f.opt_bool("enabled") }
    }
}

/// Body of `PATCH /streams/<id>/simulcast-targets/<tid>`.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct UpdateSimulcastTarget {
    /// 1–100 characters.
    pub name: Option<String>,
    /// `false` ends the target's connection within a second; `true` starts one while the
    /// stream is live.
    pub enabled: Option<bool>,
}

impl FromJsonBody for UpdateSimulcastTarget {
    fn from_fields(f: &mut Fields) -> Self {
        UpdateSimulcastTarget { name: f.opt_string("name", 1..=100), enabled: f.opt_bool("enabled") }
    }
}

#[derive(ApiResponse)]
enum Created {
    /// The target; it receives the push within 3 s while the stream is live.
    #[oai(status = 201)]
    Created(Json<SimulcastTarget>),
}

#[derive(ApiResponse)]
enum Removed {
    /// The target is gone; its connection ends within a second.
    #[oai(status = 204)]
    NoContent,
}

/// Where a target may point: in development anywhere; in production only at public addresses,
/// a name checked by resolving it (the sender checks again at connect).
pub async fn check_host(url: &TargetUrl, allow_private: bool) -> Result<(), String> {
    if allow_private {
        return Ok(());
    }
    if let Some(ip) = url.ip() {
        return if is_public(ip) {
            Ok(())
        } else {
            Err("must not point to a loopback, private, link-local or multicast address".into())
        };
    }
    tokio::time::timeout(std::time::Duration::from_secs(5), resolves_public(&url.host, url.port))
        .await
        .map_err(|_| format!("host {} did not resolve within 5 s", url.host))?
}

fn target_not_found() -> ApiError {
    ApiError::not_found("simulcast target not found")
}

/// A deleted stream's targets went with it: 404 where a list or a removal is asked of them.
fn deleted_has_none(e: ApiError) -> ApiError {
    if matches!(e, ApiError::Conflict(_)) {
        ApiError::not_found("the stream was deleted; its simulcast targets went with it")
    } else {
        e
    }
}

/// The stream, refused (409) when deleted.
async fn undeleted_stream(app: &ApiState, project_id: &str, id: &str) -> ApiResult<StreamRow> {
    let row = app.db.stream(project_id, id).await?.ok_or_else(stream_not_found)?;
    if row.state().reason == Some(DisabledReason::Deleted) {
        return Err(move_error(MoveError::Deleted));
    }
    Ok(row)
}

pub struct SimulcastApi;

#[OpenApi(tag = "ApiTags::Streams")]
impl SimulcastApi {
    /// Add a simulcast target: while the stream is live, the publisher's own H.264 and AAC are
    /// sent there too (at most 10 targets a stream)
    #[oai(
        path = "/v1/projects/:slug/streams/:id/simulcast-targets",
        method = "post",
        operation_id = "createSimulcastTarget"
    )]
    async fn create(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
        body: JsonBody<CreateSimulcastTarget>,
    ) -> ApiResult<Created> {
        let stream = undeleted_stream(&app, &p.project.id, &id).await?;
        let body = body.0;
        let url = TargetUrl::parse(&body.url).map_err(|problem| ApiError::invalid("url", &problem))?;
        check_host(&url, app.allow_private_webhooks())
            .await
            .map_err(|problem| ApiError::invalid("url", &problem))?;
        let target_id = new_id();
        let row = TargetRow {
            url: app
                .master_key
                .seal(url.full().as_bytes(), &crate::store::secrets::simulcast_context(&target_id)),
            id: target_id,
            stream_id: stream.id.clone(),
            name: body.name.unwrap_or_else(|| url.host.clone()),
            masked_url: url.masked(),
            enabled: i64::from(body.enabled.unwrap_or(true)),
            status: TargetStatus::Idle.as_str().to_string(),
            last_error: None,
            connected_at: None,
            bytes_sent: 0,
            created_at: now_ms(),
        };
        if !app.db.create_target(&row, MAX_TARGETS).await? {
            return Err(ApiError::conflict(format!("a stream has at most {MAX_TARGETS} simulcast targets")));
        }
        app.simulcast.changed();
        tracing::info!(project = %p.project.slug, stream = %stream.id, target = %row.id, url = %row.masked_url, "simulcast target created");
        Ok(Created::Created(Json(SimulcastTarget::of(row, &stream))))
    }

    /// The stream's simulcast targets, oldest first
    #[oai(
        path = "/v1/projects/:slug/streams/:id/simulcast-targets",
        method = "get",
        operation_id = "listSimulcastTargets"
    )]
    async fn list(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<SimulcastTargetList>> {
        let stream = undeleted_stream(&app, &p.project.id, &id).await.map_err(deleted_has_none)?;
        let items =
            app.db.targets(&stream.id).await?.into_iter().map(|t| SimulcastTarget::of(t, &stream)).collect();
        Ok(Json(SimulcastTargetList { items }))
    }

    /// Rename a simulcast target, or enable or disable it
    #[oai(
        path = "/v1/projects/:slug/streams/:id/simulcast-targets/:tid",
        method = "patch",
        operation_id = "updateSimulcastTarget"
    )]
    async fn update(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
        tid: Path<String>,
        body: JsonBody<UpdateSimulcastTarget>,
    ) -> ApiResult<Json<SimulcastTarget>> {
        let stream = undeleted_stream(&app, &p.project.id, &id).await?;
        let mut row = app.db.target(&stream.id, &tid).await?.ok_or_else(target_not_found)?;
        let body = body.0;
        if let Some(name) = body.name {
            row.name = name;
        }
        if let Some(enabled) = body.enabled {
            row.enabled = i64::from(enabled);
        }
        if !app.db.update_target(&row).await? {
            return Err(target_not_found());
        }
        app.simulcast.changed();
        Ok(Json(SimulcastTarget::of(row, &stream)))
    }

    /// Remove a simulcast target; its connection ends
    #[oai(
        path = "/v1/projects/:slug/streams/:id/simulcast-targets/:tid",
        method = "delete",
        operation_id = "deleteSimulcastTarget"
    )]
    async fn delete(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
        tid: Path<String>,
    ) -> ApiResult<Removed> {
        let stream = undeleted_stream(&app, &p.project.id, &id).await.map_err(deleted_has_none)?;
        if !app.db.delete_target(&stream.id, &tid).await? {
            return Err(target_not_found());
        }
        app.simulcast.changed();
        tracing::info!(project = %p.project.slug, stream = %stream.id, target = %tid.0, "simulcast target removed");
        Ok(Removed::NoContent)
    }
}

impl poem_openapi::types::Example for SimulcastTarget {
    fn example() -> Self {
        SimulcastTarget {
            id: "tg3m5p7r9t1v3x5z7b9d".into(),
            stream_id: "st8w2k4n6p1q3r5t7v9x".into(),
            name: "YouTube".into(),
            url: "rtmp://a.rtmp.youtube.com:1935/live2/abcd****".into(),
            enabled: true,
            status: TargetStatus::Live,
            last_error: None,
            connected_at: Some("2026-05-01T12:00:03.000Z".into()),
            bytes_sent: 18_750_000,
            created_at: "2026-05-01T11:58:00.000Z".into(),
        }
    }
}

impl poem_openapi::types::Example for CreateSimulcastTarget {
    fn example() -> Self {
        CreateSimulcastTarget {
            url: "rtmp://a.rtmp.youtube.com/live2/abcd-efgh-ijkl-mnop-qrst".into(),
            name: Some("YouTube".into()),
            enabled: None,
        }
    }
}
