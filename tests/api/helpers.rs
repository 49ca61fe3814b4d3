//! `spawn_app()`: the real server on a free port with a fresh database (SQLite file in a temp
//! dir, or a new Postgres database), bootstrapped with one project, its admin and a `*` key.

use std::time::{Duration, Instant};

use reqwest::{Client, Method, RequestBuilder, Response};
use serde_json::Value;
use sluice::app::App;
use sluice::config::{ConfigArgs, Settings};
use sluice::store::Db;
use sqlx::Connection;
use tokio::sync::OnceCell;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs the body of a test once per backend. Every HTTP rule is proven on both.
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name(crate::helpers::spawn_app(crate::helpers::Backend::Sqlite).await).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name(crate::helpers::spawn_app(crate::helpers::Backend::Postgres).await).await
                }
            }
        )*
    };
}
pub(crate) use both_backends;

pub struct TestApp {
    pub app: std::sync::Arc<App>,
    pub project_id: String,
    pub base: String,
    pub slug: String,
    pub key: String,
    pub email: String,
    pub password: String,
    pub db: Db,
    pub client: Client,
    _dir: tempfile::TempDir,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

pub fn postgres_admin_url() -> String {
    std::env::var("SLUICE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A new, empty Postgres database; databases of earlier runs are dropped once per process.
pub async fn fresh_postgres_url() -> String {
    static CLEANED: OnceCell<()> = OnceCell::const_new();
    let admin = postgres_admin_url();
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap_or_else(|e| {
        panic!("Postgres at {admin} is needed for these tests (bash scripts/pg.sh): {e}")
    });
    CLEANED
        .get_or_init(|| async {
            let mut c = sqlx::PgConnection::connect(&admin).await.expect("connect");
            let old: Vec<(String,)> = sqlx::query_as(
                "SELECT datname FROM pg_database WHERE datname LIKE 'sluice_t_%' \
                 AND (pg_stat_file('base/' || oid || '/PG_VERSION')).modification < now() - interval '1 hour'",
            )
            .fetch_all(&mut c)
            .await
            .unwrap_or_default();
            for (name,) in old {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).execute(&mut c).await;
            }
        })
        .await;
    let name = format!("sluice_t_{}", sluice::domain::new_id());
    sqlx::query(&format!("CREATE DATABASE \"{name}\"")).execute(&mut conn).await.expect("create database");
    let (prefix, _) = admin.rsplit_once('/').expect("database URL has a path");
    format!("{prefix}/{name}")
}

pub fn test_args(dir: &std::path::Path, database_url: String) -> ConfigArgs {
    ConfigArgs {
        data_dir: Some(dir.to_path_buf()),
        database_url: Some(database_url),
        http_addr: Some("127.0.0.1:0".parse().expect("addr")),
        rtmp_addr: Some("127.0.0.1:0".parse().expect("addr")),
        // Tests receive webhooks on loopback over plain http, with retries 100 times faster.
        mode: Some(sluice::config::Mode::Development),
        webhook_retry_scale: Some(0.01),
        ..Default::default()
    }
}

pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, |_| {}).await
}

pub async fn spawn_app_with(backend: Backend, tweak: impl FnOnce(&mut ConfigArgs)) -> TestApp {
    let dir = tempfile::tempdir().expect("tempdir");
    let database_url = match backend {
        Backend::Sqlite => format!("sqlite://{}/sluice.db", dir.path().display()),
        Backend::Postgres => fresh_postgres_url().await,
    };
    let mut args = test_args(dir.path(), database_url);
    tweak(&mut args);
    let settings = Settings::resolve(&args).expect("settings");
    let app = App::build(settings).await.expect("app builds");
    let boot = sluice::cli::bootstrap_project(&app.db, "demo", None).await.expect("bootstrap");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (addr, _server) = app
        .start_with(
            async move {
                let _ = rx.await;
            },
            crate::contract::check,
        )
        .await
        .expect("server starts");
    let project_id = app.db.project_by_slug(&boot.project_slug).await.expect("db").expect("project").id;
    TestApp {
        app: app.clone(),
        project_id,
        base: format!("http://{addr}"),
        slug: boot.project_slug,
        key: boot.key.expose().to_string(),
        email: boot.email,
        password: boot.password.expect("new user has a password"),
        db: app.db.clone(),
        client: Client::builder().timeout(Duration::from_secs(30)).build().expect("client"),

        _dir: dir,
        _shutdown: tx,
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// `/v1/projects/<slug><rest>`
    pub fn project_url(&self, rest: &str) -> String {
        self.url(&format!("/v1/projects/{}{}", self.slug, rest))
    }

    pub fn with_key(&self, method: Method, url: &str, key: &str) -> RequestBuilder {
        self.client.request(method, url).bearer_auth(key)
    }

    pub async fn get_with(&self, url: &str, key: &str) -> Response {
        self.with_key(Method::GET, url, key).send().await.expect("request")
    }

    pub async fn post_json_with(&self, url: &str, key: &str, body: &Value) -> Response {
        self.with_key(Method::POST, url, key).json(body).send().await.expect("request")
    }

    /// Creates a key with `scopes` using the bootstrap key; returns the raw key.
    pub async fn create_key(&self, scopes: &[&str]) -> String {
        let resp = self
            .post_json_with(
                &self.project_url("/api-keys"),
                &self.key,
                &serde_json::json!({"label": "t", "scopes": scopes}),
            )
            .await;
        assert_eq!(resp.status(), 201);
        let body: Value = resp.json().await.expect("json");
        body["key"].as_str().expect("key").to_string()
    }

    /// A second project with its own admin and `*` key.
    pub async fn other_project(&self, slug: &str) -> String {
        let b = sluice::cli::bootstrap_project(&self.db, slug, Some(format!("admin@{slug}.test")))
            .await
            .expect("bootstrap");
        b.key.expose().to_string()
    }

    /// A client that keeps cookies, signed in as `email`.
    pub async fn signed_in(&self, email: &str, password: &str) -> Client {
        let client = Client::builder().cookie_store(true).build().expect("client");
        let resp = client
            .post(self.url("/v1/auth/login"))
            .json(&serde_json::json!({"email": email, "password": password}))
            .send()
            .await
            .expect("login");
        assert_eq!(resp.status(), 200, "sign-in of {email}");
        client
    }
}

/// Asserts the contract's error body and returns its `message`.
pub async fn error_message(resp: Response, status: u16) -> Value {
    assert_eq!(resp.status().as_u16(), status, "status");
    let body: Value = resp.json().await.expect("error body is JSON");
    assert_eq!(body["statusCode"], status, "statusCode in {body}");
    assert!(body["error"].is_string(), "error in {body}");
    body["message"].clone()
}

/// Polls `check` until it returns `Some` or the deadline passes.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let until = Instant::now() + deadline;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A child process (a real `sluice serve`, a pusher) killed when dropped.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Killed {
    /// Waits for the child to exit on its own (a refused push).
    pub async fn exits(&mut self, within: Duration) {
        let until = Instant::now() + within;
        while self.0.try_wait().expect("wait").is_none() {
            assert!(Instant::now() < until, "the pusher did not give up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// ffmpeg pushing a generated source in real time to `url`, as a publisher would: `video` is a
/// lavfi source (`testsrc=size=320x240:rate=15`), encoded as 4:2:0 H.264 with a keyframe every
/// `gop` frames, with a 44.1 kHz AAC tone; `extra` adds output options (bitrates).
pub fn ffmpeg_push(url: &str, video: &str, gop: u32, extra: &[&str]) -> Killed {
    Killed(
        std::process::Command::new("ffmpeg")
            .args(["-loglevel", "error", "-re", "-f", "lavfi", "-i", video])
            .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100"])
            .args(["-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-pix_fmt", "yuv420p"])
            .args(["-g", &gop.to_string(), "-c:a", "aac"])
            .args(extra)
            .args(["-t", "300", "-f", "flv", url])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("ffmpeg runs"),
    )
}

/// The master key of every real-binary test: processes with different data dirs on one
/// database must share one (CONTRACT: `SLUICE_MASTER_KEY`).
pub const TEST_MASTER_KEY: &str = "5e1ce0de5e1ce0de5e1ce0de5e1ce0de5e1ce0de5e1ce0de5e1ce0de5e1ce0de";

/// The real `sluice` binary on `dir`, HTTP on `port`, RTMP on a free port, development mode,
/// [`TEST_MASTER_KEY`].
pub fn sluice_command(dir: &std::path::Path, port: u16) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.env("SLUICE_DATA_DIR", dir)
        .env("SLUICE_MASTER_KEY", TEST_MASTER_KEY)
        .env("SLUICE_HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env("SLUICE_RTMP_ADDR", "127.0.0.1:0")
        .env("SLUICE_MODE", "development")
        .env("RUST_LOG", "warn")
        .env_remove("SLUICE_CONFIG");
    cmd
}

/// Waits until a `sluice serve` on `port` answers `/readyz`.
pub async fn wait_ready(port: u16) {
    let client = Client::new();
    eventually("the server to listen", Duration::from_secs(30), || async {
        client.get(format!("http://127.0.0.1:{port}/readyz")).send().await.ok().filter(|r| r.status() == 200)
    })
    .await;
}

/// Runs `sluice admin bootstrap --project demo --json` with `cmd`'s settings; returns the key.
pub fn bootstrap_key(mut cmd: std::process::Command) -> String {
    let out = cmd.args(["admin", "bootstrap", "--project", "demo", "--json"]).output().expect("sluice runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).expect("bootstrap JSON")["apiKey"]["key"]
        .as_str()
        .expect("key")
        .to_string()
}
