//! API keys: only the SHA-256 hash and the 12-character prefix are stored.

use sqlx::FromRow;

use super::{count, Db, DbError, Page};
use crate::domain::{new_id, time::now_ms, ScopeSet};

#[derive(Debug, Clone, FromRow)]
pub struct ApiKeyRow {
    pub id: String,
    pub project_id: String,
    pub label: String,
    pub prefix: String,
    pub hashed_key: String,
    pub scopes: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// A key found by its hash, with the slug of its project.
#[derive(Debug, Clone, FromRow)]
pub struct KeyWithProject {
    pub id: String,
    pub project_id: String,
    pub project_slug: String,
    pub hashed_key: String,
    pub scopes: String,
    pub revoked_at: Option<i64>,
}

const COLUMNS: &str =
    "id, project_id, label, prefix, hashed_key, scopes, created_at, last_used_at, revoked_at";

impl Db {
    pub async fn create_api_key(
        &self,
        project_id: &str,
        label: &str,
        prefix: &str,
        hashed_key: &str,
        scopes: &ScopeSet,
    ) -> Result<ApiKeyRow, DbError> {
        let row = ApiKeyRow {
            id: new_id(),
            project_id: project_id.to_string(),
            label: label.to_string(),
            prefix: prefix.to_string(),
            hashed_key: hashed_key.to_string(),
            scopes: scopes.to_db(),
            created_at: now_ms(),
            last_used_at: None,
            revoked_at: None,
        };
        sqlx::query(
            "INSERT INTO api_keys (id, project_id, label, prefix, hashed_key, scopes, created_at, last_used_at, revoked_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, NULL)",
        )
        .bind(&row.id)
        .bind(&row.project_id)
        .bind(&row.label)
        .bind(&row.prefix)
        .bind(&row.hashed_key)
        .bind(&row.scopes)
        .bind(row.created_at)
        .execute(self.pool())
        .await?;
        Ok(row)
    }

    pub async fn api_key_by_hash(&self, hashed_key: &str) -> Result<Option<KeyWithProject>, DbError> {
        sqlx::query_as(
            "SELECT k.id, k.project_id, p.slug AS project_slug, k.hashed_key, k.scopes, k.revoked_at \
             FROM api_keys k JOIN projects p ON p.id = k.project_id WHERE k.hashed_key = $1",
        )
        .bind(hashed_key)
        .fetch_optional(self.pool())
        .await
    }

    pub async fn api_key(&self, project_id: &str, id: &str) -> Result<Option<ApiKeyRow>, DbError> {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM api_keys WHERE project_id = $1 AND id = $2"))
            .bind(project_id)
            .bind(id)
            .fetch_optional(self.pool())
            .await
    }

    pub async fn list_api_keys(
        &self,
        project_id: &str,
        skip: i64,
        limit: i64,
    ) -> Result<Page<ApiKeyRow>, DbError> {
        let items = sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM api_keys WHERE project_id = $1 \
             ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3"
        ))
        .bind(project_id)
        .bind(limit)
        .bind(skip)
        .fetch_all(self.pool())
        .await?;
        let total = count(
            &sqlx::query("SELECT COUNT(*) FROM api_keys WHERE project_id = $1")
                .bind(project_id)
                .fetch_one(self.pool())
                .await?,
        )?;
        Ok(Page { items, total })
    }

    /// Revokes a key (permanently; a second revoke keeps the first time). Returns the record.
    pub async fn revoke_api_key(&self, project_id: &str, id: &str) -> Result<Option<ApiKeyRow>, DbError> {
        sqlx::query(
            "UPDATE api_keys SET revoked_at = $1 WHERE project_id = $2 AND id = $3 AND revoked_at IS NULL",
        )
        .bind(now_ms())
        .bind(project_id)
        .bind(id)
        .execute(self.pool())
        .await?;
        self.api_key(project_id, id).await
    }

    /// Records use, at most once a minute per key even across processes.
    pub async fn touch_api_key(&self, id: &str, now: i64) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE api_keys SET last_used_at = $1 WHERE id = $2 AND (last_used_at IS NULL OR last_used_at <= $3)",
        )
        .bind(now)
        .bind(id)
        .bind(now - 60_000)
        .execute(self.pool())
        .await
        .map(|_| ())
    }
}
