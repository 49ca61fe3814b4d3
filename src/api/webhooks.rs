//! `/v1/projects/<slug>/webhooks` (interface: Webhooks; CONTRACT: Webhooks).

use std::sync::Arc;

use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::body::{Fields, FromJsonBody, JsonBody};
use super::error::{ApiError, ApiResult};
use super::pagination::{Limit, PageQuery, Paginated, Skip};
use super::security::{need, Authorized};
use super::ApiTags;
use crate::api::ApiState;
use crate::domain::delivery::{DeliveryMove, DeliveryStatus};
use crate::domain::{new_id, time::iso, time::now_ms};
use crate::events::delivery::{self, DeliveryError};
use crate::events::{guard, signing, EventFilter, EventName};
use crate::store::webhooks::{DeliveryRow, DeliveryWrite, WebhookRow};

/// A webhook as listed: never its secret.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase", example)]
pub struct Webhook {
    #[oai(rename = "_id")]
    pub id: String,
    pub url: String,
    pub description: String,
    /// Subscribed event names, or `["*"]` for every event.
    pub events: Vec<EventFilter>,
    pub enabled: bool,
    /// Failed attempts in a row; a success resets it.
    pub consecutive_failures: i64,
    pub created_at: String,
    pub updated_at: String,
}

impl From<WebhookRow> for Webhook {
    fn from(w: WebhookRow) -> Self {
        Webhook {
            id: w.id,
            url: w.url,
            description: w.description,
            events: w.events.split_whitespace().filter_map(|e| EventFilter::parse(e).ok()).collect(),
            enabled: w.enabled == 1,
            consecutive_failures: w.consecutive_failures,
            created_at: iso(w.created_at),
            updated_at: iso(w.updated_at),
        }
    }
}

/// The created webhook with its signing secret: shown in this response only.
#[derive(Debug, Object)]
#[oai(example)]
pub struct CreatedWebhook {
    #[oai(flatten)]
    pub webhook: Webhook,
    /// 32 hexadecimal characters; signs every delivery (HMAC-SHA256). Never shown again.
    pub secret: String,
}

/// Body of `POST /webhooks`.
#[derive(Debug, Object)]
#[oai(example)]
pub struct CreateWebhook {
    /// An http(s) URL. In production: https only, and its host must resolve to public
    /// addresses only; plain http and private or loopback targets are for development mode.
    pub url: String,
    /// Optional label, up to 200 characters.
    pub description: Option<String>,
    /// Event names from the catalog, or `*`; at least one.
    pub events: Vec<EventFilter>,
    /// Whether deliveries are sent (default true).
    pub enabled: Option<bool>,
}

/// Stored form of a subscription: `*` alone, or the names sorted, once each.
fn normalise_events(mut events: Vec<EventFilter>) -> String {
    if events.iter().any(|e| e.as_str() == "*") {
        return "*".into();
    }
    events.sort();
    events.dedup();
    events.iter().map(EventFilter::as_str).collect::<Vec<_>>().join(" ")
}

impl FromJsonBody for CreateWebhook {
    fn from_fields(f: &mut Fields) -> Self {
        let url = f.string("url", 1..=2048);
        f.document("url", |r| r.pattern = Some(guard::URL_PATTERN));
        let description = f.opt_string("description", 0..=200);
        let events = f.list("events", 1..=32, EventFilter::parse).unwrap_or_default();
        CreateWebhook { url, description, events, enabled: f.opt_bool("enabled") }
    }
}

/// Body of `PATCH /webhooks/<id>`: any of the fields.
#[derive(Debug, Object)]
pub struct UpdateWebhook {
    pub url: Option<String>,
    pub description: Option<String>,
    pub events: Option<Vec<EventFilter>>,
    pub enabled: Option<bool>,
}

impl FromJsonBody for UpdateWebhook {
    fn from_fields(f: &mut Fields) -> Self {
        UpdateWebhook {
            url: {
                let url = f.opt_string("url", 1..=2048);
                f.document("url", |r| r.pattern = Some(guard::URL_PATTERN));
                url
            },
            description: f.opt_string("description", 0..=200),
            events: f.opt_list("events", 1..=32, EventFilter::parse),
            enabled: f.opt_bool("enabled"),
        }
    }
}

/// Every event name in the catalog.
#[derive(Debug, Object)]
pub struct EventCatalog {
    pub events: Vec<EventName>,
}

/// One delivery of an event to a webhook.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct Delivery {
    /// Also the envelope `id` and the `X-Service-Delivery` header; the same on every retry.
    #[oai(rename = "_id")]
    pub id: String,
    pub webhook_id: String,
    pub event: String,
    pub status: DeliveryStatus,
    pub attempts: i64,
    /// HTTP status of the last attempt, if it got a response.
    pub response_code: Option<i64>,
    /// Why the last attempt failed.
    pub error: Option<String>,
    pub created_at: String,
    pub last_attempt_at: Option<String>,
    /// When the next attempt is due (pending deliveries only).
    pub next_attempt_at: Option<String>,
}

impl From<DeliveryRow> for Delivery {
    fn from(d: DeliveryRow) -> Self {
        let status = d.status();
        let pending = status == DeliveryStatus::Pending;
        Delivery {
            id: d.id,
            webhook_id: d.webhook_id,
            event: d.event,
            status,
            attempts: d.attempts,
            response_code: d.response_code,
            error: d.error,
            created_at: iso(d.created_at),
            last_attempt_at: d.last_attempt_at.map(iso),
            next_attempt_at: pending.then(|| iso(d.next_attempt_at)),
        }
    }
}

/// Recent deliveries, newest first.
#[derive(Debug, Object)]
pub struct DeliveryList {
    pub items: Vec<Delivery>,
}

#[derive(ApiResponse)]
pub enum CreateWebhookResponse {
    /// The webhook was created; `secret` is shown only here.
    #[oai(status = 201)]
    Created(Json<CreatedWebhook>),
}

#[derive(ApiResponse)]
pub enum TestWebhookResponse {
    /// A signed `webhook.test` delivery was queued.
    #[oai(status = 201)]
    Created(Json<Delivery>),
}

pub struct WebhooksApi;

#[OpenApi(tag = "ApiTags::Webhooks")]
impl WebhooksApi {
    /// List every event name in the catalog
    #[oai(path = "/v1/projects/:slug/webhooks/events", method = "get", operation_id = "listWebhookEvents")]
    async fn events(
        &self,
        _p: Authorized<need::WebhooksRead>,
        #[oai(name = "slug")] _slug: Path<String>,
    ) -> ApiResult<Json<EventCatalog>> {
        Ok(Json(EventCatalog { events: EventName::ALL.to_vec() }))
    }

    /// List the project's webhooks, newest first
    #[oai(path = "/v1/projects/:slug/webhooks", method = "get", operation_id = "listWebhooks")]
    async fn list(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::WebhooksRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        /// Items to skip (default 0).
        skip: Query<Option<Skip>>,
        /// Page size (default 20, at most 100).
        limit: Query<Option<Limit<100>>>,
    ) -> ApiResult<Json<Paginated<Webhook>>> {
        let page = PageQuery::list(skip.0, limit.0)?;
        let rows = app.db.list_webhooks(&p.project.id, page.skip, page.limit).await?;
        Ok(Json(Paginated::from_rows(rows, page)))
    }

    /// Create a webhook; its signing secret is returned only in this response
    #[oai(path = "/v1/projects/:slug/webhooks", method = "post", operation_id = "createWebhook")]
    async fn create(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::WebhooksWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        body: JsonBody<CreateWebhook>,
    ) -> ApiResult<CreateWebhookResponse> {
        let body = body.0;
        let url = guard::check_target(&body.url, app.allow_private_webhooks())
            .await
            .map_err(|problem| ApiError::invalid("url", &problem))?;
        let now = now_ms();
        let id = new_id();
        let secret = signing::new_secret();
        let row = WebhookRow {
            secret: app.master_key.seal(secret.as_bytes(), &crate::store::secrets::webhook_context(&id)),
            id,
            project_id: p.project.id.clone(),
            url: url.to_string(),
            description: body.description.unwrap_or_default(),
            events: normalise_events(body.events),
            enabled: i64::from(body.enabled.unwrap_or(true)),
            consecutive_failures: 0,
            created_at: now,
            updated_at: now,
        };
        app.db.create_webhook(&row).await?;
        tracing::info!(project = %p.project.slug, webhook = %row.id, "webhook created");
        Ok(CreateWebhookResponse::Created(Json(CreatedWebhook { webhook: row.into(), secret })))
    }

    /// Recent deliveries, newest first, optionally of one webhook
    #[oai(
        path = "/v1/projects/:slug/webhooks/deliveries",
        method = "get",
        operation_id = "listWebhookDeliveries"
    )]
    async fn deliveries(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::WebhooksRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        /// Only deliveries to this webhook.
        #[oai(name = "webhookId")]
        webhook_id: Query<Option<String>>,
        /// How many (default 50, at most 200).
        limit: Query<Option<Limit<200>>>,
    ) -> ApiResult<Json<DeliveryList>> {
        let page = PageQuery::parse(None, limit.0.map(|l| l.0), 50, 200)?;
        let rows = app.db.list_deliveries(&p.project.id, webhook_id.0.as_deref(), page.limit).await?;
        Ok(Json(DeliveryList { items: rows.into_iter().map(Into::into).collect() }))
    }

    /// Send a finished delivery again: same id and bytes, a fresh set of attempts
    #[oai(
        path = "/v1/projects/:slug/webhooks/deliveries/:id/redeliver",
        method = "post",
        operation_id = "redeliverWebhookDelivery"
    )]
    async fn redeliver(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::WebhooksWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<Delivery>> {
        let row = app
            .db
            .delivery(&p.project.id, &id)
            .await?
            .ok_or_else(|| ApiError::not_found("delivery not found"))?;
        let write = DeliveryWrite::Requeue { project_id: &p.project.id };
        match delivery::apply(&app.db, Some(&app.outbox), &id, row.status(), DeliveryMove::Requeued, &write)
            .await
        {
            Ok(()) => {}
            Err(DeliveryError::Refused(_)) => return Err(ApiError::conflict("delivery is still pending")),
            Err(DeliveryError::Db(e)) => return Err(e.into()),
        }
        let row = app
            .db
            .delivery(&p.project.id, &id)
            .await?
            .ok_or_else(|| ApiError::not_found("delivery not found"))?;
        Ok(Json(row.into()))
    }

    /// Get a webhook
    #[oai(path = "/v1/projects/:slug/webhooks/:id", method = "get", operation_id = "getWebhook")]
    async fn get(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::WebhooksRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<Webhook>> {
        Ok(Json(find(&app, &p.project.id, &id).await?.into()))
    }

    /// Change a webhook's url, events, description or enabled flag
    #[oai(path = "/v1/projects/:slug/webhooks/:id", method = "patch", operation_id = "updateWebhook")]
    async fn update(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::WebhooksWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
        body: JsonBody<UpdateWebhook>,
    ) -> ApiResult<Json<Webhook>> {
        let mut row = find(&app, &p.project.id, &id).await?;
        let body = body.0;
        if let Some(url) = body.url {
            row.url = guard::check_target(&url, app.allow_private_webhooks())
                .await
                .map_err(|problem| ApiError::invalid("url", &problem))?
                .to_string();
        }
        if let Some(description) = body.description {
            row.description = description;
        }
        if let Some(events) = body.events {
            row.events = normalise_events(events);
        }
        if let Some(enabled) = body.enabled {
            row.enabled = i64::from(enabled);
        }
        row.updated_at = now_ms();
        app.db.update_webhook(&row).await?;
        Ok(Json(row.into()))
    }

    /// Delete a webhook and its delivery log
    #[oai(path = "/v1/projects/:slug/webhooks/:id", method = "delete", operation_id = "deleteWebhook")]
    async fn delete(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::WebhooksWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<Webhook>> {
        let row = find(&app, &p.project.id, &id).await?;
        app.db.delete_webhook(&p.project.id, &id).await?;
        tracing::info!(project = %p.project.slug, webhook = %row.id, "webhook deleted");
        Ok(Json(row.into()))
    }

    /// Queue a signed test ping (`webhook.test`) to this webhook
    #[oai(path = "/v1/projects/:slug/webhooks/:id/test", method = "post", operation_id = "testWebhook")]
    async fn test(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::WebhooksWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<TestWebhookResponse> {
        let row = find(&app, &p.project.id, &id).await?;
        if row.enabled != 1 {
            return Err(ApiError::conflict("webhook is disabled; enable it to send a test"));
        }
        let delivery_id = crate::events::queue_test(&app.db, &p.project.id, &row.id).await?;
        app.outbox.wake();
        let d = app
            .db
            .delivery(&p.project.id, &delivery_id)
            .await?
            .ok_or_else(|| ApiError::internal("delivery vanished"))?;
        Ok(TestWebhookResponse::Created(Json(d.into())))
    }
}

async fn find(app: &ApiState, project_id: &str, id: &str) -> ApiResult<WebhookRow> {
    app.db.webhook(project_id, id).await?.ok_or_else(|| ApiError::not_found("webhook not found"))
}
