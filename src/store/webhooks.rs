//! Webhooks and the delivery outbox.

use sqlx::{AnyConnection, FromRow};

use super::{count, Backend, Db, DbError, Page};
use crate::domain::delivery::DeliveryStatus;
use crate::domain::time::now_ms;

#[derive(Debug, Clone, FromRow)]
pub struct WebhookRow {
    pub id: String,
    pub project_id: String,
    pub url: String,
    pub description: String,
    pub events: String,
    pub enabled: i64,
    pub secret: String,
    pub consecutive_failures: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, FromRow)]
pub struct DeliveryRow {
    pub id: String,
    pub project_id: String,
    pub webhook_id: String,
    pub event: String,
    pub body: String,
    pub status: String,
    pub attempts: i64,
    pub response_code: Option<i64>,
    pub error: Option<String>,
    pub created_at: i64,
    pub last_attempt_at: Option<i64>,
    pub next_attempt_at: i64,
    pub seq: i64,
}

impl DeliveryRow {
    /// The status as the domain's state machine sees it (the column holds nothing else).
    pub fn status(&self) -> DeliveryStatus {
        DeliveryStatus::parse(&self.status).unwrap_or(DeliveryStatus::Pending)
    }
}

/// A delivery leased for one attempt, with what is needed to send it.
#[derive(Debug, Clone, FromRow)]
pub struct Claimed {
    pub id: String,
    pub webhook_id: String,
    pub event: String,
    pub body: String,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub seq: i64,
}

/// A new delivery to write into the outbox.
pub struct NewDelivery<'a> {
    pub id: &'a str,
    pub project_id: &'a str,
    pub webhook_id: &'a str,
    pub event: &'a str,
    pub body: &'a str,
    pub created_at: i64,
    pub seq: i64,
}

/// What an attempt came to.
pub struct AttemptOutcome<'a> {
    pub response_code: Option<i64>,
    pub error: Option<&'a str>,
    pub next_attempt_at: i64,
}

/// What a move of a delivery writes besides its status, and who may make it.
pub enum DeliveryWrite<'a> {
    /// An attempt, by the holder of the lease.
    Attempt { owner: &'a str, webhook_id: &'a str, outcome: &'a AttemptOutcome<'a> },
    /// The end of a leased delivery without an attempt, by the holder of the lease.
    Abandon { owner: &'a str, error: &'a str },
    /// A finished delivery of `project_id` queued again with a fresh set of attempts.
    Requeue { project_id: &'a str },
}

const WEBHOOK_COLUMNS: &str =
    "id, project_id, url, description, events, enabled, secret, consecutive_failures, created_at, updated_at";
const DELIVERY_COLUMNS: &str =
    "id, project_id, webhook_id, event, body, status, attempts, response_code, error, \
     created_at, last_attempt_at, next_attempt_at, seq";

impl Db {
    pub async fn create_webhook(&self, w: &WebhookRow) -> Result<(), DbError> {
        sqlx::query(&format!(
            "INSERT INTO webhooks ({WEBHOOK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        ))
        .bind(&w.id)
        .bind(&w.project_id)
        .bind(&w.url)
        .bind(&w.description)
        .bind(&w.events)
        .bind(w.enabled)
        .bind(&w.secret)
        .bind(w.consecutive_failures)
        .bind(w.created_at)
        .bind(w.updated_at)
        .execute(self.pool())
        .await
        .map(|_| ())
    }

    pub async fn webhook(&self, project_id: &str, id: &str) -> Result<Option<WebhookRow>, DbError> {
        sqlx::query_as(&format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE project_id = $1 AND id = $2"))
            .bind(project_id)
            .bind(id)
            .fetch_optional(self.pool())
            .await
    }

    pub async fn webhook_by_id(&self, id: &str) -> Result<Option<WebhookRow>, DbError> {
        sqlx::query_as(&format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await
    }

    pub async fn list_webhooks(
        &self,
        project_id: &str,
        skip: i64,
        limit: i64,
    ) -> Result<Page<WebhookRow>, DbError> {
        let items = sqlx::query_as(&format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE project_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3"
        ))
        .bind(project_id)
        .bind(limit)
        .bind(skip)
        .fetch_all(self.pool())
        .await?;
        let total = count(
            &sqlx::query("SELECT COUNT(*) FROM webhooks WHERE project_id = $1")
                .bind(project_id)
                .fetch_one(self.pool())
                .await?,
        )?;
        Ok(Page { items, total })
    }

    pub async fn update_webhook(&self, w: &WebhookRow) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE webhooks SET url = $1, description = $2, events = $3, enabled = $4, updated_at = $5 \
             WHERE id = $6 AND project_id = $7",
        )
        .bind(&w.url)
        .bind(&w.description)
        .bind(&w.events)
        .bind(w.enabled)
        .bind(w.updated_at)
        .bind(&w.id)
        .bind(&w.project_id)
        .execute(self.pool())
        .await
        .map(|_| ())
    }

    pub async fn delete_webhook(&self, project_id: &str, id: &str) -> Result<(), DbError> {
        sqlx::query("DELETE FROM webhooks WHERE project_id = $1 AND id = $2")
            .bind(project_id)
            .bind(id)
            .execute(self.pool())
            .await
            .map(|_| ())
    }

    /// The enabled webhooks of a project (for fan-out), on the caller's transaction.
    pub async fn enabled_webhooks(
        conn: &mut AnyConnection,
        project_id: &str,
    ) -> Result<Vec<(String, String)>, DbError> {
        sqlx::query_as(
            "SELECT id, events FROM webhooks WHERE project_id = $1 AND enabled = 1 ORDER BY created_at, id",
        )
        .bind(project_id)
        .fetch_all(conn)
        .await
    }

    /// Writes a delivery into the outbox, on the caller's transaction.
    pub async fn insert_delivery(conn: &mut AnyConnection, d: &NewDelivery<'_>) -> Result<(), DbError> {
        sqlx::query(&format!(
            "INSERT INTO webhook_deliveries ({DELIVERY_COLUMNS}, lease_owner, lease_until) \
             VALUES ($1, $2, $3, $4, $5, 'pending', 0, NULL, NULL, $6, NULL, $6, $7, NULL, NULL)"
        ))
        .bind(d.id)
        .bind(d.project_id)
        .bind(d.webhook_id)
        .bind(d.event)
        .bind(d.body)
        .bind(d.created_at)
        .bind(d.seq)
        .execute(conn)
        .await
        .map(|_| ())
    }

    /// Webhooks that have due, unleased deliveries (at most `limit` of them).
    pub async fn due_webhooks(&self, now: i64, limit: i64) -> Result<Vec<String>, DbError> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT DISTINCT webhook_id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= $1 \
             AND (lease_until IS NULL OR lease_until < $1) LIMIT $2",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(|(w,)| w).collect())
    }

    /// Leases the next `limit` due deliveries of one webhook for `owner` until `lease_until`, in
    /// event order, and only while no other owner holds a live lease on one of the webhook's
    /// pending rows: a webhook's deliveries go out from one process at a time, so a second process
    /// cannot send a newer event beside an older one still in flight. On Postgres the claim first
    /// locks the webhook's row, which makes claimers of one webhook take turns (the second sees
    /// the first's committed leases and takes nothing), and picks rows with `FOR UPDATE SKIP
    /// LOCKED`; SQLite has one writer at a time (`BEGIN IMMEDIATE`), which does the same.
    pub async fn claim_deliveries(
        &self,
        owner: &str,
        webhook_id: &str,
        now: i64,
        lease_until: i64,
        limit: i64,
    ) -> Result<Vec<Claimed>, DbError> {
        let mut tx = self.begin_write().await?;
        let lock = match self.backend() {
            Backend::Postgres => {
                sqlx::query("SELECT id FROM webhooks WHERE id = $1 FOR UPDATE")
                    .bind(webhook_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                " FOR UPDATE SKIP LOCKED"
            }
            Backend::Sqlite => "",
        };
        let mut rows: Vec<Claimed> = sqlx::query_as(&format!(
            "UPDATE webhook_deliveries SET lease_owner = $1, lease_until = $2 WHERE id IN ( \
               SELECT id FROM webhook_deliveries WHERE webhook_id = $3 AND status = 'pending' \
               AND next_attempt_at <= $4 AND (lease_until IS NULL OR lease_until < $4) \
               AND NOT EXISTS (SELECT 1 FROM webhook_deliveries held WHERE held.webhook_id = $3 \
                 AND held.status = 'pending' AND held.lease_owner <> $1 AND held.lease_until >= $4) \
               ORDER BY next_attempt_at, seq LIMIT $5{lock}) \
             RETURNING id, webhook_id, event, body, attempts, next_attempt_at, seq"
        ))
        .bind(owner)
        .bind(lease_until)
        .bind(webhook_id)
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.sort_by_key(|c| (c.next_attempt_at, c.seq));
        Ok(rows)
    }

    /// Gives up the leases of `owner` (a restarted process reclaims what it held when it died).
    pub async fn release_leases(&self, owner: &str) -> Result<u64, DbError> {
        sqlx::query(
            "UPDATE webhook_deliveries SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = $1",
        )
        .bind(owner)
        .execute(self.pool())
        .await
        .map(|r| r.rows_affected())
    }

    /// Writes one move of a delivery as a compare-and-set: the row changes only while its status
    /// is one of `from` (and, for the sender's moves, while `owner` holds its lease), to `to`.
    /// An attempt also keeps the webhook's run of failures, in the same transaction. Returns
    /// whether the row changed. Called by [`crate::events::delivery::apply`] only, which takes
    /// `from` and `to` from the domain's state machine.
    pub async fn move_delivery(
        &self,
        id: &str,
        from: &[DeliveryStatus],
        to: DeliveryStatus,
        write: &DeliveryWrite<'_>,
    ) -> Result<bool, DbError> {
        let now = now_ms();
        // `$1` is the new status, `$2` the id; the allowed statuses follow the move's own binds.
        let (set, fence, binds) = match write {
            DeliveryWrite::Attempt { .. } => (
                "attempts = attempts + 1, response_code = $3, error = $4, last_attempt_at = $5, \
                 next_attempt_at = $6, lease_owner = NULL, lease_until = NULL",
                "lease_owner = $7",
                7,
            ),
            DeliveryWrite::Abandon { .. } => {
                ("error = $3, lease_owner = NULL, lease_until = NULL", "lease_owner = $4", 4)
            }
            DeliveryWrite::Requeue { .. } => (
                "attempts = 0, response_code = NULL, error = NULL, next_attempt_at = $3, \
                 lease_owner = NULL, lease_until = NULL",
                "project_id = $4",
                4,
            ),
        };
        let allowed = super::placeholders(binds + 1, from.len());
        let sql = format!(
            "UPDATE webhook_deliveries SET status = $1, {set} WHERE id = $2 AND {fence} AND status IN ({allowed})"
        );
        let mut q = sqlx::query(&sql).bind(to.as_str()).bind(id);
        q = match write {
            DeliveryWrite::Attempt { owner, outcome, .. } => q
                .bind(outcome.response_code)
                .bind(outcome.error)
                .bind(now)
                .bind(outcome.next_attempt_at)
                .bind(*owner),
            DeliveryWrite::Abandon { owner, error } => q.bind(*error).bind(*owner),
            DeliveryWrite::Requeue { project_id } => q.bind(now).bind(*project_id),
        };
        for status in from {
            q = q.bind(status.as_str());
        }
        let mut tx = self.begin_write().await?;
        let updated = q.execute(&mut *tx).await?.rows_affected() == 1;
        if let (true, DeliveryWrite::Attempt { webhook_id, .. }) = (updated, write) {
            let sql = if to == DeliveryStatus::Success {
                "UPDATE webhooks SET consecutive_failures = 0 WHERE id = $1"
            } else {
                "UPDATE webhooks SET consecutive_failures = consecutive_failures + 1 WHERE id = $1"
            };
            sqlx::query(sql).bind(*webhook_id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(updated)
    }

    pub async fn delivery(&self, project_id: &str, id: &str) -> Result<Option<DeliveryRow>, DbError> {
        sqlx::query_as(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE project_id = $1 AND id = $2"
        ))
        .bind(project_id)
        .bind(id)
        .fetch_optional(self.pool())
        .await
    }

    /// Recent deliveries, newest first, optionally of one webhook.
    pub async fn list_deliveries(
        &self,
        project_id: &str,
        webhook_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<DeliveryRow>, DbError> {
        let filter = if webhook_id.is_some() { " AND webhook_id = $3" } else { "" };
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE project_id = $1{filter} \
             ORDER BY created_at DESC, seq DESC LIMIT $2"
        );
        let mut q = sqlx::query_as(&sql).bind(project_id).bind(limit);
        if let Some(w) = webhook_id {
            q = q.bind(w);
        }
        q.fetch_all(self.pool()).await
    }
}
