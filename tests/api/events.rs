//! The event log (CONTRACT: Webhooks, event log): pages by cursor, server-sent events that
//! follow it live and resume with `Last-Event-ID` (across a restart of the real binary), the
//! scopes that read each kind, the caps on followers; and `Idempotency-Key` on POST
//! (CONTRACT: Conventions).

use std::collections::HashSet;
use std::process::Stdio;
use std::time::Duration;

use reqwest::{Method, Response};
use serde_json::{json, Value};
use sluice::events::catalog::VodEventData;
use sluice::events::Event;
use sluice::store::idempotency::{Claim, StoredAnswer};

use crate::support::{
    bootstrap_key, both_backends, error_message, fresh_postgres_url, sluice_command, spawn_app, wait_ready,
    Backend, Killed, TestApp,
};

both_backends!(
    pages_by_cursor_oldest_first_with_filters,
    each_kind_needs_its_read_scope,
    bad_parameters_are_400_naming_them,
    sse_follows_live_and_resumes_after_last_event_id,
    concurrent_events_reach_a_follower_once_each_in_cursor_order,
    followers_are_capped_per_credential,
    a_repeated_create_answers_the_first_answer_without_its_secrets,
    idempotency_keys_are_checked_and_scoped,
    idempotency_claims_run_once_and_stale_ones_are_taken_over,
);

async fn create_stream(t: &TestApp, name: &str) -> String {
    let resp = t.post_json_with(&t.project_url("/streams"), &t.key, &json!({"name": name})).await;
    assert_eq!(resp.status(), 201);
    let body: Value = resp.json().await.unwrap();
    body["_id"].as_str().unwrap().to_string()
}

fn vod_event(t: &TestApp, id: &str) -> Event {
    Event::VodComplete(VodEventData {
        id: id.into(),
        name: "v".into(),
        status: sluice::domain::vod::VodStatus::Complete,
        project_id: t.project_id.clone(),
        output_format: sluice::domain::vod::OutputFormat::Hls,
        playback_url: "http://x/vod/v/master.m3u8".into(),
        thumbnail_url: "http://x/vod/v/thumb.jpg".into(),
        source_size: Some(1),
        completed_at: None,
        error: None,
    })
}

async fn page(t: &TestApp, key: &str, query: &str) -> Value {
    let resp = t.get_with(&t.project_url(&format!("/events{query}")), key).await;
    assert_eq!(resp.status(), 200, "GET /events{query}");
    resp.json().await.unwrap()
}

fn names(page: &Value) -> Vec<String> {
    page["items"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap().to_string()).collect()
}

async fn pages_by_cursor_oldest_first_with_filters(t: TestApp) {
    let first = page(&t, &t.key, "").await;
    assert_eq!(first["items"], json!([]));
    assert_eq!(first["next"], Value::Null, "nothing read, nowhere to go on from");
    let a = create_stream(&t, "a").await;
    t.app.emit(&t.project_id, &vod_event(&t, "v1")).await.unwrap();
    let b = create_stream(&t, "b").await;

    let all = page(&t, &t.key, "").await;
    assert_eq!(names(&all), ["stream.created", "vod.complete", "stream.created"]);
    let items = all["items"].as_array().unwrap();
    assert_eq!(items[0]["data"]["id"], a.as_str());
    assert_eq!(items[2]["data"]["id"], b.as_str());
    let cursors: Vec<&str> = items.iter().map(|e| e["cursor"].as_str().unwrap()).collect();
    assert!(cursors.windows(2).all(|w| w[0] < w[1]), "cursors increase: {cursors:?}");
    assert_eq!(all["next"], json!(cursors[2]));
    let ids: HashSet<&str> = items.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 3, "each event has its own id");

    // Pages of one, then nothing past the end (and `next` stays where it was).
    let one = page(&t, &t.key, "?limit=1").await;
    assert_eq!(one["items"].as_array().unwrap().len(), 1);
    let two = page(&t, &t.key, &format!("?limit=1&after={}", one["next"].as_str().unwrap())).await;
    assert_eq!(two["items"][0]["cursor"], json!(cursors[1]));
    let end = page(&t, &t.key, &format!("?after={}", cursors[2])).await;
    assert_eq!(end["items"], json!([]));
    assert_eq!(end["next"], json!(cursors[2]));

    assert_eq!(names(&page(&t, &t.key, "?type=stream.*").await), ["stream.created", "stream.created"]);
    assert_eq!(names(&page(&t, &t.key, "?type=vod.complete").await), ["vod.complete"]);
    assert_eq!(names(&page(&t, &t.key, "?type=stream.live").await), Vec::<String>::new());
    assert_eq!(names(&page(&t, &t.key, "?type=*").await).len(), 3);
}

async fn each_kind_needs_its_read_scope(t: TestApp) {
    create_stream(&t, "a").await;
    t.app.emit(&t.project_id, &vod_event(&t, "v1")).await.unwrap();
    let streams = t.create_key(&["streams:read"]).await;
    let vods = t.create_key(&["vod:read"]).await;
    let hooks = t.create_key(&["webhooks:read"]).await;
    assert_eq!(names(&page(&t, &streams, "").await), ["stream.created"]);
    assert_eq!(names(&page(&t, &vods, "").await), ["vod.complete"]);
    assert_eq!(names(&page(&t, &hooks, "").await), Vec::<String>::new(), "neither kind: nothing");
    // Another project's key: 404, as everywhere.
    let other = t.other_project("other").await;
    error_message(t.get_with(&t.project_url("/events"), &other).await, 404).await;
    // A signed-in viewer reads both.
    let client = t.signed_in(&t.email, &t.password).await;
    let resp = client.get(t.project_url("/events")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(names(&resp.json().await.unwrap()).len(), 2);
}

async fn bad_parameters_are_400_naming_them(t: TestApp) {
    let resp = t.get_with(&t.project_url("/events?type=webhook.*&after=x1&limit=501"), &t.key).await;
    let message = error_message(resp, 400).await;
    let text = message.to_string();
    for field in ["type", "after", "limit"] {
        assert!(text.contains(&format!("\"{field} ")), "{field} is named: {text}");
    }
    let resp =
        t.with_key(Method::GET, &t.project_url("/events"), &t.key).header("Last-Event-ID", "nope").send();
    let message = error_message(resp.await.unwrap(), 400).await;
    assert!(message.to_string().contains("Last-Event-ID"), "{message}");
    // Anonymous: 401 whatever the query.
    let resp = t.client.get(t.project_url("/events?limit=0")).send().await.unwrap();
    error_message(resp, 401).await;
}

/// A follower of the log over SSE, read by hand.
struct Follower {
    resp: Response,
    buffer: String,
}

/// One SSE message.
#[derive(Debug)]
struct Message {
    id: String,
    event: String,
    data: Value,
}

impl Follower {
    async fn open(client: &reqwest::Client, url: &str, key: &str, last: Option<&str>) -> Follower {
        let mut req = client.get(url).bearer_auth(key).header("Accept", "text/event-stream");
        if let Some(last) = last {
            req = req.header("Last-Event-ID", last);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        Follower { resp, buffer: String::new() }
    }

    /// The next message within `within` (comments and keep-alives skipped).
    async fn next(&mut self, within: Duration) -> Option<Message> {
        let until = tokio::time::Instant::now() + within;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (String::new(), String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ").or_else(|| line.strip_prefix("id:")) {
                        id = v.to_string();
                    } else if let Some(v) =
                        line.strip_prefix("event: ").or_else(|| line.strip_prefix("event:"))
                    {
                        event = v.to_string();
                    } else if let Some(v) = line.strip_prefix("data: ").or_else(|| line.strip_prefix("data:"))
                    {
                        data.push_str(v);
                    }
                }
                if data.is_empty() {
                    continue;
                }
                return Some(Message { id, event, data: serde_json::from_str(&data).unwrap() });
            }
            let chunk = tokio::time::timeout_at(until, self.resp.chunk()).await.ok()?.ok()??;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// `n` messages, each within `within` of the last.
    async fn take(&mut self, n: usize, within: Duration) -> Vec<Message> {
        let mut got = Vec::new();
        while got.len() < n {
            match self.next(within).await {
                Some(m) => got.push(m),
                None => panic!("{} of {n} messages arrived: {got:?}", got.len()),
            }
        }
        got
    }
}

async fn sse_follows_live_and_resumes_after_last_event_id(t: TestApp) {
    let url = t.project_url("/events");
    create_stream(&t, "before").await;
    let mut f = Follower::open(&t.client, &url, &t.key, None).await;
    let old = f.take(1, Duration::from_secs(5)).await;
    assert_eq!(old[0].event, "stream.created", "the log from its start");
    let started = std::time::Instant::now();
    let id = create_stream(&t, "live").await;
    let m = f.next(Duration::from_secs(5)).await.expect("the new event");
    assert!(started.elapsed() < Duration::from_secs(2), "within 2 s: {:?}", started.elapsed());
    assert_eq!((m.event.as_str(), m.data["event"].as_str()), ("stream.created", Some("stream.created")));
    assert_eq!(m.data["data"]["id"], id.as_str());
    let envelope: HashSet<&str> = m.data.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(envelope, HashSet::from(["id", "event", "createdAt", "data"]), "data is the envelope");
    let last = m.id.clone();
    drop(f);

    // Two more while away; resuming after `last` gets exactly those, then follows on.
    let x = create_stream(&t, "x").await;
    let y = create_stream(&t, "y").await;
    let mut f = Follower::open(&t.client, &url, &t.key, Some(&last)).await;
    let got = f.take(2, Duration::from_secs(5)).await;
    let ids: Vec<&str> = got.iter().map(|m| m.data["data"]["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [x.as_str(), y.as_str()]);
    assert!(got[0].id > last && got[1].id > got[0].id);
    assert!(f.next(Duration::from_millis(1500)).await.is_none(), "nothing repeated");
}

async fn concurrent_events_reach_a_follower_once_each_in_cursor_order(t: TestApp) {
    let mut f = Follower::open(&t.client, &t.project_url("/events"), &t.key, None).await;
    const N: usize = 40;
    let creates = (0..N).map(|i| {
        let (client, url, key) = (t.client.clone(), t.project_url("/streams"), t.key.clone());
        async move {
            let resp = client.post(url).bearer_auth(key).json(&json!({"name": format!("s{i}")})).send().await;
            assert_eq!(resp.unwrap().status(), 201);
        }
    });
    futures_util::future::join_all(creates).await;
    let got = f.take(N, Duration::from_secs(10)).await;
    let cursors: Vec<&str> = got.iter().map(|m| m.id.as_str()).collect();
    assert!(cursors.windows(2).all(|w| w[0] < w[1]), "in cursor order: {cursors:?}");
    let streams: HashSet<&str> = got.iter().map(|m| m.data["data"]["id"].as_str().unwrap()).collect();
    assert_eq!(streams.len(), N, "each stream once");
    assert!(f.next(Duration::from_millis(1500)).await.is_none(), "nothing repeated");
}

async fn followers_are_capped_per_credential(t: TestApp) {
    let url = t.project_url("/events");
    let mut open = Vec::new();
    for _ in 0..sluice::api::events::PER_CREDENTIAL {
        open.push(Follower::open(&t.client, &url, &t.key, None).await);
    }
    let refused =
        t.with_key(Method::GET, &url, &t.key).header("Accept", "text/event-stream").send().await.unwrap();
    assert!(refused.headers().get("retry-after").is_some());
    let message = error_message(refused, 429).await;
    assert!(message.as_str().unwrap().contains("followers"), "{message}");
    // Pages are not followers; another credential has its own places.
    assert_eq!(t.get_with(&url, &t.key).await.status(), 200);
    let other = t.create_key(&["streams:read"]).await;
    let _theirs = Follower::open(&t.client, &url, &other, None).await;
    open.pop();
    crate::support::eventually("a place to come back", Duration::from_secs(5), || async {
        let resp = t.with_key(Method::GET, &url, &t.key).header("Accept", "text/event-stream").send().await;
        resp.ok().filter(|r| r.status() == 200)
    })
    .await;
}

async fn a_repeated_create_answers_the_first_answer_without_its_secrets(t: TestApp) {
    let url = t.project_url("/streams");
    let send = |body: Value, key: &'static str| {
        t.with_key(Method::POST, &url, &t.key).header("Idempotency-Key", key).json(&body).send()
    };
    let first = send(json!({"name": "once"}), "create-once").await.unwrap();
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    assert!(first["pushPassword"].is_string());
    let again = send(json!({"name": "once"}), "create-once").await.unwrap();
    assert_eq!(again.status(), 201, "the first answer's status");
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let redacted = again.headers()["idempotent-redacted"].to_str().unwrap().to_string();
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["_id"], first["_id"], "the same stream");
    for secret in ["pushPassword", "ingestUrl", "srtUrl"] {
        assert!(again[secret].is_null(), "{secret} is not replayed");
        assert!(redacted.contains(secret), "{redacted} names {secret}");
    }
    assert_eq!(again["obs"], first["obs"], "what is no secret is replayed");
    let list: Value = t.get_with(&t.project_url("/streams?q=once"), &t.key).await.json().await.unwrap();
    assert_eq!(list["total"], 1, "one stream");

    // The same key with another request: 422, and nothing is made.
    let other = send(json!({"name": "twice"}), "create-once").await.unwrap();
    let message = error_message(other, 422).await;
    assert!(message.as_str().unwrap().contains("Idempotency-Key"), "{message}");
    let list: Value = t.get_with(&t.project_url("/streams?q=twice"), &t.key).await.json().await.unwrap();
    assert_eq!(list["total"], 0);

    // A refused request gives its key back: the corrected one runs.
    error_message(send(json!({"name": ""}), "fix-me").await.unwrap(), 400).await;
    assert_eq!(send(json!({"name": "fixed"}), "fix-me").await.unwrap().status(), 201);
}

async fn idempotency_keys_are_checked_and_scoped(t: TestApp) {
    let url = t.project_url("/streams");
    let long = "k".repeat(256);
    for bad in [long.as_str(), "tab\there"] {
        let resp =
            t.with_key(Method::POST, &url, &t.key).header("Idempotency-Key", bad).json(&json!({"name": "n"}));
        let message = error_message(resp.send().await.unwrap(), 400).await;
        assert!(message.to_string().contains("Idempotency-Key"), "{message}");
    }
    // No credential: 401 first, as without the header.
    let anon = t.client.post(&url).header("Idempotency-Key", &long).json(&json!({"name": "n"})).send();
    error_message(anon.await.unwrap(), 401).await;
    // Another project's key with the same key makes its own stream.
    let other = t.other_project("other").await;
    let other_url = t.url("/v1/projects/other/streams");
    for (url, key) in [(&url, &t.key), (&other_url, &other)] {
        let resp = t
            .with_key(Method::POST, url, key)
            .header("Idempotency-Key", "shared")
            .json(&json!({"name": "n"}));
        let resp = resp.send().await.unwrap();
        assert_eq!(resp.status(), 201);
        assert!(resp.headers().get("idempotent-replayed").is_none(), "scoped to the credential's project");
    }
    // A second key of the same project replays the first answer.
    let second = t.create_key(&["streams:write"]).await;
    let resp = t
        .with_key(Method::POST, &url, &second)
        .header("Idempotency-Key", "shared")
        .json(&json!({"name": "n"}));
    assert_eq!(resp.send().await.unwrap().headers()["idempotent-replayed"], "true");
    // A signed-in person's keys are theirs, read off the session cookie as the operations read it.
    let person = t.signed_in(&t.email, &t.password).await;
    let create = || {
        person
            .post(t.url("/v1/projects"))
            .header("origin", &t.base)
            .header("Idempotency-Key", "shared")
            .json(&json!({"slug": "by-cookie"}))
            .send()
    };
    let first = create().await.unwrap();
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none(), "not the project key's scope");
    let again = create().await.unwrap();
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["slug"], "by-cookie");
}

async fn idempotency_claims_run_once_and_stale_ones_are_taken_over(t: TestApp) {
    let db = &t.db;
    let claim = |fp: &'static str, now: i64| {
        db.claim_idempotency("project:p", "k", fp, now, now - 86_400_000, now - 60_000)
    };
    assert!(matches!(claim("a", 1_000_000).await.unwrap(), Claim::Claimed));
    assert!(matches!(claim("a", 1_000_001).await.unwrap(), Claim::Running), "a repeat while it runs");
    assert!(matches!(claim("b", 1_000_001).await.unwrap(), Claim::Mismatch));
    // Its process died: after a minute a repeat takes the key over.
    assert!(matches!(claim("a", 1_070_000).await.unwrap(), Claim::Claimed));
    let answer = StoredAnswer {
        status: 201,
        content_type: Some("application/json".into()),
        body: Some("{}".into()),
        redacted: None,
    };
    db.finish_idempotency("project:p", "k", &answer).await.unwrap();
    match claim("a", 1_080_000).await.unwrap() {
        Claim::Done(a) => assert_eq!((a.status, a.body.as_deref()), (201, Some("{}"))),
        other => panic!("{other:?}"),
    }
    // A day later the key is free again; released keys are free at once.
    assert!(matches!(claim("b", 1_070_000 + 86_400_001).await.unwrap(), Claim::Claimed));
    db.release_idempotency("project:p", "k").await.unwrap();
    assert!(matches!(claim("c", 1_070_000 + 86_400_002).await.unwrap(), Claim::Claimed));
}

/// The real binary, SIGTERMed and started again: a follower that resumes with `Last-Event-ID`
/// gets every event once, those of both runs.
#[tokio::test]
async fn a_follower_resumes_across_a_restart_missing_and_repeating_nothing() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let dir = tempfile::tempdir().unwrap();
        let db = match backend {
            Backend::Sqlite => format!("sqlite://{}/sluice.db", dir.path().display()),
            Backend::Postgres => fresh_postgres_url().await,
        };
        let port = crate::support::free_port();
        let command = || {
            let mut cmd = sluice_command(dir.path(), port);
            cmd.env("SLUICE_DATABASE_URL", &db);
            cmd
        };
        let key = bootstrap_key(command());
        let base = format!("http://127.0.0.1:{port}/v1/projects/demo");
        let client = reqwest::Client::new();
        let serve = || async {
            let s =
                Killed(command().arg("serve").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
            wait_ready(port).await;
            s
        };
        let create = |name: String| {
            let (client, url, key) = (client.clone(), format!("{base}/streams"), key.clone());
            async move {
                let resp =
                    client.post(url).bearer_auth(key).json(&json!({"name": name})).send().await.unwrap();
                assert_eq!(resp.status(), 201);
            }
        };
        let mut server = serve().await;
        let mut f = Follower::open(&client, &format!("{base}/events"), &key, None).await;
        for i in 0..3 {
            create(format!("first-{i}")).await;
        }
        let mut got = f.take(3, Duration::from_secs(5)).await;
        let last = got[2].id.clone();
        // SIGTERM: the follower's stream ends with the server.
        let pid = server.0.id().to_string();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        assert!(f.next(Duration::from_secs(15)).await.is_none(), "the stream ends at shutdown");
        let _ = server.0.wait();
        server = serve().await;
        for i in 0..3 {
            create(format!("second-{i}")).await;
        }
        let mut f = Follower::open(&client, &format!("{base}/events"), &key, Some(&last)).await;
        got.extend(f.take(3, Duration::from_secs(5)).await);
        assert!(f.next(Duration::from_millis(1500)).await.is_none(), "{backend:?}: nothing repeated");
        let names: Vec<&str> = got.iter().map(|m| m.data["data"]["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["first-0", "first-1", "first-2", "second-0", "second-1", "second-2"],
            "{backend:?}"
        );
        drop(server);
    }
}

/// A page and a follower name an event by the same cursor and id.
#[tokio::test]
async fn a_page_and_a_follower_give_the_same_cursors() {
    let t = spawn_app(Backend::Sqlite).await;
    create_stream(&t, "a").await;
    let page = page(&t, &t.key, "").await;
    let mut f = Follower::open(&t.client, &t.project_url("/events"), &t.key, None).await;
    let m = f.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(page["items"][0]["cursor"], json!(m.id));
    assert_eq!(page["items"][0]["id"], m.data["id"]);
}

/// Followers that stop reading hold their places only until the server's writes have waited
/// `WRITE_STALL` for them: then their connections are dropped, and the credential's places come
/// back. Eight of them (a credential's cap) read nothing while 10 MB of events are logged; a
/// ninth is refused until they are gone.
#[tokio::test]
async fn followers_that_stop_reading_are_dropped() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t = spawn_app(Backend::Sqlite).await;
    let addr: std::net::SocketAddr = t.base.trim_start_matches("http://").parse().unwrap();
    let request = format!(
        "GET /v1/projects/demo/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Accept: text/event-stream\r\n\r\n",
        t.key
    );
    let mut stalled = Vec::new();
    for _ in 0..sluice::api::events::PER_CREDENTIAL {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        // Its answer's head, so it is a follower: then it reads nothing more.
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte)).await;
            assert_eq!(n.expect("the answer's head").expect("read"), 1, "the head, whole");
            head.push(byte[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
        stalled.push(stream);
    }
    let url = t.project_url("/events");
    let follow = || t.with_key(Method::GET, &url, &t.key).header("Accept", "text/event-stream").send();
    let refused = follow().await.unwrap();
    assert_eq!(refused.status(), 429, "the credential's places are taken");
    assert!(refused.text().await.unwrap().contains("followers"));
    // 10 MB of events for each follower: more than the socket (its send buffer grows to 4 MB on
    // this kernel) and hyper's write buffer together hold.
    let big = "x".repeat(16_000);
    for i in 0..640 {
        let mut event = vod_event(&t, &format!("v{i}"));
        if let Event::VodComplete(data) = &mut event {
            data.name = big.clone();
        }
        t.app.emit(&t.project_id, &event).await.unwrap();
    }
    let started = std::time::Instant::now();
    let stall = sluice::app::WRITE_STALL;
    // Asked once a second (well within the key's rate): a place comes back once they are gone.
    loop {
        let status = follow().await.unwrap().status();
        if status == 200 {
            break;
        }
        assert_eq!(status, 429, "refused only for want of a place");
        assert!(
            started.elapsed() < stall + Duration::from_secs(30),
            "the stalled followers were never dropped"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let gone = started.elapsed();
    assert!(gone >= stall - Duration::from_secs(5), "dropped after {gone:?}, before the stall deadline");
    // The server goes on serving everyone else.
    assert_eq!(t.get_with(&t.project_url("/streams"), &t.key).await.status(), 200);
    drop(stalled);
}
