//! SIGKILL while deliveries are pending (some failed and waiting for a retry, some in flight):
//! after a restart every delivery reaches the receiver, none is missing, and every copy of a
//! delivery carries the same id and bytes (CONTRACT: Webhooks — durable across restarts).

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::receiver::Receiver;
use crate::support::{
    bootstrap_key, eventually, fresh_postgres_url, sluice_command, wait_ready, Backend, Killed,
};

fn sluice(dir: &std::path::Path, db: &str, port: u16) -> Command {
    let mut cmd = sluice_command(dir, port);
    cmd.env("SLUICE_DATABASE_URL", db).env("SLUICE_WEBHOOK_RETRY_SCALE", "0.2");
    cmd
}

async fn serve(dir: &std::path::Path, db: &str, port: u16) -> Killed {
    let child = sluice(dir, db, port).arg("serve").stdout(Stdio::null()).spawn().unwrap();
    let s = Killed(child);
    wait_ready(port).await;
    s
}

/// Creates a webhook for `events` on a real binary's API (`base` ends in the project);
/// returns its id.
pub async fn create_hook(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    url: &str,
    events: Value,
) -> String {
    let hook: Value = client
        .post(format!("{base}/webhooks"))
        .bearer_auth(key)
        .json(&serde_json::json!({"url": url, "events": events}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    hook["_id"].as_str().unwrap().to_string()
}

/// Queues a test ping; returns its delivery id.
async fn ping(client: &reqwest::Client, base: &str, key: &str, hook_id: &str) -> String {
    let d: Value = client
        .post(format!("{base}/webhooks/{hook_id}/test"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    d["_id"].as_str().unwrap().to_string()
}

async fn kill_and_restart(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = match backend {
        Backend::Sqlite => format!("sqlite://{}/sluice.db", dir.path().display()),
        Backend::Postgres => fresh_postgres_url().await,
    };
    let port = crate::support::free_port();
    let key = bootstrap_key(sluice(dir.path(), &db, port));
    let base = format!("http://127.0.0.1:{port}/v1/projects/demo");
    let client = reqwest::Client::new();

    // Phase 1: the receiver fails every request, and holds the later ones open (in flight).
    let rx = Receiver::start().await;
    rx.answer(500, Duration::ZERO);
    let mut server = serve(dir.path(), &db, port).await;
    let hook_id = create_hook(&client, &base, &key, &rx.url(), serde_json::json!(["*"])).await;
    let mut expected = HashSet::new();
    for i in 0..20 {
        if i == 10 {
            // The first ten have failed once by now or soon; the rest will hang in flight.
            rx.wait_for(10, Duration::from_secs(10)).await;
            rx.answer(500, Duration::from_secs(3600));
        }
        expected.insert(ping(&client, &base, &key, &hook_id).await);
    }
    assert_eq!(expected.len(), 20);
    // Wait until one delivery is in flight (held by the receiver), then SIGKILL.
    let pending: Value = client
        .get(format!("{base}/webhooks/deliveries"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(pending["items"].as_array().unwrap().iter().all(|d| d["status"] == "pending"));
    eventually("a delivery held in flight", Duration::from_secs(10), || async {
        (rx.arrivals() > 10).then_some(())
    })
    .await;
    server.0.kill().unwrap(); // SIGKILL
    server.0.wait().unwrap();
    drop(server);

    // Phase 2: the receiver accepts; the restarted server sends everything.
    rx.answer(200, Duration::ZERO);
    let _server = serve(dir.path(), &db, port).await;
    let delivered = eventually("all 20 deliveries to succeed", Duration::from_secs(60), || async {
        let ok: HashSet<String> =
            rx.received().iter().filter(|r| r.answered == 200).map(|r| r.id()).collect();
        (ok.len() >= 20).then_some(ok)
    })
    .await;
    assert_eq!(delivered, expected, "every delivery arrived, and no other");
    // Every copy of one delivery (failed attempts, retries, resends) has the same bytes.
    let mut bodies: HashMap<String, Vec<u8>> = HashMap::new();
    for r in rx.received() {
        let first = bodies.entry(r.id()).or_insert_with(|| r.body.clone());
        assert_eq!(*first, r.body, "same bytes for {}", r.id());
    }
    let log: Value =
        eventually("the log to show every delivery succeeded", Duration::from_secs(10), || async {
            let log: Value = client
                .get(format!("{base}/webhooks/deliveries"))
                .bearer_auth(&key)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            log["items"].as_array().unwrap().iter().all(|d| d["status"] == "success").then_some(log)
        })
        .await;
    assert_eq!(log["items"].as_array().unwrap().len(), 20);
}

/// Two `sluice serve` processes on one Postgres share the outbox: every delivery is sent, none
/// twice (leases taken with FOR UPDATE SKIP LOCKED), and one webhook's deliveries leave one at a
/// time in the order they were queued, whichever process queued them (a process claims nothing
/// while the other holds a lease on the webhook's rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_one_postgres() {
    let db = fresh_postgres_url().await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let free = crate::support::free_port;
    let (port_a, port_b) = (free(), free());
    let key = bootstrap_key(sluice(dir_a.path(), &db, port_a));
    let _a = serve(dir_a.path(), &db, port_a).await;
    let _b = serve(dir_b.path(), &db, port_b).await;
    let rx = Receiver::start().await;
    // Each answer takes a while, so two processes sending at once would overlap at the receiver.
    rx.answer(200, Duration::from_millis(15));
    let client = reqwest::Client::new();
    let base = |port: u16| format!("http://127.0.0.1:{port}/v1/projects/demo");
    let hook_id = create_hook(&client, &base(port_a), &key, &rx.url(), serde_json::json!(["*"])).await;
    // 80 pings queued through both processes (within the key's burst).
    let mut queued = Vec::new();
    for i in 0..80 {
        let port = if i % 2 == 0 { port_a } else { port_b };
        queued.push(ping(&client, &base(port), &key, &hook_id).await);
    }
    let expected: HashSet<String> = queued.iter().cloned().collect();
    let got = rx.wait_for(80, Duration::from_secs(30)).await;
    let ids: Vec<String> = got.iter().map(|r| r.id()).collect();
    let unique: HashSet<String> = ids.iter().cloned().collect();
    assert_eq!(unique, expected, "every delivery arrived");
    assert_eq!(ids, queued, "deliveries arrived in the order they were queued");
    assert_eq!(rx.most_at_once(), 1, "one webhook's deliveries are sent one at a time");
    // Nothing more arrives. One more ping queued through each process: each process sends its
    // leased rows in order, one at a time, so a row it sent a second time would reach the
    // receiver before the ping it sends after it.
    let markers = [
        ping(&client, &base(port_a), &key, &hook_id).await,
        ping(&client, &base(port_b), &key, &hook_id).await,
    ];
    let got = eventually("both pings", Duration::from_secs(30), || async {
        let got = rx.received();
        markers.iter().all(|m| got.iter().any(|r| &r.id() == m)).then_some(got)
    })
    .await;
    let got: Vec<_> = got.into_iter().filter(|r| !markers.contains(&r.id())).collect();
    assert_eq!(got.len(), 80, "no delivery was sent twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_pending_deliveries_sqlite() {
    kill_and_restart(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_pending_deliveries_postgres() {
    kill_and_restart(Backend::Postgres).await;
}
