//! `cargo bench --bench webhooks`: sustained deliveries per second to a local receiver, and the
//! delay from an event to its first attempt (p50/p99), on SQLite and on Postgres.
//!
//! Sluice runs in this process (release build) with its real sender; events are emitted through
//! `App::emit`, the path every emitter takes; the receiver is a real HTTP server on loopback.
//! Throughput: a burst of events, to 1 webhook (sent in order, one at a time) and spread over 8
//! webhooks (in parallel). Latency: events at a steady 100/s, timed from emit to arrival.
//! Knobs: `BENCH_EVENTS` (default 2000), `BENCH_LATENCY_EVENTS` (default 500).

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use poem::web::Data;
use poem::{handler, post, EndpointExt, Route};
use sluice::app::App;
use sluice::config::Settings;
use sluice::events::catalog::StreamEventData;
use sluice::events::Event;
use sqlx::Connection;

type Arrivals = Arc<Mutex<HashMap<usize, Instant>>>;

#[handler]
async fn hook(body: Vec<u8>, arrivals: Data<&Arrivals>) -> poem::http::StatusCode {
    let now = Instant::now();
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) {
        if let Some(i) = v["data"]["name"].as_str().and_then(|n| n.parse::<usize>().ok()) {
            arrivals.lock().unwrap().entry(i).or_insert(now);
        }
    }
    poem::http::StatusCode::NO_CONTENT
}

/// A receiver that only notes when each event arrived (the support one keeps whole requests,
/// too much work for a throughput bench); it stops when the returned sender is dropped.
async fn receiver() -> (String, Arrivals, tokio::sync::oneshot::Sender<()>) {
    let arrivals: Arrivals = Arc::default();
    let routes = Route::new().at("/hook", post(hook)).data(arrivals.clone());
    let (addr, stop) = support::serve_loopback(routes).await;
    (format!("http://{addr}/hook"), arrivals, stop)
}

fn event(project_id: &str, i: usize) -> Event {
    Event::StreamLive(StreamEventData {
        id: format!("st{i}"),
        name: i.to_string(),
        stream_key: "k".into(),
        status: sluice::domain::stream::StreamStatus::Live,
        project_id: project_id.into(),
        vod_enabled: false,
        created_at: "2026-01-01T00:00:00.000Z".into(),
        reason: None,
    })
}

/// An enabled webhook for every event of the project.
async fn add_webhook(app: &App, project_id: &str, url: String) {
    let now = sluice::domain::time::now_ms();
    app.db
        .create_webhook(&sluice::store::webhooks::WebhookRow {
            id: sluice::domain::new_id(),
            project_id: project_id.to_string(),
            url,
            description: String::new(),
            events: "*".into(),
            enabled: 1,
            secret: sluice::events::signing::new_secret(),
            consecutive_failures: 0,
            created_at: now,
            updated_at: now,
        })
        .await
        .expect("webhook");
}

async fn wait_for(arrivals: &Arrivals, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while arrivals.lock().unwrap().len() < n {
        assert!(Instant::now() < deadline, "deliveries did not arrive");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn bench(
    label: &str,
    database_url: String,
    dir: &std::path::Path,
    events: usize,
    latency_events: usize,
) {
    let args = support::test_args(dir, database_url);
    let app = App::build(Settings::resolve(&args).expect("settings")).await.expect("app");
    let (_addr, _server) = app.start(std::future::pending()).await.expect("start");
    sluice::cli::bootstrap_project(&app.db, "bench", None).await.expect("bootstrap");
    let project = app.db.project_by_slug("bench").await.expect("db").expect("project");
    println!("webhooks bench [{label}], release build, receiver on loopback");

    for hooks in [1usize, 8] {
        // Each round gets its own project-wide set of webhooks; older ones are disabled.
        sqlx::query("UPDATE webhooks SET enabled = 0").execute(app.db.pool()).await.expect("disable");
        let (mut receivers, mut running) = (Vec::new(), Vec::new());
        for _ in 0..hooks {
            let (url, arrivals, stop) = receiver().await;
            add_webhook(&app, &project.id, url).await;
            receivers.push(arrivals);
            running.push(stop);
        }
        let per_hook = events / hooks;
        let started = Instant::now();
        for i in 0..per_hook {
            app.emit(&project.id, &event(&project.id, i)).await.expect("emit");
        }
        let emitted = started.elapsed().as_secs_f64();
        for r in &receivers {
            wait_for(r, per_hook).await;
        }
        let elapsed = started.elapsed().as_secs_f64();
        println!(
            "  burst of {} events to {hooks} webhook(s): {:>7.0} deliveries/s sustained ({:.2} s; events emitted at {:.0}/s)",
            per_hook * hooks,
            (per_hook * hooks) as f64 / elapsed,
            elapsed,
            per_hook as f64 / emitted
        );
    }

    // Latency at a steady rate, one webhook.
    sqlx::query("UPDATE webhooks SET enabled = 0").execute(app.db.pool()).await.expect("disable");
    let (url, arrivals, _running) = receiver().await;
    add_webhook(&app, &project.id, url).await;
    let mut emitted_at = Vec::with_capacity(latency_events);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    for i in 0..latency_events {
        tick.tick().await;
        emitted_at.push(Instant::now());
        app.emit(&project.id, &event(&project.id, i)).await.expect("emit");
    }
    wait_for(&arrivals, latency_events).await;
    let arrived = arrivals.lock().unwrap().clone();
    let mut delays: Vec<f64> = (0..latency_events)
        .map(|i| arrived[&i].duration_since(emitted_at[i]).as_secs_f64() * 1000.0)
        .collect();
    delays.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| delays[((delays.len() as f64 * p) as usize).min(delays.len() - 1)];
    println!(
        "  event -> first attempt at 100 events/s ({latency_events} events): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(0.50),
        pct(0.99),
        delays[delays.len() - 1]
    );
    app.db.close().await;
}

fn main() {
    let events: usize = std::env::var("BENCH_EVENTS").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let latency_events: usize =
        std::env::var("BENCH_LATENCY_EVENTS").ok().and_then(|s| s.parse().ok()).unwrap_or(500);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let sqlite = format!("sqlite://{}/sluice.db", dir.path().display());
        bench("SQLite", sqlite, dir.path(), events, latency_events).await;

        match support::try_fresh_postgres_url().await {
            Ok(url) => {
                let pg_dir = tempfile::tempdir().expect("tempdir");
                bench("Postgres", url.clone(), pg_dir.path(), events, latency_events).await;
                let name = url.rsplit('/').next().unwrap_or_default();
                if let Ok(mut conn) = sqlx::PgConnection::connect(&support::postgres_admin_url()).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                        .execute(&mut conn)
                        .await;
                }
            }
            Err(_) => println!("webhooks bench [Postgres]: skipped, no server at SLUICE_TEST_POSTGRES_URL"),
        }
    });
}
