//! Two `sluice serve` processes on one Postgres database (CONTRACT: Live media — "DELETE,
//! disable, credit kill and auto-stop end every session of the stream at once, whatever its
//! protocol and whichever process holds it"): an ffmpeg push held by process A is ended within
//! 3 s by a DELETE made through process B, with one `stream.ended` and then one
//! `stream.disabled` on a real receiver; and again by a PATCH `enabled: false` through B right
//! after the connections that hear the kills were cut (the listener reconnects, and checks the
//! sessions it holds against the database for what it missed meanwhile).

use std::time::{Duration, Instant};

use reqwest::Client;
use serde_json::{json, Value};
use sqlx::Connection;

use crate::lifecycle::push;
use crate::support::receiver::Receiver;
use crate::support::{bootstrap_key, eventually, free_port, fresh_postgres_url, Killed};
use crate::webhooks_restart::create_hook;

/// The most a push may outlive the disable that ends it, whichever process holds it.
const KILL_WITHIN: Duration = Duration::from_secs(3);

use crate::support::{serve_on as serve, sluice_on as sluice};

/// One of the two processes: its API base (`…/projects/demo`) and port.
struct Node {
    port: u16,
    base: String,
}

impl Node {
    fn new(port: u16) -> Node {
        Node { port, base: format!("http://127.0.0.1:{port}/v1/projects/demo") }
    }

    async fn sessions(&self, client: &Client) -> Option<u64> {
        let text = client
            .get(format!("http://127.0.0.1:{}/metrics", self.port))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines().find_map(|l| l.strip_prefix("sluice_push_sessions ")).and_then(|v| v.trim().parse().ok())
    }

    async fn stream(&self, client: &Client, key: &str, id: &str) -> Value {
        let resp = client.get(format!("{}/streams/{id}", self.base)).bearer_auth(key).send().await;
        resp.expect("get").json().await.expect("json")
    }
}

/// Waits until the pusher has exited and A holds no session; returns how long each took from
/// `since` (the disable's request).
async fn ended_on(a: &Node, client: &Client, pusher: &mut Killed, since: Instant) -> (Duration, Duration) {
    let (mut exited, mut closed) = (None, None);
    let until = since + KILL_WITHIN + Duration::from_secs(5);
    while exited.is_none() || closed.is_none() {
        assert!(
            Instant::now() < until,
            "process A did not end the push (pusher {exited:?}, session {closed:?})"
        );
        if exited.is_none() && !pusher.running() {
            exited = Some(since.elapsed());
        }
        if closed.is_none() && a.sessions(client).await == Some(0) {
            closed = Some(since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (exited.unwrap_or_default(), closed.unwrap_or_default())
}

/// The events the receiver got for `id`, in arrival order.
fn events_for(rx: &Receiver, id: &str) -> Vec<String> {
    rx.received()
        .iter()
        .map(|r| r.json())
        .filter(|b| b["data"]["id"] == id)
        .map(|b| b["event"].as_str().expect("event").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disable_through_one_process_ends_the_push_held_by_another() {
    let db = fresh_postgres_url().await;
    let (dir_a, dir_b) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let (a, b) = (Node::new(free_port()), Node::new(free_port()));
    let key = bootstrap_key(sluice(dir_a.path(), &db, a.port));
    let _a_proc = serve(dir_a.path(), &db, a.port).await;
    let _b_proc = serve(dir_b.path(), &db, b.port).await;
    let client = Client::new();
    let rx = Receiver::start().await;
    create_hook(&client, &b.base, &key, &rx.url(), json!(["stream.live", "stream.ended", "stream.disabled"]))
        .await;

    // A push to process A (its ingestUrl names A's RTMP port), seen live through B.
    let create = |name: &'static str| {
        let (client, base, key) = (client.clone(), a.base.clone(), key.clone());
        async move {
            let resp =
                client.post(format!("{base}/streams")).bearer_auth(&key).json(&json!({"name": name})).send();
            let s: Value = resp.await.expect("create").json().await.expect("json");
            (
                s["_id"].as_str().expect("id").to_string(),
                s["ingestUrl"].as_str().expect("ingestUrl").to_string(),
            )
        }
    };
    let (id, url) = create("cam").await;
    let mut pusher = push(&url);
    eventually("live, seen through B", Duration::from_secs(20), || async {
        (b.stream(&client, &key, &id).await["status"] == "live").then_some(())
    })
    .await;
    assert_eq!(
        (a.sessions(&client).await, b.sessions(&client).await),
        (Some(1), Some(0)),
        "A holds the push"
    );

    // DELETE through B.
    let since = Instant::now();
    let resp =
        client.delete(format!("{}/streams/{id}", b.base)).bearer_auth(&key).send().await.expect("delete");
    assert_eq!(resp.status(), 200);
    let (exited, closed) = ended_on(&a, &client, &mut pusher, since).await;
    println!("DELETE through B: A closed its session after {closed:?}, the pusher exited after {exited:?}");
    assert!(closed <= KILL_WITHIN && exited <= KILL_WITHIN, "session {closed:?}, pusher {exited:?}");
    for node in [&a, &b] {
        let s = node.stream(&client, &key, &id).await;
        assert_eq!((s["status"].as_str(), s["disabledReason"].as_str()), (Some("disabled"), Some("deleted")));
    }
    eventually("three deliveries", Duration::from_secs(10), || async {
        (events_for(&rx, &id).len() >= 3).then_some(())
    })
    .await;
    assert_eq!(events_for(&rx, &id), ["stream.live", "stream.ended", "stream.disabled"]);

    // The connections that hear kills are cut; a disable through B right after still ends A's
    // push in time (the notification reaches the new connection, or the check after it finds
    // the stream disabled).
    let (id, url) = create("cam 2").await;
    let mut pusher = push(&url);
    eventually("the second stream live", Duration::from_secs(20), || async {
        (b.stream(&client, &key, &id).await["status"] == "live").then_some(())
    })
    .await;
    let mut conn = sqlx::PgConnection::connect(&db).await.expect("db");
    let cut: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
    )
    .bind(sluice::store::notify::KILL_LISTENER_NAME)
    .fetch_all(&mut conn)
    .await
    .expect("terminate");
    assert_eq!(cut.len(), 2, "each process listens on a connection of its own");
    let since = Instant::now();
    let resp = client
        .patch(format!("{}/streams/{id}", b.base))
        .bearer_auth(&key)
        .json(&json!({"enabled": false}))
        .send()
        .await
        .expect("patch");
    assert_eq!(resp.status(), 200);
    let (exited, closed) = ended_on(&a, &client, &mut pusher, since).await;
    println!("PATCH disable through B after the listeners were cut: session closed after {closed:?}, pusher exited after {exited:?}");
    assert!(closed <= KILL_WITHIN && exited <= KILL_WITHIN, "session {closed:?}, pusher {exited:?}");
    eventually("three deliveries of the second stream", Duration::from_secs(10), || async {
        (events_for(&rx, &id).len() >= 3).then_some(())
    })
    .await;
    assert_eq!(events_for(&rx, &id), ["stream.live", "stream.ended", "stream.disabled"]);
    // Both sessions closed; nothing more was queued for either stream.
    let log: Value = client
        .get(format!("{}/webhooks/deliveries?limit=200", b.base))
        .bearer_auth(&key)
        .send()
        .await
        .expect("log")
        .json()
        .await
        .expect("json");
    assert_eq!(log["items"].as_array().map(Vec::len), Some(6), "{log}");
}
