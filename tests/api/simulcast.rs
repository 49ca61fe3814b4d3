//! Simulcast (CONTRACT: Simulcast) on the real binary: one push to Sluice goes on, as the
//! publisher sent it, to a second `sluice serve` over RTMP, to nginx's rtmp module and to an SRT
//! listener (ffmpeg); a target stopped and started again is live again within its backoff;
//! targets that hang, reset, answer garbage or do not resolve show `error` while a good target
//! and the push's LL-HLS parts carry on; deleting the stream ends every connection at once; and
//! bad input is refused naming the field.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::player::{longest_hold, one_watcher_at_a_time, Player};
use crate::support::{clip, eventually, free_port, push_file, Killed, Sluice};

/// The wall clock in ms (the page's `Date.now()` is on the same clock).
fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// The publisher: a 320×240 30 fps H.264 (no B-frames) + AAC file, sent as it is, looping. Its
/// frames are all different (testsrc's counter), so a copy is checked frame by frame.
const SOURCE: &str = "vod-testsrc-320x240-30fps-10s.mp4";

/// nginx with the rtmp module on a free port (`application live`), until dropped.
pub struct NginxRtmp {
    proc: Killed,
    port: u16,
    dir: PathBuf,
}

impl NginxRtmp {
    pub fn start(dir: &Path, port: u16) -> NginxRtmp {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;\ndaemon off;\nworker_processes 1;\n\
                 pid {pid};\nerror_log {log} warn;\nevents {{ worker_connections 64; }}\n\
                 rtmp {{ server {{ listen 127.0.0.1:{port}; application live {{ live on; record off; }} }} }}\n",
                pid = dir.join("nginx.pid").display(),
                log = dir.join("nginx.log").display(),
            ),
        )
        .expect("nginx.conf");
        let proc = Killed(
            Command::new("nginx")
                .arg("-c")
                .arg(&conf)
                .arg("-p")
                .arg(dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nginx runs (scripts/deps.sh test installs it with its rtmp module)"),
        );
        let until = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "nginx listens on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        NginxRtmp { proc, port, dir: dir.to_path_buf() }
    }

    pub fn url(&self) -> String {
        format!("rtmp://127.0.0.1:{}/live/simulcast-key", self.port)
    }
}

impl Drop for NginxRtmp {
    fn drop(&mut self) {
        // The master's workers outlive a killed master: stop them the way nginx is stopped.
        let _ = Command::new("nginx")
            .arg("-c")
            .arg(self.dir.join("nginx.conf"))
            .arg("-p")
            .arg(&self.dir)
            .args(["-s", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.proc.0.wait();
    }
}

/// An SRT listener (ffmpeg) on `port` writing what it receives, as sent, to `out`; it ends when
/// the caller's connection ends.
fn srt_listener(port: u16, out: &Path) -> Killed {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-loglevel", "error", "-y", "-i"])
        .arg(format!("srt://127.0.0.1:{port}?mode=listener"))
        .args(["-map", "0", "-c", "copy"]);
    cmd.args(["-f", "mpegts"]).arg(out).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    Killed(cmd.spawn().expect("ffmpeg runs"))
}

/// ffprobe's `codec_name,codec_type[,width,height]` of each stream of `url`, sorted.
fn probe(url: &str) -> Vec<String> {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-rw_timeout", "10000000", "-show_entries"])
        .args(["stream=codec_type,codec_name,width,height", "-of", "csv=p=0", url])
        .output()
        .expect("ffprobe runs");
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().trim_end_matches(',').to_string())
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort();
    lines.dedup();
    lines
}

/// The MD5 of each decoded video frame of `file`, in order.
fn frame_md5s(file: &Path) -> Vec<String> {
    let out = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(file)
        .args(["-map", "0:v:0", "-f", "framemd5", "-"])
        .output()
        .expect("ffmpeg runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit(',').next().map(|m| m.trim().to_string()))
        .collect()
}

async fn api(s: &Sluice, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = s.client.request(method, format!("{}{path}", s.api)).bearer_auth(&s.key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn add_target(s: &Sluice, stream: &str, url: &str, name: &str) -> String {
    let (status, body) = api(
        s,
        reqwest::Method::POST,
        &format!("/streams/{stream}/simulcast-targets"),
        Some(json!({"url": url, "name": name})),
    )
    .await;
    assert_eq!(status, 201, "{name}: {body}");
    body["_id"].as_str().expect("target id").to_string()
}

async fn targets(s: &Sluice, stream: &str) -> Vec<Value> {
    let (status, body) =
        api(s, reqwest::Method::GET, &format!("/streams/{stream}/simulcast-targets"), None).await;
    assert_eq!(status, 200, "{body}");
    body["items"].as_array().cloned().unwrap_or_default()
}

/// The target named `name` once `ok` holds of it.
async fn target_when(
    s: &Sluice,
    stream: &str,
    name: &str,
    what: &str,
    within: Duration,
    ok: fn(&Value) -> bool,
) -> Value {
    eventually(&format!("{name}: {what}"), within, || async {
        targets(s, stream).await.into_iter().find(|t| t["name"] == name).filter(ok)
    })
    .await
}

fn is_live(t: &Value) -> bool {
    t["status"] == "live" && t["bytesSent"].as_i64().unwrap_or(0) > 0 && t["connectedAt"].is_string()
}

fn is_error(t: &Value) -> bool {
    t["status"] == "error" && t["lastError"].as_str().is_some_and(|e| !e.is_empty())
}

async fn stream_of(s: &Sluice, id: &str) -> Value {
    api(s, reqwest::Method::GET, &format!("/streams/{id}"), None).await.1
}

async fn live_stream(s: &Sluice, name: &str) -> (String, Value) {
    // Without a reconnect window: a push that ends ends the stream's live at once.
    let body = json!({"name": name, "qualities": ["240p"], "vodEnabled": false, "reconnectWindow": 0});
    let created = s.create_stream(body).await;
    let id = created["_id"].as_str().unwrap_or_else(|| panic!("stream: {created}")).to_string();
    (id, created)
}

/// One push, three targets: a second Sluice (RTMP), nginx (RTMP) and an SRT listener each
/// receive the publisher's own H.264 and AAC at its size, the SRT copy frame for frame; nginx
/// stopped for 10 s and started again is live again within the backoff; DELETE of the stream
/// ends every target's connection at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_targets_receive_the_publishers_own_media() {
    let origin = Sluice::start(&[]).await;
    let second = Sluice::start(&[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let nginx_port = free_port();
    let mut nginx = Some(NginxRtmp::start(dir.path(), nginx_port));
    let nginx_url = nginx.as_ref().map(NginxRtmp::url).expect("nginx");
    let srt_port = free_port();
    let copy = dir.path().join("copy.ts");
    let mut listener = srt_listener(srt_port, &copy);

    let (second_id, second_stream) = live_stream(&second, "downstream").await;
    let second_url = second_stream["ingestUrl"].as_str().expect("ingestUrl").to_string();
    let (id, created) = live_stream(&origin, "simulcast").await;
    add_target(&origin, &id, &second_url, "second sluice").await;
    add_target(&origin, &id, &nginx_url, "nginx").await;
    add_target(&origin, &id, &format!("srt://127.0.0.1:{srt_port}?latency=120"), "srt").await;
    let listed = targets(&origin, &id).await;
    assert_eq!(listed.len(), 3, "{listed:?}");
    for t in &listed {
        assert_eq!(t["status"], "idle", "a target of a stream not live is idle: {t}");
        let url = t["url"].as_str().expect("url");
        assert!(!url.contains("simulcast-key") && !url.contains("pass="), "masked: {url}");
    }

    let source = clip(SOURCE);
    let ingest = created["ingestUrl"].as_str().expect("ingestUrl");
    let _publisher = push_file(&source, ingest);
    for name in ["second sluice", "nginx", "srt"] {
        let t = target_when(&origin, &id, name, "live", Duration::from_secs(30), is_live).await;
        println!("{name}: {t}");
    }

    // `/metrics` counts them and their bytes.
    let metrics = eventually("/metrics with three live targets", Duration::from_secs(10), || async {
        let text = origin
            .client
            .get(format!("http://127.0.0.1:{}/metrics", origin.http))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.contains("sluice_simulcast_targets{status=\"live\"} 3").then_some(text)
    })
    .await;
    let sent: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("sluice_simulcast_bytes_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("sluice_simulcast_bytes_total");
    assert!(sent > 0, "sluice_simulcast_bytes_total {sent}");

    // The second Sluice reads the publisher's codecs and size off its input.
    let input =
        eventually("the second Sluice live with the input known", Duration::from_secs(20), || async {
            let v = stream_of(&second, &second_id).await;
            (v["status"] == "live" && v["input"]["audioCodec"].is_string()).then(|| v["input"].clone())
        })
        .await;
    assert_eq!(
        (&input["videoCodec"], &input["width"], &input["height"], &input["audioCodec"]),
        (&json!("h264"), &json!(320), &json!(240), &json!("aac")),
        "the second Sluice's input: {input}"
    );
    // nginx plays it on.
    let at_nginx = probe(&nginx_url);
    assert_eq!(at_nginx, ["aac,audio", "h264,video,320,240"], "ffprobe at nginx");
    // The SRT listener's copy, once it holds 5 s: the publisher's frames, bit for bit once
    // decoded (but for the last few, which the listener may be writing).
    let snapshot = dir.path().join("snapshot.ts");
    let copied = eventually("5 s at the SRT listener", Duration::from_secs(20), || async {
        std::fs::copy(&copy, &snapshot).ok()?;
        let mut md5s = frame_md5s(&snapshot);
        (md5s.len() >= 150).then(|| {
            md5s.truncate(md5s.len() - 3);
            md5s
        })
    })
    .await;
    let at_srt = probe(snapshot.to_str().expect("path"));
    assert_eq!(at_srt, ["aac,audio", "h264,video,320,240"], "ffprobe of the SRT copy");
    let published: HashSet<String> = frame_md5s(&source).into_iter().collect();
    assert_eq!(published.len(), 300, "the source's frames are all different");
    let foreign = copied.iter().filter(|m| !published.contains(*m)).count();
    assert_eq!(
        foreign,
        0,
        "{foreign} of the {} frames at the SRT target are not the publisher's",
        copied.len()
    );

    // nginx stopped for 10 s: the target shows why; started again, it is live again within
    // the backoff then in force (at most 8 s after 10 s of failures) and a connection's time.
    let bytes_before = target_when(&origin, &id, "nginx", "live", Duration::from_secs(5), is_live).await
        ["bytesSent"]
        .as_i64()
        .unwrap_or(0);
    nginx.take();
    let failed = target_when(&origin, &id, "nginx", "error", Duration::from_secs(15), is_error).await;
    println!("nginx stopped: {}", failed["lastError"]);
    let stopped_at = Instant::now();
    while stopped_at.elapsed() < Duration::from_secs(10) {
        let t: Vec<Value> = targets(&origin, &id).await;
        let second = t.iter().find(|t| t["name"] == "second sluice").expect("second");
        assert!(is_live(second), "the other targets stay live: {second}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let dir2 = tempfile::tempdir().expect("tempdir");
    let back = NginxRtmp::start(dir2.path(), nginx_port);
    let restarted = Instant::now();
    let again = target_when(&origin, &id, "nginx", "live again", Duration::from_secs(14), |t| {
        is_live(t) && t["lastError"].is_string()
    })
    .await;
    println!("nginx live again {:.1} s after it was started: {again}", restarted.elapsed().as_secs_f64());
    assert!(again["bytesSent"].as_i64().unwrap_or(0) > 0 && bytes_before > 0);
    let at_nginx = probe(&back.url());
    assert_eq!(at_nginx, ["aac,audio", "h264,video,320,240"], "ffprobe at nginx again");

    // DELETE of the stream ends every target's connection at once: the second Sluice's push
    // ends (a clean unpublish) and the SRT listener's input ends.
    assert!(listener.running(), "the SRT listener still receives");
    let (status, body) = api(&origin, reqwest::Method::DELETE, &format!("/streams/{id}"), None).await;
    assert!(status == 204 || status == 200, "delete: {status} {body}");
    let deleted = Instant::now();
    eventually("the second Sluice's push ended", Duration::from_secs(5), || async {
        (stream_of(&second, &second_id).await["status"] != "live").then_some(())
    })
    .await;
    println!("the second Sluice's push ended {:.2} s after DELETE", deleted.elapsed().as_secs_f64());
    listener.exits(Duration::from_secs(5)).await;
    println!("every target's connection ended {:.2} s after DELETE", deleted.elapsed().as_secs_f64());
}

/// A TCP server on a free port that treats each connection as `kind` says, until dropped.
struct BadServer {
    port: u16,
    stop: Arc<AtomicBool>,
}

#[derive(Clone, Copy)]
enum Bad {
    /// Accepts and never reads.
    BlackHole,
    /// Accepts and resets at once.
    Reset,
    /// Answers garbage to everything.
    Garbage,
}

impl BadServer {
    fn start(kind: Bad) -> BadServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut conn, _)) => match kind {
                        Bad::BlackHole => held.push(conn),
                        Bad::Reset => {
                            // Closed with the client's handshake unread: the kernel answers
                            // with a reset.
                            std::thread::sleep(Duration::from_millis(100));
                            drop(conn);
                        }
                        Bad::Garbage => {
                            std::thread::spawn(move || {
                                let _ = conn.set_read_timeout(Some(Duration::from_secs(60)));
                                let mut buf = [0u8; 4096];
                                let noise: Vec<u8> = (0..4096u32)
                                    .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                                    .collect();
                                while let Ok(n) = conn.read(&mut buf) {
                                    if n == 0 || conn.write_all(&noise).is_err() {
                                        break;
                                    }
                                }
                            });
                        }
                    },
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        BadServer { port, stop }
    }
}

impl Drop for BadServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The media playlist of the first rendition of the stream's LL-HLS.
async fn media_playlist(s: &Sluice, stream: &Value) -> String {
    let master = stream["playbackUrls"]["hls"].as_str().expect("hls URL").to_string();
    let text = eventually("the master playlist", Duration::from_secs(30), || async {
        let r = s.client.get(&master).send().await.ok()?;
        if r.status() != 200 {
            return None;
        }
        r.text().await.ok()
    })
    .await;
    let uri = text.lines().find(|l| !l.starts_with('#') && !l.trim().is_empty()).expect("a variant");
    let base = master.rsplit_once('/').map(|(b, _)| b).expect("base");
    format!("{base}/{uri}")
}

/// The median part latency over `secs`: how long after the wall-clock end of a part (its
/// segment's PROGRAM-DATE-TIME plus the parts before it) a blocking reload hands it out, in ms.
async fn part_latency(s: &Sluice, media: &str, secs: u64) -> f64 {
    use crate::support::llhls_check::parse;
    let mut samples = Vec::new();
    let mut url = media.to_string();
    let until = Instant::now() + Duration::from_secs(secs);
    let sep = if media.contains('?') { '&' } else { '?' };
    while Instant::now() < until {
        let Ok(resp) = s.client.get(&url).send().await else { continue };
        let text = resp.text().await.unwrap_or_default();
        let now = now_ms();
        let Ok(p) = parse(&text) else { continue };
        // From the last segment with a date, add every duration up to the newest part.
        let Some(dated) = p.segments.iter().rposition(|seg| seg.pdt.is_some()) else { continue };
        let mut end = p.segments[dated].pdt.unwrap_or(0) as f64;
        for seg in &p.segments[dated..] {
            end += if seg.uri.is_some() { seg.duration } else { seg.parts.iter().map(|x| x.duration).sum() }
                * 1000.0;
        }
        if url != media {
            samples.push(now - end);
        }
        let Some((msn, part)) = crate::support::next_part(&text) else { continue };
        url = format!("{media}{sep}_HLS_msn={msn}&_HLS_part={part}");
    }
    assert!(samples.len() > secs as usize, "{} blocking reloads in {secs} s", samples.len());
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

/// Targets that hang, reset, answer garbage or whose name does not resolve each show `error`
/// with a reason a person reads; the push, a good target, an hls.js viewer and the LL-HLS part
/// latency carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_targets_show_error_and_touch_nothing_else() {
    let origin = Sluice::start(&[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let nginx = NginxRtmp::start(dir.path(), free_port());
    let (id, created) = live_stream(&origin, "failing targets").await;
    add_target(&origin, &id, &nginx.url(), "nginx").await;
    let _publisher = push_file(&clip(SOURCE), created["ingestUrl"].as_str().expect("ingestUrl"));
    target_when(&origin, &id, "nginx", "live", Duration::from_secs(30), is_live).await;
    let media = media_playlist(&origin, &created).await;
    let alone = part_latency(&origin, &media, 12).await;
    // An hls.js viewer, playing before the failing targets come.
    let _turn = one_watcher_at_a_time().await;
    let master = created["playbackUrls"]["hls"].as_str().expect("hls URL");
    let viewer = Player::start(master).await;
    viewer.wait_played("hls.js plays", 4.0, |_| true).await;
    let since = now_ms();

    let hole = BadServer::start(Bad::BlackHole);
    let reset = BadServer::start(Bad::Reset);
    let garbage = BadServer::start(Bad::Garbage);
    add_target(&origin, &id, &format!("rtmp://127.0.0.1:{}/live/key1", hole.port), "black hole").await;
    add_target(&origin, &id, &format!("rtmp://127.0.0.1:{}/live/key2", reset.port), "reset").await;
    add_target(&origin, &id, &format!("rtmp://127.0.0.1:{}/live/key3", garbage.port), "garbage").await;
    add_target(&origin, &id, "rtmp://no-such-host.invalid/live/key4", "no dns").await;
    let with_bad = part_latency(&origin, &media, 12).await;
    for name in ["black hole", "reset", "garbage", "no dns"] {
        let t = target_when(&origin, &id, name, "error", Duration::from_secs(30), is_error).await;
        println!("{name}: {}", t["lastError"]);
    }
    // One `stream.simulcast.error` per failing target (not one per retry), one `live` for nginx.
    let events = |kind: &'static str| {
        let (origin, id) = (&origin, id.clone());
        async move {
            let (status, page) =
                api(origin, reqwest::Method::GET, &format!("/events?type={kind}&limit=100"), None).await;
            assert_eq!(status, 200, "{page}");
            let items = page["items"].as_array().cloned().unwrap_or_default();
            items
                .into_iter()
                .filter(|e| e["data"]["id"] == id.as_str())
                .map(|e| e["data"]["target"]["name"].clone())
                .collect::<Vec<_>>()
        }
    };
    let failed = eventually("an error event of each failing target", Duration::from_secs(10), || async {
        let mut failed = events("stream.simulcast.error").await;
        failed.sort_by_key(|v| v.to_string());
        (failed.len() >= 4).then_some(failed)
    })
    .await;
    assert_eq!(
        failed,
        [json!("black hole"), json!("garbage"), json!("no dns"), json!("reset")],
        "error events"
    );
    assert_eq!(events("stream.simulcast.live").await, [json!("nginx")], "live events");

    let all = targets(&origin, &id).await;
    let good = all.iter().find(|t| t["name"] == "nginx").expect("nginx");
    assert!(is_live(good), "the good target stays live: {good}");
    assert_eq!(stream_of(&origin, &id).await["status"], "live");
    assert_eq!(probe(&nginx.url()), ["aac,audio", "h264,video,320,240"], "ffprobe at nginx");
    let reports = viewer.reports();
    let last = reports.last().expect("reports");
    let (hold, at) = longest_hold(&reports, since, last.t);
    let fatal: Vec<&String> = reports.iter().flat_map(|r| r.fatal_errors()).collect();
    println!(
        "hls.js with four failing targets: longest hold {hold:.2} s (at {at}), latency {:?} s",
        last.latency
    );
    assert!(fatal.is_empty(), "hls.js errors: {fatal:?}");
    assert!(hold < 0.5, "hls.js held {hold:.2} s while the targets failed");
    println!("part latency: {alone:.0} ms alone, {with_bad:.0} ms with four failing targets");
    assert!(
        (with_bad - alone).abs() <= 50.0,
        "part latency moved by more than 50 ms: {alone:.0} → {with_bad:.0} ms"
    );
}

/// Bad input is refused naming the field; an 11th target is refused; a target of an unknown
/// stream is 404; PATCH renames and disables; DELETE removes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_targets_are_refused_naming_the_field() {
    let s = Sluice::start(&[]).await;
    let (id, _) = live_stream(&s, "limits").await;
    let path = format!("/streams/{id}/simulcast-targets");
    for (url, says) in [
        ("http://example.com/live/key", "scheme"),
        ("rtmp://example.com/live", "stream key"),
        ("rtmp://example.com:70000/live/key", "port"),
        ("srt://example.com", "port"),
        ("srt://example.com:9000?passphrase=short", "passphrase"),
        ("srt://example.com:9000?latency=5", "latency"),
        ("srt://example.com:9000?mode=listener", "mode"),
        ("rtmp://user:pw@example.com/live/key", "credentials"),
    ] {
        let (status, body) = api(&s, reqwest::Method::POST, &path, Some(json!({"url": url}))).await;
        assert_eq!(status, 400, "{url}: {body}");
        let text = body.to_string();
        assert!(text.contains("url") && text.contains(says), "{url}: {text}");
    }
    let (status, body) =
        api(&s, reqwest::Method::POST, &path, Some(json!({"url": "rtmp://a.example/live/k", "name": ""})))
            .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("name"), "{body}");
    let (status, _) = api(
        &s,
        reqwest::Method::POST,
        "/streams/nosuchstream/simulcast-targets",
        Some(json!({"url": "rtmp://a.example/live/k"})),
    )
    .await;
    assert_eq!(status, 404);

    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(
            add_target(&s, &id, &format!("rtmp://a.example/live/key-number-{n}"), &format!("t{n}")).await,
        );
    }
    let (status, body) =
        api(&s, reqwest::Method::POST, &path, Some(json!({"url": "rtmp://a.example/live/k11"}))).await;
    assert_eq!(status, 409, "an 11th target: {body}");
    assert!(body.to_string().contains("10"), "{body}");

    let listed = targets(&s, &id).await;
    assert_eq!(listed.len(), 10);
    assert_eq!(listed[0]["url"], "rtmp://a.example:1935/live/key-****", "masked: {}", listed[0]);
    let (status, body) = api(
        &s,
        reqwest::Method::PATCH,
        &format!("{path}/{}", ids[0]),
        Some(json!({"name": "renamed", "enabled": false})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((&body["name"], &body["enabled"]), (&json!("renamed"), &json!(false)));
    let (status, _) = api(&s, reqwest::Method::DELETE, &format!("{path}/{}", ids[1]), None).await;
    assert_eq!(status, 204);
    let (status, _) = api(&s, reqwest::Method::DELETE, &format!("{path}/{}", ids[1]), None).await;
    assert_eq!(status, 404);
    assert_eq!(targets(&s, &id).await.len(), 9);
}

/// The publisher away and back within the stream's reconnect window: the target keeps its
/// connection (the same `connectedAt`, bytes still flowing) and still plays the publisher's
/// video afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_reconnect_keeps_the_targets_connection() {
    let origin = Sluice::start(&[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let nginx = NginxRtmp::start(dir.path(), free_port());
    let created = origin
        .create_stream(
            json!({"name": "reconnects", "qualities": ["240p"], "vodEnabled": false, "reconnectWindow": 10}),
        )
        .await;
    let id = created["_id"].as_str().expect("id").to_string();
    let ingest = created["ingestUrl"].as_str().expect("ingestUrl").to_string();
    add_target(&origin, &id, &nginx.url(), "nginx").await;
    let publisher = push_file(&clip(SOURCE), &ingest);
    let before = target_when(&origin, &id, "nginx", "live with 100 kB sent", Duration::from_secs(30), |t| {
        is_live(t) && t["bytesSent"].as_i64().unwrap_or(0) > 100_000
    })
    .await;
    drop(publisher);
    // Away long enough for the slate to come on, back well within the window.
    eventually("the slate on", Duration::from_secs(10), || async {
        (stream_of(&origin, &id).await["input"]["active"] == "slate").then_some(())
    })
    .await;
    // The target gets the slate meanwhile.
    let at_slate = targets(&origin, &id).await[0]["bytesSent"].as_i64().unwrap_or(0);
    eventually("the slate sent on to the target", Duration::from_secs(6), || async {
        (targets(&origin, &id).await[0]["bytesSent"].as_i64().unwrap_or(0) > at_slate).then_some(())
    })
    .await;
    let _back = push_file(&clip(SOURCE), &ingest);
    eventually("the publisher back", Duration::from_secs(20), || async {
        (stream_of(&origin, &id).await["input"]["active"] == "primary").then_some(())
    })
    .await;
    let bytes_back = targets(&origin, &id).await[0]["bytesSent"].as_i64().unwrap_or(0);
    let after = eventually("bytes still flowing to the target", Duration::from_secs(10), || async {
        targets(&origin, &id).await.into_iter().find(|t| t["bytesSent"].as_i64().unwrap_or(0) > bytes_back)
    })
    .await;
    assert!(is_live(&after), "{after}");
    assert_eq!(after["connectedAt"], before["connectedAt"], "one connection across the reconnect: {after}");
    assert_eq!(
        probe(&nginx.url()),
        ["aac,audio", "h264,video,320,240"],
        "ffprobe at nginx after the reconnect"
    );
}

/// An RTMPS target verifies the server's certificate: one signed by no CA the system trusts
/// (a Sluice serving RTMPS with a self-signed certificate) is refused, and the target says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rtmps_target_with_an_untrusted_certificate_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tls, _) = crate::tls::spawn_tls(dir.path()).await;
    let rtmps = tls.app.rtmps_addr().expect("RTMPS listens");
    let origin = Sluice::start(&[]).await;
    let (id, created) = live_stream(&origin, "rtmps").await;
    add_target(&origin, &id, &format!("rtmps://127.0.0.1:{}/live/some-key", rtmps.port()), "self-signed")
        .await;
    let _publisher = push_file(&clip(SOURCE), created["ingestUrl"].as_str().expect("ingestUrl"));
    let t = target_when(&origin, &id, "self-signed", "error", Duration::from_secs(30), is_error).await;
    let why = t["lastError"].as_str().unwrap_or_default().to_lowercase();
    println!("self-signed: {why}");
    assert!(why.contains("certificate") || why.contains("tls"), "the reason names the certificate: {why}");
    assert_eq!(t["bytesSent"], 0, "nothing sent: {t}");
}

/// In production mode a target on a loopback, private or link-local address, or whose name
/// resolves to one, is refused naming `url` (SSRF, as for webhooks); a public address is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn production_refuses_targets_inside_the_network() {
    let s = Sluice::start(&[("SLUICE_MODE", "production".to_string())]).await;
    let (id, _) = live_stream(&s, "ssrf").await;
    let path = format!("/streams/{id}/simulcast-targets");
    for url in [
        "rtmp://127.0.0.1/live/key",
        "rtmp://10.1.2.3:1935/live/key",
        "rtmps://[::1]/live/key",
        "srt://169.254.169.254:9000",
        "rtmp://localhost/live/key",
    ] {
        let (status, body) = api(&s, reqwest::Method::POST, &path, Some(json!({"url": url}))).await;
        assert_eq!(status, 400, "{url}: {body}");
        let text = body.to_string();
        assert!(
            text.contains("url") && (text.contains("loopback") || text.contains("resolve")),
            "{url}: {text}"
        );
    }
    let (status, body) =
        api(&s, reqwest::Method::POST, &path, Some(json!({"url": "rtmp://8.8.8.8/live/key"}))).await;
    assert_eq!(status, 201, "a public address: {body}");
}
