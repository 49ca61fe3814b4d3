//! Invitations of new members and password changes (CONTRACT: Users and sessions). Tokens are
//! stored only as SHA-256 hashes; an account whose `password_hash` is empty has not set one yet.

use super::{Db, DbError};
use crate::domain::{new_id, time::now_ms, Role};
use crate::store::accounts::UserRow;

/// What redeeming an invitation led to.
#[derive(Debug, PartialEq, Eq)]
pub enum Accepted {
    /// The password is set; every invitation of the user is used up.
    Done { user_id: String },
    /// Unknown, used or expired (not told apart).
    Invalid,
}

impl Db {
    /// Creates a password-less account for `email`, its membership and its invitation, in one
    /// transaction. A unique violation means the account (or the membership) exists already.
    pub async fn add_invited_member(
        &self,
        email: &str,
        project_id: &str,
        role: Role,
        token_hash: &str,
        expires_at: i64,
    ) -> Result<UserRow, DbError> {
        let now = now_ms();
        let user =
            UserRow { id: new_id(), email: email.to_string(), password_hash: String::new(), created_at: now };
        let mut tx = self.begin_write().await?;
        sqlx::query("INSERT INTO users (id, email, password_hash, created_at) VALUES ($1, $2, $3, $4)")
            .bind(&user.id)
            .bind(&user.email)
            .bind(&user.password_hash)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO memberships (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(project_id)
        .bind(&user.id)
        .bind(role.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        insert_invitation(&mut tx, token_hash, &user.id, project_id, expires_at).await?;
        tx.commit().await?;
        Ok(user)
    }

    /// A new invitation for an account that has not set its password yet.
    pub async fn create_invitation(
        &self,
        token_hash: &str,
        user_id: &str,
        project_id: &str,
        expires_at: i64,
    ) -> Result<(), DbError> {
        let mut tx = self.begin_write().await?;
        insert_invitation(&mut tx, token_hash, user_id, project_id, expires_at).await?;
        tx.commit().await
    }

    /// Whether an invitation can be redeemed now (unused, unexpired).
    pub async fn invitation_is_open(&self, token_hash: &str) -> Result<bool, DbError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT user_id FROM invitations WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2",
        )
        .bind(token_hash)
        .bind(now_ms())
        .fetch_optional(self.pool())
        .await?;
        Ok(row.is_some())
    }

    /// Redeems an invitation exactly once (also under concurrent redemption): sets the user's
    /// password and uses up every invitation of that user.
    pub async fn accept_invitation(
        &self,
        token_hash: &str,
        password_hash: &str,
    ) -> Result<Accepted, DbError> {
        let now = now_ms();
        let mut tx = self.begin_write().await?;
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT user_id FROM invitations WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2",
        )
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((user_id,)) = row else { return Ok(Accepted::Invalid) };
        let claimed = sqlx::query(
            "UPDATE invitations SET used_at = $1 WHERE token_hash = $2 AND used_at IS NULL AND expires_at > $1",
        )
        .bind(now)
        .bind(token_hash)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if claimed == 0 {
            return Ok(Accepted::Invalid);
        }
        sqlx::query("UPDATE users SET password_hash = $1 WHERE id = $2")
            .bind(password_hash)
            .bind(&user_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE invitations SET used_at = $1 WHERE user_id = $2 AND used_at IS NULL")
            .bind(now)
            .bind(&user_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Accepted::Done { user_id })
    }

    /// Sets a new password and ends every other sign-in of the user: sessions other than
    /// `keep_session` and refresh tokens outside `keep_family`.
    pub async fn change_password(
        &self,
        user_id: &str,
        password_hash: &str,
        keep_session: &str,
        keep_family: Option<&str>,
    ) -> Result<(), DbError> {
        let mut tx = self.begin_write().await?;
        sqlx::query("UPDATE users SET password_hash = $1 WHERE id = $2")
            .bind(password_hash)
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM sessions WHERE user_id = $1 AND token_hash <> $2")
            .bind(user_id)
            .bind(keep_session)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM refresh_tokens WHERE user_id = $1 AND family_id <> $2")
            .bind(user_id)
            .bind(keep_family.unwrap_or_default())
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }
}

async fn insert_invitation(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    token_hash: &str,
    user_id: &str,
    project_id: &str,
    expires_at: i64,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO invitations (token_hash, user_id, project_id, expires_at, used_at, created_at) \
         VALUES ($1, $2, $3, $4, NULL, $5)",
    )
    .bind(token_hash)
    .bind(user_id)
    .bind(project_id)
    .bind(expires_at)
    .bind(now_ms())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}
