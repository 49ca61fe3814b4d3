//! Several nodes, one service (docs/scale-out.md): three `sluice serve` processes on one
//! Postgres database and one S3-compatible store (moto). A push held by node A plays through
//! node B — LL-HLS with blocking reload, relayed from A, and WHEP — viewers on every node are
//! summed through any of them, and the operator sees the nodes through `GET /v1/admin/nodes`. Then A is SIGKILLed: within the node timeout the stream
//! is `idle` with one `stream.ended`, the recording A had in progress is completed by a
//! survivor from what reached the store, and a new push to node C goes live and plays through B.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Client;
use serde_json::{json, Value};

use crate::live_hls::last_part;
use crate::recording::push_for;
use crate::support::receiver::Receiver;
use crate::support::webrtc::WhepViewer;
use crate::support::{bootstrap_key, eventually, free_port, fresh_postgres_url, wait_ready, Killed};
use crate::webhooks_restart::create_hook;

/// `SLUICE_NODE_TIMEOUT` of the three nodes.
const TIMEOUT: Duration = Duration::from_secs(4);
const ADMIN: &str = "operator-token-for-the-cluster-test";

struct Node {
    http: u16,
    rtmp: u16,
    rtsp: u16,
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        Node { http: free_port(), rtmp: free_port(), rtsp: free_port(), dir }
    }

    fn command(&self, db: &str, storage: &str) -> Command {
        let mut cmd = crate::support::sluice_on(self.dir.path(), db, self.http);
        cmd.env("SLUICE_RTMP_ADDR", format!("127.0.0.1:{}", self.rtmp))
            .env("SLUICE_RTSP_ADDR", format!("127.0.0.1:{}", self.rtsp))
            .env("SLUICE_STORAGE_URL", storage)
            .env("SLUICE_NODE_TIMEOUT", TIMEOUT.as_secs().to_string())
            .env("SLUICE_ADMIN_TOKEN", ADMIN)
            .env("SLUICE_RATE_LIMIT_PER_KEY", "1000")
            .env("SLUICE_RATE_LIMIT_BURST", "1000");
        cmd
    }

    async fn serve(&self, db: &str, storage: &str) -> Killed {
        let child =
            self.command(db, storage).arg("serve").stdout(Stdio::null()).spawn().expect("sluice serve");
        let proc = Killed(child);
        wait_ready(self.http).await;
        proc
    }

    fn api(&self) -> String {
        format!("http://127.0.0.1:{}/v1/projects/demo", self.http)
    }

    /// `url` (a playback or WHEP URL another node handed out) on this node.
    fn on_me(&self, url: &str, from: &Node) -> String {
        url.replace(&format!("127.0.0.1:{}", from.http), &format!("127.0.0.1:{}", self.http))
    }

    async fn metric(&self, client: &Client, name: &str) -> Option<u64> {
        let url = format!("http://127.0.0.1:{}/metrics", self.http);
        let text = client.get(url).send().await.ok()?.text().await.ok()?;
        text.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).and_then(|v| v.trim().parse().ok())
    }
}

async fn get_json(client: &Client, url: &str, key: &str) -> Value {
    client.get(url).bearer_auth(key).send().await.expect("get").json().await.expect("json")
}

async fn text(client: &Client, url: &str) -> (u16, String) {
    let resp = client.get(url).send().await.expect("get");
    (resp.status().as_u16(), resp.text().await.unwrap_or_default())
}

/// The codecs ffprobe reads at `url`, once it reads video (a live playlist has none at first).
async fn codecs(url: &str) -> Vec<String> {
    let url = url.to_string();
    eventually(&format!("ffprobe to read video at {url}"), Duration::from_secs(40), || {
        let url = url.clone();
        async move {
            let found = tokio::task::spawn_blocking(move || probe(&url)).await.expect("ffprobe thread");
            found.iter().any(|c| c == "h264").then_some(found)
        }
    })
    .await
}

fn probe(url: &str) -> Vec<String> {
    let transport: &[&str] = if url.starts_with("rtsp:") { &["-rtsp_transport", "tcp"] } else { &[] };
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-rw_timeout", "10000000"])
        .args(transport)
        .args(["-show_entries", "stream=codec_name", "-of", "json", url])
        .output()
        .expect("ffprobe runs");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["streams"]
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["codec_name"].as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// The source rendition's media playlist URL under a master URL, once the master lists it,
/// without the playback session (`vs=`) the master gave it: the test adds its own queries.
async fn media_playlist(client: &Client, master: &str) -> String {
    let url = session_playlist(client, master).await;
    url.split('?').next().unwrap_or(&url).to_string()
}

/// [`media_playlist`] with the playback session the master fetch started.
async fn session_playlist(client: &Client, master: &str) -> String {
    eventually("a master playlist with the source rendition", Duration::from_secs(40), || async {
        let (status, body) = text(client, master).await;
        let uri =
            body.lines().find(|l| l.split('?').next().is_some_and(|p| p.ends_with("source/index.m3u8")))?;
        (status == 200).then(|| master.replace("master.m3u8", uri))
    })
    .await
}

/// A blocking reload through `playlist` for the part after the last one listed in a plain
/// reload of it (see [`blocking_reload_after`]).
async fn blocking_reload(client: &Client, playlist: &str) -> Duration {
    let (_, body) = text(client, playlist).await;
    blocking_reload_after(client, playlist, &body).await.0
}

/// A blocking reload through `playlist` for the part after the last one `body` (an earlier
/// answer) lists, as an LL-HLS player asks: answered with that part, after waiting for it, and
/// the part fetched. Returns how long it was held and the answer.
async fn blocking_reload_after(client: &Client, playlist: &str, body: &str) -> (Duration, String) {
    let (msn, index, _) = last_part(body);
    let asked = Instant::now();
    let (status, blocked) = text(client, &format!("{playlist}?_HLS_msn={msn}&_HLS_part={}", index + 1)).await;
    let held = asked.elapsed();
    assert_eq!(status, 200, "blocking reload: {blocked}");
    let (m, i, uri) = last_part(&blocked);
    assert!((m, i) > (msn, index), "the blocked answer lists the next part ({msn}.{index} → {m}.{i})");
    let part = client.get(playlist.replace("index.m3u8", &uri)).send().await.expect("part");
    assert_eq!(part.status(), 200, "the part itself, relayed");
    assert!(!part.bytes().await.expect("part bytes").is_empty());
    (held, blocked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_serve_any_url_and_take_over_a_dead_node() {
    let db = fresh_postgres_url().await;
    let (_moto, endpoint) = crate::vod_s3::moto().await;
    let storage =
        format!("s3://sluice?endpoint={endpoint}&region=us-east-1&access_key_id=test&secret_access_key=test");
    let (a, b, c) = (Node::new(), Node::new(), Node::new());
    let key = bootstrap_key(a.command(&db, &storage));
    let mut a_proc = a.serve(&db, &storage).await;
    let _b_proc = b.serve(&db, &storage).await;
    let _c_proc = c.serve(&db, &storage).await;
    let client = Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
    let rx = Receiver::start().await;
    create_hook(&client, &b.api(), &key, &rx.url(), json!(["stream.live", "stream.ended", "vod.complete"]))
        .await;

    // The operator sees three live nodes.
    let nodes_url = format!("http://127.0.0.1:{}/v1/admin/nodes", b.http);
    let resp = client.get(&nodes_url).bearer_auth("not-the-operator-token").send().await.expect("nodes");
    assert_eq!(resp.status(), 401, "a wrong operator token");
    let resp = client.get(&nodes_url).bearer_auth(&key).send().await.expect("nodes");
    assert_eq!(resp.status(), 401, "a project key is not the operator's");
    let nodes = get_json(&client, &nodes_url, ADMIN).await;
    let alive = nodes["nodes"].as_array().expect("nodes").iter().filter(|n| n["alive"] == true).count();
    assert_eq!(alive, 3, "{nodes}");

    // A push to A.
    let body = json!({"name": "cluster", "vodEnabled": true, "qualities": ["240p"], "protocols": ["llhls", "webrtc", "rtsp"]});
    let s: Value = client
        .post(format!("{}/streams", a.api()))
        .bearer_auth(&key)
        .json(&body)
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let id = s["_id"].as_str().expect("id").to_string();
    let ingest = s["ingestUrl"].as_str().expect("ingestUrl").to_string();
    assert!(ingest.contains(&format!(":{}/", a.rtmp)), "A's RTMP: {ingest}");
    let _pusher_a = push_for(&ingest, 300);
    let stream_url = format!("{}/streams/{id}", b.api());
    eventually("live, seen through B", Duration::from_secs(20), || async {
        (get_json(&client, &stream_url, &key).await["status"] == "live").then_some(())
    })
    .await;

    // LL-HLS through B, relayed from A: ffprobe reads it; blocking reload works.
    let master_a = s["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let master_b = b.on_me(&master_a, &a);
    let playlist_b = media_playlist(&client, &master_b).await;
    let streams = codecs(&master_b).await;
    assert!(
        streams.iter().any(|c| c == "h264") && streams.iter().any(|c| c == "aac"),
        "through B: {streams:?}"
    );
    // Held until the part exists: five in a row, each asking for the part after the one the
    // previous answer listed, as a player does (a part that appeared meanwhile is answered at
    // once: of five, at least one must have waited).
    let mut holds = Vec::new();
    let (_, mut body) = text(&client, &playlist_b).await;
    for _ in 0..5 {
        let (held, answer) = blocking_reload_after(&client, &playlist_b, &body).await;
        holds.push(held);
        body = answer;
    }
    println!("blocking reloads through B held {holds:?}");
    assert!(
        holds.iter().any(|h| *h > Duration::from_millis(50)),
        "no request waited for its part: {holds:?}"
    );
    assert_eq!(b.metric(&client, "sluice_push_sessions").await, Some(0), "B holds no push");

    // 30 viewers blocked on B for the same next part share one request to A.
    let (_, body) = text(&client, &playlist_b).await;
    let (msn, index, _) = last_part(&body);
    let next = format!("{playlist_b}?_HLS_msn={msn}&_HLS_part={}", index + 1);
    let before = b.metric(&client, "sluice_relay_fetches_total").await.expect("relay metric");
    let waits: Vec<_> = (0..30).map(|_| tokio::spawn(text_owned(client.clone(), next.clone()))).collect();
    for w in waits {
        assert_eq!(w.await.expect("viewer").0, 200);
    }
    let fetched = b.metric(&client, "sluice_relay_fetches_total").await.expect("relay metric") - before;
    assert!(fetched <= 2, "30 blocked viewers on B cost A {fetched} requests");

    // A flood of made-up part names through B: each is refused (404 from A, or 503 once 256
    // relayed requests are in flight), and B still relays the stream.
    let floods: Vec<_> = (0..600)
        .map(|i| {
            tokio::spawn(text_owned(client.clone(), playlist_b.replace("index.m3u8", &format!("x{i}.m4s"))))
        })
        .collect();
    for f in floods {
        let status = f.await.expect("flood").0;
        assert!(status == 404 || status == 503, "a made-up part: {status}");
    }
    blocking_reload(&client, &playlist_b).await;

    // WHEP through B: the offer is relayed to A, whose media the viewer decodes.
    let whep_b = b.on_me(s["playbackUrls"]["webrtc"].as_str().expect("whep"), &a);
    let viewer = WhepViewer::play(&whep_b).await;
    viewer.wait_for("WHEP frames through B", Duration::from_secs(30), |r| r.video_frames >= 30).await;

    // Viewers on every node, summed through any node (docs/viewers.md): HLS sessions started
    // on A (3), on B (4, relayed from A) and on C (5), and the WHEP viewer above (held by A).
    let mut followers = Vec::new();
    for (node, n) in [(&a, 3), (&b, 4), (&c, 5)] {
        let master = node.on_me(&master_a, &a);
        for _ in 0..n {
            let url = session_playlist(&client, &master).await;
            let client = client.clone();
            followers.push(tokio::spawn(async move {
                loop {
                    let _ = client.get(&url).send().await;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }));
        }
    }
    let by = json!({"hls": 12, "webrtc": 1, "rtsp": 0});
    for node in [&a, &b, &c] {
        let url = format!("{}/streams/{id}", node.api());
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let v = get_json(&client, &url, &key).await;
            if v["viewers"] == 13 && v["viewerCounts"] == by && v["peakViewers"].as_u64() >= Some(13) {
                break;
            }
            let seen = (&v["viewers"], &v["viewerCounts"], &v["peakViewers"]);
            assert!(Instant::now() < until, "13 viewers through node {}: {seen:?}", node.http);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Each node counts the sessions it serves: A not B's relayed requests.
    for (node, n) in [(&a, 3), (&b, 4), (&c, 5)] {
        let url = format!("http://127.0.0.1:{}/metrics", node.http);
        let line = format!("sluice_stream_viewers{{stream=\"{id}\",protocol=\"hls\"}} {n}");
        let metrics = text(&client, &url).await.1;
        assert!(metrics.lines().any(|l| l == line), "node {}: no {line}", node.http);
    }
    for f in followers {
        f.abort();
    }
    drop(viewer);

    // RTSP through B: the DESCRIBE is redirected to A, which ffprobe follows.
    let rtsp_a = s["playbackUrls"]["rtsp"].as_str().expect("rtsp").to_string();
    let rtsp_b = rtsp_a.replace(&format!(":{}/", a.rtsp), &format!(":{}/", b.rtsp));
    assert_ne!(rtsp_a, rtsp_b, "{rtsp_a}");
    let streams = codecs(&rtsp_b).await;
    assert!(streams.iter().any(|c| c == "h264"), "RTSP through B: {streams:?}");

    let nodes = get_json(&client, &nodes_url, ADMIN).await;
    let held_by: Vec<&Value> = nodes["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["sessions"].as_array().is_some_and(|s| s.iter().any(|x| x["streamId"] == id.as_str())))
        .collect();
    assert_eq!(held_by.len(), 1, "one node holds the push: {nodes}");
    assert_eq!(held_by[0]["internalUrl"], format!("http://127.0.0.1:{}", a.http));

    // Recorded segments reach the store before the kill.
    eventually("6 s of live segments", Duration::from_secs(30), || async {
        let (_, body) = text(&client, &playlist_b).await;
        (body.matches("#EXTINF:").count() >= 3).then_some(())
    })
    .await;

    // A dies.
    let killed = Instant::now();
    let _ = a_proc.0.kill();
    let _ = a_proc.0.wait();
    eventually("idle after A died", TIMEOUT * 3, || async {
        (get_json(&client, &stream_url, &key).await["status"] == "idle").then_some(())
    })
    .await;
    let noticed = killed.elapsed();
    println!("A killed: the stream was idle after {noticed:?} (node timeout {TIMEOUT:?})");
    assert!(noticed <= TIMEOUT + Duration::from_secs(3), "idle after {noticed:?}");

    let vods: Vec<Value> =
        eventually("the recording completed by a survivor", Duration::from_secs(60), || async {
            let v = get_json(&client, &format!("{}/vod?streamId={id}", b.api()), &key).await;
            let items = v["items"].as_array()?.clone();
            (items.len() == 1 && items[0]["status"] == "complete").then_some(items)
        })
        .await;
    let recorded = vods[0]["playbackUrl"].as_str().expect("playbackUrl").to_string();
    let streams = codecs(&recorded).await;
    assert!(streams.iter().any(|c| c == "h264"), "the recording plays: {streams:?}");
    eventually("stream.ended and vod.complete delivered", Duration::from_secs(20), || async {
        let got = rx.received().iter().filter(|r| r.json()["event"] == "vod.complete").count();
        (rx.events_for(&id).contains(&"stream.ended".to_string()) && got == 1).then_some(())
    })
    .await;
    assert_eq!(rx.events_for(&id), ["stream.live", "stream.ended"], "one stream.ended");

    let nodes = get_json(&client, &nodes_url, ADMIN).await;
    let a_row = nodes["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["internalUrl"] == format!("http://127.0.0.1:{}", a.http))
        .expect("A listed")
        .clone();
    assert_eq!(a_row["alive"], false, "{a_row}");
    assert!(a_row["takenOverBy"].is_string(), "a survivor took A over: {a_row}");
    // The same from the command line, off the database.
    let out =
        b.command(&db, &storage).args(["admin", "nodes", "--json"]).output().expect("sluice admin nodes");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let alive: Vec<&Value> =
        listed["nodes"].as_array().expect("nodes").iter().filter(|n| n["alive"] == true).collect();
    assert_eq!(alive.len(), 2, "B and C: {listed}");
    let human = b.command(&db, &storage).args(["admin", "nodes"]).output().expect("sluice admin nodes");
    let text = String::from_utf8_lossy(&human.stdout);
    assert_eq!(text.matches("alive").count(), 2, "{text}");
    assert!(text.contains("gone") && text.contains(&format!("http://127.0.0.1:{}", a.http)), "{text}");

    // The publisher comes back on C and plays through B.
    let ingest_c = ingest.replace(&format!(":{}/", a.rtmp), &format!(":{}/", c.rtmp));
    let _pusher_c = push_for(&ingest_c, 300);
    eventually("live again, on C", Duration::from_secs(20), || async {
        (get_json(&client, &stream_url, &key).await["status"] == "live").then_some(())
    })
    .await;
    let playlist_b = media_playlist(&client, &master_b).await;
    let streams = codecs(&master_b).await;
    assert!(streams.iter().any(|c| c == "h264"), "C's push through B: {streams:?}");
    blocking_reload(&client, &playlist_b).await;
    assert_eq!(c.metric(&client, "sluice_push_sessions").await, Some(1), "C holds the push");
    eventually("the second stream.live", Duration::from_secs(20), || async {
        (rx.events_for(&id).len() >= 3).then_some(())
    })
    .await;
    assert_eq!(rx.events_for(&id), ["stream.live", "stream.ended", "stream.live"]);
}

async fn text_owned(client: Client, url: String) -> (u16, String) {
    text(&client, &url).await
}

/// The node-to-node header with anything but the service's own credential is ignored: a signed
/// stream still needs its token, and garbage in the header does not reach the relay.
#[tokio::test]
async fn a_forged_node_credential_is_only_a_viewer() {
    use crate::support::{spawn_app, Backend};
    let t = spawn_app(Backend::Sqlite).await;
    let resp = t.post_json_with(&t.project_url("/streams"), &t.key, &json!({"name": "signed"})).await;
    let s: Value = resp.json().await.expect("json");
    let id = s["_id"].as_str().expect("id").to_string();
    let resp = t
        .with_key(reqwest::Method::PATCH, &t.project_url(&format!("/streams/{id}/signed-playback")), &t.key)
        .json(&json!({"enabled": true}))
        .send()
        .await
        .expect("switch");
    assert_eq!(resp.status(), 200);
    let master = t.url(&format!("/play/live/{id}/master.m3u8"));
    for forged in ["", "0", &"0".repeat(64), &"a".repeat(64), &"f".repeat(10_000), "Bearer x"] {
        let resp = t
            .client
            .get(&master)
            .header("x-sluice-relay", forged)
            .header("x-sluice-client", "10.9.8.7")
            .send()
            .await
            .expect("get");
        assert_eq!(resp.status(), 401, "forged credential {:?}", forged.get(..8));
        assert_eq!(resp.headers().get("x-deny-reason").and_then(|v| v.to_str().ok()), Some("missing_token"));
    }
    // Still serving.
    assert_eq!(t.client.get(t.url("/readyz")).send().await.expect("readyz").status(), 200);
}
