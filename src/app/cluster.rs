//! Several nodes, one service (docs/scale-out.md): this node's place in the node registry. At
//! start it records itself with the address the others reach it at; a task then beats every
//! quarter of the node timeout, reporting its load, and claims nodes that stopped beating: their
//! pushes end (`stream.ended`) and their recordings are completed here from what reached storage.
//! A node that finds the others declared it dead (a long pause, a cut network) ends the pushes
//! it still holds — they were ended in the database already — and joins again.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::App;
use crate::config::Settings;
use crate::domain::content_key::MasterKey;
use crate::domain::time::now_ms;
use crate::playback::relay::Relay;
use crate::services::nodes::{Load, Nodes};
use crate::store::Db;

/// Nodes gone for longer than this are forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The registry and the relay of this node.
pub(super) fn relay(
    settings: &Settings,
    db: &Db,
    node_id: &str,
    master_key: &MasterKey,
) -> anyhow::Result<Arc<Relay>> {
    let nodes = Arc::new(Nodes::new(
        db.clone(),
        node_id.to_string(),
        Duration::from_secs(settings.node_timeout),
        master_key,
    ));
    // Nodes sharing a self-signed certificate trust it for their internal HTTPS.
    let cert = match &settings.tls {
        Some(files) => Some(std::fs::read(&files.cert)?),
        None => None,
    };
    Ok(Arc::new(Relay::new(nodes, cert.as_deref())?))
}

/// A stable identity for this process's data dir, created on first start.
pub(super) fn node_id(data_dir: &std::path::Path) -> anyhow::Result<String> {
    let path = data_dir.join("node-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim().to_string();
        if !id.is_empty() {
            return Ok(id);
        }
    }
    let id = crate::domain::new_id();
    std::fs::write(&path, &id).with_context(|| format!("writing {}", path.display()))?;
    Ok(id)
}

/// The internal URL of this node: `SLUICE_INTERNAL_URL`, or the bound HTTP port on loopback.
fn internal_url(settings: &Settings, bound: SocketAddr) -> String {
    match &settings.internal_url {
        Some(url) => url.clone(),
        None => {
            let scheme = if settings.tls.is_some() { "https" } else { "http" };
            format!("{scheme}://127.0.0.1:{}", bound.port())
        }
    }
}

impl App {
    fn nodes(&self) -> &Arc<Nodes> {
        &self.origin.relay.nodes
    }

    /// Records this node and starts its heartbeat (`App::start`, once HTTP is bound).
    pub(super) async fn join_cluster(self: &Arc<Self>, bound: SocketAddr) -> anyhow::Result<()> {
        let url = internal_url(&self.settings, bound);
        self.nodes().register(&url).await?;
        tracing::info!(node = %self.node_id, internal_url = %url, "joined the node registry");
        let app = Arc::downgrade(self);
        let every = self.nodes().heartbeat_every();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut cpu = CpuClock::start();
            let mut forgot = Instant::now();
            // Since when heartbeats have been written without a failure (from the start: as long
            // ago as a timeout, so a node that starts takes over at once).
            let mut beating_since = Instant::now().checked_sub(every * 8);
            loop {
                tick.tick().await;
                let Some(app) = app.upgrade() else { return };
                // After the database was away, every node's heartbeat is as old as the outage:
                // this one declares none dead before the others have had a timeout to beat again.
                if !app.beat(&url, &mut cpu).await {
                    beating_since = None;
                } else if beating_since.get_or_insert_with(Instant::now).elapsed() >= app.nodes().timeout() {
                    app.take_over_dead_nodes().await;
                }
                match app.streams.reconcile().await {
                    Ok(0) => {}
                    Ok(n) => tracing::warn!(
                        pushes = n,
                        "wrote the ends of pushes that ended while the database was away"
                    ),
                    Err(e) => tracing::debug!(error = %e, "reconciling ended pushes"),
                }
                if forgot.elapsed() > Duration::from_secs(600) {
                    forgot = Instant::now();
                    let before = now_ms() - FORGET_AFTER.as_millis() as i64;
                    if let Err(e) = app.db.forget_nodes(before).await {
                        tracing::warn!(error = %e, "forgetting nodes gone long ago");
                    }
                }
            }
        });
        Ok(())
    }

    /// This node's load as it reports it.
    fn load(&self, cpu: &mut CpuClock) -> Load {
        Load {
            live_sessions: self.streams.sessions.count() as u64,
            viewers: self.last_viewers.total(),
            relayed: self.origin.relay.served.load(Ordering::Relaxed),
            cpu_percent: cpu.percent(),
            load1: load1(),
        }
    }

    /// Where RTSP viewers reach this node: the host of its internal URL when one is set (nodes
    /// on several machines), else the public host; its bound RTSP port.
    fn rtsp_url(&self) -> Option<String> {
        let port = self.rtsp.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|s| s.addr.port())?;
        let host = match &self.settings.internal_url {
            Some(url) => url::Url::parse(url).ok()?.host_str()?.to_string(),
            None => self.settings.public_host(),
        };
        Some(format!("rtsp://{host}:{port}"))
    }

    /// Writes this node's heartbeat; `false` when the database did not take it.
    async fn beat(&self, url: &str, cpu: &mut CpuClock) -> bool {
        let load = self.load(cpu);
        match self.nodes().beat(&load, self.rtsp_url().as_deref()).await {
            Ok(true) => true,
            Ok(false) => {
                tracing::error!(
                    node = %self.node_id,
                    "the other nodes declared this node dead (no heartbeat within the timeout); \
                     ending the pushes it still holds and joining again"
                );
                if let Err(e) = self.streams.end_stale_sessions().await {
                    tracing::warn!(error = %e, "ending pushes the other nodes ended");
                }
                if let Err(e) = self.nodes().register(url).await {
                    tracing::warn!(error = %e, "joining the node registry again");
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "node heartbeat");
                false
            }
        }
    }

    /// Ends the pushes and completes the recordings of every node this one claims as dead.
    async fn take_over_dead_nodes(&self) {
        let dead = match self.nodes().claim_dead().await {
            Ok(dead) => dead,
            Err(e) => return tracing::warn!(error = %e, "looking for dead nodes"),
        };
        for node in dead {
            match self.streams.end_pushes_of_dead_node(&node).await {
                Ok(n) => tracing::warn!(node = %node, pushes = n, "ended the pushes of a dead node"),
                Err(e) => tracing::error!(node = %node, error = %e, "ending the pushes of a dead node"),
            }
            let left = match self.db.recordings_of_node(&node).await {
                Ok(left) => left,
                Err(e) => {
                    tracing::error!(node = %node, error = %e, "listing the recordings of a dead node");
                    continue;
                }
            };
            if let Err(e) = self.db.take_recordings(&node, &self.node_id).await {
                tracing::error!(node = %node, error = %e, "taking over the recordings of a dead node");
                continue;
            }
            if !left.is_empty() {
                let recordings = self.outputs.recordings.clone();
                tokio::spawn(async move {
                    let n = left.len();
                    let completed = recordings.recover(left).await;
                    tracing::warn!(node = %node, left = n, completed, "completed the recordings of a dead node");
                });
            }
        }
    }

    /// Shutdown: the node is listed as gone at once (its pushes ended cleanly before).
    pub(super) async fn leave_cluster(&self) {
        if let Err(e) = self.nodes().stopped().await {
            tracing::warn!(error = %e, "leaving the node registry");
        }
    }
}

/// The 1-minute load average (0 where `/proc` does not say).
fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// This process's CPU time between two readings.
struct CpuClock {
    at: Instant,
    ticks: u64,
}

impl CpuClock {
    fn start() -> CpuClock {
        CpuClock { at: Instant::now(), ticks: process_ticks() }
    }

    fn percent(&mut self) -> f64 {
        let (now, ticks) = (Instant::now(), process_ticks());
        let wall = now.duration_since(self.at).as_secs_f64();
        // Clock ticks are 1/100 s on Linux.
        let used = ticks.saturating_sub(self.ticks) as f64 / 100.0;
        (self.at, self.ticks) = (now, ticks);
        if wall > 0.0 {
            (used / wall * 1000.0).round() / 10.0
        } else {
            0.0
        }
    }
}

/// utime + stime of this process, in clock ticks (`/proc/self/stat` fields 14 and 15).
fn process_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0 };
    // The command name may hold spaces: count fields after its closing parenthesis.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}
