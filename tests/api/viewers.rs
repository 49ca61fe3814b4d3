//! Viewer counts (CONTRACT: Viewers) on the real binary: 20 HLS playback sessions (hls.js in
//! Chromium, ffmpeg, and plain playlist followers), 3 WHEP viewers and 2 RTSP clients of one
//! live push are counted exactly through the API and `/metrics`; a forged, replayed or invented
//! `vs=` (2,000 of them at once) adds nothing; when all leave the count falls to 0; the peak stays on the stream and on its
//! recording; the recording played twice counts two views and the time played.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::player::Player;
use crate::support::webrtc::WhepViewer;
use crate::support::{eventually, ffmpeg_push, spawn_app, Backend, Killed, TestApp};

/// Plain HLS followers: fetch the master (a new session), then reload its first media playlist
/// every second, as a player does.
const FOLLOWERS: usize = 17;
const FFMPEG_READERS: usize = 2;
const WHEP_VIEWERS: usize = 3;
const RTSP_CLIENTS: usize = 2;
const HLS: usize = FOLLOWERS + FFMPEG_READERS + 1;

async fn stream_record(t: &TestApp, id: &str) -> Value {
    t.get_with(&t.project_url(&format!("/streams/{id}")), &t.key).await.json().await.expect("json")
}

/// The first media playlist URL a master lists (with the session it carries).
async fn media_url(client: &reqwest::Client, master_url: &str) -> Option<reqwest::Url> {
    let master = client.get(master_url).send().await.ok()?.error_for_status().ok()?.text().await.ok()?;
    let uri = master.lines().find(|l| !l.is_empty() && !l.starts_with('#'))?;
    reqwest::Url::parse(master_url).ok()?.join(uri).ok()
}

/// Reloads `url` every second until aborted.
fn follow(client: reqwest::Client, url: reqwest::Url) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let _ = client.get(url.clone()).send().await.and_then(|r| r.error_for_status());
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// `ffmpeg` reading `url` in real time, its output thrown away.
fn reader(url: &str, extra: &[&str]) -> Killed {
    let child = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-re"])
        .args(extra)
        .args(["-i", url, "-f", "null", "-"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ffmpeg runs");
    Killed(child)
}

/// What the API says of the stream's viewers: (viewers, viewerCounts, peakViewers).
async fn counts(t: &TestApp, id: &str) -> (u64, (u64, u64, u64), u64) {
    let v = stream_record(t, id).await;
    let c = &v["viewerCounts"];
    let n = |v: &Value| v.as_u64().unwrap_or(u64::MAX);
    (n(&v["viewers"]), (n(&c["hls"]), n(&c["webrtc"]), n(&c["rtsp"])), n(&v["peakViewers"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn viewers_are_counted_per_protocol_and_the_peak_is_kept() {
    // On Postgres, as a service of several nodes runs (the sums are its SQL too).
    let t = spawn_app(Backend::Postgres).await;
    let body = json!({"name": "watched", "protocols": ["llhls", "webrtc", "rtsp"], "qualities": ["240p"],
                      "vodEnabled": true});
    let resp = t.post_json_with(&t.project_url("/streams"), &t.key, &body).await;
    assert_eq!(resp.status(), 201);
    let stream: Value = resp.json().await.expect("json");
    let id = stream["_id"].as_str().expect("id").to_string();
    let urls = &stream["playbackUrls"];
    let (master_url, whep, rtsp) = (
        urls["hls"].as_str().expect("hls").to_string(),
        urls["webrtc"].as_str().expect("webrtc").to_string(),
        urls["rtsp"].as_str().expect("rtsp").to_string(),
    );
    assert_eq!(counts(&t, &id).await, (0, (0, 0, 0), 0), "an idle stream has no viewers");
    let pusher = ffmpeg_push(
        stream["ingestUrl"].as_str().expect("ingestUrl"),
        "testsrc2=size=640x360:rate=30",
        30,
        &["-b:v", "600k"],
    );
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
    let first = eventually("the master and its media playlist", Duration::from_secs(40), || {
        media_url(&client, &master_url)
    })
    .await;
    assert!(first.query().is_some_and(|q| q.contains("vs=")), "the master's URIs carry a session: {first}");

    // 20 HLS sessions: 17 followers (the first one's URL above among them), 2 ffmpeg, hls.js.
    let mut tasks = vec![follow(client.clone(), first.clone())];
    for _ in 1..FOLLOWERS {
        let url = media_url(&client, &master_url).await.expect("a media playlist");
        tasks.push(follow(client.clone(), url));
    }
    // A replayed session (another viewer's URL) and forged ones count nothing.
    tasks.push(follow(client.clone(), first.clone()));
    let mut forged = first.clone();
    let query = first.query().unwrap_or_default().to_string();
    let vs = query.split('&').find_map(|p| p.strip_prefix("vs=")).expect("vs").to_string();
    let flipped: String = vs
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i == 31 {
                if c == '0' {
                    '1'
                } else {
                    '0'
                }
            } else {
                c
            }
        })
        .collect();
    forged.set_query(Some(&query.replace(&vs, &flipped)));
    tasks.push(follow(client.clone(), forged));
    let mut invented = first.clone();
    invented.set_query(Some(&query.replace(&vs, "0123456789abcdef0123456789abcdef")));
    tasks.push(follow(client.clone(), invented));
    let mut readers: Vec<Killed> = (0..FFMPEG_READERS).map(|_| reader(&master_url, &[])).collect();
    let player = Player::start(&master_url).await;
    let mut whep_viewers = Vec::new();
    for _ in 0..WHEP_VIEWERS {
        whep_viewers.push(WhepViewer::play(&whep).await);
    }
    for _ in 0..RTSP_CLIENTS {
        readers.push(reader(&rtsp, &["-rtsp_transport", "tcp"]));
    }

    let all = (HLS + WHEP_VIEWERS + RTSP_CLIENTS) as u64;
    let expected = (all, (HLS as u64, WHEP_VIEWERS as u64, RTSP_CLIENTS as u64));
    let started = Instant::now();
    eventually("every viewer counted", Duration::from_secs(10), || async {
        let (n, by, _) = counts(&t, &id).await;
        ((n, by) == expected).then_some(())
    })
    .await;
    println!("all {all} viewers counted {:.1} s after the last joined", started.elapsed().as_secs_f64());
    // A flood of 2,000 invented sessions (20 clients at once): each reload is served, none is
    // counted (the count stays exact through the three reports below).
    let floods: Vec<_> = (0..20u64)
        .map(|worker| {
            let (client, first) = (client.clone(), first.clone());
            tokio::spawn(async move {
                for i in 0..100u64 {
                    let mut url = first.clone();
                    let n = worker * 100 + i;
                    url.set_query(Some(&format!(
                        "vs={:016x}{n:016x}",
                        n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    )));
                    let status = client.get(url).send().await.map(|r| r.status().as_u16()).unwrap_or(0);
                    assert_eq!(status, 200, "an invented session is still served");
                }
            })
        })
        .collect();
    for f in floods {
        f.await.expect("flood");
    }
    // Held for three reports more: the count stays exact.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (n, by, peak) = counts(&t, &id).await;
        assert_eq!((n, by), expected, "the count moved");
        assert_eq!(peak, all, "the peak");
    }
    let list: Value = t.get_with(&t.project_url("/streams"), &t.key).await.json().await.expect("json");
    let item = list["items"].as_array().and_then(|i| i.iter().find(|s| s["_id"] == id.as_str())).cloned();
    let item = item.expect("the stream in the list");
    assert_eq!((item["viewers"].as_u64(), item["peakViewers"].as_u64()), (Some(all), Some(all)));
    assert_eq!(item["viewerCounts"], json!({"hls": HLS, "webrtc": WHEP_VIEWERS, "rtsp": RTSP_CLIENTS}));
    let metrics = t.client.get(t.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    for (protocol, n) in [("hls", HLS), ("webrtc", WHEP_VIEWERS), ("rtsp", RTSP_CLIENTS)] {
        let line = format!("sluice_stream_viewers{{stream=\"{id}\",protocol=\"{protocol}\"}} {n}");
        assert!(metrics.lines().any(|l| l == line), "/metrics lacks {line}");
    }

    // Everyone leaves: 0 within 15 s.
    for task in &tasks {
        task.abort();
    }
    drop(readers);
    drop(player);
    // WHEP viewers hang up (DELETE), as a player page that is closed does.
    drop(whep_viewers);
    let left = Instant::now();
    eventually("no viewers left", Duration::from_secs(15), || async {
        let (n, _, peak) = counts(&t, &id).await;
        (n == 0 && peak == all).then_some(())
    })
    .await;
    println!("the count fell to 0 {:.1} s after all left", left.elapsed().as_secs_f64());

    // The push ends: its recording keeps the session's peak.
    drop(pusher);
    let vod = eventually("the recording complete", Duration::from_secs(60), || async {
        let v: Value =
            t.get_with(&t.project_url(&format!("/vod?streamId={id}")), &t.key).await.json().await.ok()?;
        v["items"].as_array()?.iter().find(|v| v["status"] == "complete").cloned()
    })
    .await;
    assert_eq!(vod["peakViewers"].as_u64(), Some(all), "the recording's peak: {vod}");
    assert_eq!((vod["views"].as_u64(), vod["watchSeconds"].as_f64()), (Some(0), Some(0.0)));
    assert_eq!(counts(&t, &id).await.2, all, "the stream keeps its last session's peak");

    // The recording played twice (ffmpeg reads it whole, one video rendition).
    let vod_id = vod["_id"].as_str().expect("vod id").to_string();
    let vod_master = vod["playbackUrl"].as_str().expect("playbackUrl").to_string();
    let duration = vod["duration"].as_f64().expect("duration");
    for _ in 0..2 {
        let url = vod_master.clone();
        let status = tokio::task::spawn_blocking(move || {
            Command::new("ffmpeg")
                .args(["-hide_banner", "-loglevel", "error", "-i", &url, "-f", "null", "-"])
                .status()
                .expect("ffmpeg runs")
        })
        .await
        .expect("ffmpeg thread");
        assert!(status.success(), "ffmpeg played the recording");
    }
    let played = 2.0 * duration;
    let until = Instant::now() + Duration::from_secs(15);
    let vod = loop {
        let v: Value =
            t.get_with(&t.project_url(&format!("/vod/{vod_id}")), &t.key).await.json().await.expect("json");
        let watched = v["watchSeconds"].as_f64().unwrap_or(-1.0);
        if v["views"] == 2 && (watched - played).abs() <= 0.1 * played {
            break v;
        }
        assert!(Instant::now() < until, "views and watch time of {played:.1} s played: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("VOD: views {}, watchSeconds {} for {played:.1} s played", vod["views"], vod["watchSeconds"]);
}
