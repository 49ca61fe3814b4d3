//! The one authentication step of every project route: a bearer API key or a session cookie
//! (interface: Authentication; CONTRACT: Scopes, Users and sessions).
//!
//! Outcomes, in this order: a malformed, unknown or revoked credential is 401; a key or user
//! over its rate is 429; a project the credential does not belong to is 404 (existence is not
//! revealed); a scope or role that does not allow the action is 403.
//!
//! Operations take the caller as [`Authorized`] (project routes) or [`SignedIn`] (a person),
//! declared before their path, query and body parameters. poem-openapi extracts an operation's
//! parameters in the order they are declared, so these checks run before any query parameter
//! or body is read: the contract's order (credential → project → scope → body and query) holds
//! for every operation by construction, and an anonymous caller never learns whether its body
//! was valid. (A handler that declared its body first would break this; the API tests of
//! `order_of_checks` would catch it on the operations they cover.)

use std::marker::PhantomData;
use std::sync::Arc;

use poem::{Request, RequestBody};
use poem_openapi::auth::{ApiKey, Bearer, BearerAuthorization};
use poem_openapi::registry::Registry;
use poem_openapi::{ApiExtractor, ApiExtractorType, ExtractParamOptions, SecurityScheme};

use super::error::{ApiError, ApiResult};
use crate::api::ApiState;
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

/// What an operation needs of its caller in the project of its path.
pub trait Need: Send + Sync {
    /// `None`: any member of the project.
    const SCOPE: Option<Scope>;
}

/// The needs of operations, one type each (`Authorized<need::StreamsWrite>`).
pub mod need {
    use super::{Need, Scope};

    macro_rules! needs {
        ($($(#[$doc:meta])* $name:ident => $scope:expr,)*) => {
            $($(#[$doc])* pub struct $name; impl Need for $name { const SCOPE: Option<Scope> = $scope; })*
        };
    }

    needs! {
        /// Any key of the project, any member.
        Member => None,
        StreamsRead => Some(Scope::StreamsRead),
        StreamsWrite => Some(Scope::StreamsWrite),
        VodRead => Some(Scope::VodRead),
        VodWrite => Some(Scope::VodWrite),
        WebhooksRead => Some(Scope::WebhooksRead),
        WebhooksWrite => Some(Scope::WebhooksWrite),
        ApiKeysRead => Some(Scope::ApiKeysRead),
        ApiKeysWrite => Some(Scope::ApiKeysWrite),
        /// A key holding `*`, or an admin.
        Admin => Some(Scope::All),
    }
}

/// The caller of a project route, authenticated, in the project of the path, allowed `N`.
pub struct Authorized<N: Need>(pub Principal, PhantomData<N>);

impl<N: Need> std::ops::Deref for Authorized<N> {
    type Target = Principal;
    fn deref(&self) -> &Principal {
        &self.0
    }
}

/// The signed-in person calling (API keys are refused with 403: they act for a project).
pub struct SignedIn {
    pub user: UserRow,
    /// The raw session token of the request (its cookie).
    pub session: String,
}

/// The app and the credential of a request (401 when there is none).
async fn credential<'a>(
    request: &'a Request,
    body: &mut RequestBody,
) -> poem::Result<(&'a Arc<ApiState>, Auth)> {
    let app = request.data::<Arc<ApiState>>().ok_or_else(|| ApiError::internal("the app is not attached"))?;
    let auth = <Auth as ApiExtractor>::from_request(request, body, ExtractParamOptions::default()).await?;
    Ok((app, auth))
}

/// The `<slug>` of `/v1/projects/<slug>/…` (as written; a slug has nothing to percent-encode).
fn slug_of(request: &Request) -> &str {
    let path = request.original_uri().path();
    path.strip_prefix("/v1/projects/").and_then(|rest| rest.split('/').next()).unwrap_or_default()
}

/// What the document says of an extractor that reads [`Auth`]'s credentials: the same
/// security schemes, no parameters of its own.
macro_rules! documented_as_auth {
    () => {
        const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::SecurityScheme];
        type ParamType = ();
        type ParamRawType = ();

        fn register(registry: &mut Registry) {
            <Auth as ApiExtractor>::register(registry);
        }

        fn security_schemes() -> Vec<&'static str> {
            <Auth as ApiExtractor>::security_schemes()
        }

        fn has_security_fallback() -> bool {
            <Auth as ApiExtractor>::has_security_fallback()
        }
    };
}

impl<'a, N: Need> ApiExtractor<'a> for Authorized<N> {
    documented_as_auth!();

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _param_opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let authorized = async {
            let (app, auth) = credential(request, body).await?;
            Ok(app.authorize(&auth, slug_of(request), N::SCOPE).await?)
        }
        .await;
        match authorized {
            Ok(principal) => Ok(Authorized(principal, PhantomData)),
            Err(refused) => {
                super::body::discard(body).await;
                Err(refused)
            }
        }
    }
}

impl<'a> ApiExtractor<'a> for SignedIn {
    documented_as_auth!();

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _param_opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let signed_in = async {
            let (app, auth) = credential(request, body).await?;
            match auth {
                Auth::Session(SessionAuth(cookie)) => {
                    Ok(SignedIn { user: app.session_user(&cookie.key).await?, session: cookie.key })
                }
                key => Err(app.require_user(&key).await.err().unwrap_or_else(|| {
                    ApiError::forbidden("this endpoint needs a signed-in user, not an API key")
                }))?,
            }
        }
        .await;
        if signed_in.is_err() {
            super::body::discard(body).await;
        }
        signed_in
    }
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

impl ApiState {
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

    /// Whose `Idempotency-Key`s a request's credential uses (CONTRACT: Conventions): its
    /// project's for an API key (`project:<id>`), the person's for a session (`user:<id>`).
    /// `None` without a valid credential; takes nothing from the rate limits, which the
    /// operation itself applies.
    pub async fn idempotency_scope(&self, request: &Request) -> Option<String> {
        // Read as [`Auth`] reads them (its extractor works only inside an operation): a bearer
        // header first, then the session cookie of the jar.
        if let Ok(bearer) = <Bearer as BearerAuthorization>::from_request(request) {
            let key = self.authenticate_key(&bearer.token).await.ok()?;
            return Some(format!("project:{}", key.project_id));
        }
        let cookie = request.cookie().get(SESSION_COOKIE)?;
        let user = self.session_user(cookie.value_str()).await.ok()?;
        Some(format!("user:{}", user.id))
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
