//! What Sluice stands on failing under a live service (CONTRACT: Faults), on the real binary
//! with a TCP proxy the test cuts and freezes between it and Postgres.
//!
//! Two pushes are live (one signed, played through its ticket by an LL-HLS reader and a WHEP
//! viewer). Postgres is refused for 30 s, then hangs for 30 s. Throughout, the reader's playlist
//! keeps advancing (no gap over 1 s) and the WHEP viewer keeps receiving frames; the API answers
//! 503 with `Retry-After` within 10 s. The other push ends while the database is refused: within
//! 10 s of the database's return its stream reads `idle`, with one `stream.ended`, and the next
//! push goes live.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Client;
use serde_json::{json, Value};

use crate::support::proxy::{Mode, Proxy};
use crate::support::webrtc::WhepViewer;
use crate::support::{
    bootstrap_key, eventually, ffmpeg_push, free_port, fresh_postgres_url, serve_logged, sluice_on, Killed,
};

/// Each outage: refused, then hung.
const OUTAGE: Duration = Duration::from_secs(30);
/// The longest a live viewer may go without new media (the bar).
const MAX_GAP: Duration = Duration::from_secs(1);
/// How soon the API must answer while the database is away, and how soon what happened
/// meanwhile must read right once it is back.
const WITHIN: Duration = Duration::from_secs(10);

fn push(url: &str) -> Killed {
    ffmpeg_push(url, "testsrc=size=320x240:rate=15", 30, &[])
}

/// The longest stretch without progress that a watcher saw, and the failed requests it made.
#[derive(Debug, Default, Clone)]
struct Watched {
    worst_gap: Duration,
    /// When the worst gap ended (the playlist's), since the watch began.
    worst_at: Duration,
    failures: Vec<String>,
    advances: u64,
}

/// Polls a live media playlist every 100 ms while `run` holds; notes when its text changes.
fn read_playlist(client: Client, url: String, run: Arc<AtomicBool>) -> tokio::task::JoinHandle<Watched> {
    tokio::spawn(async move {
        let mut seen = Watched::default();
        let (mut last_text, mut last_change) = (String::new(), Instant::now());
        let began = Instant::now();
        while run.load(Ordering::Relaxed) {
            match client.get(&url).send().await {
                Ok(resp) if resp.status() == 200 => {
                    let text = resp.text().await.unwrap_or_default();
                    if text != last_text {
                        if last_change.elapsed() > seen.worst_gap {
                            seen.worst_gap = last_change.elapsed();
                            seen.worst_at = began.elapsed();
                        }
                        (last_text, last_change) = (text, Instant::now());
                        seen.advances += 1;
                    }
                }
                Ok(resp) => seen.failures.push(format!("{}", resp.status())),
                Err(e) => seen.failures.push(e.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen.worst_gap = seen.worst_gap.max(last_change.elapsed());
        seen
    })
}

/// Samples how long ago the WHEP viewer decoded its last frame, every 50 ms while `run` holds.
fn watch_whep(viewer: Arc<WhepViewer>, run: Arc<AtomicBool>) -> tokio::task::JoinHandle<Watched> {
    tokio::spawn(async move {
        let mut seen = Watched::default();
        while run.load(Ordering::Relaxed) {
            let received = viewer.received();
            let gap = received.last_video.map_or(Duration::MAX, |at| at.elapsed());
            seen.worst_gap = seen.worst_gap.max(gap);
            seen.advances = received.video_frames;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        seen
    })
}

/// The URL of the first variant a master playlist lists, resolved against the master's URL.
fn first_variant(master_url: &str, master: &str) -> String {
    let uri = master.lines().find(|l| !l.is_empty() && !l.starts_with('#')).expect("a variant");
    url::Url::parse(master_url).expect("url").join(uri).expect("join").to_string()
}

struct Api {
    client: Client,
    base: String,
    key: String,
}

impl Api {
    async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(format!("{}{path}", self.base)).bearer_auth(&self.key).send().await.expect("request")
    }

    async fn stream(&self, id: &str) -> Value {
        let resp = self.get(&format!("/streams/{id}")).await;
        assert_eq!(resp.status(), 200);
        resp.json().await.expect("json")
    }

    async fn create(&self, body: Value) -> Value {
        let resp =
            self.client.post(format!("{}/streams", self.base)).bearer_auth(&self.key).json(&body).send();
        let resp = resp.await.expect("create");
        assert_eq!(resp.status(), 201);
        resp.json().await.expect("json")
    }

    /// While the database is away: a read answers 503 with `Retry-After` and the contract's JSON
    /// within [`WITHIN`]. Returns how long it took.
    async fn unavailable(&self, what: &str) -> Duration {
        let started = Instant::now();
        let resp = self.get("/streams").await;
        let took = started.elapsed();
        assert_eq!(resp.status(), 503, "{what}: the API while the database is away");
        let retry = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
        assert!(retry.is_some_and(|v| v.parse::<u64>().is_ok_and(|s| s >= 1)), "{what}: Retry-After");
        let body: Value = resp.json().await.expect("a JSON error");
        assert_eq!(body["statusCode"], 503, "{what}: {body}");
        assert!(took <= WITHIN, "{what}: answered after {took:?}");
        took
    }

    /// The `stream.ended` events of the event log for `id`.
    async fn ended(&self, id: &str) -> usize {
        let resp = self.get("/events?type=stream.ended&limit=500").await;
        assert_eq!(resp.status(), 200);
        let page: Value = resp.json().await.expect("json");
        page["items"].as_array().expect("items").iter().filter(|e| e["data"]["id"] == id).count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_database_away_costs_live_viewers_nothing_and_loses_nothing() {
    let direct = fresh_postgres_url().await;
    let mut url = url::Url::parse(&direct).expect("database URL");
    let upstream = format!("{}:{}", url.host_str().expect("host"), url.port().unwrap_or(5432));
    let upstream = tokio::net::lookup_host(&upstream).await.expect("resolve").next().expect("an address");
    let proxy = Proxy::start(upstream).await;
    url.set_port(Some(proxy.addr.port())).expect("port");
    let through_proxy = url.to_string();

    let dir = tempfile::tempdir().expect("tempdir");
    let (http, rtmp) = (free_port(), free_port());
    let key = bootstrap_key(sluice_on(dir.path(), &through_proxy, http));
    let mut serve = sluice_on(dir.path(), &through_proxy, http);
    serve.env("SLUICE_RTMP_ADDR", format!("127.0.0.1:{rtmp}"));
    let (_server, _log) = serve_logged(serve, http, "faults-database").await;
    let client = Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
    let api = Api { client: client.clone(), base: format!("http://127.0.0.1:{http}/v1/projects/demo"), key };

    let signed =
        api.create(json!({"name": "signed", "protocols": ["llhls", "webrtc"], "qualities": ["240p"]})).await;
    let plain = api
        .create(json!({"name": "plain", "protocols": ["llhls"], "qualities": ["240p"], "vodEnabled": true}))
        .await;
    let (signed_id, plain_id) =
        (signed["_id"].as_str().expect("id").to_string(), plain["_id"].as_str().expect("id").to_string());
    let switch = client
        .patch(format!("{}/streams/{signed_id}/signed-playback", api.base))
        .bearer_auth(&api.key)
        .json(&json!({"enabled": true}))
        .send()
        .await
        .expect("switch");
    assert_eq!(switch.status(), 200);
    let _signed_push = push(signed["ingestUrl"].as_str().expect("ingestUrl"));
    let plain_push = push(plain["ingestUrl"].as_str().expect("ingestUrl"));
    for id in [&signed_id, &plain_id] {
        eventually("both streams live", Duration::from_secs(30), || async {
            (api.stream(id).await["status"] == "live").then_some(())
        })
        .await;
    }
    let plain_live = Instant::now();

    // The signed stream played as a viewer does: its ticket's master, then a variant.
    let ticket: Value = client
        .post(format!("{}/streams/{signed_id}/playback-ticket", api.base))
        .bearer_auth(&api.key)
        .json(&json!({}))
        .send()
        .await
        .expect("ticket")
        .json()
        .await
        .expect("json");
    let master_url = ticket["hls"].as_str().expect("an HLS URL").to_string();
    let master = eventually("the signed master playlist", Duration::from_secs(20), || async {
        let resp = client.get(&master_url).send().await.ok()?;
        (resp.status() == 200).then_some(())?;
        resp.text().await.ok()
    })
    .await;
    let variant = first_variant(&master_url, &master);
    let viewer = Arc::new(WhepViewer::play(ticket["webrtc"].as_str().expect("a WHEP URL")).await);
    viewer.wait_for("WHEP frames", Duration::from_secs(30), |r| r.video_frames >= 15).await;

    let run = Arc::new(AtomicBool::new(true));
    let watching = Instant::now();
    let reader = read_playlist(client.clone(), variant, run.clone());
    let whep = watch_whep(viewer.clone(), run.clone());
    let ended_before = api.ended(&plain_id).await;
    assert_eq!(ended_before, 0);

    // Refused: the API says so; the plain push ends while nothing can be written.
    proxy.set(Mode::Refuse);
    let outage = Instant::now();
    let watch_to_outage = outage - watching;
    let refused_took = api.unavailable("refused").await;
    drop(plain_push);
    let pushed_for = plain_live.elapsed();
    let metrics = || async {
        client.get(format!("http://127.0.0.1:{http}/metrics")).send().await.ok()?.text().await.ok()
    };
    eventually("the plain push's session to close", Duration::from_secs(15), || async {
        metrics().await?.lines().any(|l| l == "sluice_push_sessions 1").then_some(())
    })
    .await;
    let ready = client.get(format!("http://127.0.0.1:{http}/readyz")).send().await.expect("readyz");
    assert_eq!(ready.status(), 503);
    let ready: Value = ready.json().await.expect("json");
    assert_eq!(ready["database"], "down", "{ready}");
    assert_eq!(
        client.get(format!("http://127.0.0.1:{http}/healthz")).send().await.expect("healthz").status(),
        200
    );
    tokio::time::sleep_until((outage + OUTAGE).into()).await;

    // Hung: nothing fails, nothing answers.
    proxy.set(Mode::Hang);
    let hung_took = api.unavailable("hung").await;
    tokio::time::sleep_until((outage + 2 * OUTAGE).into()).await;

    // Back: within 10 s everything reads as before, and the push that ended is written once.
    proxy.set(Mode::Open);
    let back = Instant::now();
    eventually("the plain stream idle once the database is back", WITHIN, || async {
        let resp = api.get(&format!("/streams/{plain_id}")).await;
        (resp.status() == 200).then_some(())?;
        let stream: Value = resp.json().await.ok()?;
        (stream["status"] == "idle").then_some(())
    })
    .await;
    let idle_after = back.elapsed();
    eventually("one stream.ended for the push that ended", WITHIN, || async {
        (api.ended(&plain_id).await == 1).then_some(())
    })
    .await;
    assert_eq!(api.stream(&signed_id).await["status"], "live", "the signed push stayed live");
    assert_eq!(api.get("/streams").await.status(), 200);
    let ready = client.get(format!("http://127.0.0.1:{http}/readyz")).send().await.expect("readyz");
    assert_eq!(ready.status(), 200);
    let reconciled = metrics().await.unwrap_or_default();
    assert!(reconciled.contains("sluice_reconciled_total{kind=\"push_ended\"} 1"), "{reconciled}");
    // Its recording, which ended while nothing could be noted, completes once, whole.
    let vod = eventually("the plain push's recording complete", Duration::from_secs(20), || async {
        let page: Value = api.get(&format!("/vod?streamId={plain_id}")).await.json().await.ok()?;
        let items = page["items"].as_array()?.clone();
        assert!(items.len() <= 1, "one recording: {items:?}");
        items.into_iter().find(|v| v["status"] == "complete")
    })
    .await;
    let recorded = vod["duration"].as_f64().expect("duration");
    let recording_after = back.elapsed();
    assert!(
        recorded >= pushed_for.as_secs_f64() - 2.5,
        "{recorded} s recorded of a {pushed_for:?} push (a segment's worth may be missing at each end)"
    );

    run.store(false, Ordering::Relaxed);
    let (read, seen) = (reader.await.expect("reader"), whep.await.expect("WHEP watcher"));
    println!(
        "database refused then hung {OUTAGE:?} each: API 503 after {refused_took:?} (refused) and \
         {hung_took:?} (hung); the plain stream idle {idle_after:?} after the database was back; \
         its recording ({recorded:.1} s of a {pushed_for:.1?} push) complete {recording_after:?} after; \
         LL-HLS (signed, ticketed): worst gap {:?} (ending {:?} into the watch, the outage began \
         {:?} into it), {} advances, {} failed requests ({:?}…); WHEP: worst gap \
         {:?}, {} frames",
        read.worst_gap,
        read.worst_at,
        watch_to_outage,
        read.advances,
        read.failures.len(),
        read.failures.first(),
        seen.worst_gap,
        seen.advances
    );
    assert!(read.failures.is_empty(), "the signed playlist failed {} times", read.failures.len());
    assert!(read.worst_gap <= MAX_GAP, "the signed playlist stood still for {:?}", read.worst_gap);
    assert!(seen.worst_gap <= MAX_GAP, "the WHEP viewer went {:?} without a frame", seen.worst_gap);

    // The next push of the stream whose end was written late goes live; still one ended.
    let _again = push(plain["ingestUrl"].as_str().expect("ingestUrl"));
    eventually("the next push live", Duration::from_secs(30), || async {
        (api.stream(&plain_id).await["status"] == "live").then_some(())
    })
    .await;
    assert_eq!(api.ended(&plain_id).await, 1);
}

/// A tmpfs of `mb` MiB mounted on a folder of its own (root only: CI runs as root), unmounted
/// when dropped: a disk the test can fill.
struct Tmpfs {
    path: std::path::PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mb: u32) -> Tmpfs {
        let parent = tempfile::tempdir().expect("tempdir");
        let path = parent.path().join("disk");
        std::fs::create_dir(&path).expect("mount point");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m,mode=0700"), "tmpfs"])
            .arg(&path)
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "mounting a tmpfs (this test needs root, as CI has): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { path, _parent: parent }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Writes a file in `dir` until its disk is full; returns its path.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let filler = dir.join("filler");
    let mut file = std::fs::File::create(&filler).expect("filler");
    let chunk = vec![0u8; 256 * 1024];
    loop {
        match file.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    filler
}

/// Files named `*.m4s` under `dir`.
fn media_files(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => media_files(&e.path()),
            _ => usize::from(e.path().extension().is_some_and(|x| x == "m4s")),
        })
        .sum()
}

/// The data dir (SQLite, DVR, recordings, uploads) on a disk that fills up mid-push: live
/// viewers see no gap; reads answer; writes answer 507 within 10 s; a tus upload chunk 507
/// too; once space is freed everything resumes (writes, DVR, the recording completes) and
/// SQLite passes `integrity_check`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_costs_live_viewers_nothing_and_writes_answer_507() {
    let disk = Tmpfs::mount(96);
    let data = disk.path.join("data");
    let (http, rtmp) = (free_port(), free_port());
    let database = format!("sqlite://{}", data.join("sluice.db").display());
    let key = bootstrap_key(sluice_on(&data, &database, http));
    let mut serve = sluice_on(&data, &database, http);
    serve.env("SLUICE_RTMP_ADDR", format!("127.0.0.1:{rtmp}"));
    let (mut server, _log) = serve_logged(serve, http, "faults-disk").await;
    let client = Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
    let api = Api { client: client.clone(), base: format!("http://127.0.0.1:{http}/v1/projects/demo"), key };

    let stream = api
        .create(json!({"name": "full", "protocols": ["llhls"], "qualities": ["240p"], "vodEnabled": true,
                       "dvrEnabled": true}))
        .await;
    let id = stream["_id"].as_str().expect("id").to_string();
    let pusher = push(stream["ingestUrl"].as_str().expect("ingestUrl"));
    eventually("the stream live", Duration::from_secs(30), || async {
        (api.stream(&id).await["status"] == "live").then_some(())
    })
    .await;
    let master_url = stream["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let master = eventually("the master playlist", Duration::from_secs(20), || async {
        let resp = client.get(&master_url).send().await.ok()?;
        (resp.status() == 200).then_some(())?;
        resp.text().await.ok()
    })
    .await;
    let run = Arc::new(AtomicBool::new(true));
    let reader = read_playlist(client.clone(), first_variant(&master_url, &master), run.clone());
    eventually("DVR segments on disk", Duration::from_secs(30), || async {
        (media_files(&data) >= 4).then_some(())
    })
    .await;
    // An upload waiting for its bytes.
    let vod: Value = client
        .post(format!("{}/vod", api.base))
        .bearer_auth(&api.key)
        .json(&json!({"name": "upload", "filename": "upload.mp4"}))
        .send()
        .await
        .expect("create VOD")
        .json()
        .await
        .expect("json");
    let upload_url =
        vod["upload"]["url"].as_str().unwrap_or_else(|| panic!("an upload URL: {vod}")).to_string();

    // Full.
    let filler = tokio::task::spawn_blocking({
        let dir = disk.path.clone();
        move || fill(&dir)
    })
    .await
    .expect("filled");
    let full = Instant::now();
    let (mut created, mut slowest) = (0, Duration::ZERO);
    let refused = loop {
        let started = Instant::now();
        let resp = client
            .post(format!("{}/streams", api.base))
            .bearer_auth(&api.key)
            .json(&json!({"name": format!("w{created}")}))
            .send()
            .await
            .expect("create");
        slowest = slowest.max(started.elapsed());
        assert!(started.elapsed() <= WITHIN, "a write on a full disk answered after {:?}", started.elapsed());
        match resp.status().as_u16() {
            201 => created += 1,
            507 => break resp.json::<Value>().await.expect("a JSON error"),
            other => {
                panic!("a write on a full disk answered {other}: {}", resp.text().await.unwrap_or_default())
            }
        }
        assert!(created < 5000, "5,000 streams created on a full disk");
    };
    assert_eq!(refused["statusCode"], 507, "{refused}");
    assert_eq!(api.get("/streams?limit=1").await.status(), 200, "reads answer on a full disk");
    let chunk = client.put(&upload_url).body(vec![7u8; 4 * 1024 * 1024]).send().await.expect("upload");
    assert_eq!(chunk.status(), 507, "an upload chunk on a full disk");
    // Some seconds of live on the full disk.
    tokio::time::sleep_until((full + Duration::from_secs(15)).into()).await;

    // Freed: everything resumes.
    std::fs::remove_file(&filler).expect("free the disk");
    let freed = Instant::now();
    let on_disk = media_files(&data);
    eventually("a write accepted once space is back", WITHIN, || async {
        let resp = client
            .post(format!("{}/streams", api.base))
            .bearer_auth(&api.key)
            .json(&json!({"name": "after"}))
            .send()
            .await
            .ok()?;
        (resp.status() == 201).then_some(())
    })
    .await;
    let resumed = freed.elapsed();
    eventually("DVR segments written again", Duration::from_secs(20), || async {
        (media_files(&data) > on_disk + 2).then_some(())
    })
    .await;
    run.store(false, Ordering::Relaxed);
    let read = reader.await.expect("reader");
    drop(pusher);
    let vod = eventually("the recording complete", Duration::from_secs(60), || async {
        let page: Value = api.get(&format!("/vod?streamId={id}")).await.json().await.ok()?;
        page["items"].as_array()?.iter().find(|v| v["status"] == "complete").cloned()
    })
    .await;
    // What the full disk did not take is a gap where it was, and the VOD says how much.
    let error = vod["error"].as_str().unwrap_or_else(|| panic!("the VOD says what was lost: {vod}"));
    assert!(error.contains("were lost"), "{error}");
    let vod_master_url = vod["playbackUrl"].as_str().expect("playbackUrl").to_string();
    let vod_master = client.get(&vod_master_url).send().await.expect("master").text().await.expect("text");
    let variant = first_variant(&vod_master_url, &vod_master);
    let media = client.get(&variant).send().await.expect("variant").text().await.expect("text");
    let (gaps, segments) = (media.matches("#EXT-X-GAP").count(), media.matches("#EXTINF").count());
    assert!(gaps > 0 && gaps < segments, "{gaps} gaps of {segments} segments:\n{media}");
    println!(
        "disk full: {created} writes taken before the first 507 (slowest answer {slowest:?}); writes resumed \
         {resumed:?} after space was freed; the recording: {gaps} gaps of {segments} segments ({error}); \
         LL-HLS worst gap {:?}, {} advances, {} failed requests",
        read.worst_gap,
        read.advances,
        read.failures.len()
    );
    assert!(
        read.failures.is_empty(),
        "the playlist failed {} times: {:?}",
        read.failures.len(),
        read.failures.first()
    );
    assert!(read.worst_gap <= MAX_GAP, "the playlist stood still for {:?}", read.worst_gap);

    // The database is whole.
    let _ = server.0.kill();
    let _ = server.0.wait();
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(&database).await.expect("open the database");
    let check: (String,) =
        sqlx::query_as("PRAGMA integrity_check").fetch_one(&mut conn).await.expect("check");
    assert_eq!(check.0, "ok");
}
