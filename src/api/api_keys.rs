//! `/v1/projects/<slug>/api-keys` (interface: API keys; CONTRACT: Scopes).

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
use crate::domain::api_key::RawApiKey;
use crate::domain::{time::iso, Scope, ScopeSet};
use crate::store::api_keys::ApiKeyRow;

/// An API key as listed: never the key itself, never its hash.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct ApiKeyRecord {
    #[oai(rename = "_id")]
    pub id: String,
    pub label: String,
    /// The first 12 characters of the key, for identification.
    pub prefix: String,
    pub scopes: Vec<Scope>,
    pub created_at: String,
    /// When the key was last used (sampled: written at most once a minute).
    pub last_used_at: Option<String>,
    /// When the key was revoked; a revoked key stays revoked.
    pub revoked_at: Option<String>,
}

impl From<ApiKeyRow> for ApiKeyRecord {
    fn from(r: ApiKeyRow) -> Self {
        ApiKeyRecord {
            id: r.id,
            label: r.label,
            prefix: r.prefix,
            scopes: ScopeSet::from_db(&r.scopes).as_slice().to_vec(),
            created_at: iso(r.created_at),
            last_used_at: r.last_used_at.map(iso),
            revoked_at: r.revoked_at.map(iso),
        }
    }
}

/// The created key, with the raw `key`: shown in this response only.
#[derive(Debug, Object)]
pub struct CreatedApiKey {
    #[oai(flatten)]
    pub record: ApiKeyRecord,
    /// The raw key, `svc_` followed by 43 characters. Store it now; it is never shown again.
    pub key: String,
}

/// Body of `POST /api-keys`.
#[derive(Debug, Object)]
pub struct CreateApiKey {
    /// Free-form label, up to 100 characters.
    pub label: Option<String>,
    /// Scopes of the key (default `["*"]`). A key cannot be given a scope its creator lacks.
    pub scopes: Option<Vec<Scope>>,
}

impl FromJsonBody for CreateApiKey {
    fn from_fields(f: &mut Fields) -> Self {
        CreateApiKey {
            label: f.opt_string("label", 0..=100),
            scopes: f.opt_list("scopes", 1..=Scope::ALL.len(), |s| s.parse::<Scope>()),
        }
    }
}

/// Every supported scope.
#[derive(Debug, Object)]
pub struct ScopeList {
    pub scopes: Vec<Scope>,
}

#[derive(ApiResponse)]
pub enum CreateApiKeyResponse {
    /// The key was created.
    #[oai(status = 201)]
    Created(Json<CreatedApiKey>),
}

pub struct ApiKeysApi;

#[OpenApi(tag = "ApiTags::ApiKeys")]
impl ApiKeysApi {
    /// List every supported scope
    #[oai(path = "/v1/projects/:slug/api-keys/scopes", method = "get", operation_id = "listScopes")]
    async fn scopes(
        &self,
        _p: Authorized<need::ApiKeysRead>,
        #[oai(name = "slug")] _slug: Path<String>,
    ) -> ApiResult<Json<ScopeList>> {
        Ok(Json(ScopeList { scopes: Scope::ALL.to_vec() }))
    }

    /// List the project's API keys, newest first
    #[oai(path = "/v1/projects/:slug/api-keys", method = "get", operation_id = "listApiKeys")]
    async fn list(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::ApiKeysRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        /// Items to skip (default 0).
        skip: Query<Option<Skip>>,
        /// Page size (default 20, at most 100).
        limit: Query<Option<Limit<100>>>,
    ) -> ApiResult<Json<Paginated<ApiKeyRecord>>> {
        let page = PageQuery::list(skip.0, limit.0)?;
        let rows = app.db.list_api_keys(&p.project.id, page.skip, page.limit).await?;
        Ok(Json(Paginated::from_rows(rows, page)))
    }

    /// Create an API key; the raw key is returned only in this response
    #[oai(path = "/v1/projects/:slug/api-keys", method = "post", operation_id = "createApiKey")]
    async fn create(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::ApiKeysWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        body: JsonBody<CreateApiKey>,
    ) -> ApiResult<CreateApiKeyResponse> {
        let body = body.0;
        let wanted = ScopeSet::new(body.scopes.unwrap_or_else(|| vec![Scope::All]));
        if !p.scopes.covers(&wanted) {
            return Err(ApiError::forbidden("a key cannot be given a scope that its creator does not hold"));
        }
        let raw = RawApiKey::generate();
        let row = app
            .db
            .create_api_key(
                &p.project.id,
                body.label.as_deref().unwrap_or(""),
                raw.prefix(),
                &raw.hash().0,
                &wanted,
            )
            .await?;
        tracing::info!(project = %p.project.slug, key_id = %row.id, prefix = %row.prefix, "API key created");
        Ok(CreateApiKeyResponse::Created(Json(CreatedApiKey {
            record: row.into(),
            key: raw.expose().to_string(),
        })))
    }

    /// Revoke an API key; effective on the next request, and permanent
    #[oai(path = "/v1/projects/:slug/api-keys/:id", method = "delete", operation_id = "revokeApiKey")]
    async fn revoke(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::ApiKeysWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<ApiKeyRecord>> {
        let row = app
            .db
            .revoke_api_key(&p.project.id, &id)
            .await?
            .ok_or_else(|| ApiError::not_found("API key not found"))?;
        tracing::info!(project = %p.project.slug, key_id = %row.id, "API key revoked");
        Ok(Json(row.into()))
    }
}
