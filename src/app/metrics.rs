//! `GET /metrics`: the request metrics, the live sessions and viewers of this process, and with
//! billing on the projects' credit balances; and [`observe`], the layer that records every
//! request in them.

use std::fmt::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use poem::web::Data;
use poem::{handler, Endpoint, Request, Response};

use super::App;
use crate::client_ip::{self, ClientIp};
use crate::config::Billing;

#[handler]
pub(super) async fn metrics(app: Data<&Arc<App>>) -> Response {
    let mut text = app.metrics.render();
    text.push_str(&format!(
        "# HELP sluice_whep_viewers WHEP viewers connected now\n# TYPE sluice_whep_viewers gauge\nsluice_whep_viewers {}\n\
         # HELP sluice_whip_sessions WHIP publishers connected now\n# TYPE sluice_whip_sessions gauge\nsluice_whip_sessions {}\n\
         # HELP sluice_srt_sessions SRT publishers live now\n# TYPE sluice_srt_sessions gauge\nsluice_srt_sessions {}\n\
         # HELP sluice_push_sessions Push sessions (every protocol) open in this process now\n# TYPE sluice_push_sessions gauge\nsluice_push_sessions {}\n\
         # HELP sluice_relay_requests_total Playback requests answered by relaying from the node holding the stream\n# TYPE sluice_relay_requests_total counter\nsluice_relay_requests_total {}\n\
         # HELP sluice_relay_fetches_total Requests made to the nodes holding streams (shared by concurrent viewers)\n# TYPE sluice_relay_fetches_total counter\nsluice_relay_fetches_total {}\n\
         # HELP sluice_live_encoders_started_total Live ladders' encoders started (a publisher that reconnects within the window keeps its session's)\n# TYPE sluice_live_encoders_started_total counter\nsluice_live_encoders_started_total {}\n",
        app.whep.viewers.count(),
        app.whip.publishers.count(),
        app.srt.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map_or(0, |s| s.sessions()),
        app.push_sessions(),
        app.origin.relay.served.load(std::sync::atomic::Ordering::Relaxed),
        app.origin.relay.fetches.load(std::sync::atomic::Ordering::Relaxed),
        app.outputs.sessions.encoders_started(),
    ));
    text.push_str(&app.per_stream.render(
        |id| app.streams.sessions.is_live(id),
        |id| {
            let c = app.last_viewers.of(id);
            [("hls", c.hls), ("webrtc", app.whep.viewers.of_stream(id) as i64), ("rtsp", c.rtsp)]
        },
    ));
    let statuses = app.simulcast.statuses();
    text.push_str("# HELP sluice_simulcast_targets Simulcast targets sent to from this node, by status\n# TYPE sluice_simulcast_targets gauge\n");
    for status in crate::domain::simulcast::TargetStatus::ALL
        .into_iter()
        .filter(|s| *s != crate::domain::simulcast::TargetStatus::Idle)
    {
        let n = statuses.get(&status).copied().unwrap_or(0);
        let _ = writeln!(text, "sluice_simulcast_targets{{status=\"{}\"}} {n}", status.as_str());
    }
    let _ = write!(
        text,
        "# HELP sluice_simulcast_bytes_total Bytes this node sent to simulcast targets\n# TYPE sluice_simulcast_bytes_total counter\nsluice_simulcast_bytes_total {}\n",
        app.simulcast.bytes_sent()
    );
    let deps = app.dependencies().await;
    let up = |u| u8::from(u == super::edge::Up::Ok);
    text.push_str(&format!(
        "# HELP sluice_dependency_up Whether a dependency answered this scrape (1) or not (0)\n# TYPE sluice_dependency_up gauge\n\
         sluice_dependency_up{{dependency=\"database\"}} {}\nsluice_dependency_up{{dependency=\"storage\"}} {}\n\
         # HELP sluice_reconciled_total What was written late, once its dependency answered again\n# TYPE sluice_reconciled_total counter\n\
         sluice_reconciled_total{{kind=\"push_ended\"}} {}\nsluice_reconciled_total{{kind=\"recording_completed\"}} {}\n\
         # HELP sluice_spool_bytes Bytes of recording segments waiting in the spool for the object store\n# TYPE sluice_spool_bytes gauge\nsluice_spool_bytes {}\n",
        up(deps.database),
        up(deps.storage),
        app.streams.reconciled(),
        app.outputs.recordings.reconciled(),
        app.outputs.recordings.spool().bytes(),
    ));
    if deps.database == super::edge::Up::Ok {
        text.push_str(&app.credit_metrics().await);
    }
    Response::builder().content_type("text/plain; version=0.0.4").body(text)
}

impl App {
    /// `sluice_credits_balance_seconds` of every project, with billing on (empty otherwise, or
    /// when the database does not answer: the other metrics are still served).
    pub(super) async fn credit_metrics(&self) -> String {
        if self.settings.billing != Billing::On {
            return String::new();
        }
        let read = crate::store::within(Duration::from_secs(2), self.db.credit_balances());
        let balances = match read.await {
            Ok(balances) => balances,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: reading credit balances");
                return String::new();
            }
        };
        let mut text = String::from(
            "# HELP sluice_credits_balance_seconds Live seconds left in each project's credits\n\
             # TYPE sluice_credits_balance_seconds gauge\n",
        );
        for (slug, ms) in balances {
            let slug = slug.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
            let _ = writeln!(
                text,
                "sluice_credits_balance_seconds{{project=\"{slug}\"}} {}",
                crate::domain::credits::seconds_of(ms)
            );
        }
        text
    }
}

/// The outermost layer: resolves the client address once (proxy-aware) for every layer and
/// handler below, and records the request in the metrics and the request log.
pub(super) struct Observed<E> {
    pub(super) app: Arc<App>,
    pub(super) inner: E,
}

impl<E: Endpoint<Output = Response>> Endpoint for Observed<E> {
    type Output = Response;

    /// By reference: poem's `around` cloned two `Arc`s a request, whose counters every HTTP
    /// thread then shares.
    async fn call(&self, req: Request) -> poem::Result<Response> {
        observe(&self.app, &self.inner, req).await
    }
}

async fn observe<E: Endpoint<Output = Response>>(
    app: &App,
    ep: &E,
    mut req: Request,
) -> poem::Result<Response> {
    let started = Instant::now();
    let ip = app.settings.trusted_proxies.resolve(&req);
    // Only an address other than the TCP peer's (a trusted proxy's client) is stored: the peer
    // is what `client_ip::of_request` falls back to, and a request with no extension yet
    // would allocate their map for it (every playlist reload passes here).
    if let Some(ip) = ip.filter(|ip| Some(*ip) != client_ip::of_request(&req)) {
        req.extensions_mut().insert(ClientIp(ip));
    }
    // Both reference-counted: no copy of the path per request.
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let resp = ep.call(req).await?;
    let status = resp.status();
    let seconds = started.elapsed().as_secs_f64();
    app.metrics.observe(&method, uri.path(), status, seconds);
    tracing::debug!(
        client_ip = %ip.map(|ip| ip.to_string()).unwrap_or_default(),
        %method,
        route = %crate::metrics::route_of(uri.path()),
        status = status.as_u16(),
        ms = (seconds * 1000.0).round() as u64,
        "request"
    );
    Ok(resp)
}
