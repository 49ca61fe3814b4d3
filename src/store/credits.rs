//! Credits: each project's balance of live time, in milliseconds (no row: zero).

use sqlx::AnyConnection;

use super::{Db, DbError};
use crate::domain::time::now_ms;

impl Db {
    /// The project's balance, read on the caller's connection (a push decides on it in the
    /// transaction that opens the session).
    pub async fn credit_balance_in(conn: &mut AnyConnection, project_id: &str) -> Result<i64, DbError> {
        let row: Option<(i64,)> = sqlx::query_as("SELECT balance_ms FROM credits WHERE project_id = $1")
            .bind(project_id)
            .fetch_optional(conn)
            .await?;
        Ok(row.map_or(0, |(ms,)| ms))
    }

    pub async fn credit_balance(&self, project_id: &str) -> Result<i64, DbError> {
        let mut conn = self.pool().acquire().await?;
        Db::credit_balance_in(&mut conn, project_id).await
    }

    /// Adds `ms` to the balance (negative: draws on it) in one statement, so that processes
    /// metering the same project at once each take their share. Returns the new balance.
    pub async fn add_credits(&self, project_id: &str, ms: i64) -> Result<i64, DbError> {
        let (balance,): (i64,) = sqlx::query_as(
            "INSERT INTO credits (project_id, balance_ms, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (project_id) DO UPDATE SET balance_ms = credits.balance_ms + excluded.balance_ms, \
             updated_at = excluded.updated_at RETURNING balance_ms",
        )
        .bind(project_id)
        .bind(ms)
        .bind(now_ms())
        .fetch_one(self.pool())
        .await?;
        Ok(balance)
    }

    /// Sets the balance to `ms`.
    pub async fn set_credits(&self, project_id: &str, ms: i64) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO credits (project_id, balance_ms, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (project_id) DO UPDATE SET balance_ms = excluded.balance_ms, updated_at = excluded.updated_at",
        )
        .bind(project_id)
        .bind(ms)
        .bind(now_ms())
        .execute(self.pool())
        .await
        .map(|_| ())
    }

    /// Every project's slug and balance (`/metrics`), in slug order.
    pub async fn credit_balances(&self) -> Result<Vec<(String, i64)>, DbError> {
        sqlx::query_as(
            "SELECT p.slug, COALESCE(c.balance_ms, 0) FROM projects p LEFT JOIN credits c ON c.project_id = p.id \
             ORDER BY p.slug",
        )
        .fetch_all(self.pool())
        .await
    }
}
