//! This node's viewer report (CONTRACT: Viewers): every [`REPORT_EVERY`] it sweeps its HLS
//! sessions, counts its WHEP viewers and RTSP clients per stream, and writes them as its rows of
//! `viewer_counts`; for each push it holds it raises the live session's peak to the sum over the
//! nodes; and it writes the VOD views and watch time gathered since the last report.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::App;
use crate::domain::time::now_ms;
use crate::services::viewers::{REPORT_EVERY, REPORT_STALE};
use crate::store::viewers::ViewerCounts;

/// How long a report may wait on the database before it is given up (the next one writes the
/// counts then; VOD tallies are kept for it).
const WRITE_DEADLINE: Duration = Duration::from_secs(2);

/// This node's counts as of its last report, by stream, for `/metrics`.
#[derive(Default)]
pub(super) struct LastCounts(Mutex<BTreeMap<String, ViewerCounts>>);

impl LastCounts {
    pub(super) fn of(&self, stream: &str) -> ViewerCounts {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).get(stream).copied().unwrap_or_default()
    }

    /// Every protocol of every stream.
    pub(super) fn total(&self) -> u64 {
        let total: i64 =
            self.0.lock().unwrap_or_else(|p| p.into_inner()).values().map(ViewerCounts::total).sum();
        u64::try_from(total).unwrap_or(0)
    }
}

impl App {
    /// Starts the report loop; it stops when the App goes.
    pub(super) fn spawn_viewer_reports(self: &Arc<Self>) {
        let app = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REPORT_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(app) = app.upgrade() else { return };
                app.report_viewers().await;
            }
        });
    }

    /// What this node counts now, by stream.
    fn count_viewers(&self) -> BTreeMap<String, ViewerCounts> {
        let mut counts: BTreeMap<String, ViewerCounts> = BTreeMap::new();
        for (stream, n) in self.origin.viewers.sweep() {
            counts.entry(stream.to_string()).or_default().hls = n.into();
        }
        for (stream, n) in self.whep.viewers.per_stream() {
            counts.entry(stream).or_default().webrtc = i64::try_from(n).unwrap_or(i64::MAX);
        }
        for (stream, n) in self.origin.viewers.rtsp() {
            counts.entry(stream).or_default().rtsp = n.into();
        }
        counts
    }

    async fn report_viewers(&self) {
        let counts = self.count_viewers();
        let rows: Vec<(String, ViewerCounts)> = counts.iter().map(|(s, c)| (s.clone(), *c)).collect();
        *self.last_viewers.0.lock().unwrap_or_else(|p| p.into_inner()) = counts;
        let now = now_ms();
        let written = crate::store::within(WRITE_DEADLINE, self.db.report_viewers(&self.node_id, &rows, now));
        if let Err(e) = written.await {
            tracing::debug!(error = %e, "viewers: writing this node's counts");
            return;
        }
        self.raise_peaks(now).await;
        self.write_vod_views().await;
    }

    /// Raises the peak of each live session held here to the viewers of all nodes.
    async fn raise_peaks(&self, now: i64) {
        let held = self.channels.live_sessions();
        if held.is_empty() {
            return;
        }
        let ids: Vec<&str> = held.iter().map(|(s, _)| s.as_str()).collect();
        let after = now - REPORT_STALE.as_millis() as i64;
        let sums = match crate::store::within(WRITE_DEADLINE, self.db.viewer_counts(&ids, after)).await {
            Ok(sums) => sums,
            Err(e) => return tracing::debug!(error = %e, "viewers: summing the nodes' counts"),
        };
        for (stream, session) in &held {
            let total = sums.get(stream).map_or(0, ViewerCounts::total);
            let raised = self.db.raise_viewer_peak(stream, session, total, now);
            if let Err(e) = crate::store::within(WRITE_DEADLINE, raised).await {
                return tracing::debug!(error = %e, "viewers: raising a session's peak");
            }
        }
    }

    /// Writes the VOD views and watch time gathered here; kept for the next report when the
    /// database does not take them.
    async fn write_vod_views(&self) {
        let taken = self.origin.viewers.take_vods();
        if taken.is_empty() {
            return;
        }
        let rows: Vec<(String, i64, f64)> = taken
            .iter()
            .map(|(vod, t)| (vod.clone(), i64::try_from(t.views).unwrap_or(i64::MAX), t.watch_seconds))
            .collect();
        if let Err(e) = crate::store::within(WRITE_DEADLINE, self.db.add_vod_views(&rows)).await {
            tracing::debug!(error = %e, "viewers: writing VOD views");
            self.origin.viewers.restore_vods(taken.into_iter().collect::<HashMap<_, _>>());
        }
    }
}
