//! The one authentication step of every project route: a bearer API key or a session cookie
//! (interface: Authentication; CONTRACT: Scopes, Users and sessions).
//!
//! Outcomes, in this order: a malformed, unknown or revoked credential is 401; a key or user
//! over its rate is 429; a project the credential does not belong to is 404 (existence is not
//! revealed); a scope or role that does not allow the action is 403.

use poem_openapi::auth::{ApiKey, Bearer};
use poem_openapi::SecurityScheme;

use super::error::{ApiError, ApiResult};
use crate::app::App;
use crate::domain::{time::now_ms, ApiKeyHash, RawApiKey, Scope, ScopeSet};
use crate::store::accounts::{ProjectRow, UserRow};
use crate::store::api_keys::KeyWithProject;

pub const SESSION_COOKIE: &str = "sluice_session";
pub const REFRESH_COOKIE: &str = "sluice_refresh";

/// `Authorization: Bearer svc_…` — a project API key.
#[derive(SecurityScheme)]
#[oai(ty = "bearer", bearer_format = "svc_ followed by 43 URL-safe characters")]
pub struct ApiKeyAuth(Bearer);

/// The session cookie set by `POST /v1/auth/login`.
#[derive(SecurityScheme)]
#[oai(ty = "api_key", key_in = "cookie", key_name = "sluice_session")]
pub struct SessionAuth(ApiKey);

/// Either credential. A bearer header, when present, is the one used.
#[derive(SecurityScheme)]
pub enum Auth {
    ApiKey(ApiKeyAuth),
    Session(SessionAuth),
}

/// Who is calling, in which project, holding which scopes.
#[derive(Debug)]
pub struct Principal {
    pub project: ProjectRow,
    pub scopes: ScopeSet,
    pub actor: Actor,
}

#[derive(Debug, Clone)]
pub enum Actor {
    Key { id: String },
    User { id: String },
}

impl Principal {
    /// 403 unless the principal holds a scope granting `needed`.
    pub fn require(&self, needed: Scope) -> ApiResult<()> {
        if self.scopes.allows(needed) {
            Ok(())
        } else {
            Err(ApiError::forbidden(match self.actor {
                Actor::Key { .. } => format!("this API key lacks the {needed} scope"),
                Actor::User { .. } => format!("your role in this project does not allow {needed}"),
            }))
        }
    }
}

impl App {
    /// Authenticates `auth` for project `slug` and checks that it allows `needed`
    /// (`None`: any member of the project).
    pub async fn authorize(&self, auth: &Auth, slug: &str, needed: Option<Scope>) -> ApiResult<Principal> {
        let principal = match auth {
            Auth::ApiKey(ApiKeyAuth(bearer)) => self.authorize_key(&bearer.token, slug).await?,
            Auth::Session(SessionAuth(cookie)) => {
                let user = self.session_user(&cookie.key).await?;
                self.rate_limit(format!("user:{}", user.id))?;
                let project = self.db.project_by_slug(slug).await?.ok_or_else(project_not_found)?;
                let role = self.db.role_in(&project.id, &user.id).await?.ok_or_else(project_not_found)?;
                Principal { project, scopes: role.scopes(), actor: Actor::User { id: user.id } }
            }
        };
        if let Some(needed) = needed {
            principal.require(needed)?;
        }
        Ok(principal)
    }

    /// A valid, unrevoked key: malformed, unknown or revoked is 401.
    async fn authenticate_key(&self, token: &str) -> ApiResult<KeyWithProject> {
        let raw = RawApiKey::parse(token).ok_or_else(|| {
            ApiError::unauthorized("malformed API key: expected svc_ followed by 43 characters")
        })?;
        let hash = raw.hash();
        let key = self
            .db
            .api_key_by_hash(&hash.0)
            .await?
            .filter(|k| hash.matches(&k.hashed_key))
            .ok_or_else(|| ApiError::unauthorized("invalid API key"))?;
        if key.revoked_at.is_some() {
            return Err(ApiError::unauthorized("API key revoked"));
        }
        Ok(key)
    }

    async fn authorize_key(&self, token: &str, slug: &str) -> ApiResult<Principal> {
        let key = self.authenticate_key(token).await?;
        self.rate_limit(format!("key:{}", key.id))?;
        self.note_key_use(&key.id);
        if key.project_slug != slug {
            return Err(project_not_found());
        }
        Ok(Principal {
            project: ProjectRow {
                id: key.project_id,
                slug: key.project_slug,
                name: String::new(),
                created_at: 0,
            },
            scopes: ScopeSet::from_db(&key.scopes),
            actor: Actor::Key { id: key.id },
        })
    }

    /// The signed-in user of a session cookie (for endpoints that are not project-scoped).
    pub async fn session_user(&self, token: &str) -> ApiResult<UserRow> {
        let user_id = self
            .db
            .session_user(&ApiKeyHash::of(token).0)
            .await?
            .ok_or_else(|| ApiError::unauthorized("session expired or invalid; sign in again"))?;
        self.db
            .user_by_id(&user_id)
            .await?
            .ok_or_else(|| ApiError::unauthorized("session expired or invalid; sign in again"))
    }

    /// The signed-in user, refusing API keys with 403 (they act for a project, not a person).
    pub async fn require_user(&self, auth: &Auth) -> ApiResult<UserRow> {
        match auth {
            Auth::Session(SessionAuth(cookie)) => self.session_user(&cookie.key).await,
            Auth::ApiKey(ApiKeyAuth(bearer)) => {
                // Still authenticate, so a bad key is 401 rather than 403.
                self.authenticate_key(&bearer.token).await?;
                Err(ApiError::forbidden("this endpoint needs a signed-in user, not an API key"))
            }
        }
    }

    fn rate_limit(&self, bucket: String) -> ApiResult<()> {
        self.request_limiter.take(&bucket).map_err(ApiError::too_many)
    }

    /// Writes `lastUsedAt` at most once a minute per key, off the request path.
    fn note_key_use(&self, key_id: &str) {
        let now = now_ms();
        {
            let mut seen = self.key_uses.lock().unwrap_or_else(|p| p.into_inner());
            if seen.get(key_id).is_some_and(|last| now - last < 60_000) {
                return;
            }
            if seen.len() > 100_000 {
                seen.clear();
            }
            seen.insert(key_id.to_string(), now);
        }
        let db = self.db.clone();
        let key_id = key_id.to_string();
        tokio::spawn(async move {
            if let Err(e) = db.touch_api_key(&key_id, now).await {
                tracing::warn!(error = %e, "recording API key use");
            }
        });
    }
}

fn project_not_found() -> ApiError {
    ApiError::not_found("project not found")
}
