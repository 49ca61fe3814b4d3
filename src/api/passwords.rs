//! `/v1/auth/accept-invitation` and `/v1/auth/password` (CONTRACT: Users and sessions): a new
//! member sets their own password by redeeming the invitation of `POST …/members`, and a
//! signed-in user changes theirs, which ends their other sessions. Every hash goes through the
//! server's bounded password gate.

use std::sync::Arc;

use poem::web::cookie::CookieJar;
use poem::web::Data;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};

use super::auth::{gate_error, User};
use super::body::{Fields, FromJsonBody, JsonBody};
use super::error::{ApiError, ApiResult};
use super::security::{SignedIn, REFRESH_COOKIE};
use super::ApiTags;
use crate::api::ApiState;
use crate::domain::ApiKeyHash;
use crate::password_gate::Queue;
use crate::store::invitations::Accepted;

/// Lengths a new password may have, in characters.
const NEW_PASSWORD: std::ops::RangeInclusive<usize> = 8..=1024;

/// Body of `POST /v1/auth/accept-invitation`.
#[derive(Debug, Object)]
pub struct AcceptInvitation {
    /// The invitation token of the `POST …/members` response.
    pub token: String,
    /// The password to set, 8 to 1024 characters.
    pub password: String,
}

impl FromJsonBody for AcceptInvitation {
    fn from_fields(f: &mut Fields) -> Self {
        AcceptInvitation { token: f.string("token", 1..=256), password: f.string("password", NEW_PASSWORD) }
    }
}

/// Body of `POST /v1/auth/password`.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct ChangePassword {
    pub current_password: String,
    /// 8 to 1024 characters.
    pub new_password: String,
}

impl FromJsonBody for ChangePassword {
    fn from_fields(f: &mut Fields) -> Self {
        ChangePassword {
            current_password: f.string("currentPassword", 1..=1024),
            new_password: f.string("newPassword", NEW_PASSWORD),
        }
    }
}

pub struct PasswordsApi;

#[OpenApi(tag = "ApiTags::Auth")]
impl PasswordsApi {
    /// Redeem an invitation: set the password of the invited account
    ///
    /// The token is single use and valid 7 days. An unknown, used or expired token is 404 (the
    /// three are not told apart). The person then signs in with `POST /v1/auth/login`.
    #[oai(path = "/v1/auth/accept-invitation", method = "post", operation_id = "acceptInvitation")]
    async fn accept_invitation(
        &self,
        app: Data<&Arc<ApiState>>,
        body: JsonBody<AcceptInvitation>,
    ) -> ApiResult<Json<User>> {
        let body = body.0;
        let token_hash = ApiKeyHash::of(&body.token).0;
        // Checked before hashing, so a bad token costs no hash; redeemed atomically after.
        if !app.db.invitation_is_open(&token_hash).await? {
            return Err(invitation_not_found());
        }
        let hash = app.passwords.hash(body.password).await.map_err(gate_error)?;
        let Accepted::Done { user_id } = app.db.accept_invitation(&token_hash, &hash).await? else {
            return Err(invitation_not_found());
        };
        let user = app.db.user_by_id(&user_id).await?.ok_or_else(|| ApiError::internal("user vanished"))?;
        tracing::info!(user_id = %user.id, "invitation accepted; password set");
        Ok(Json(user.into()))
    }

    /// Change one's own password; ends one's other sessions
    ///
    /// Needs the current password (403 when it is wrong; wrong attempts count towards the
    /// sign-in limit of the account). Every other session and refresh token of the user ends;
    /// the session of this request stays signed in.
    #[oai(path = "/v1/auth/password", method = "post", operation_id = "changePassword")]
    async fn change_password(
        &self,
        app: Data<&Arc<ApiState>>,
        me: SignedIn,
        jar: &CookieJar,
        body: JsonBody<ChangePassword>,
    ) -> ApiResult<Json<User>> {
        let body = body.0;
        let bucket = me.user.email.clone();
        if let Some(retry_after) = app.login_failures.locked(&bucket) {
            return Err(ApiError::too_many(retry_after));
        }
        let stored = Some(me.user.password_hash.clone()).filter(|h| !h.is_empty());
        if !app.passwords.verify(body.current_password, stored, Queue::Wait).await.map_err(gate_error)? {
            app.login_failures.fail(&bucket).map_err(ApiError::too_many)?;
            return Err(ApiError::forbidden("the current password is wrong"));
        }
        let hash = app.passwords.hash(body.new_password).await.map_err(gate_error)?;
        let family = match jar.get(REFRESH_COOKIE) {
            Some(c) => app.db.refresh_family(&ApiKeyHash::of(c.value_str()).0).await?,
            None => None,
        };
        app.db.change_password(&me.user.id, &hash, &ApiKeyHash::of(&me.session).0, family.as_deref()).await?;
        tracing::info!(user_id = %me.user.id, "password changed; other sessions ended");
        Ok(Json(me.user.into()))
    }
}

fn invitation_not_found() -> ApiError {
    ApiError::not_found("invitation not found, used or expired")
}
