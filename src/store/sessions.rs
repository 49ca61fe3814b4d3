//! Sign-in sessions and rotating refresh tokens, both stored only as SHA-256 hashes.

use super::{Db, DbError};
use crate::domain::time::now_ms;

/// What presenting a refresh token led to.
#[derive(Debug, PartialEq, Eq)]
pub enum RefreshOutcome {
    /// The token was valid and is now used; the caller issues the next pair for this user.
    Rotated { user_id: String, family_id: String },
    /// Unknown or expired.
    Invalid,
    /// Already used once: the whole family is revoked (a stolen token was replayed).
    Reused,
}

impl Db {
    pub async fn create_session(&self, token_hash: &str, user_id: &str, ttl_ms: i64) -> Result<(), DbError> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO sessions (token_hash, user_id, expires_at, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(token_hash)
        .bind(user_id)
        .bind(now + ttl_ms)
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The user of a live session.
    pub async fn session_user(&self, token_hash: &str) -> Result<Option<String>, DbError> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT user_id FROM sessions WHERE token_hash = $1 AND expires_at > $2")
                .bind(token_hash)
                .bind(now_ms())
                .fetch_optional(self.pool())
                .await?;
        Ok(row.map(|(u,)| u))
    }

    pub async fn delete_session(&self, token_hash: &str) -> Result<(), DbError> {
        sqlx::query("DELETE FROM sessions WHERE token_hash = $1")
            .bind(token_hash)
            .execute(self.pool())
            .await
            .map(|_| ())
    }

    pub async fn create_refresh(
        &self,
        token_hash: &str,
        user_id: &str,
        family_id: &str,
        ttl_ms: i64,
    ) -> Result<(), DbError> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO refresh_tokens (token_hash, user_id, family_id, expires_at, used_at, created_at) \
             VALUES ($1, $2, $3, $4, NULL, $5)",
        )
        .bind(token_hash)
        .bind(user_id)
        .bind(family_id)
        .bind(now + ttl_ms)
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Marks a refresh token used, exactly once even under concurrent presentation.
    pub async fn use_refresh(&self, token_hash: &str) -> Result<RefreshOutcome, DbError> {
        let now = now_ms();
        let row: Option<(String, String, i64, Option<i64>)> = sqlx::query_as(
            "SELECT user_id, family_id, expires_at, used_at FROM refresh_tokens WHERE token_hash = $1",
        )
        .bind(token_hash)
        .fetch_optional(self.pool())
        .await?;
        let Some((user_id, family_id, expires_at, used_at)) = row else {
            return Ok(RefreshOutcome::Invalid);
        };
        if used_at.is_some() {
            self.revoke_refresh_family(&family_id).await?;
            return Ok(RefreshOutcome::Reused);
        }
        if expires_at <= now {
            return Ok(RefreshOutcome::Invalid);
        }
        let claimed =
            sqlx::query("UPDATE refresh_tokens SET used_at = $1 WHERE token_hash = $2 AND used_at IS NULL")
                .bind(now)
                .bind(token_hash)
                .execute(self.pool())
                .await?
                .rows_affected();
        if claimed == 0 {
            self.revoke_refresh_family(&family_id).await?;
            return Ok(RefreshOutcome::Reused);
        }
        Ok(RefreshOutcome::Rotated { user_id, family_id })
    }

    pub async fn revoke_refresh_family(&self, family_id: &str) -> Result<(), DbError> {
        sqlx::query("DELETE FROM refresh_tokens WHERE family_id = $1")
            .bind(family_id)
            .execute(self.pool())
            .await
            .map(|_| ())
    }

    /// The family of a refresh token, for logout.
    pub async fn refresh_family(&self, token_hash: &str) -> Result<Option<String>, DbError> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT family_id FROM refresh_tokens WHERE token_hash = $1")
                .bind(token_hash)
                .fetch_optional(self.pool())
                .await?;
        Ok(row.map(|(f,)| f))
    }

    /// Drops expired sessions and refresh tokens.
    pub async fn purge_expired_sessions(&self) -> Result<u64, DbError> {
        let now = now_ms();
        let a =
            sqlx::query("DELETE FROM sessions WHERE expires_at <= $1").bind(now).execute(self.pool()).await?;
        let b = sqlx::query("DELETE FROM refresh_tokens WHERE expires_at <= $1")
            .bind(now)
            .execute(self.pool())
            .await?;
        Ok(a.rows_affected() + b.rows_affected())
    }
}
