//! Durable transcode jobs, with the real binary on Postgres: SIGKILL mid-transcode, and the job
//! finishes after a restart with one `vod.complete`; SIGTERM mid-transcode gives the job back to
//! the queue without counting the attempt (CONTRACT: The program — SIGTERM; VOD — jobs).

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Connection;

use crate::support::receiver::Receiver;
use crate::support::{bootstrap_key, eventually, fresh_postgres_url, wait_ready, Killed};
use crate::vod::{events_for, make_file};

use crate::support::{serve_on as serve, sluice_on as sluice};

async fn vod(client: &reqwest::Client, base: &str, key: &str, id: &str) -> Value {
    client
        .get(format!("{base}/vod/{id}"))
        .bearer_auth(key)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json")
}

/// Creates a VOD named `name` and PUTs `file` to its upload URL; returns its id.
async fn create_and_upload(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    name: &str,
    file: &std::path::Path,
) -> String {
    let created: Value = client
        .post(format!("{base}/vod"))
        .bearer_auth(key)
        .json(&json!({"name": name, "filename": "source.mp4"}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let id = created["vod"]["_id"].as_str().expect("id").to_string();
    let upload = created["upload"]["url"].as_str().expect("url");
    let put = client.put(upload).body(std::fs::read(file).expect("read")).send().await.expect("put");
    assert_eq!(put.status(), 200);
    id
}

/// Waits until the VOD is processing and at least `percent` done.
async fn processing_past(client: &reqwest::Client, base: &str, key: &str, id: &str, percent: i64) {
    eventually(&format!("progress past {percent} %"), Duration::from_secs(120), || async {
        let v = vod(client, base, key, id).await;
        assert!(!["failed", "complete"].contains(&v["status"].as_str().unwrap_or_default()), "{v}");
        (v["status"] == "processing" && v["progress"].as_i64().unwrap_or(0) >= percent).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_transcode_finishes_after_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fresh_postgres_url().await;
    let port = crate::support::free_port();
    let key = bootstrap_key(sluice(dir.path(), &db, port));
    let base = format!("http://127.0.0.1:{port}/v1/projects/demo");
    let client = reqwest::Client::new();
    let rx = Receiver::start().await;

    let mut server = serve(dir.path(), &db, port).await;
    let hook = client
        .post(format!("{base}/webhooks"))
        .bearer_auth(&key)
        .json(&json!({"url": rx.url(), "events": ["*"]}));
    assert_eq!(hook.send().await.expect("hook").status(), 201);
    let file = make_file(dir.path(), "long.mp4", Some("testsrc2=size=1280x720:rate=30"), 40);
    let id = create_and_upload(&client, &base, &key, "Long", &file).await;
    let resp =
        client.post(format!("{base}/vod/{id}/uploaded")).bearer_auth(&key).send().await.expect("uploaded");
    assert_eq!(resp.status(), 200);

    // SIGKILL mid-transcode: the partial output stays behind, the lease with the dead process.
    processing_past(&client, &base, &key, &id, 10).await;
    let _ = server.0.kill();
    let _ = server.0.wait();
    assert!(dir.path().join("work").join(&id).exists(), "the killed attempt left its work folder");

    // A restart takes the job up again (attempt 2); SIGTERM then gives it back uncounted.
    server = serve(dir.path(), &db, port).await;
    processing_past(&client, &base, &key, &id, 10).await;
    let status = Command::new("kill").args(["-TERM", &server.0.id().to_string()]).status().expect("kill");
    assert!(status.success());
    server.exits(Duration::from_secs(30)).await;
    let mut conn = sqlx::PgConnection::connect(&db).await.expect("db");
    let (attempts, owner): (i64, Option<String>) =
        sqlx::query_as("SELECT attempts, lease_owner FROM transcode_jobs WHERE vod_id = $1")
            .bind(&id)
            .fetch_one(&mut conn)
            .await
            .expect("the job is back in the queue");
    assert_eq!((attempts, owner), (1, None), "the killed attempt counts; the stopped one does not");
    assert!(!dir.path().join("work").join(&id).exists(), "a stopped job removes its work folder");

    drop(server);
    let _server = serve(dir.path(), &db, port).await;
    let done = eventually("complete", Duration::from_secs(180), || async {
        let v = vod(&client, &base, &key, &id).await;
        assert_ne!(v["status"], "failed", "{v}");
        (v["status"] == "complete").then_some(v)
    })
    .await;
    assert_eq!(done["renditions"].as_array().map(Vec::len), Some(3), "{done}");
    let master = client.get(done["playbackUrl"].as_str().expect("url")).send().await.expect("master");
    assert_eq!(master.status(), 200);

    // One vod.complete, one vod.processing: the retries are invisible to the project.
    let (jobs,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM transcode_jobs").fetch_one(&mut conn).await.expect("count");
    assert_eq!(jobs, 0);
    let counted: Vec<(String, i64)> = sqlx::query_as(
        "SELECT event, COUNT(*) FROM webhook_deliveries WHERE body LIKE $1 GROUP BY event ORDER BY event",
    )
    .bind(format!("%{id}%"))
    .fetch_all(&mut conn)
    .await
    .expect("deliveries");
    let counted: Vec<(&str, i64)> = counted.iter().map(|(e, n)| (e.as_str(), *n)).collect();
    assert_eq!(counted, [("vod.complete", 1), ("vod.processing", 1), ("vod.uploaded", 1)]);
    let events = eventually("vod.complete delivered", Duration::from_secs(30), || async {
        let e = events_for(&rx, &id);
        e.iter().any(|(name, _)| name == "vod.complete").then_some(e)
    })
    .await;
    assert_eq!(events.iter().filter(|(name, _)| name == "vod.complete").count(), 1);
}

/// Two `sluice serve` processes on one Postgres and one storage folder share the queue: with one
/// worker each, two jobs run at once, one in each process, and each completes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_the_queue() {
    let db = fresh_postgres_url().await;
    let storage = tempfile::tempdir().expect("storage");
    let (dir1, dir2) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let free = crate::support::free_port;
    let (port1, port2) = (free(), free());
    let shared = |dir: &std::path::Path, port: u16| {
        let mut cmd = sluice(dir, &db, port);
        cmd.env("SLUICE_STORAGE_URL", format!("file://{}", storage.path().display()))
            .env("SLUICE_TRANSCODE_WORKERS", "1");
        cmd
    };
    let key = bootstrap_key(shared(dir1.path(), port1));
    let spawn = |dir: &std::path::Path, port: u16| {
        Killed(shared(dir, port).arg("serve").stdout(Stdio::null()).spawn().expect("sluice serve"))
    };
    let (_one, _two) = (spawn(dir1.path(), port1), spawn(dir2.path(), port2));
    wait_ready(port1).await;
    wait_ready(port2).await;
    let base = format!("http://127.0.0.1:{port1}/v1/projects/demo");
    let client = reqwest::Client::new();
    let file = make_file(dir1.path(), "shared.mp4", Some("testsrc2=size=1280x720:rate=30"), 20);
    let mut ids = Vec::new();
    for name in ["one", "two"] {
        let id = create_and_upload(&client, &base, &key, name, &file).await;
        ids.push(id);
    }
    for id in &ids {
        let resp = client
            .post(format!("{base}/vod/{id}/uploaded"))
            .bearer_auth(&key)
            .send()
            .await
            .expect("uploaded");
        assert_eq!(resp.status(), 200);
    }
    let pool = sqlx::PgPool::connect(&db).await.expect("db");
    let owners = eventually("both processes working at once", Duration::from_secs(60), || async {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT DISTINCT lease_owner FROM transcode_jobs WHERE lease_owner IS NOT NULL")
                .fetch_all(&pool)
                .await
                .expect("owners");
        (rows.len() == 2).then_some(rows)
    })
    .await;
    let node = |dir: &std::path::Path| {
        std::fs::read_to_string(dir.join("node-id")).expect("node id").trim().to_string()
    };
    let mut seen: Vec<String> = owners.into_iter().map(|(o,)| o).collect();
    seen.sort();
    let mut nodes = vec![node(dir1.path()), node(dir2.path())];
    nodes.sort();
    assert_eq!(seen, nodes, "one job in each process");
    for id in &ids {
        let done = eventually("complete", Duration::from_secs(180), || async {
            let v = vod(&client, &base, &key, id).await;
            assert_ne!(v["status"], "failed", "{v}");
            (v["status"] == "complete").then_some(v)
        })
        .await;
        assert_eq!(done["renditions"].as_array().map(Vec::len), Some(3));
    }
}
