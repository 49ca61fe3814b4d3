//! The real `sluice` binary as a child process: its environment, `admin bootstrap`, waiting for
//! it to answer, and [`Sluice`], a whole `sluice serve` with its own data dir (the benches').

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::Client;
use serde_json::Value;

use super::{eventually, free_port, Killed};

/// The master key of every real-binary test: processes with different data dirs on one
/// database must share one (CONTRACT: `SLUICE_MASTER_KEY`).
pub const TEST_MASTER_KEY: &str = "5e1ce0de5e1ce0de5e1ce0de5e1ce0de5e1ce0de5e1ce0de5e1ce0de5e1ce0de";

/// The real `sluice` binary on `dir`, HTTP on `port`, RTMP on a free port, development mode,
/// [`TEST_MASTER_KEY`].
pub fn sluice_command(dir: &std::path::Path, port: u16) -> Command {
    sluice_command_of(Path::new(env!("CARGO_BIN_EXE_sluice")), dir, port)
}

/// [`sluice_command`] of the binary `bin` (a bench runs another build's beside this one's).
pub fn sluice_command_of(bin: &Path, dir: &std::path::Path, port: u16) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("SLUICE_DATA_DIR", dir)
        .env("SLUICE_MASTER_KEY", TEST_MASTER_KEY)
        .env("SLUICE_HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env("SLUICE_RTMP_ADDR", "127.0.0.1:0")
        .env("SLUICE_RTSP_ADDR", "127.0.0.1:0")
        .env("SLUICE_SRT_ADDR", "127.0.0.1:0")
        .env("SLUICE_MODE", "development")
        .env("RUST_LOG", "warn")
        .env_remove("SLUICE_CONFIG");
    cmd
}

/// A self-signed certificate for `localhost` and 127.0.0.1 in `dir`: (`<name>.cert.pem`,
/// `<name>.key.pem`). A server certificate, not a CA (rustls refuses a CA certificate as a
/// server's).
pub fn self_signed(dir: &std::path::Path, name: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join(format!("{name}.cert.pem")), dir.join(format!("{name}.key.pem")));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-days", "2", "-subj", &format!("/CN=sluice test {name}")])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    (cert, key)
}

/// [`sluice_command`] on the database `db` (processes sharing one Postgres).
pub fn sluice_on(dir: &std::path::Path, db: &str, port: u16) -> Command {
    let mut cmd = sluice_command(dir, port);
    cmd.env("SLUICE_DATABASE_URL", db);
    cmd
}

/// `sluice serve` on the database `db`, once it answers.
pub async fn serve_on(dir: &std::path::Path, db: &str, port: u16) -> super::Killed {
    let child = sluice_on(dir, db, port).arg("serve").stdout(Stdio::null()).spawn().expect("sluice serve");
    let s = super::Killed(child);
    wait_ready(port).await;
    s
}

/// `cmd serve` (a [`sluice_on`] command, HTTP on `http`), its log (`warn,sluice=info`) written to
/// `<CARGO_TARGET_TMPDIR>/<name>.log`, once it answers; returns it and the log's path.
pub async fn serve_logged(mut cmd: Command, http: u16, name: &str) -> (super::Killed, PathBuf) {
    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.log"));
    cmd.env("RUST_LOG", "warn,sluice=info")
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"));
    let server = super::Killed(cmd.spawn().expect("sluice serve"));
    println!("sluice's log: {}", log.display());
    wait_ready(http).await;
    (server, log)
}

/// Sends `req` (to a `sluice serve`) and reads the answer as JSON; `what` names the call when
/// either fails.
pub async fn json_of(req: reqwest::RequestBuilder, what: &str) -> Value {
    let resp = req.send().await.unwrap_or_else(|e| panic!("{what}: {e}"));
    resp.json().await.unwrap_or_else(|e| panic!("{what}: the answer is not JSON: {e}"))
}

/// Waits until a `sluice serve` on `port` answers `/readyz`.
pub async fn wait_ready(port: u16) {
    let client = Client::new();
    eventually("the server to listen", Duration::from_secs(30), || async {
        client.get(format!("http://127.0.0.1:{port}/readyz")).send().await.ok().filter(|r| r.status() == 200)
    })
    .await;
}

/// Runs `sluice admin bootstrap --project demo --json` with `cmd`'s settings; returns what it
/// printed (`user.email`, `user.password`, `apiKey.key`, …).
pub fn bootstrap_json(mut cmd: Command) -> Value {
    let out = cmd.args(["admin", "bootstrap", "--project", "demo", "--json"]).output().expect("sluice runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).expect("bootstrap JSON")
}

/// [`bootstrap_json`]'s API key.
pub fn bootstrap_key(cmd: Command) -> String {
    bootstrap_json(cmd)["apiKey"]["key"].as_str().expect("key").to_string()
}

/// A `sluice serve` (the build's binary: release under `cargo bench`) on free ports with its own
/// data dir and a project `bench` bootstrapped.
pub struct Sluice {
    pub proc: Killed,
    pub http: u16,
    pub rtmp: u16,
    pub key: String,
    pub api: String,
    /// A client for it: no proxy, 15-s timeout, many idle connections.
    pub client: Client,
    /// The file its stderr (its log) goes to, when started with one.
    pub log: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Sluice {
    /// Starts it with extra environment `env` (overriding the defaults), its log on the bench's
    /// stderr, and waits until it answers.
    pub async fn start(env: &[(&str, String)]) -> Sluice {
        Sluice::launch(env, None, None).await
    }

    /// The same, its log written to `log`.
    pub async fn start_logged(env: &[(&str, String)], log: PathBuf) -> Sluice {
        Sluice::launch(env, Some(log), None).await
    }

    /// [`Sluice::start_logged`] of another binary (a bench's base build, run beside this one).
    pub async fn start_logged_bin(bin: &Path, env: &[(&str, String)], log: PathBuf) -> Sluice {
        Sluice::launch_bin(bin, env, Some(log), None).await
    }

    /// Another node on the database of a first one (`env` names it): no bootstrap, the first
    /// one's `key`.
    pub async fn join(env: &[(&str, String)], key: &str) -> Sluice {
        Sluice::launch(env, None, Some(key.to_string())).await
    }

    async fn launch(env: &[(&str, String)], log: Option<PathBuf>, key: Option<String>) -> Sluice {
        Sluice::launch_bin(Path::new(env!("CARGO_BIN_EXE_sluice")), env, log, key).await
    }

    async fn launch_bin(
        bin: &Path,
        env: &[(&str, String)],
        log: Option<PathBuf>,
        key: Option<String>,
    ) -> Sluice {
        let dir = tempfile::tempdir().expect("tempdir");
        let (http, rtmp) = (free_port(), free_port());
        let configure = || {
            let mut cmd = sluice_command_of(bin, dir.path(), http);
            // A bench measures the server, not the per-key limiter.
            cmd.env("SLUICE_RTMP_ADDR", format!("127.0.0.1:{rtmp}"))
                .env("SLUICE_RATE_LIMIT_PER_KEY", "100000")
                .env("SLUICE_RATE_LIMIT_BURST", "100000");
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd
        };
        let key = key.unwrap_or_else(|| {
            let mut boot = configure();
            let out = boot
                .args(["admin", "bootstrap", "--project", "bench", "--json"])
                .output()
                .expect("sluice runs");
            assert!(out.status.success(), "bootstrap: {}", String::from_utf8_lossy(&out.stderr));
            serde_json::from_slice::<Value>(&out.stdout).expect("bootstrap JSON")["apiKey"]["key"]
                .as_str()
                .expect("key")
                .to_string()
        });
        let mut serve = configure();
        serve.arg("serve").stdin(Stdio::null()).stdout(Stdio::null());
        if let Some(log) = &log {
            serve.stderr(std::fs::File::create(log).expect("sluice log"));
        }
        let proc = Killed(serve.spawn().expect("sluice serve"));
        let client = Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(15))
            .pool_max_idle_per_host(256)
            .build()
            .expect("client");
        wait_ready(http).await;
        let api = format!("http://127.0.0.1:{http}/v1/projects/bench");
        Sluice { proc, http, rtmp, key, api, client, log, _dir: dir }
    }

    /// Creates a stream; returns its record.
    pub async fn create_stream(&self, body: Value) -> Value {
        self.client
            .post(format!("{}/streams", self.api))
            .bearer_auth(&self.key)
            .json(&body)
            .send()
            .await
            .expect("create stream")
            .json()
            .await
            .expect("stream JSON")
    }
}

/// The resident memory of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
