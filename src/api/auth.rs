//! `/v1/auth`: sign-in with a 15-minute session cookie and a rotating 30-day refresh cookie
//! (CONTRACT: Users and sessions). Both tokens are stored only as SHA-256 hashes.

use std::sync::Arc;
use std::time::Duration;

use poem::web::cookie::{Cookie, CookieJar, SameSite};
use poem::web::Data;
use poem::Request;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};

use super::body::{Fields, FromJsonBody, JsonBody};
use super::error::{ApiError, ApiResult};
use super::security::{SignedIn, REFRESH_COOKIE, SESSION_COOKIE};
use super::ApiTags;
use crate::api::ApiState;
use crate::client_ip;
use crate::domain::{new_id, random_token, time::iso, ApiKeyHash, Email};
use crate::password_gate::{GateError, Queue, BUSY_RETRY_AFTER_SECS};
use crate::store::accounts::UserRow;
use crate::store::sessions::RefreshOutcome;

pub const SESSION_TTL: Duration = Duration::from_secs(15 * 60);
pub const REFRESH_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct User {
    #[oai(rename = "_id")]
    pub id: String,
    pub email: String,
    pub created_at: String,
}

impl From<UserRow> for User {
    fn from(u: UserRow) -> Self {
        User { id: u.id, email: u.email, created_at: iso(u.created_at) }
    }
}

/// Body of `POST /v1/auth/login`.
#[derive(Debug, Object)]
pub struct Login {
    pub email: String,
    pub password: String,
}

impl FromJsonBody for Login {
    fn from_fields(f: &mut Fields) -> Self {
        Login { email: f.string("email", 3..=254), password: f.string("password", 1..=1024) }
    }
}

/// Outcome of sign-out.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct LoggedOut {
    pub logged_out: bool,
}

pub struct AuthApi;

#[OpenApi(tag = "ApiTags::Auth")]
impl AuthApi {
    /// Sign in; sets the session and refresh cookies
    #[oai(path = "/v1/auth/login", method = "post", operation_id = "login")]
    async fn login(
        &self,
        app: Data<&Arc<ApiState>>,
        req: &Request,
        jar: &CookieJar,
        body: JsonBody<Login>,
    ) -> ApiResult<Json<User>> {
        let body = body.0;
        // Failures count per e-mail address; past the limit the address is locked out for a
        // while and attempts are refused before any hashing, right password or not, so that
        // guessing one account's password is slow whatever the number of client addresses.
        let email = Email::parse(&body.email).map(|e| e.as_str().to_string());
        let bucket = email.clone().unwrap_or_else(|_| body.email.to_lowercase());
        if let Some(retry_after) = app.login_failures.locked(&bucket) {
            return Err(ApiError::too_many(retry_after));
        }
        let user = match &email {
            Ok(email) => app.db.user_by_email(email).await?,
            Err(_) => None,
        };
        // An account without a password yet (an open invitation) is checked like no account.
        let stored = user.as_ref().map(|u| u.password_hash.clone()).filter(|h| !h.is_empty());
        // An address over its failed-auth limit is still heard (a right password is never
        // refused for its address) but does not queue for hashing ahead of anyone else.
        let limited = client_ip::of_request(req)
            .is_some_and(|ip| app.auth_failures.locked(&client_ip::limit_key(ip)).is_some());
        let queue = if limited { Queue::NoWait } else { Queue::Wait };
        let verified = app.passwords.verify(body.password, stored, queue).await.map_err(gate_error)?;
        let Some(user) = user.filter(|_| verified) else {
            if let Err(retry_after) = app.login_failures.fail(&bucket) {
                tracing::info!("sign-in failures over the limit for one e-mail address; locked out");
                return Err(ApiError::too_many(retry_after));
            }
            return Err(ApiError::unauthorized("invalid e-mail or password"));
        };
        AuthApi::issue(&app, jar, &user.id, &new_id()).await?;
        tracing::info!(user_id = %user.id, "signed in");
        Ok(Json(user.into()))
    }

    /// Exchange the refresh cookie for a new session and refresh cookie
    #[oai(path = "/v1/auth/refresh", method = "post", operation_id = "refresh")]
    async fn refresh(&self, app: Data<&Arc<ApiState>>, jar: &CookieJar) -> ApiResult<Json<User>> {
        let token = jar
            .get(REFRESH_COOKIE)
            .map(|c| c.value_str().to_string())
            .ok_or_else(|| ApiError::unauthorized("no refresh cookie; sign in"))?;
        match app.db.use_refresh(&ApiKeyHash::of(&token).0).await? {
            RefreshOutcome::Rotated { user_id, family_id } => {
                let user = app
                    .db
                    .user_by_id(&user_id)
                    .await?
                    .ok_or_else(|| ApiError::unauthorized("account not found"))?;
                AuthApi::issue(&app, jar, &user.id, &family_id).await?;
                Ok(Json(user.into()))
            }
            RefreshOutcome::Invalid => {
                Err(ApiError::unauthorized("refresh token expired or invalid; sign in"))
            }
            RefreshOutcome::Reused => {
                tracing::warn!("a used refresh token was presented again; its family is revoked");
                Err(ApiError::unauthorized("refresh token already used; sign in"))
            }
        }
    }

    /// Sign out; ends the session and its refresh tokens and clears the cookies
    #[oai(path = "/v1/auth/logout", method = "post", operation_id = "logout")]
    async fn logout(&self, app: Data<&Arc<ApiState>>, jar: &CookieJar) -> ApiResult<Json<LoggedOut>> {
        if let Some(c) = jar.get(SESSION_COOKIE) {
            app.db.delete_session(&ApiKeyHash::of(c.value_str()).0).await?;
        }
        if let Some(c) = jar.get(REFRESH_COOKIE) {
            if let Some(family) = app.db.refresh_family(&ApiKeyHash::of(c.value_str()).0).await? {
                app.db.revoke_refresh_family(&family).await?;
            }
        }
        for name in [SESSION_COOKIE, REFRESH_COOKIE] {
            let mut c = Cookie::named(name);
            c.set_path("/");
            c.make_removal();
            jar.add(c);
        }
        Ok(Json(LoggedOut { logged_out: true }))
    }

    /// The signed-in user
    #[oai(path = "/v1/auth/me", method = "get", operation_id = "me")]
    async fn me(&self, signed_in: SignedIn) -> ApiResult<Json<User>> {
        Ok(Json(signed_in.user.into()))
    }
}

/// The password gate's refusal: 429 when busy, 500 when hashing itself failed.
pub(crate) fn gate_error(err: GateError) -> ApiError {
    match err {
        GateError::Busy => ApiError::too_many(BUSY_RETRY_AFTER_SECS),
        GateError::Failed(detail) => ApiError::internal(detail),
    }
}

impl AuthApi {
    async fn issue(app: &ApiState, jar: &CookieJar, user_id: &str, family_id: &str) -> ApiResult<()> {
        let session = random_token(48);
        let refresh = random_token(48);
        app.db.create_session(&ApiKeyHash::of(&session).0, user_id, SESSION_TTL.as_millis() as i64).await?;
        app.db
            .create_refresh(&ApiKeyHash::of(&refresh).0, user_id, family_id, REFRESH_TTL.as_millis() as i64)
            .await?;
        let secure = app.settings.clients_use_tls();
        for (name, value, ttl) in
            [(SESSION_COOKIE, session, SESSION_TTL), (REFRESH_COOKIE, refresh, REFRESH_TTL)]
        {
            let mut c = Cookie::new_with_str(name, value);
            c.set_http_only(true);
            c.set_path("/");
            c.set_same_site(SameSite::Lax);
            c.set_secure(secure);
            c.set_max_age(ttl);
            jar.add(c);
        }
        Ok(())
    }
}
