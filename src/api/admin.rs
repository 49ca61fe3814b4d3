//! `/v1/admin/*`: the operator's view of the service (docs/scale-out.md), across projects.
//! Authenticated by the operator's bearer `SLUICE_ADMIN_TOKEN` (compared in constant time);
//! without one configured, every admin route answers 403.

use std::sync::Arc;
use std::time::Duration;

use poem::web::Data;
use poem_openapi::auth::Bearer;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi, SecurityScheme};

use super::error::{ApiError, ApiResult};
use super::ApiTags;
use crate::api::ApiState;
use crate::domain::time::iso;
use crate::services::nodes::NodeView;

/// `Authorization: Bearer <SLUICE_ADMIN_TOKEN>` — the operator of this Sluice.
#[derive(SecurityScheme)]
#[oai(ty = "bearer")]
pub struct OperatorAuth(Bearer);

/// A push held by a node.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct NodeSession {
    pub project_id: String,
    pub stream_id: String,
}

/// What a node last reported of itself.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct NodeLoad {
    /// Pushes held there.
    pub live_sessions: u64,
    /// Viewers there as of its last viewer report (every 2 s): HLS playback sessions, WHEP
    /// viewers and RTSP clients.
    pub viewers: u64,
    /// Playback requests it answered by relaying from another node, since it started.
    pub relayed_requests: u64,
    /// The process's CPU time over its last heartbeat, in % of one core.
    pub cpu_percent: f64,
    /// The machine's 1-minute load average.
    pub load1: f64,
}

/// A `sluice serve` process of this service.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct Node {
    pub id: String,
    /// Where the other nodes reach it (`SLUICE_INTERNAL_URL`).
    pub internal_url: String,
    /// Whether it beat within the node timeout and nobody declared it gone.
    pub alive: bool,
    pub started_at: String,
    pub heartbeat_at: String,
    /// When it stopped (cleanly) or was declared dead.
    pub gone_at: Option<String>,
    /// The node that took its work over (itself when it stopped cleanly).
    pub taken_over_by: Option<String>,
    /// The live pushes it holds.
    pub sessions: Vec<NodeSession>,
    pub load: NodeLoad,
}

impl From<NodeView> for Node {
    fn from(v: NodeView) -> Node {
        Node {
            id: v.row.id,
            internal_url: v.row.internal_url,
            alive: v.alive,
            started_at: iso(v.row.started_at),
            heartbeat_at: iso(v.row.heartbeat_at),
            gone_at: v.row.reaped_at.map(iso),
            taken_over_by: v.row.reaped_by,
            sessions: v
                .sessions
                .into_iter()
                .map(|(project_id, stream_id)| NodeSession { project_id, stream_id })
                .collect(),
            load: NodeLoad {
                live_sessions: v.load.live_sessions,
                viewers: v.load.viewers,
                relayed_requests: v.load.relayed,
                cpu_percent: v.load.cpu_percent,
                load1: v.load.load1,
            },
        }
    }
}

/// Every node, newest first.
#[derive(Debug, Object)]
pub struct NodeList {
    pub nodes: Vec<Node>,
}

pub struct AdminApi;

#[OpenApi(tag = "ApiTags::Admin")]
impl AdminApi {
    /// List the nodes of this service, their live sessions and load (operator only)
    #[oai(path = "/v1/admin/nodes", method = "get", operation_id = "listNodes")]
    async fn nodes(&self, app: Data<&Arc<ApiState>>, auth: OperatorAuth) -> ApiResult<Json<NodeList>> {
        operator(&app, &auth)?;
        let timeout = Duration::from_secs(app.settings.node_timeout);
        let nodes = crate::services::nodes::list(&app.db, timeout).await?;
        Ok(Json(NodeList { nodes: nodes.into_iter().map(Node::from).collect() }))
    }
}

/// 403 when no operator token is configured, 401 for any other bearer.
fn operator(app: &ApiState, auth: &OperatorAuth) -> ApiResult<()> {
    use subtle::ConstantTimeEq;
    let Some(token) = &app.settings.admin_token else {
        return Err(ApiError::forbidden("no operator token is configured (SLUICE_ADMIN_TOKEN)"));
    };
    if bool::from(auth.0.token.as_bytes().ct_eq(token.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::unauthorized("not the operator token"))
    }
}
