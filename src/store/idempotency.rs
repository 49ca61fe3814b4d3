//! `Idempotency-Key`: the first answer to each key of a scope (see the migration
//! `0014_idempotency`).

use super::{Db, DbError};

/// A stored answer.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredAnswer {
    pub status: i64,
    pub content_type: Option<String>,
    pub body: Option<String>,
    pub redacted: Option<String>,
}

/// A key's row.
#[derive(sqlx::FromRow)]
struct KeyRow {
    fingerprint: String,
    status: Option<i64>,
    content_type: Option<String>,
    body: Option<String>,
    redacted: Option<String>,
    created_at: i64,
}

/// What a request with a key finds.
#[derive(Debug)]
pub enum Claim {
    /// The key is this request's: run it, then [`Db::finish_idempotency`] or
    /// [`Db::release_idempotency`].
    Claimed,
    /// The key was used with another request.
    Mismatch,
    /// The first request with the key is still running.
    Running,
    /// The first request's answer.
    Done(StoredAnswer),
}

impl Db {
    /// Claims `key` of `scope` for the request `fingerprint` at `now`. A key first used before
    /// `expired_before` counts as unused; a claim still running since before `stale_before`
    /// (its process died) is taken over.
    pub async fn claim_idempotency(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        now: i64,
        expired_before: i64,
        stale_before: i64,
    ) -> Result<Claim, DbError> {
        sqlx::query(
            "DELETE FROM idempotency_keys WHERE scope = $1 AND idempotency_key = $2 AND created_at < $3",
        )
        .bind(scope)
        .bind(key)
        .bind(expired_before)
        .execute(self.pool())
        .await?;
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys (scope, idempotency_key, fingerprint, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (scope, idempotency_key) DO NOTHING",
        )
        .bind(scope)
        .bind(key)
        .bind(fingerprint)
        .bind(now)
        .execute(self.pool())
        .await?;
        if inserted.rows_affected() == 1 {
            return Ok(Claim::Claimed);
        }
        let row: Option<KeyRow> = sqlx::query_as(
            "SELECT fingerprint, status, content_type, body, redacted, created_at FROM idempotency_keys \
             WHERE scope = $1 AND idempotency_key = $2",
        )
        .bind(scope)
        .bind(key)
        .fetch_optional(self.pool())
        .await?;
        let Some(KeyRow {
            fingerprint: stored_fingerprint,
            status,
            content_type,
            body,
            redacted,
            created_at,
        }) = row
        else {
            // Released between the two statements: the key is free again.
            return Ok(Claim::Running);
        };
        if stored_fingerprint != fingerprint {
            return Ok(Claim::Mismatch);
        }
        match status {
            Some(status) => Ok(Claim::Done(StoredAnswer { status, content_type, body, redacted })),
            None if created_at < stale_before => {
                let taken = sqlx::query(
                    "UPDATE idempotency_keys SET created_at = $4 WHERE scope = $1 AND idempotency_key = $2 \
                     AND status IS NULL AND created_at = $3",
                )
                .bind(scope)
                .bind(key)
                .bind(created_at)
                .bind(now)
                .execute(self.pool())
                .await?;
                Ok(if taken.rows_affected() == 1 { Claim::Claimed } else { Claim::Running })
            }
            None => Ok(Claim::Running),
        }
    }

    /// Keeps the answer of a claimed key.
    pub async fn finish_idempotency(
        &self,
        scope: &str,
        key: &str,
        answer: &StoredAnswer,
    ) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE idempotency_keys SET status = $3, content_type = $4, body = $5, redacted = $6 \
             WHERE scope = $1 AND idempotency_key = $2 AND status IS NULL",
        )
        .bind(scope)
        .bind(key)
        .bind(answer.status)
        .bind(answer.content_type.as_deref())
        .bind(answer.body.as_deref())
        .bind(answer.redacted.as_deref())
        .execute(self.pool())
        .await
        .map(|_| ())
    }

    /// Gives a claimed key back unanswered (the request failed or was abandoned): a repeat
    /// runs again.
    pub async fn release_idempotency(&self, scope: &str, key: &str) -> Result<(), DbError> {
        sqlx::query(
            "DELETE FROM idempotency_keys WHERE scope = $1 AND idempotency_key = $2 AND status IS NULL",
        )
        .bind(scope)
        .bind(key)
        .execute(self.pool())
        .await
        .map(|_| ())
    }

    /// Forgets the keys first used before `before` (housekeeping). Returns how many.
    pub async fn sweep_idempotency(&self, before: i64) -> Result<u64, DbError> {
        let done = sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1")
            .bind(before)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }
}
