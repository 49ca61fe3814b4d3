//! `cargo bench --bench api`: authenticated list throughput and p99 latency at 64 concurrent
//! connections, as a ratio to `/healthz` on the same server in the same run.
//!
//! The server is the release `sluice serve` in its own process, on a fresh SQLite database (and
//! on a fresh Postgres database when one answers at `SLUICE_TEST_POSTGRES_URL`). The per-key rate
//! limit is raised for the run: at its default (50/s) the bench would measure the limiter.
//! Knobs: `BENCH_SECONDS` (default 8 per measurement), `BENCH_CONNECTIONS` (default 64).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use reqwest::Client;
use sqlx::Connection;

use support::{postgres_admin_url, try_fresh_postgres_url, Sluice};

/// The server, its per-key limit out of the way; the first page of keys filled.
async fn start(database_url: Option<String>) -> Sluice {
    let mut env = vec![
        ("SLUICE_RATE_LIMIT_PER_KEY", "1000000000".to_string()),
        ("SLUICE_RATE_LIMIT_BURST", "1000000000".to_string()),
    ];
    if let Some(url) = database_url {
        env.push(("SLUICE_DATABASE_URL", url));
    }
    let server = Sluice::start(&env).await;
    // Fill the first page: 20 keys listed per request.
    for i in 0..19 {
        let resp = server
            .client
            .post(format!("{}/api-keys", server.api))
            .bearer_auth(&server.key)
            .json(&serde_json::json!({"label": format!("k{i}"), "scopes": ["vod:read"]}))
            .send()
            .await
            .expect("create key");
        assert_eq!(resp.status(), 201);
    }
    server
}

struct Run {
    requests: usize,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
}

impl Run {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.seconds
    }
}

/// `connections` clients, each on its own keep-alive connection, for `seconds`.
async fn load(url: &str, key: Option<&str>, connections: usize, seconds: f64) -> Run {
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let client = Client::builder().pool_max_idle_per_host(1).build().expect("client");
        let (url, key) = (url.to_string(), key.map(str::to_string));
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let t = Instant::now();
                let mut req = client.get(&url);
                if let Some(k) = &key {
                    req = req.bearer_auth(k);
                }
                let resp = req.send().await.expect("request");
                assert_eq!(resp.status(), 200, "{url}");
                let _ = resp.bytes().await.expect("body");
                latencies.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("load task"));
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Run { requests: all.len(), seconds: elapsed, p50_ms: pct(0.50), p99_ms: pct(0.99) }
}

async fn bench(label: &str, database_url: Option<String>, connections: usize, seconds: f64) {
    let server = start(database_url).await;
    let health = format!("http://127.0.0.1:{}/healthz", server.http);
    let list = format!("{}/api-keys", server.api);
    // Warm up both paths (connections, caches, the database).
    load(&health, None, connections, 1.0).await;
    load(&list, Some(&server.key), connections, 1.0).await;
    let h = load(&health, None, connections, seconds).await;
    let l = load(&list, Some(&server.key), connections, seconds).await;
    println!("api bench [{label}], {connections} connections, {seconds:.0} s each, release build");
    println!(
        "  GET /healthz                          {:>9.0} req/s   p50 {:>6.2} ms   p99 {:>6.2} ms",
        h.rps(),
        h.p50_ms,
        h.p99_ms
    );
    println!(
        "  GET /v1/projects/:slug/api-keys (20)  {:>9.0} req/s   p50 {:>6.2} ms   p99 {:>6.2} ms",
        l.rps(),
        l.p50_ms,
        l.p99_ms
    );
    println!(
        "  ratio list/healthz: throughput {:.2}x, p99 latency {:.2}x",
        l.rps() / h.rps(),
        l.p99_ms / h.p99_ms
    );
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument filters nothing here.
    let seconds: f64 = std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(8.0);
    let connections: usize =
        std::env::var("BENCH_CONNECTIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(64);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        bench("SQLite", None, connections, seconds).await;
        match try_fresh_postgres_url().await {
            Ok(url) => {
                bench("Postgres", Some(url.clone()), connections, seconds).await;
                let name = url.rsplit('/').next().unwrap_or_default();
                if let Ok(mut c) = sqlx::PgConnection::connect(&postgres_admin_url()).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                        .execute(&mut c)
                        .await;
                }
            }
            Err(_) => println!("api bench [Postgres]: skipped, no server at SLUICE_TEST_POSTGRES_URL"),
        }
    });
}
