//! Viewer counts (migration 0016): what each node reports of each stream, the peak of each live
//! session, and the views and watch time of VODs.

use std::collections::HashMap;

use super::{placeholders, Db, DbError};

/// One node's counts of one stream: HLS sessions, WHEP viewers, RTSP clients.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ViewerCounts {
    pub hls: i64,
    pub webrtc: i64,
    pub rtsp: i64,
}

impl ViewerCounts {
    pub fn total(&self) -> i64 {
        self.hls + self.webrtc + self.rtsp
    }
}

impl Db {
    /// Replaces what node `node` reports: one row per stream it counts anything of.
    pub async fn report_viewers(
        &self,
        node: &str,
        counts: &[(String, ViewerCounts)],
        now: i64,
    ) -> Result<(), DbError> {
        let mut tx = self.begin_write().await?;
        // This node's last rows, and any row no node has refreshed for an hour (a node gone).
        sqlx::query("DELETE FROM viewer_counts WHERE node = $1 OR reported_at < $2")
            .bind(node)
            .bind(now - 3_600_000)
            .execute(&mut *tx)
            .await?;
        for (stream, c) in counts {
            sqlx::query(
                "INSERT INTO viewer_counts (node, stream_id, hls, webrtc, rtsp, reported_at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(node)
            .bind(stream)
            .bind(c.hls)
            .bind(c.webrtc)
            .bind(c.rtsp)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The counts of `streams` summed over the nodes that reported since `after` (ms). (Postgres
    /// sums BIGINTs as NUMERIC: cast back.)
    pub async fn viewer_counts(
        &self,
        streams: &[&str],
        after: i64,
    ) -> Result<HashMap<String, ViewerCounts>, DbError> {
        if streams.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT stream_id, CAST(SUM(hls) AS BIGINT), CAST(SUM(webrtc) AS BIGINT), CAST(SUM(rtsp) AS BIGINT) \
             FROM viewer_counts \
             WHERE reported_at > $1 AND stream_id IN ({}) GROUP BY stream_id",
            placeholders(2, streams.len())
        );
        let mut q = sqlx::query_as::<_, (String, i64, i64, i64)>(&sql).bind(after);
        for s in streams {
            q = q.bind(*s);
        }
        let rows = q.fetch_all(self.pool()).await?;
        Ok(rows.into_iter().map(|(s, hls, webrtc, rtsp)| (s, ViewerCounts { hls, webrtc, rtsp })).collect())
    }

    /// Raises the peak of `stream`'s live session `session` to `viewers` (a new session starts
    /// at it).
    pub async fn raise_viewer_peak(
        &self,
        stream: &str,
        session: &str,
        viewers: i64,
        now: i64,
    ) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO viewer_peaks (stream_id, session_id, peak, started_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (stream_id, session_id) DO UPDATE SET peak = CASE \
             WHEN excluded.peak > viewer_peaks.peak THEN excluded.peak ELSE viewer_peaks.peak END",
        )
        .bind(stream)
        .bind(session)
        .bind(viewers)
        .bind(now)
        .execute(self.pool())
        .await
        .map(|_| ())
    }

    /// The peak of each stream's newest live session.
    pub async fn viewer_peaks(&self, streams: &[&str]) -> Result<HashMap<String, i64>, DbError> {
        if streams.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT p.stream_id, p.peak FROM viewer_peaks p WHERE p.stream_id IN ({}) AND p.started_at = \
             (SELECT MAX(q.started_at) FROM viewer_peaks q WHERE q.stream_id = p.stream_id)",
            placeholders(1, streams.len())
        );
        let mut q = sqlx::query_as::<_, (String, i64)>(&sql);
        for s in streams {
            q = q.bind(*s);
        }
        Ok(q.fetch_all(self.pool()).await?.into_iter().collect())
    }

    /// The peaks of live sessions `(stream, session)` (recordings'), in one query.
    pub async fn session_viewer_peaks(
        &self,
        sessions: &[(&str, &str)],
    ) -> Result<HashMap<(String, String), i64>, DbError> {
        if sessions.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT stream_id, session_id, peak FROM viewer_peaks WHERE session_id IN ({})",
            placeholders(1, sessions.len())
        );
        let mut q = sqlx::query_as::<_, (String, String, i64)>(&sql);
        for (_, session) in sessions {
            q = q.bind(*session);
        }
        let wanted: std::collections::HashSet<(&str, &str)> = sessions.iter().copied().collect();
        Ok(q.fetch_all(self.pool())
            .await?
            .into_iter()
            .filter(|(stream, session, _)| wanted.contains(&(stream.as_str(), session.as_str())))
            .map(|(stream, session, peak)| ((stream, session), peak))
            .collect())
    }

    /// Adds views and watch seconds to VODs, in one transaction.
    pub async fn add_vod_views(&self, tallies: &[(String, i64, f64)]) -> Result<(), DbError> {
        let mut tx = self.begin_write().await?;
        for (vod, views, seconds) in tallies {
            sqlx::query(
                "UPDATE vods SET views = views + $2, watch_seconds = watch_seconds + $3 WHERE id = $1",
            )
            .bind(vod)
            .bind(views)
            .bind(seconds)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Views and watch seconds of `vods`.
    pub async fn vod_views(&self, vods: &[&str]) -> Result<HashMap<String, (i64, f64)>, DbError> {
        if vods.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT id, views, watch_seconds FROM vods WHERE id IN ({})",
            placeholders(1, vods.len())
        );
        let mut q = sqlx::query_as::<_, (String, i64, f64)>(&sql);
        for v in vods {
            q = q.bind(*v);
        }
        Ok(q.fetch_all(self.pool()).await?.into_iter().map(|(id, v, w)| (id, (v, w))).collect())
    }
}
