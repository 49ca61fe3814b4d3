//! The event log: each project's events in commit order (see the migration `0013_events`).

use sqlx::AnyConnection;

use super::{Db, DbError};

/// One logged event.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRow {
    pub seq: i64,
    pub event: String,
    pub body: String,
}

/// Which events a read returns: the kinds its caller may read (`stream`, `vod`), and
/// optionally one event name or one kind.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    pub kinds: Vec<&'static str>,
    pub event: Option<String>,
    pub kind: Option<&'static str>,
}

impl Db {
    /// Appends an event on the caller's transaction: raises the project's counter and writes
    /// the row under the new number. Call it as the transaction's last write (the counter's row
    /// stays locked until the commit).
    pub async fn append_event(
        conn: &mut AnyConnection,
        project_id: &str,
        kind: &str,
        event: &str,
        created_at: i64,
        body: &str,
    ) -> Result<i64, DbError> {
        let (seq,): (i64,) = sqlx::query_as(
            "INSERT INTO event_counters (project_id, last_seq) VALUES ($1, 1) \
             ON CONFLICT (project_id) DO UPDATE SET last_seq = event_counters.last_seq + 1 RETURNING last_seq",
        )
        .bind(project_id)
        .fetch_one(&mut *conn)
        .await?;
        sqlx::query(
            "INSERT INTO events (project_id, seq, kind, event, created_at, body) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(project_id)
        .bind(seq)
        .bind(kind)
        .bind(event)
        .bind(created_at)
        .bind(body)
        .execute(&mut *conn)
        .await?;
        Ok(seq)
    }

    /// Up to `limit` events of the project after `after`, oldest first. Nothing when `q` allows
    /// no kind.
    pub async fn events_after(
        &self,
        project_id: &str,
        after: i64,
        limit: i64,
        q: &EventQuery,
    ) -> Result<Vec<EventRow>, DbError> {
        if q.kinds.is_empty() {
            return Ok(Vec::new());
        }
        // Fixed fragments with bound values only: nothing a caller wrote is spliced in.
        let mut sql = String::from(
            "SELECT seq, event, body FROM events WHERE project_id = $1 AND seq > $2 AND kind IN (",
        );
        let mut n = 3;
        for i in 0..q.kinds.len() {
            sql.push_str(if i == 0 { "" } else { ", " });
            sql.push_str(&format!("${n}"));
            n += 1;
        }
        sql.push(')');
        if q.event.is_some() {
            sql.push_str(&format!(" AND event = ${n}"));
            n += 1;
        }
        if q.kind.is_some() {
            sql.push_str(&format!(" AND kind = ${n}"));
            n += 1;
        }
        sql.push_str(&format!(" ORDER BY seq LIMIT ${n}"));
        let mut query = sqlx::query_as::<_, EventRow>(&sql).bind(project_id).bind(after);
        for kind in &q.kinds {
            query = query.bind(*kind);
        }
        if let Some(event) = &q.event {
            query = query.bind(event.as_str());
        }
        if let Some(kind) = q.kind {
            query = query.bind(kind);
        }
        query.bind(limit).fetch_all(self.pool()).await
    }

    /// Forgets the events logged before `before` (housekeeping). Returns how many.
    pub async fn sweep_events(&self, before: i64) -> Result<u64, DbError> {
        let done =
            sqlx::query("DELETE FROM events WHERE created_at < $1").bind(before).execute(self.pool()).await?;
        Ok(done.rows_affected())
    }
}
