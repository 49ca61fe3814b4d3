//! Builds the App (settings, database, limiters, metrics) and serves HTTP.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use poem::endpoint::BoxEndpoint;
use poem::listener::{Acceptor, Listener, TcpListener};
use poem::middleware::{CatchPanic, CookieJarManager};
use poem::web::Data;
use poem::{get, handler, Endpoint, EndpointExt, Response, Route};

use crate::api::error::to_json_error;
use crate::api::ApiState;
use crate::config::{Mode, Settings};
use crate::domain::content_key::MasterKey;
use crate::events::sender::Sender;
use crate::events::{Event, Outbox};
use crate::media::egress::simulcast::Simulcast;
use crate::media::egress::whep::Whep;
use crate::media::ingest::whip::Whip;
use crate::media::live::channel::Channels;
use crate::media::live::recording::Recordings;
use crate::media::live::session::LiveSessions;
use crate::media::live::taps::Taps;
use crate::media::vod::worker::Transcoder;
use crate::media::webrtc::WebrtcConfig;
use crate::metrics::Metrics;
use crate::password_gate::PasswordGate;
use crate::playback::Origin;
use crate::ratelimit::{self, Limiter, Lockout};
use crate::services::endpoints::Endpoints;
use crate::services::policy::Policies;
use crate::services::streams::Streams;
use crate::services::viewers::Viewers;
use crate::services::vods::Vods;
use crate::storage::Storage;
use crate::store::keys::SigningKeys;
use crate::store::Db;
use crate::upload::Uploads;

/// How long the event log keeps an event (CONTRACT: Webhooks, event log).
const EVENT_LOG_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long open HTTP requests may take to finish once shutdown begins.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

mod cluster;
mod csrf;
mod edge;
mod http;
pub use http::WRITE_STALL;
mod listeners;
mod metrics;
mod viewers;
mod workers;
use edge::{guard, healthz, readyz};

/// Failed sign-ins allowed per e-mail address within [`LOGIN_FAILURE_WINDOW`] (CONTRACT: Conventions).
pub const LOGIN_FAILURES_PER_EMAIL: u32 = 10;
pub const LOGIN_FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);

/// The composition root: every service and store is built here once and handed to what uses
/// it (the API's handlers, the origin, the upload target, RTMP ingest, the transcode workers,
/// the webhook sender). Only `main` and `cli` (and the tests, as a user of the crate) see it.
pub struct App {
    pub settings: Arc<Settings>,
    pub db: Db,
    /// VOD sources and outputs.
    pub storage: Storage,
    /// Wraps the content keys of `drmEnabled` media and seals the secrets kept.
    pub master_key: MasterKey,
    pub metrics: Metrics,
    /// This process's identity for leases; kept in the data dir so a restart reclaims them.
    node_id: String,
    outbox: Outbox,
    endpoints: Arc<Endpoints>,
    streams: Arc<Streams>,
    vods: Arc<Vods>,
    /// The LL-HLS live edge of each stream pushed to this process.
    channels: Arc<Channels>,
    pub uploads: Arc<Uploads>,
    api: Arc<ApiState>,
    origin: Arc<Origin>,
    /// The transcode workers hold it weakly: they stop when the App goes (tests run many).
    transcoder: Arc<Transcoder>,
    /// Live outputs of pushes (RTMP and WHIP): LL-HLS channels and the taps of WHEP and RTSP.
    outputs: Arc<LiveSessions>,
    /// Per-stream counters of `/metrics`.
    per_stream: Arc<crate::metrics::PerStream>,
    /// This node's viewer counts as of its last report (`/metrics`).
    last_viewers: viewers::LastCounts,
    pub whep: Arc<Whep>,
    pub whip: Arc<Whip>,
    /// The senders to the simulcast targets of the pushes held here.
    simulcast: Arc<Simulcast>,
    /// RTSP playback, once started; stopped when the App goes.
    rtsp: std::sync::Mutex<Option<crate::media::egress::rtsp::RtspServer>>,
    /// SRT ingest's listener (closed when the app goes).
    srt: std::sync::Mutex<Option<crate::media::ingest::srt::SrtServer>>,
}

impl App {
    /// Connects to the database (applying migrations) and prepares the data dir.
    pub async fn build(settings: Settings) -> anyhow::Result<Arc<App>> {
        prepare_data_dir(&settings.data_dir)?;
        let settings = Arc::new(settings);
        let storage = Storage::open(&settings.storage_url)?;
        let db = Db::connect(&settings.database_url).await?;
        let node_id = cluster::node_id(&settings.data_dir)?;
        let master_key = master_key(&settings)?;
        let sealed =
            db.seal_legacy_secrets(&master_key).await.context("sealing secrets kept in the clear")?;
        if sealed > 0 {
            tracing::info!(secrets = sealed, "sealed secrets that an older version kept in the clear");
        }
        let keys = Arc::new(SigningKeys::load(&db, &master_key).await?);
        let outbox = Outbox::new(db.clone());
        let endpoints = Arc::new(Endpoints::new(&settings));
        let policies = Arc::new(Policies::new(db.clone(), master_key.clone()));
        let streams = Arc::new(Streams::new(db.clone(), outbox.clone(), node_id.clone(), &settings));
        let vods = Arc::new(Vods::new(db.clone(), outbox.clone(), endpoints.clone(), policies.clone()));
        let channels = Arc::new(Channels::default());
        let per_stream = Arc::new(crate::metrics::PerStream::default());
        let spool =
            crate::storage::spool::Spool::open(&settings.data_dir.join("spool"), settings.spool_bytes)
                .context("opening the spool")?;
        let recordings = Arc::new(Recordings::new(
            db.clone(),
            storage.clone(),
            Arc::new(spool),
            policies.clone(),
            vods.clone(),
            node_id.clone(),
        ));
        let taps = Arc::new(Taps::default());
        let webrtc = WebrtcConfig {
            ports: settings.webrtc_udp_ports,
            public_ip: settings.webrtc_public_ip,
            ice_servers: settings.ice_servers.clone(),
            max_per_ip: settings.webrtc_max_per_ip as usize,
        };
        let whep = Arc::new(Whep::new(taps.clone(), webrtc.clone()));
        let simulcast = Arc::new(Simulcast::new(
            db.clone(),
            taps.clone(),
            outbox.clone(),
            master_key.clone(),
            settings.mode == crate::config::Mode::Development,
        ));
        let outputs = Arc::new(LiveSessions {
            channels: channels.clone(),
            taps,
            policies: policies.clone(),
            live_dir: settings.data_dir.join("live"),
            part_ms: settings.llhls_part_ms,
            segment_ms: settings.llhls_segment_ms,
            pipelines_dir: settings.pipelines_dir.clone(),
            recordings: recordings.clone(),
            per_stream: per_stream.clone(),
            sessions: Default::default(),
        });
        let whip = Arc::new(Whip {
            db: db.clone(),
            master_key: master_key.clone(),
            streams: streams.clone(),
            outputs: outputs.clone(),
            config: webrtc,
            publishers: Default::default(),
        });
        let uploads = Arc::new(Uploads {
            db: db.clone(),
            storage: storage.clone(),
            keys: keys.clone(),
            endpoints: endpoints.clone(),
            max_bytes: settings.max_upload_bytes,
            uploading: Default::default(),
        });
        let api = Arc::new(ApiState {
            settings: settings.clone(),
            db: db.clone(),
            outbox: outbox.clone(),
            endpoints: endpoints.clone(),
            streams: streams.clone(),
            vods: vods.clone(),
            policies: policies.clone(),
            channels: channels.clone(),
            simulcast: simulcast.clone(),
            uploads: uploads.clone(),
            storage: storage.clone(),
            keys: keys.clone(),
            master_key: master_key.clone(),
            request_limiter: Arc::new(Limiter::new(ratelimit::per_second(
                settings.rate_limit_per_key,
                settings.rate_limit_burst,
            ))),
            auth_failures: Arc::new(Lockout::new(ratelimit::per_minute(settings.auth_failures_per_min))),
            login_failures: Arc::new(Lockout::new(ratelimit::per_window(
                LOGIN_FAILURES_PER_EMAIL,
                LOGIN_FAILURE_WINDOW,
            ))),
            passwords: PasswordGate::for_this_machine(),
            followers: Default::default(),
            key_uses: Default::default(),
        });
        let transcoder = Arc::new(Transcoder {
            db: db.clone(),
            storage: storage.clone(),
            vods: vods.clone(),
            policies: policies.clone(),
            node_id: node_id.clone(),
            workers: settings.transcode_workers,
            work_dir: settings.data_dir.join("work"),
            pipelines_dir: settings.pipelines_dir.clone(),
            channels: channels.clone(),
        });
        let origin = Arc::new(Origin {
            policies,
            keys,
            channels: channels.clone(),
            storage: storage.clone(),
            whep: whep.clone(),
            per_stream: per_stream.clone(),
            relay: cluster::relay(&settings, &db, &node_id, &master_key)?,
            viewers: Arc::new(Viewers::new(&master_key.derive("sluice viewer sessions v1"))),
            stills: Default::default(),
        });
        Ok(Arc::new(App {
            storage,
            per_stream,
            last_viewers: Default::default(),
            master_key,
            metrics: Metrics::new(),
            node_id,
            outbox,
            endpoints,
            streams,
            vods,
            channels,
            uploads,
            api,
            origin,
            transcoder,
            outputs,
            whep,
            whip,
            simulcast,
            rtsp: Default::default(),
            srt: Default::default(),
            settings,
            db,
        }))
    }

    /// The RTMP port handed out in ingest URLs: the bound one once started (port 0 picks one).
    pub fn rtmp_port(&self) -> u16 {
        self.endpoints.rtmp_port()
    }

    /// `{base_url}`, with the bound port when HTTP was asked to bind port 0 (tests).
    pub fn public_url(&self) -> String {
        self.endpoints.public_url()
    }

    /// `{playback_base}`, with the bound port when HTTP was asked to bind port 0 (tests).
    pub fn playback_base(&self) -> String {
        self.endpoints.playback_base()
    }

    /// Where RTMP ingest listens (after `start`).
    pub fn rtmp_addr(&self) -> Option<SocketAddr> {
        self.endpoints.rtmp_addr()
    }

    /// Where RTMPS ingest listens (after `start`, with TLS configured).
    pub fn rtmps_addr(&self) -> Option<SocketAddr> {
        self.endpoints.rtmps_addr()
    }

    /// Where SRT ingest listens (after start).
    pub fn srt_addr(&self) -> Option<SocketAddr> {
        self.endpoints.srt_addr()
    }

    /// This process's identity (owner of its leases).
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Stops the transcode workers: running jobs go back to the queue (CONTRACT: SIGTERM).
    /// Waits up to `grace` for them to let go.
    pub async fn drain_vod(&self, grace: Duration) {
        self.vods.drain(grace).await;
    }

    /// Shutdown (CONTRACT: `SIGTERM` drains): ends every push cleanly (`stream.ended`, the
    /// stream back to `idle`) and ends its playlists (`EXT-X-ENDLIST`) without the reconnect
    /// grace, waiting at most `within`.
    pub async fn drain_live(&self, within: Duration) {
        let pushes = self.streams.sessions.kill_all();
        if pushes > 0 {
            tracing::info!(pushes, "ending live pushes");
        }
        let deadline = tokio::time::Instant::now() + within;
        while (self.streams.sessions.count() > 0 || self.channels.any_live())
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.channels.finish_all();
        // Ended channels drop their recorders: the recordings complete now.
        self.outputs.recordings.drain(within).await;
        self.leave_cluster().await;
    }

    /// Ends the event log's followers, so that draining HTTP connections does not wait for them.
    pub fn end_followers(&self) {
        self.api.followers.close();
    }

    /// Emits an event that goes with no state change (tests, the webhook guide).
    pub async fn emit(&self, project_id: &str, event: &Event) -> Result<usize, crate::store::DbError> {
        self.outbox.emit(project_id, event).await
    }

    /// Every route (the API's and playback's, each with its own layers), below the layers that
    /// every request passes ([`App::outermost`]).
    fn tree(self: &Arc<Self>) -> BoxEndpoint<'static, Response> {
        let service = crate::api::service();
        let spec = crate::api::spec_json(&service);
        let docs = service.swagger_ui();
        let guard_app = self.clone();
        let idempotency_api = self.api.clone();
        let allow = Arc::new(crate::api::allow::AllowTable::from_spec(&spec));
        let console = crate::console::Console::new(&self.public_url(), &self.playback_base());
        let api = console
            .clone()
            .mount(Route::new())
            .nest("/", service)
            .nest("/v1/whip", crate::api::whip::routes(self.whip.clone()))
            .at("/v1/openapi.json", get(openapi_json).data(Arc::new(spec)))
            .nest("/docs", docs)
            .at("/healthz", get(healthz))
            .at("/readyz", get(readyz).data(self.clone()))
            .at("/metrics", get(metrics::metrics).data(self.clone()))
            .nest("/upload", crate::upload::routes().data(self.uploads.clone()))
            .around(move |ep, req| crate::api::idempotency::around(idempotency_api.clone(), ep, req))
            .with(CookieJarManager::new())
            .with(CatchPanic::new())
            .data(self.api.clone())
            .catch_all_error(|err| async move { to_json_error(err) })
            .around(move |ep, req| {
                let allow = allow.clone();
                async move {
                    let uri = req.uri().clone();
                    let mut resp = ep.call(req).await?;
                    allow.complete(uri.path(), &mut resp);
                    Ok(resp)
                }
            })
            .around(move |ep, req| guard(guard_app.clone(), ep, req));
        // Playback takes none of the API's layers (cookies, CSRF, the Allow table): a playlist
        // reload costs what its handler costs.
        let play = crate::playback::routes()
            .data(self.origin.clone())
            .with(CatchPanic::new())
            .catch_all_error(|err| async move { to_json_error(err) });
        console.at_root(Route::new().nest("/play", play).nest("/", api)).boxed()
    }

    /// What every request passes before `tree`: the metrics and request log, the client
    /// address (`metrics::Observed`), and live playlist reloads and media answered without the
    /// router (inside it, so they are counted and their client address resolved like every
    /// request). Kept out of any box: a reload goes through no dynamic call before its handler.
    fn outermost<E: Endpoint<Output = Response> + 'static>(
        self: &Arc<Self>,
        tree: E,
    ) -> impl Endpoint<Output = Response> + 'static {
        let inner = crate::playback::origin::LiveFirst::new(self.origin.clone(), "/play", tree);
        metrics::Observed { app: self.clone(), inner }
    }

    /// Serves on `settings.http_addr` until `shutdown` resolves. Returns once bound, with the
    /// bound address (port 0 picks a free port) and the server task.
    pub async fn start(
        self: &Arc<Self>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
        self.start_with(shutdown, |routes| routes).await
    }

    /// [`App::start`], with `wrap` around the routes' tree (the test suite checks every API
    /// answer against the OpenAPI document this way).
    pub async fn start_with(
        self: &Arc<Self>,
        shutdown: impl Future<Output = ()> + Send + 'static,
        wrap: impl FnOnce(BoxEndpoint<'static, Response>) -> BoxEndpoint<'static, Response>,
    ) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
        let tls = match &self.settings.tls {
            Some(files) => {
                Some(crate::tls::Tls::load(&files.cert, &files.key).await.context("TLS certificate")?)
            }
            None => None,
        };
        let acceptor = TcpListener::bind(self.settings.http_addr)
            .into_acceptor()
            .await
            .with_context(|| format!("binding {}", self.settings.http_addr))?;
        let addr = acceptor
            .local_addr()
            .first()
            .and_then(|a| a.as_socket_addr().copied())
            .context("listener has no address")?;
        self.endpoints.http_bound(addr);
        self.join_cluster(addr).await.context("joining the node registry")?;
        // The test suite's wrap sees every answer of the tree (the API's contract is checked
        // there); the outermost layers add no answers of their own but the live media's. The
        // connections are served on the HTTP threads; the tree's handlers on this runtime.
        let tree = http::OnRuntime::new(tokio::runtime::Handle::current(), wrap(self.tree()));
        let routes = self.outermost(tree);
        self.spawn_housekeeping();
        self.spawn_limiter_sweeps();
        self.spawn_simulcast();
        let orphans =
            self.streams.end_orphaned_pushes().await.context("ending pushes left open by a previous run")?;
        if orphans > 0 {
            tracing::warn!(streams = orphans, "ended pushes that a previous run left live");
        }
        // Listed before ingest listens, so that only the dead run's recordings are completed.
        let left = self
            .outputs
            .recordings
            .left_in_progress()
            .await
            .context("listing recordings left in progress")?;
        if !left.is_empty() {
            let recordings = self.outputs.recordings.clone();
            tokio::spawn(async move {
                let n = left.len();
                let completed = recordings.recover(left).await;
                tracing::warn!(
                    left = n,
                    completed,
                    "completed recordings that a previous run left in progress"
                );
            });
        }
        tokio::spawn(self.outputs.recordings.spool().clone().drain(self.storage.clone()));
        self.spawn_sender()?;
        self.spawn_kill_listener();
        self.spawn_meter();
        self.spawn_viewer_reports();
        crate::media::vod::worker::spawn(&self.transcoder);
        if self.transcoder.workers > 0 {
            crate::media::vod::clip::spawn(&self.transcoder);
            crate::media::vod::downloads::spawn(&self.transcoder);
        }
        // Served on the acceptor's own connection type (src/app/http.rs); spawned once the
        // media listeners are up, so a failed start leaves nothing serving.
        let serve: std::pin::Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>> = match &tls {
            Some(tls) => Box::pin(http::serve(tls.https(acceptor), routes, shutdown, SHUTDOWN_GRACE)),
            None => Box::pin(http::serve(acceptor, routes, shutdown, SHUTDOWN_GRACE)),
        };
        self.start_media_listeners(tls).await?;
        let server = tokio::spawn(serve);
        Ok((addr, server))
    }

    fn spawn_sender(self: &Arc<Self>) -> anyhow::Result<()> {
        let sender = Sender::new(
            self.db.clone(),
            self.settings.mode == Mode::Development,
            self.settings.webhook_retry_scale,
            self.node_id.clone(),
            self.outbox.waker(),
            self.master_key.clone(),
        )?;
        tokio::spawn(Arc::new(sender).run());
        Ok(())
    }

    /// Forgets rate-limit state that has lapsed, so a flood of keys or addresses does not stay.
    fn spawn_limiter_sweeps(self: &Arc<Self>) {
        let api = Arc::downgrade(&self.api);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                let Some(api) = api.upgrade() else { return };
                api.request_limiter.sweep();
                api.auth_failures.sweep();
                api.login_failures.sweep();
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
                if let Err(e) = app.streams.disable_idle_streams().await {
                    tracing::warn!(error = %e, "disabling idle streams");
                }
                app.channels.sweep();
                let now = crate::domain::time::now_ms();
                if let Err(e) = app.db.sweep_events(now - EVENT_LOG_KEEP.as_millis() as i64).await {
                    tracing::warn!(error = %e, "forgetting old events of the event log");
                }
                let keep = crate::api::idempotency::KEEP.as_millis() as i64;
                if let Err(e) = app.db.sweep_idempotency(now - keep).await {
                    tracing::warn!(error = %e, "forgetting old idempotency keys");
                }
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
pub fn master_key(settings: &Settings) -> anyhow::Result<MasterKey> {
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

#[handler]
fn openapi_json(spec: Data<&Arc<String>>) -> Response {
    Response::builder().content_type("application/json; charset=utf-8").body(spec.0.as_str().to_string())
}
