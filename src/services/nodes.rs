//! The node registry (docs/scale-out.md): several `sluice serve` processes on one database are
//! one service. Each node records itself (id, the address the others reach it at, a heartbeat
//! every quarter of `SLUICE_NODE_TIMEOUT`); a node whose heartbeat is older than the timeout is
//! dead to the others, and the first survivor to claim it ends its pushes and completes its
//! recordings (`app::cluster` runs the loop; this holds the rules and the lookups).
//!
//! Node-to-node requests (the live relay, WHEP signalling) carry a bearer derived from the
//! master key, which every node of one service shares already (it seals the secrets they read).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::domain::content_key::MasterKey;
use crate::domain::time::now_ms;
use crate::store::nodes::NodeRow;
use crate::store::{Db, DbError};

/// The header a node-to-node request carries its credential in.
pub const RELAY_HEADER: &str = "x-sluice-relay";
/// The header carrying the viewer's address on a relayed request (per-address limits).
pub const CLIENT_HEADER: &str = "x-sluice-client";
/// How long the holder of a stream is remembered (found or not).
const HOLDER_TTL: Duration = Duration::from_millis(500);
/// Streams remembered at most (a flood of made-up ids cannot grow the map).
const HOLDERS_MAX: usize = 4096;

/// Where another node holds a live stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub node: String,
    /// The node's internal base URL (`http://10.0.0.2:8080`), no trailing slash.
    pub url: String,
    /// Where RTSP viewers reach it (`rtsp://10.0.0.2:8554`), once it said.
    pub rtsp: Option<String>,
}

/// What a node reports of itself at each heartbeat.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Load {
    /// Pushes held here.
    pub live_sessions: u64,
    /// Viewers here as of its last viewer report: HLS playback sessions, WHEP viewers and RTSP
    /// clients (docs/viewers.md).
    pub viewers: u64,
    /// Relayed requests answered from another node since start.
    pub relayed: u64,
    /// This process's CPU time over the last heartbeat, in % of one core.
    pub cpu_percent: f64,
    /// The machine's 1-minute load average.
    pub load1: f64,
}

/// A node as the operator sees it.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub row: NodeRow,
    pub alive: bool,
    pub load: Load,
    /// Live streams held there: (project id, stream id).
    pub sessions: Vec<(String, String)>,
}

pub struct Nodes {
    db: Db,
    node_id: String,
    timeout: Duration,
    relay_token: String,
    holders: Mutex<HashMap<String, (Instant, Option<Holder>)>>,
}

impl Nodes {
    pub fn new(db: Db, node_id: String, timeout: Duration, master_key: &MasterKey) -> Nodes {
        let relay_token = hex::encode(master_key.derive("sluice node relay v1"));
        Nodes { db, node_id, timeout, relay_token, holders: Mutex::new(HashMap::new()) }
    }

    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Four heartbeats per timeout: one lost write does not make a node dead.
    pub fn heartbeat_every(&self) -> Duration {
        (self.timeout / 4).max(Duration::from_millis(250))
    }

    /// The bearer of node-to-node requests.
    pub fn relay_token(&self) -> &str {
        &self.relay_token
    }

    /// Whether `presented` is the node-to-node bearer (constant time).
    pub fn is_relay(&self, presented: Option<&str>) -> bool {
        use subtle::ConstantTimeEq;
        presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(self.relay_token.as_bytes())))
    }

    fn alive_after(&self) -> i64 {
        now_ms() - i64::try_from(self.timeout.as_millis()).unwrap_or(i64::MAX)
    }

    pub async fn register(&self, internal_url: &str) -> Result<(), DbError> {
        self.db.register_node(&self.node_id, internal_url.trim_end_matches('/'), now_ms()).await
    }

    /// The heartbeat, with where RTSP viewers reach this node; `false` when the others
    /// declared this node dead meanwhile.
    pub async fn beat(&self, load: &Load, rtsp_url: Option<&str>) -> Result<bool, DbError> {
        let json = serde_json::to_string(load).unwrap_or_default();
        self.db.node_heartbeat(&self.node_id, now_ms(), &json, rtsp_url).await
    }

    pub async fn stopped(&self) -> Result<(), DbError> {
        self.db.node_stopped(&self.node_id, now_ms()).await
    }

    /// Claims every node that has been silent past the timeout; returns those this node took
    /// over (each is taken by exactly one survivor).
    pub async fn claim_dead(&self) -> Result<Vec<String>, DbError> {
        let before = self.alive_after();
        let mut taken = Vec::new();
        for id in self.db.silent_nodes(before).await? {
            if id != self.node_id && self.db.claim_dead_node(&id, before, &self.node_id, now_ms()).await? {
                tracing::warn!(node = %id, timeout = ?self.timeout, "node stopped answering; taking over its work");
                taken.push(id);
            }
        }
        Ok(taken)
    }

    /// The live node holding `stream_id`'s push, when it is another node (remembered for half a
    /// second, so 1,000 viewers asking cost one lookup).
    pub async fn holder(&self, stream_id: &str) -> Result<Option<Holder>, DbError> {
        if let Some((at, found)) = self.lock().get(stream_id) {
            if at.elapsed() < HOLDER_TTL {
                return Ok(found.clone());
            }
        }
        let found = self
            .db
            .live_holder(stream_id, self.alive_after())
            .await?
            .filter(|(node, _, _)| *node != self.node_id)
            .map(|(node, url, rtsp)| Holder { node, url, rtsp });
        let mut holders = self.lock();
        if holders.len() >= HOLDERS_MAX {
            holders.retain(|_, (at, _)| at.elapsed() < HOLDER_TTL);
            if holders.len() >= HOLDERS_MAX {
                holders.clear();
            }
        }
        holders.insert(stream_id.to_string(), (Instant::now(), found.clone()));
        Ok(found)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Option<Holder>)>> {
        self.holders.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every node with its live sessions and last reported load.
    pub async fn list(&self) -> Result<Vec<NodeView>, DbError> {
        list(&self.db, self.timeout).await
    }
}

/// [`Nodes::list`] without a running node (`sluice admin nodes`).
pub async fn list(db: &Db, timeout: Duration) -> Result<Vec<NodeView>, DbError> {
    let alive_after = now_ms() - i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
    let pushes = db.held_pushes().await?;
    Ok(db
        .nodes()
        .await?
        .into_iter()
        .map(|row| {
            let alive = row.reaped_at.is_none() && row.heartbeat_at >= alive_after;
            let load = row.load.as_deref().and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default();
            let sessions = pushes
                .iter()
                .filter(|p| p.node == row.id)
                .map(|p| (p.project_id.clone(), p.stream_id.clone()))
                .collect();
            NodeView { row, alive, load, sessions }
        })
        .collect())
}
