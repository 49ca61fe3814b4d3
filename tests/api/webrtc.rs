//! WebRTC and RTSP end to end: WHEP viewers (GStreamer's `webrtcbin` as the peer) of an RTMP
//! push decode its video and audio; a WHIP publisher goes live and its LL-HLS reads in ffprobe;
//! ffprobe and ffmpeg read the RTSP URL over TCP and UDP; signed streams refuse WHEP and RTSP
//! without a token and play with a ticket's URLs; DELETE of a stream stops its viewers.

use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::webrtc::{WhepViewer, WhipPublisher};
use crate::support::{eventually, ffmpeg_push, spawn_app, Backend, Killed, TestApp};

/// `SLUICE_TEST_LOG=1`: the server's log in the test's output.
fn log() {
    if std::env::var_os("SLUICE_TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt().with_env_filter("sluice=debug").with_test_writer().try_init();
    }
}

async fn create(t: &TestApp, body: Value) -> Value {
    let resp = t.post_json_with(&t.project_url("/streams"), &t.key, &body).await;
    assert_eq!(resp.status(), 201);
    resp.json().await.expect("json")
}

/// A real-time 640×360 30 fps H.264 push with AAC, a keyframe a second.
fn push(stream: &Value) -> Killed {
    ffmpeg_push(stream["ingestUrl"].as_str().expect("ingestUrl"), "testsrc2=size=640x360:rate=30", 30, &["-b:v", "800k"])
}

async fn status_of(t: &TestApp, id: &str) -> String {
    let resp = t.get_with(&t.project_url(&format!("/streams/{id}")), &t.key).await;
    let v: Value = resp.json().await.expect("json");
    v["status"].as_str().unwrap_or_default().to_string()
}

async fn metric(t: &TestApp, name: &str) -> Option<u64> {
    let text = t.client.get(t.url("/metrics")).send().await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).and_then(|v| v.trim().parse().ok())
}

/// A viewer, once the push is live and the offer is taken (409 until then).
async fn viewer(url: &str) -> WhepViewer {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match WhepViewer::try_play(url).await {
            Ok(v) => return v,
            Err(r) if r.status == 409 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(r) => panic!("WHEP {url}: {r:?}"),
        }
    }
}

/// `codec_type:codec_name` of each stream ffprobe finds at `url`, or why it found none.
fn probe(url: &str, extra: &[&str]) -> Result<Vec<String>, String> {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-rw_timeout", "10000000"])
        .args(extra)
        .args(["-show_entries", "stream=codec_type,codec_name,width,height", "-of", "json", url])
        .output()
        .map_err(|e| format!("ffprobe: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok(v["streams"]
        .as_array()
        .map(|s| {
            s.iter()
                .map(|s| format!("{}:{}", s["codec_type"].as_str().unwrap_or(""), s["codec_name"].as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default())
}

async fn probe_until(url: &str, extra: &'static [&'static str]) -> Vec<String> {
    let url = url.to_string();
    let mut last = String::new();
    let until = Instant::now() + Duration::from_secs(40);
    while Instant::now() < until {
        let u = url.clone();
        match tokio::task::spawn_blocking(move || probe(&u, extra)).await.expect("probe") {
            Ok(streams) if streams.iter().any(|s| s.starts_with("video:")) => return streams,
            Ok(streams) => last = format!("streams {streams:?}"),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("ffprobe {url}: {last}");
}

#[tokio::test]
async fn whep_viewer_decodes_an_rtmp_push_and_delete_stops_it() {
    log();
    let t = spawn_app(Backend::Sqlite).await;
    let stream = create(&t, json!({"name": "webrtc", "protocols": ["llhls", "webrtc"], "qualities": ["240p"]})).await;
    let id = stream["_id"].as_str().expect("id").to_string();
    let whep = stream["playbackUrls"]["webrtc"].as_str().expect("a WHEP URL").to_string();

    let early = WhepViewer::try_play(&whep).await.err().expect("no push yet");
    assert_eq!(early.status, 409, "{early:?}");
    assert!(early.body.contains("not live"), "{early:?}");

    let _push = push(&stream);
    let v = viewer(&whep).await;
    let r = v
        .wait_for("decoded video and audio", Duration::from_secs(30), |r| r.video_frames >= 60 && r.audio_buffers >= 50)
        .await;
    assert_eq!((r.width, r.height), (640, 360), "the WebRTC rung keeps a source below 480p as it is");
    assert_eq!(metric(&t, "sluice_whep_viewers").await, Some(1));

    // Trickle: the ETag must come back as If-Match.
    let frag = "a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuv\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\n\
                a=candidate:1 1 udp 2130706431 127.0.0.1 9 typ host\r\n";
    let patch = |if_match: Option<&str>| {
        let mut req = t
            .client
            .request(Method::PATCH, &v.location)
            .header("content-type", "application/trickle-ice-sdpfrag")
            .body(frag);
        if let Some(tag) = if_match {
            req = req.header("if-match", tag);
        }
        req.send()
    };
    assert_eq!(patch(None).await.expect("patch").status(), 412);
    assert_eq!(patch(Some("\"other\"")).await.expect("patch").status(), 412);
    assert_eq!(patch(Some(&v.etag)).await.expect("patch").status(), 204);

    // DELETE of the stream ends the viewer within 3 s.
    let frames_before = v.received().video_frames;
    let deleted = Instant::now();
    let resp = t.with_key(Method::DELETE, &t.project_url(&format!("/streams/{id}")), &t.key).send().await.expect("delete");
    assert_eq!(resp.status(), 200);
    let r = v
        .wait_for("the frames to stop", Duration::from_secs(10), |r| {
            r.last_video.is_some_and(|at| at.elapsed() > Duration::from_millis(1500))
        })
        .await;
    let last = r.last_video.expect("frames came");
    assert!(last < deleted + Duration::from_secs(3), "frames went on {:?} after DELETE", last.duration_since(deleted));
    assert!(r.video_frames > frames_before || last <= deleted + Duration::from_millis(100));
    eventually("no WHEP viewer left", Duration::from_secs(5), || async {
        (metric(&t, "sluice_whep_viewers").await == Some(0)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn whip_publisher_goes_live_plays_in_hls_and_whep_and_ends_on_delete() {
    log();
    let t = spawn_app(Backend::Sqlite).await;
    let stream = create(&t, json!({"name": "whip", "protocols": ["llhls", "webrtc"], "qualities": ["240p"]})).await;
    let id = stream["_id"].as_str().expect("id").to_string();
    let whip = stream["whipUrl"].as_str().expect("whipUrl").to_string();
    let password = stream["pushPassword"].as_str().expect("pushPassword").to_string();

    // Refusals of the contract: unknown key 404 whatever the bearer, bad or no bearer 401.
    let unknown = format!("{}/v1/whip/nosuchkey", t.base);
    let r = WhipPublisher::try_publish(&unknown, Some(&password)).await.err().expect("refused");
    assert_eq!(r.status, 404, "{r:?}");
    let r = WhipPublisher::try_publish(&whip, Some("wrong")).await.err().expect("refused");
    assert_eq!(r.status, 401, "{r:?}");
    let r = WhipPublisher::try_publish(&whip, None).await.err().expect("refused");
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(status_of(&t, &id).await, "idle", "a refused push changes nothing");
    let garbage = t
        .client
        .post(&whip)
        .bearer_auth(&password)
        .header("content-type", "application/sdp")
        .body("v=0\r\nnot sdp at all")
        .send()
        .await
        .expect("post");
    assert_eq!(garbage.status(), 400);
    assert_eq!(status_of(&t, &id).await, "idle");

    let publisher = WhipPublisher::publish(&whip, &password).await;
    assert_eq!(status_of(&t, &id).await, "live");
    let second = WhipPublisher::try_publish(&whip, Some(&password)).await.err().expect("live already");
    assert_eq!(second.status, 409, "{second:?}");

    let master = stream["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let streams = probe_until(&master, &[]).await;
    assert!(streams.iter().any(|s| s == "video:h264"), "{streams:?}");
    let with_audio = eventually("the HLS audio of the Opus push", Duration::from_secs(20), || {
        let master = master.clone();
        async move {
            let s = tokio::task::spawn_blocking(move || probe(&master, &[])).await.ok()?.ok()?;
            s.iter().any(|s| s == "audio:aac").then_some(s)
        }
    })
    .await;
    assert!(with_audio.iter().any(|s| s == "video:h264"), "{with_audio:?}");

    let v = viewer(stream["playbackUrls"]["webrtc"].as_str().expect("webrtc")).await;
    v.wait_for("WHEP of the WHIP push", Duration::from_secs(30), |r| r.video_frames >= 30 && r.audio_buffers >= 20)
        .await;
    assert_eq!(metric(&t, "sluice_whip_sessions").await, Some(1));

    let resp = t.client.delete(&publisher.location).send().await.expect("delete");
    assert_eq!(resp.status(), 200);
    eventually("the stream back to idle", Duration::from_secs(10), || async {
        (status_of(&t, &id).await == "idle").then_some(())
    })
    .await;
    assert_eq!(t.client.delete(&publisher.location).send().await.expect("delete").status(), 404);
}

#[tokio::test]
async fn rtsp_plays_the_push_over_tcp_and_udp() {
    let t = spawn_app(Backend::Sqlite).await;
    let stream = create(&t, json!({"name": "rtsp", "protocols": ["rtsp"]})).await;
    let url = stream["playbackUrls"]["rtsp"].as_str().expect("an RTSP URL").to_string();
    let _push = push(&stream);
    let streams = probe_until(&url, &["-rtsp_transport", "tcp"]).await;
    assert!(streams.contains(&"video:h264".to_string()) && streams.contains(&"audio:aac".to_string()), "{streams:?}");
    let udp = probe_until(&url, &["-rtsp_transport", "udp"]).await;
    assert!(udp.contains(&"video:h264".to_string()), "{udp:?}");
    let decoded = tokio::task::spawn_blocking(move || {
        Command::new("ffmpeg")
            .args(["-v", "error", "-rtsp_transport", "tcp", "-i", &url, "-frames:v", "60", "-f", "null", "-"])
            .output()
            .expect("ffmpeg")
    })
    .await
    .expect("ffmpeg");
    assert!(decoded.status.success(), "{}", String::from_utf8_lossy(&decoded.stderr));
}

#[tokio::test]
async fn signed_streams_refuse_whep_and_rtsp_without_a_token() {
    let t = spawn_app(Backend::Sqlite).await;
    let stream = create(&t, json!({"name": "signed", "protocols": ["webrtc", "rtsp"]})).await;
    let id = stream["_id"].as_str().expect("id").to_string();
    let resp = t
        .with_key(Method::PATCH, &t.project_url(&format!("/streams/{id}/signed-playback")), &t.key)
        .json(&json!({"enabled": true}))
        .send()
        .await
        .expect("switch");
    assert_eq!(resp.status(), 200);
    let _push = push(&stream);
    let whep = stream["playbackUrls"]["webrtc"].as_str().expect("webrtc").to_string();
    let rtsp = stream["playbackUrls"]["rtsp"].as_str().expect("rtsp").to_string();

    let r = WhepViewer::try_play(&whep).await.err().expect("refused");
    assert_eq!((r.status, r.deny_reason.as_deref()), (401, Some("missing_token")), "{r:?}");
    let r = WhepViewer::try_play(&format!("{whep}?token=forged")).await.err().expect("refused");
    assert_eq!(r.status, 401, "{r:?}");
    let refused = tokio::task::spawn_blocking({
        let rtsp = rtsp.clone();
        move || probe(&rtsp, &["-rtsp_transport", "tcp"])
    })
    .await
    .expect("probe");
    let why = refused.expect_err("RTSP without a token is refused");
    assert!(why.contains("401"), "{why}");

    let resp = t.post_json_with(&t.project_url(&format!("/streams/{id}/playback-ticket")), &t.key, &json!({})).await;
    assert_eq!(resp.status(), 200);
    let ticket: Value = resp.json().await.expect("json");
    let v = viewer(ticket["webrtc"].as_str().expect("a WHEP URL in the ticket")).await;
    v.wait_for("signed WHEP frames", Duration::from_secs(30), |r| r.video_frames >= 30).await;
    let streams = probe_until(ticket["rtsp"].as_str().expect("an RTSP URL in the ticket"), &["-rtsp_transport", "tcp"]).await;
    assert!(streams.contains(&"video:h264".to_string()), "{streams:?}");
}

#[tokio::test]
async fn chromium_plays_whep_on_the_demo_page() {
    let t = spawn_app(Backend::Sqlite).await;
    let stream = create(&t, json!({"name": "browser", "protocols": ["llhls", "webrtc"], "qualities": ["240p"]})).await;
    let id = stream["_id"].as_str().expect("id");
    let whep = stream["playbackUrls"]["webrtc"].as_str().expect("webrtc").to_string();
    let hls = stream["playbackUrls"]["hls"].as_str().expect("hls").to_string();

    // Sluice serves the page at {playback_base}/live/<id>/, naming both players' URLs.
    let page = t.client.get(format!("{}/play/live/{id}/", t.base)).send().await.expect("page");
    assert_eq!(page.status(), 200);
    assert!(page.text().await.expect("text").contains("RTCPeerConnection"));

    let _push = push(&stream);
    viewer(&whep).await; // live, and the rung is up
    let player = crate::support::player::Player::start_demo(&whep, &hls).await;
    let last = player
        .wait_demo("WHEP frames decoded in <video>", Duration::from_secs(40), |r| {
            r["whep"]["frames"].as_u64().unwrap_or(0) >= 60 && r["whep"]["width"].as_u64() == Some(640)
        })
        .await;
    assert_eq!(last["whep"]["errors"], json!([]), "{last}");
    // The LL-HLS side of the same page plays too.
    player
        .wait_demo("LL-HLS frames beside it", Duration::from_secs(40), |r| r["hls"]["frames"].as_u64().unwrap_or(0) > 30)
        .await;
}
