//! SRT ingest with real clients: ffmpeg (libsrt) pushing MPEG-TS to `srtUrl` goes live, its
//! LL-HLS reads in ffprobe, the push ends on disconnect and on DELETE with the same events as
//! RTMP; a wrong or missing passphrase, an unknown key, rotated-away credentials, a disabled or
//! already live stream are refused in the handshake, without a session; hostile input (20,000
//! garbage and malformed control datagrams, random bytes over an authenticated session) leaves
//! ingest serving; the connection cap per address is shared with RTMP.

use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::receiver::Receiver;
use crate::support::{
    both_backends, eventually, ffmpeg_push, ffmpeg_push_ts, spawn_app, spawn_app_with, Backend, Killed,
    TestApp,
};
use crate::webhooks::create_webhook;

both_backends!(srt_push_goes_live_plays_and_ends, refused_srt_pushes_open_no_session);

/// The test suite's SRT publisher: 320×240 at 15 fps, a keyframe every 2 s, AAC, in MPEG-TS.
fn push(url: &str) -> Killed {
    ffmpeg_push_ts(url, "testsrc=size=320x240:rate=15", 30, &[])
}

async fn create_stream(app: &TestApp, name: &str) -> Value {
    let resp = app.post_json_with(&app.project_url("/streams"), &app.key, &json!({"name": name})).await;
    assert_eq!(resp.status(), 201);
    resp.json().await.expect("json")
}

async fn stream(app: &TestApp, id: &str) -> Value {
    app.get_with(&app.project_url(&format!("/streams/{id}")), &app.key).await.json().await.expect("json")
}

async fn wait_status(app: &TestApp, id: &str, want: &str, within: Duration) {
    eventually(&format!("status {want}"), within, || async {
        (stream(app, id).await["status"] == want).then_some(())
    })
    .await;
}

fn events_of(rx: &Receiver) -> Vec<(String, String)> {
    rx.received()
        .iter()
        .map(|r| {
            let b = r.json();
            (
                b["event"].as_str().unwrap_or_default().to_string(),
                b["data"]["id"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

async fn srt_sessions(app: &TestApp) -> Option<u64> {
    let text = app.client.get(app.url("/metrics")).send().await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix("sluice_srt_sessions ")).and_then(|v| v.trim().parse().ok())
}

fn srt_url(s: &Value) -> String {
    s["srtUrl"].as_str().expect("srtUrl").to_string()
}

/// ffprobe's reading of `url`: one `codec_type,codec_name` line per stream.
fn probe(url: &str) -> String {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "stream=codec_type,codec_name", "-of", "csv=p=0", url])
        .output()
        .expect("ffprobe runs");
    String::from_utf8_lossy(&out.stdout).to_string()
}

async fn srt_push_goes_live_plays_and_ends(app: TestApp) {
    let rx = Receiver::start().await;
    create_webhook(&app, &rx.url(), json!(["stream.live", "stream.ended"])).await;
    let s = create_stream(&app, "srt cam").await;
    let id = s["_id"].as_str().expect("id").to_string();
    let url = srt_url(&s);
    let port = app.app.srt_addr().expect("SRT listens").port();
    let key = s["streamKey"].as_str().expect("key");
    let password = s["pushPassword"].as_str().expect("password");
    assert_eq!(url, format!("srt://127.0.0.1:{port}?streamid=publish:{key}&passphrase={password}"));

    let mut pusher = push(&url);
    wait_status(&app, &id, "live", Duration::from_secs(20)).await;
    rx.wait_for(1, Duration::from_secs(10)).await;
    let input = eventually("the input format and bitrate", Duration::from_secs(20), || async {
        let input = stream(&app, &id).await["input"].clone();
        (input["bitrateKbps"].as_i64().is_some() && input["audioCodec"].is_string()).then_some(input)
    })
    .await;
    assert_eq!(input["videoCodec"], "h264");
    assert_eq!((input["width"].as_i64(), input["height"].as_i64()), (Some(320), Some(240)));
    assert_eq!((input["audioCodec"].as_str(), input["audioSampleRate"].as_i64()), (Some("aac"), Some(44100)));
    assert_eq!(srt_sessions(&app).await, Some(1));

    // The LL-HLS of the push reads in ffprobe: H.264 and AAC.
    let hls = s["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let master = eventually("a master playlist with a variant", Duration::from_secs(20), || async {
        let text = app.client.get(&hls).send().await.ok()?.text().await.ok()?;
        text.contains("#EXT-X-STREAM-INF").then_some(text)
    })
    .await;
    let base = hls.trim_end_matches("master.m3u8");
    let variant = master.lines().find(|l| !l.starts_with('#') && !l.is_empty()).expect("a variant URI");
    let media = format!("{base}{variant}");
    eventually("two whole segments", Duration::from_secs(20), || async {
        let text = app.client.get(&media).send().await.ok()?.text().await.ok()?;
        (text.matches("#EXTINF:").count() >= 2).then_some(())
    })
    .await;
    let probed = probe(&hls);
    assert!(probed.lines().any(|l| l == "h264,video"), "ffprobe of {hls}: {probed}");
    assert!(probed.lines().any(|l| l == "aac,audio"), "ffprobe of {hls}: {probed}");

    // The stream's own metrics: live here, bytes in from the push, bytes out to ffprobe.
    let metrics =
        app.client.get(app.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    let value = |name: &str| -> f64 {
        // `name` alone, or with its labels (`ID` standing for the stream's id).
        let prefix = match name.contains('{') {
            true => name.replace("ID", &id),
            false => format!("{name}{{stream=\"{id}\""),
        };
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {metrics}"));
        line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a number")
    };
    assert_eq!(value("sluice_stream_live"), 1.0);
    assert!(value("sluice_stream_bytes_in_total") > 50_000.0, "{metrics}");
    assert!(value("sluice_stream_bytes_out_total") > 10_000.0, "{metrics}");
    // No WebRTC viewer. (The HLS line counts playback sessions as of the node's last viewer
    // report: every master fetched above, and ffprobe's, once a report has run; it raced.)
    assert_eq!(value("sluice_stream_viewers{stream=\"ID\",protocol=\"webrtc\"}"), 0.0);

    // A second caller for the live stream is refused in its handshake.
    push(&url).exits(Duration::from_secs(20)).await;
    assert_eq!(stream(&app, &id).await["status"], "live");

    // The publisher goes: idle, and stream.ended.
    let _ = pusher.0.kill();
    wait_status(&app, &id, "idle", Duration::from_secs(20)).await;
    assert!(stream(&app, &id).await["input"].is_null());
    assert_eq!(srt_sessions(&app).await, Some(0));
    rx.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(
        events_of(&rx),
        [("stream.live".to_string(), id.clone()), ("stream.ended".to_string(), id.clone())]
    );

    // DELETE ends a live SRT push at once: the caller's connection closes.
    let mut pusher = push(&url);
    wait_status(&app, &id, "live", Duration::from_secs(20)).await;
    let resp = app
        .with_key(Method::DELETE, &app.project_url(&format!("/streams/{id}")), &app.key)
        .send()
        .await
        .expect("delete");
    assert_eq!(resp.status(), 200);
    pusher.exits(Duration::from_secs(15)).await;
    rx.wait_for(4, Duration::from_secs(15)).await;
    assert_eq!(events_of(&rx).iter().filter(|(e, _)| e == "stream.ended").count(), 2);
    assert_eq!(stream(&app, &id).await["status"], "disabled");
}

async fn refused_srt_pushes_open_no_session(app: TestApp) {
    let rx = Receiver::start().await;
    create_webhook(&app, &rx.url(), json!(["stream.live"])).await;
    let s = create_stream(&app, "srt cam").await;
    let id = s["_id"].as_str().expect("id").to_string();
    let url = srt_url(&s);
    let key = s["streamKey"].as_str().expect("key");
    let password = s["pushPassword"].as_str().expect("password");

    let wrong_pass = url.replace(password, "wrong-passphrase-0123");
    let no_pass = url.split("&passphrase").next().expect("url").to_string();
    let wrong_key = url.replace(key, "notAKey123");
    let no_stream_id = url.replace(&format!("streamid=publish:{key}&"), "");
    let to_play = url.replace("publish:", "play:");
    for bad in [wrong_pass, no_pass, wrong_key, no_stream_id, to_play] {
        push(&bad).exits(Duration::from_secs(20)).await;
    }
    // Rotated-away credentials: the old passphrase is refused, the new URL is not.
    let resp = app
        .with_key(Method::POST, &app.project_url(&format!("/streams/{id}/rotate-push")), &app.key)
        .send()
        .await
        .expect("rotate");
    assert_eq!(resp.status(), 200);
    let rotated: Value = resp.json().await.expect("json");
    let new_url = srt_url(&rotated);
    assert_ne!(new_url, url);
    push(&url).exits(Duration::from_secs(20)).await;
    // A disabled stream.
    let resp = app
        .with_key(Method::PATCH, &app.project_url(&format!("/streams/{id}")), &app.key)
        .json(&json!({"enabled": false}))
        .send()
        .await
        .expect("patch");
    assert_eq!(resp.status(), 200);
    push(&new_url).exits(Duration::from_secs(20)).await;

    let s = stream(&app, &id).await;
    assert_eq!(s["status"], "disabled");
    assert!(s["lastPushAt"].is_null(), "no push session was ever opened");
    assert!(rx.received().is_empty(), "stream.live never fired");

    // Re-enabled, the rotated credentials push.
    let resp = app
        .with_key(Method::PATCH, &app.project_url(&format!("/streams/{id}")), &app.key)
        .json(&json!({"enabled": true}))
        .send()
        .await
        .expect("patch");
    assert_eq!(resp.status(), 200);
    let _pusher = push(&new_url);
    wait_status(&app, &id, "live", Duration::from_secs(20)).await;
}

/// Random bytes over an authenticated SRT session: GStreamer's `srtsink` (libsrt, caller mode)
/// sending /dev/urandom as fast as SRT takes it.
fn garbage_publisher(url: &str) -> Killed {
    Killed(
        Command::new("gst-launch-1.0")
            .arg("-q")
            .args([
                "filesrc",
                "location=/dev/urandom",
                "blocksize=1316",
                "!",
                "srtsink",
                "auto-reconnect=false",
            ])
            .arg(format!("uri={url}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gst-launch-1.0 runs"),
    )
}

#[tokio::test]
async fn hostile_srt_input_leaves_ingest_serving() {
    let app = spawn_app(Backend::Sqlite).await;
    let srt = app.app.srt_addr().expect("SRT listens");
    let (victim, other) = (create_stream(&app, "garbage").await, create_stream(&app, "good").await);

    // Datagrams that are no SRT: random bytes, SRT control headers with nothing behind them,
    // handshake-typed packets of every length up to 64 bytes.
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("udp");
    for i in 0..20_000u32 {
        let packet: Vec<u8> = match i % 3 {
            0 => (0..(i % 1500)).map(|_| rand::random::<u8>()).collect(),
            1 => {
                let mut p = vec![0x80, 0x00, 0x00, 0x00];
                p.extend((0..(i % 64)).map(|_| rand::random::<u8>()));
                p
            }
            _ => vec![0xFF; (i % 48) as usize],
        };
        let _ = sock.send_to(&packet, srt).await;
    }

    // An authenticated caller sending random bytes: its session opens, carries no media and is
    // ended by the no-media deadline; nothing else is disturbed.
    let victim_id = victim["_id"].as_str().expect("id").to_string();
    let mut garbage = garbage_publisher(&srt_url(&victim));
    wait_status(&app, &victim_id, "live", Duration::from_secs(20)).await;

    // Meanwhile a real publisher goes live and its playlist is served.
    let other_id = other["_id"].as_str().expect("id").to_string();
    let _good = push(&srt_url(&other));
    wait_status(&app, &other_id, "live", Duration::from_secs(20)).await;
    let hls = other["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    eventually("the good push's playlist", Duration::from_secs(20), || async {
        let r = app.client.get(&hls).send().await.ok()?;
        (r.status() == 200).then_some(())
    })
    .await;

    wait_status(&app, &victim_id, "idle", Duration::from_secs(30)).await;
    garbage.exits(Duration::from_secs(15)).await;
    assert_eq!(stream(&app, &other_id).await["status"], "live", "the good push is untouched");
    let health = app.client.get(app.url("/healthz")).send().await.expect("health");
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn srt_and_rtmp_share_the_connection_cap_per_address() {
    let app = spawn_app_with(Backend::Sqlite, |a| a.rtmp_max_per_ip = Some(1)).await;
    let (first, second, third) = (
        create_stream(&app, "one").await,
        create_stream(&app, "two").await,
        create_stream(&app, "three").await,
    );
    let first_id = first["_id"].as_str().expect("id").to_string();
    let _live = push(&srt_url(&first));
    wait_status(&app, &first_id, "live", Duration::from_secs(20)).await;
    // The address holds its one place: a second SRT caller and an RTMP publisher are refused.
    push(&srt_url(&second)).exits(Duration::from_secs(20)).await;
    ffmpeg_push(third["ingestUrl"].as_str().expect("ingestUrl"), "testsrc=size=320x240:rate=15", 30, &[])
        .exits(Duration::from_secs(20))
        .await;
    for s in [&second, &third] {
        let id = s["_id"].as_str().expect("id");
        assert_eq!(stream(&app, id).await["status"], "idle");
    }
}
