//! `spawn_app()`: the real server on a free port with a fresh database (SQLite file in a temp
//! dir, or a new Postgres database), bootstrapped with one project, its admin and a `*` key.

use std::time::Duration;

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
                    super::$name($crate::support::spawn_app($crate::support::Backend::Sqlite).await).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::support::spawn_app($crate::support::Backend::Postgres).await).await
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
    try_fresh_postgres_url().await.unwrap_or_else(|e| {
        panic!("Postgres at {} is needed for these tests (bash scripts/pg.sh): {e}", postgres_admin_url())
    })
}

/// [`fresh_postgres_url`], or why there is none (the benches skip Postgres without a server).
pub async fn try_fresh_postgres_url() -> Result<String, sqlx::Error> {
    static CLEANED: OnceCell<()> = OnceCell::const_new();
    let admin = postgres_admin_url();
    let mut conn = sqlx::PgConnection::connect(&admin).await?;
    CLEANED
        .get_or_init(|| async {
            let Ok(mut c) = sqlx::PgConnection::connect(&admin).await else { return };
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
    sqlx::query(&format!("CREATE DATABASE \"{name}\"")).execute(&mut conn).await?;
    let (prefix, _) = admin.rsplit_once('/').expect("database URL has a path");
    Ok(format!("{prefix}/{name}"))
}

pub fn test_args(dir: &std::path::Path, database_url: String) -> ConfigArgs {
    ConfigArgs {
        data_dir: Some(dir.to_path_buf()),
        database_url: Some(database_url),
        http_addr: Some("127.0.0.1:0".parse().expect("addr")),
        rtmp_addr: Some("127.0.0.1:0".parse().expect("addr")),
        rtsp_addr: Some("127.0.0.1:0".parse().expect("addr")),
        srt_addr: Some("127.0.0.1:0".parse().expect("addr")),
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
            super::contract::check,
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
