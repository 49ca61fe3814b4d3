//! What every API request passes before its handler (CSRF, the failed-authentication limit,
//! the API's deadline), and the process's own probes: `/healthz` and `/readyz`.

use std::sync::Arc;
use std::time::Duration;

use poem::http::StatusCode;
use poem::web::{Data, Json};
use poem::{handler, Endpoint, IntoResponse, Request, Response};
use serde::Serialize;

use super::csrf::csrf_refusal;
use super::App;
use crate::api::error::ApiError;
use crate::client_ip;

/// The longest an API request may take to be answered (CONTRACT: Faults — "503 … within
/// 10 s"): a handler still waiting then (on a database that hangs) is dropped, as if its client
/// had gone, and the request answered 503 with `Retry-After`. Every handler is written to be
/// dropped at any await (a client may close its connection at any time). The event log's
/// stream answers at once and is not held by it; uploads are not under `/v1`.
pub const API_DEADLINE: Duration = Duration::from_secs(8);

/// The deadline of `POST …/vod/{id}/uploaded`, which probes the file it marks: one probe at a
/// time in the process (`media::vod::probe`), each bounded at 20 s, so under load a probe waits
/// behind others (the suite saw 8 s go by). Its database work comes first, so a database that
/// is away still answers 503 within [`API_DEADLINE`].
pub const PROBE_API_DEADLINE: Duration = Duration::from_secs(30);

/// The deadline of a request to `path`.
fn deadline_of(method: &poem::http::Method, path: &str) -> Duration {
    if method == poem::http::Method::POST && path.starts_with("/v1/projects/") && path.ends_with("/uploaded")
    {
        PROBE_API_DEADLINE
    } else {
        API_DEADLINE
    }
}

/// How long a probe of `/readyz` (or `/metrics`) waits for a dependency to answer.
const PROBE_DEADLINE: Duration = Duration::from_secs(2);

/// Cross-cutting rules of `/v1`: mutating requests authenticated by cookie must come from our
/// own origin (CSRF); failed authentications are counted per client IP, and past the limit a
/// failing request gets 429 in place of its 401 (CONTRACT: Conventions). A request whose
/// credential is valid is never refused by that limit, whatever its address did before. No
/// request is held past [`API_DEADLINE`].
pub(super) async fn guard<E: Endpoint<Output = Response>>(
    app: Arc<App>,
    ep: Arc<E>,
    req: Request,
) -> poem::Result<Response> {
    if !req.uri().path().starts_with("/v1/") {
        return ep.call(req).await;
    }
    if let Some(refusal) = csrf_refusal(&app.settings, &req) {
        return Ok(ApiError::forbidden(refusal).into_response());
    }
    let ip = client_ip::of_request(&req);
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let resp = match tokio::time::timeout(deadline_of(&method, &path), ep.call(req)).await {
        Ok(resp) => resp?,
        Err(_) => {
            tracing::warn!(%method, %path, "API request not answered within its deadline");
            return Ok(ApiError::unavailable(
                "the service could not answer in time (its database is slow or away); retry later",
            )
            .into_response());
        }
    };
    if resp.status() == StatusCode::UNAUTHORIZED {
        if let Some(ip) = ip {
            if let Err(retry_after) = app.api.auth_failures.fail(&client_ip::limit_key(ip)) {
                tracing::info!(%ip, "failed authentication; address over its limit");
                return Ok(ApiError::too_many(retry_after).into_response());
            }
            tracing::info!(%ip, "failed authentication");
        }
    }
    Ok(resp)
}

#[handler]
pub(super) fn healthz() -> &'static str {
    "ok"
}

/// Whether each dependency answers now, as `/readyz` says it.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Dependencies {
    pub database: Up,
    pub storage: Up,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Up {
    Ok,
    Down,
}

impl Up {
    fn of(ok: bool) -> Up {
        if ok {
            Up::Ok
        } else {
            Up::Down
        }
    }
}

impl App {
    /// Asks the database and the storage at once, each for up to [`PROBE_DEADLINE`].
    pub(super) async fn dependencies(&self) -> Dependencies {
        let database = async {
            match crate::store::within(PROBE_DEADLINE, self.db.ping()).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "readiness: database");
                    false
                }
            }
        };
        let storage =
            async { tokio::time::timeout(PROBE_DEADLINE, self.storage.check()).await.unwrap_or(false) };
        let (database, storage) = tokio::join!(database, storage);
        Dependencies { database: Up::of(database), storage: Up::of(storage) }
    }
}

/// `{"status": "ready", "database": "ok", "storage": "ok", "spool": {"bytes": 0}}` with 200 when
/// the database and the storage answer; 503 with `"status": "unavailable"` and the one that is
/// `down` otherwise. The spool's bytes are what waits for the store.
#[handler]
pub(super) async fn readyz(app: Data<&Arc<App>>) -> Response {
    #[derive(Serialize)]
    struct Spooled {
        bytes: u64,
    }
    #[derive(Serialize)]
    struct Ready {
        status: &'static str,
        #[serde(flatten)]
        dependencies: Dependencies,
        /// What waits for the store (docs/operations.md).
        spool: Spooled,
    }
    let dependencies = app.dependencies().await;
    let spool = Spooled { bytes: app.outputs.recordings.spool().bytes() };
    let ready = dependencies.database == Up::Ok && dependencies.storage == Up::Ok;
    let status = if ready { "ready" } else { "unavailable" };
    let mut resp = Json(Ready { status, dependencies, spool }).into_response();
    if !ready {
        resp.set_status(StatusCode::SERVICE_UNAVAILABLE);
    }
    resp.headers_mut()
        .insert(poem::http::header::CACHE_CONTROL, poem::http::HeaderValue::from_static("no-store"));
    resp
}
