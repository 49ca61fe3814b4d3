//! Builds the App (settings, database, limiters, metrics) and serves HTTP.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use poem::endpoint::BoxEndpoint;
use poem::http::{Method, StatusCode};
use poem::listener::{Acceptor, Listener, TcpListener};
use poem::middleware::{CatchPanic, CookieJarManager};
use poem::web::Data;
use poem::{get, handler, Endpoint, EndpointExt, IntoResponse, Request, Response, Route};
use tokio::sync::Notify;

use crate::api::error::{to_json_error, ApiError};
use crate::api::security::SESSION_COOKIE;
use crate::client_ip::{self, ClientIp};
use crate::config::{Mode, Settings};
use crate::events::sender::Sender;
use crate::events::Event;
use crate::metrics::Metrics;
use crate::password_gate::PasswordGate;
use crate::ratelimit::{self, Limiter, Lockout};
use crate::store::Db;

/// Failed sign-ins allowed per e-mail address within [`LOGIN_FAILURE_WINDOW`] (CONTRACT: Conventions).
pub const LOGIN_FAILURES_PER_EMAIL: u32 = 10;
pub const LOGIN_FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);

/// Everything a request handler or background worker needs.
pub struct App {
    pub settings: Settings,
    pub db: Db,
    /// Per API key (and per signed-in user): sustained rate and burst of the contract.
    pub request_limiter: Limiter<String>,
    /// Per client IP: failed authentications a minute. Only failing requests are refused.
    pub auth_failures: Lockout<IpAddr>,
    /// Per e-mail address: failed sign-ins (10 in 15 minutes), then a lockout.
    pub login_failures: Lockout<String>,
    /// Every password hash and check of the server runs through it.
    pub passwords: PasswordGate,
    pub metrics: Metrics,
    /// When each key's `lastUsedAt` was last written by this process.
    pub(crate) key_uses: Mutex<HashMap<String, i64>>,
    /// Wakes the webhook sender when this process queued deliveries.
    sender_wake: Arc<Notify>,
    /// This process's identity for leases; kept in the data dir so a restart reclaims them.
    node_id: String,
    /// Open push sessions of this process.
    pub live: crate::media::live::LiveSessions,
    /// The LL-HLS live edge of each stream pushed to this process.
    pub channels: crate::media::live_hls::channel::Channels,
    /// Adobe RTMP challenges handed out and not yet answered.
    pub adobe_challenges: crate::media::rtmp::challenges::Challenges,
    /// Where RTMP ingest listens, once started.
    rtmp_bound: std::sync::OnceLock<SocketAddr>,
    /// Where HTTP listens, once started.
    http_bound: std::sync::OnceLock<SocketAddr>,
    /// VOD sources and outputs.
    pub storage: crate::storage::Storage,
    /// Keys of signed URLs.
    pub keys: crate::store::keys::SigningKeys,
    /// Wraps the content keys of `drmEnabled` media.
    pub master_key: crate::domain::content_key::MasterKey,
    /// The origin's cache of playback policies and content keys.
    pub playback: crate::playback::Policies,
    /// Uploads running on this process's upload target.
    pub uploading: crate::upload::Uploading,
    /// Wakes idle transcode workers when a job was queued.
    vod_wake: Arc<Notify>,
    /// Turns true when transcode workers must stop and give their jobs back (shutdown).
    vod_stop: tokio::sync::watch::Sender<bool>,
}

impl App {
    /// Connects to the database (applying migrations) and prepares the data dir.
    pub async fn build(settings: Settings) -> anyhow::Result<Arc<App>> {
        prepare_data_dir(&settings.data_dir)?;
        let storage = crate::storage::Storage::open(&settings.storage_url)?;
        let db = Db::connect(&settings.database_url).await?;
        let node_id = node_id(&settings.data_dir)?;
        let master_key = master_key(&settings)?;
        let sealed =
            db.seal_legacy_secrets(&master_key).await.context("sealing secrets kept in the clear")?;
        if sealed > 0 {
            tracing::info!(secrets = sealed, "sealed secrets that an older version kept in the clear");
        }
        let keys = crate::store::keys::SigningKeys::load(&db, &master_key).await?;
        Ok(Arc::new(App {
            storage,
            keys,
            master_key,
            playback: Default::default(),
            uploading: Default::default(),
            vod_wake: Arc::new(Notify::new()),
            vod_stop: tokio::sync::watch::channel(false).0,
            sender_wake: Arc::new(Notify::new()),
            node_id,
            live: Default::default(),
            channels: Default::default(),
            adobe_challenges: Default::default(),
            rtmp_bound: std::sync::OnceLock::new(),
            http_bound: std::sync::OnceLock::new(),
            request_limiter: Limiter::new(ratelimit::per_second(
                settings.rate_limit_per_key,
                settings.rate_limit_burst,
            )),
            auth_failures: Lockout::new(ratelimit::per_minute(settings.auth_failures_per_min)),
            login_failures: Lockout::new(ratelimit::per_window(
                LOGIN_FAILURES_PER_EMAIL,
                LOGIN_FAILURE_WINDOW,
            )),
            passwords: PasswordGate::for_this_machine(),
            metrics: Metrics::new(),
            key_uses: Mutex::new(HashMap::new()),
            settings,
            db,
        }))
    }

    /// Whether webhook targets may be plain http and private addresses (development mode).
    pub fn allow_private_webhooks(&self) -> bool {
        self.settings.mode == Mode::Development
    }

    /// The RTMP port handed out in ingest URLs: the bound one once started (port 0 picks one).
    pub fn rtmp_port(&self) -> u16 {
        self.rtmp_addr().map_or(self.settings.rtmp_addr.port(), |a| a.port())
    }

    /// `{base_url}`, with the bound port when HTTP was asked to bind port 0 (tests).
    pub fn public_url(&self) -> String {
        self.with_bound_port(&self.settings.public_url)
    }

    /// `{playback_base}`, with the bound port when HTTP was asked to bind port 0 (tests).
    pub fn playback_base(&self) -> String {
        self.with_bound_port(&self.settings.playback_base)
    }

    fn with_bound_port(&self, url: &str) -> String {
        match self.http_bound.get() {
            Some(bound) if self.settings.http_addr.port() == 0 => {
                url.replacen(&self.settings.http_addr.to_string(), &bound.to_string(), 1)
            }
            _ => url.to_string(),
        }
    }

    /// Where RTMP ingest listens (after `start`).
    pub fn rtmp_addr(&self) -> Option<SocketAddr> {
        self.rtmp_bound.get().copied()
    }

    /// This process's identity (owner of its leases).
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Wakes transcode workers waiting for a job.
    pub fn vod_wake(&self) -> Arc<Notify> {
        self.vod_wake.clone()
    }

    /// Turns true when transcode workers must stop.
    pub fn vod_stop(&self) -> tokio::sync::watch::Receiver<bool> {
        self.vod_stop.subscribe()
    }

    /// Stops the transcode workers: running jobs go back to the queue (CONTRACT: SIGTERM).
    /// Waits up to `grace` for them to let go.
    pub async fn drain_vod(&self, grace: Duration) {
        self.vod_stop.send_replace(true);
        let deadline = Instant::now() + grace;
        // Each worker holds a receiver; they drop them as they stop.
        while self.vod_stop.receiver_count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Tells the webhook sender that deliveries were queued.
    pub fn wake_sender(&self) {
        self.sender_wake.notify_one();
    }

    /// Emits an event in a transaction of its own and wakes the sender. Emitters that change
    /// state call [`crate::events::emit`] on their own transaction instead.
    pub async fn emit(&self, project_id: &str, event: &Event) -> Result<usize, crate::store::DbError> {
        let mut tx = self.db.begin_write().await?;
        let queued = crate::events::emit(&mut tx, project_id, event).await?;
        tx.commit().await?;
        self.wake_sender();
        Ok(queued)
    }

    /// The whole HTTP surface.
    pub fn routes(self: &Arc<Self>) -> impl Endpoint<Output = Response> {
        let service = crate::api::service();
        let spec = crate::api::spec_json(&service);
        let docs = service.swagger_ui();
        let (guard_app, metrics_app) = (self.clone(), self.clone());
        let allow = Arc::new(crate::api::allow::AllowTable::from_spec(&spec));
        Route::new()
            .nest("/", service)
            .at("/v1/openapi.json", get(openapi_json).data(Arc::new(spec)))
            .nest("/docs", docs)
            .at("/healthz", get(healthz))
            .at("/readyz", get(readyz))
            .at("/metrics", get(metrics))
            .nest("/play", crate::playback::routes())
            .nest("/upload", crate::upload::routes())
            .with(CookieJarManager::new())
            .with(CatchPanic::new())
            .data(self.clone())
            .catch_all_error(|err| async move { to_json_error(err) })
            .around(move |ep, req| {
                let allow = allow.clone();
                async move {
                    let path = req.uri().path().to_string();
                    let mut resp = ep.call(req).await?;
                    allow.complete(&path, &mut resp);
                    Ok(resp)
                }
            })
            .around(move |ep, req| guard(guard_app.clone(), ep, req))
            .around(move |ep, req| observe(metrics_app.clone(), ep, req))
    }

    /// Serves on `settings.http_addr` until `shutdown` resolves. Returns once bound, with the
    /// bound address (port 0 picks a free port) and the server task.
    pub async fn start(
        self: &Arc<Self>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
        self.start_with(shutdown, |routes| routes).await
    }

    /// [`App::start`], serving [`App::routes`] as `wrap` wraps them (the test suite checks every
    /// answer against the OpenAPI document this way).
    pub async fn start_with(
        self: &Arc<Self>,
        shutdown: impl Future<Output = ()> + Send + 'static,
        wrap: impl FnOnce(BoxEndpoint<'static, Response>) -> BoxEndpoint<'static, Response>,
    ) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
        let acceptor = TcpListener::bind(self.settings.http_addr)
            .into_acceptor()
            .await
            .with_context(|| format!("binding {}", self.settings.http_addr))?;
        let addr = acceptor
            .local_addr()
            .first()
            .and_then(|a| a.as_socket_addr().copied())
            .context("listener has no address")?;
        let _ = self.http_bound.set(addr);
        let routes = wrap(self.routes().boxed());
        self.spawn_housekeeping();
        self.spawn_limiter_sweeps();
        let orphans =
            self.end_orphaned_pushes().await.context("ending pushes left open by a previous run")?;
        if orphans > 0 {
            tracing::warn!(streams = orphans, "ended pushes that a previous run left live");
        }
        self.spawn_sender()?;
        crate::media::vod::worker::spawn(self);
        let rtmp = crate::media::rtmp::server::start(self.clone())
            .await
            .with_context(|| format!("binding RTMP on {}", self.settings.rtmp_addr))?;
        let _ = self.rtmp_bound.set(rtmp);
        let server = tokio::spawn(async move {
            poem::Server::new_with_acceptor(acceptor)
                .run_with_graceful_shutdown(routes, shutdown, Some(Duration::from_secs(10)))
                .await
        });
        Ok((addr, server))
    }

    fn spawn_sender(self: &Arc<Self>) -> anyhow::Result<()> {
        let sender = Sender::new(
            self.db.clone(),
            self.allow_private_webhooks(),
            self.settings.webhook_retry_scale,
            self.node_id.clone(),
            self.sender_wake.clone(),
            self.master_key.clone(),
        )?;
        tokio::spawn(Arc::new(sender).run());
        Ok(())
    }

    /// Forgets rate-limit state that has lapsed, so a flood of keys or addresses does not stay.
    fn spawn_limiter_sweeps(self: &Arc<Self>) {
        let app = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                let Some(app) = app.upgrade() else { return };
                app.request_limiter.sweep();
                app.auth_failures.sweep();
                app.login_failures.sweep();
            }
        });
    }

    fn spawn_housekeeping(self: &Arc<Self>) {
        let app = Arc::downgrade(self);
        // Often enough that a short idle limit (tests) is honoured promptly.
        let every = match self.settings.stream_idle_disable {
            0 => 600,
            idle => (idle / 2).clamp(1, 60),
        };
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(every));
            let mut passes = 0u64;
            loop {
                tick.tick().await;
                let Some(app) = app.upgrade() else { return };
                if let Err(e) = app.disable_idle_streams().await {
                    tracing::warn!(error = %e, "disabling idle streams");
                }
                app.channels.sweep();
                if passes % (600 / every).max(1) == 0 {
                    if let Err(e) = app.db.purge_expired_sessions().await {
                        tracing::warn!(error = %e, "purging expired sessions");
                    }
                }
                passes += 1;
            }
        });
    }
}

/// A stable identity for this process's data dir, created on first start.
fn node_id(data_dir: &std::path::Path) -> anyhow::Result<String> {
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

/// Creates the data dir, readable by its owner only: it holds the database, the master key and
/// the media.
pub fn prepare_data_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).with_context(|| format!("creating data dir {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making data dir {} readable by its owner only", dir.display()))
}

/// The master key of the settings, or the one in `<data dir>/master.key` (created on first use,
/// readable by the owner only).
pub fn master_key(settings: &Settings) -> anyhow::Result<crate::domain::content_key::MasterKey> {
    use crate::domain::content_key::MasterKey;
    if let Some(hex) = &settings.master_key {
        return MasterKey::from_hex(hex).context("the master key must be 64 hexadecimal characters");
    }
    let path = settings.data_dir.join("master.key");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            MasterKey::from_hex(&text).with_context(|| format!("{} is not a master key", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let key = MasterKey::random();
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            file.write_all(key.to_hex().as_bytes()).with_context(|| format!("writing {}", path.display()))?;
            Ok(key)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Cross-cutting rules of `/v1`: mutating requests authenticated by cookie must come from our
/// own origin (CSRF); failed authentications are counted per client IP, and past the limit a
/// failing request gets 429 in place of its 401 (CONTRACT: Conventions). A request whose
/// credential is valid is never refused by that limit, whatever its address did before.
async fn guard<E: Endpoint<Output = Response>>(
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
    let resp = ep.call(req).await?;
    if resp.status() == StatusCode::UNAUTHORIZED {
        if let Some(ip) = ip {
            if let Err(retry_after) = app.auth_failures.fail(&client_ip::limit_key(ip)) {
                tracing::info!(%ip, "failed authentication; address over its limit");
                return Ok(ApiError::too_many(retry_after).into_response());
            }
            tracing::info!(%ip, "failed authentication");
        }
    }
    Ok(resp)
}

/// Why a request must be refused as possibly cross-site, if it must.
fn csrf_refusal(settings: &Settings, req: &Request) -> Option<&'static str> {
    let mutating = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let has_bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer "));
    let has_session = req
        .headers()
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(';').any(|c| c.trim().starts_with(&format!("{SESSION_COOKIE}="))));
    let login = req.uri().path() == "/v1/auth/login";
    if !mutating || has_bearer || !(has_session || login) {
        return None;
    }
    let origin =
        req.headers().get("origin").or_else(|| req.headers().get("referer")).and_then(|v| v.to_str().ok());
    match origin {
        Some(origin) if same_origin(settings, req, origin) => None,
        Some(_) => Some("cross-site request refused: Origin does not match this service"),
        // A first sign-in from a tool (curl) sends no Origin and carries no cookie to abuse.
        None if login && !has_session => None,
        None => Some("cookie-authenticated writes need an Origin header"),
    }
}

fn same_origin(settings: &Settings, req: &Request, origin: &str) -> bool {
    let origin_of = |url: &str| -> String {
        match url.split_once("://") {
            Some((scheme, rest)) => {
                let host = rest.split('/').next().unwrap_or_default();
                format!("{}://{}", scheme.to_ascii_lowercase(), host.to_ascii_lowercase())
            }
            None => String::new(),
        }
    };
    let origin = origin_of(origin);
    if origin.is_empty() {
        return false;
    }
    if origin == origin_of(&settings.public_url) {
        return true;
    }
    let host = req.headers().get("host").and_then(|v| v.to_str().ok()).unwrap_or_default();
    !host.is_empty()
        && (origin == format!("http://{}", host.to_ascii_lowercase())
            || origin == format!("https://{}", host.to_ascii_lowercase()))
}

/// The outermost layer: resolves the client address once (proxy-aware) for every layer and
/// handler below, and records the request in the metrics and the request log.
async fn observe<E: Endpoint<Output = Response>>(
    app: Arc<App>,
    ep: Arc<E>,
    mut req: Request,
) -> poem::Result<Response> {
    let started = Instant::now();
    let ip = app.settings.trusted_proxies.resolve(&req);
    if let Some(ip) = ip {
        req.extensions_mut().insert(ClientIp(ip));
    }
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let resp = ep.call(req).await?;
    let status = resp.status().as_u16();
    let seconds = started.elapsed().as_secs_f64();
    app.metrics.observe(&method, &path, status, seconds);
    tracing::debug!(
        client_ip = %ip.map(|ip| ip.to_string()).unwrap_or_default(),
        %method,
        route = %crate::metrics::route_of(&path),
        status,
        ms = (seconds * 1000.0).round() as u64,
        "request"
    );
    Ok(resp)
}

#[handler]
fn openapi_json(spec: Data<&Arc<String>>) -> Response {
    Response::builder().content_type("application/json; charset=utf-8").body(spec.0.as_str().to_string())
}

#[handler]
fn healthz() -> &'static str {
    "ok"
}

/// 200 when the database answers and the storage folder is there; 503 otherwise.
#[handler]
async fn readyz(app: Data<&Arc<App>>) -> Response {
    let mut problems = Vec::new();
    if let Err(e) = app.db.ping().await {
        tracing::warn!(error = %e, "readiness: database");
        problems.push("database unreachable");
    }
    if !app.storage.check().await {
        problems.push("storage unreachable");
    }
    if problems.is_empty() {
        "ready".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, problems.join("; ")).into_response()
    }
}

#[handler]
fn metrics(app: Data<&Arc<App>>) -> Response {
    Response::builder().content_type("text/plain; version=0.0.4").body(app.metrics.render())
}
