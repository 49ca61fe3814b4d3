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
    ffmpeg_push(
        stream["ingestUrl"].as_str().expect("ingestUrl"),
        "testsrc2=size=640x360:rate=30",
        30,
        &["-b:v", "800k"],
    )
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
                .map(|s| {
                    format!(
                        "{}:{}",
                        s["codec_type"].as_str().unwrap_or(""),
                        s["codec_name"].as_str().unwrap_or("")
                    )
                })
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
    let stream =
        create(&t, json!({"name": "webrtc", "protocols": ["llhls", "webrtc"], "qualities": ["240p"]})).await;
    let id = stream["_id"].as_str().expect("id").to_string();
    let whep = stream["playbackUrls"]["webrtc"].as_str().expect("a WHEP URL").to_string();

    let early = WhepViewer::try_play(&whep).await.err().expect("no push yet");
    assert_eq!(early.status, 409, "{early:?}");
    assert!(early.body.contains("not live"), "{early:?}");

    let _push = push(&stream);
    let v = viewer(&whep).await;
    let r = v
        .wait_for("decoded video and audio", Duration::from_secs(30), |r| {
            r.video_frames >= 60 && r.audio_buffers >= 50
        })
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
    let resp = t
        .with_key(Method::DELETE, &t.project_url(&format!("/streams/{id}")), &t.key)
        .send()
        .await
        .expect("delete");
    assert_eq!(resp.status(), 200);
    let r = v
        .wait_for("the frames to stop", Duration::from_secs(10), |r| {
            r.last_video.is_some_and(|at| at.elapsed() > Duration::from_millis(1500))
        })
        .await;
    let last = r.last_video.expect("frames came");
    eprintln!("WHEP frames stopped {:?} after the stream's DELETE", last.saturating_duration_since(deleted));
    assert!(
        last < deleted + Duration::from_secs(3),
        "frames went on {:?} after DELETE",
        last.duration_since(deleted)
    );
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
    // `reconnectWindow: 0`: the push session ends with the WHIP session (a publisher's DELETE
    // waits out the window as any other end but the API's does).
    let stream =
        create(&t, json!({"name": "whip", "protocols": ["llhls", "webrtc"], "qualities": ["240p"], "reconnectWindow": 0}))
            .await;
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
    v.wait_for("WHEP of the WHIP push", Duration::from_secs(30), |r| {
        r.video_frames >= 30 && r.audio_buffers >= 20
    })
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
    assert!(
        streams.contains(&"video:h264".to_string()) && streams.contains(&"audio:aac".to_string()),
        "{streams:?}"
    );
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

    let resp =
        t.post_json_with(&t.project_url(&format!("/streams/{id}/playback-ticket")), &t.key, &json!({})).await;
    assert_eq!(resp.status(), 200);
    let ticket: Value = resp.json().await.expect("json");
    let v = viewer(ticket["webrtc"].as_str().expect("a WHEP URL in the ticket")).await;
    v.wait_for("signed WHEP frames", Duration::from_secs(30), |r| r.video_frames >= 30).await;
    let streams =
        probe_until(ticket["rtsp"].as_str().expect("an RTSP URL in the ticket"), &["-rtsp_transport", "tcp"])
            .await;
    assert!(streams.contains(&"video:h264".to_string()), "{streams:?}");
}

#[tokio::test]
async fn chromium_plays_whep_on_the_demo_page() {
    let t = spawn_app(Backend::Sqlite).await;
    let stream =
        create(&t, json!({"name": "browser", "protocols": ["llhls", "webrtc"], "qualities": ["240p"]})).await;
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
        .wait_demo("LL-HLS frames beside it", Duration::from_secs(40), |r| {
            r["hls"]["frames"].as_u64().unwrap_or(0) > 30
        })
        .await;
}

#[tokio::test]
async fn hostile_offers_and_rtsp_garbage_leave_playback_serving() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t = spawn_app(Backend::Sqlite).await;
    let stream = create(&t, json!({"name": "hostile", "protocols": ["webrtc", "rtsp"]})).await;
    let id = stream["_id"].as_str().expect("id").to_string();
    let whep = stream["playbackUrls"]["webrtc"].as_str().expect("webrtc").to_string();
    let rtsp = stream["playbackUrls"]["rtsp"].as_str().expect("rtsp").to_string();
    let _push = push(&stream);
    let _first = viewer(&whep).await;

    let post =
        |ct: &'static str, body: Vec<u8>| t.client.post(&whep).header("content-type", ct).body(body).send();
    assert_eq!(post("application/sdp", b"v=0\r\nm=bogus\r\n".to_vec()).await.expect("post").status(), 400);
    assert_eq!(post("application/sdp", vec![0xff; 5000]).await.expect("post").status(), 400);
    assert_eq!(post("application/sdp", vec![b'a'; 100_000]).await.expect("post").status(), 413);
    assert_eq!(post("text/plain", b"v=0".to_vec()).await.expect("post").status(), 415);
    let vp8_only = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n\
                    c=IN IP4 0.0.0.0\r\na=mid:0\r\na=recvonly\r\na=rtpmap:96 VP8/90000\r\n";
    let r = post("application/sdp", vp8_only.as_bytes().to_vec()).await.expect("post");
    assert_eq!(r.status(), 400);
    assert!(r.text().await.expect("text").contains("H.264"));
    // Ten viewers from one address at most (SLUICE_WEBRTC_MAX_PER_IP); the first is `viewer`'s.
    let mut held = Vec::new();
    for _ in 0..9 {
        held.push(WhepViewer::play_counting(&whep).await.expect("within the per-IP cap"));
    }
    let over = WhepViewer::play_counting(&whep).await.err().expect("past the per-IP cap");
    assert_eq!(over.status, 429, "{over:?}");
    drop(held);
    let missing = format!("{whep}/nosuchsession");
    assert_eq!(t.client.delete(&missing).send().await.expect("delete").status(), 404);
    let whip_missing =
        format!("{}/v1/whip/{}/nosuchsession", t.base, stream["obs"]["streamKey"].as_str().expect("key"));
    assert_eq!(t.client.delete(&whip_missing).send().await.expect("delete").status(), 404);

    // RTSP: garbage, a half request left open, and more connections from one address than it
    // may hold; the server answers the next real client all the same.
    let addr = rtsp.trim_start_matches("rtsp://").split('/').next().expect("host:port").to_string();
    let mut garbage = tokio::net::TcpStream::connect(&addr).await.expect("connect");
    garbage.write_all(&[0u8, 0xff, b'\r', b'\n'].repeat(4096)).await.ok();
    let mut buf = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(5), garbage.read(&mut buf)).await;
    let mut held = Vec::new();
    for _ in 0..40 {
        if let Ok(mut c) = tokio::net::TcpStream::connect(&addr).await {
            let _ = c.write_all(b"OPTIONS rtsp://x/live/").await;
            held.push(c);
        }
    }
    // Past the per-IP cap the server closes new connections at once.
    let mut refused = tokio::net::TcpStream::connect(&addr).await.expect("connect");
    let _ = refused.write_all(b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n").await;
    let n =
        tokio::time::timeout(Duration::from_secs(5), refused.read(&mut buf)).await.expect("closed in time");
    // Closed (EOF) or reset, with no answer either way.
    assert!(matches!(n, Ok(0) | Err(_)), "a connection past the per-IP cap is closed unanswered: {n:?}");
    drop(held);
    let streams = probe_until(&rtsp, &["-rtsp_transport", "tcp"]).await;
    assert!(streams.contains(&"video:h264".to_string()), "{streams:?}");
    // Dropped viewers leave (their ICE closes or times out); a new one plays.
    drop(_first);
    let v = eventually("a viewer admitted again", Duration::from_secs(40), || async {
        WhepViewer::try_play(&whep).await.ok()
    })
    .await;
    v.wait_for("frames after the garbage", Duration::from_secs(20), |r| r.video_frames >= 30).await;
    assert_eq!(status_of(&t, &id).await, "live");
}

#[tokio::test]
async fn answers_announce_the_public_ip_within_the_port_range() {
    let t = crate::support::spawn_app_with(Backend::Sqlite, |a| {
        a.webrtc_public_ip = Some("203.0.113.7".parse().expect("ip"));
        a.webrtc_udp_ports = Some("41000-41019".into());
    })
    .await;
    let stream = create(&t, json!({"name": "nat", "protocols": ["webrtc"]})).await;
    let _push = push(&stream);
    let v = viewer(stream["playbackUrls"]["webrtc"].as_str().expect("webrtc")).await;
    let udp: Vec<Vec<&str>> = v
        .answer
        .lines()
        .filter_map(|l| l.strip_prefix("a=candidate:"))
        .map(|c| c.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() > 7 && f[2].eq_ignore_ascii_case("udp"))
        .collect();
    assert!(!udp.is_empty(), "{}", v.answer);
    for f in &udp {
        let port: u16 = f[5].parse().expect("port");
        assert!((41000..=41019).contains(&port), "UDP candidate outside the range: {f:?}");
    }
    assert!(udp.iter().any(|f| f[4] == "203.0.113.7"), "the public IP is announced: {}", v.answer);
    v.wait_for("frames over the local candidates", Duration::from_secs(20), |r| r.video_frames >= 10).await;
}

#[tokio::test]
async fn a_viewer_that_vanishes_without_delete_is_ended() {
    let t = spawn_app(Backend::Sqlite).await;
    let stream = create(&t, json!({"name": "vanishing", "protocols": ["webrtc"]})).await;
    let _push = push(&stream);
    let v = viewer(stream["playbackUrls"]["webrtc"].as_str().expect("webrtc")).await;
    v.wait_for("frames", Duration::from_secs(20), |r| r.video_frames >= 10).await;
    assert_eq!(metric(&t, "sluice_whep_viewers").await, Some(1));
    let gone = Instant::now();
    v.vanish();
    // Its ICE keepalives (connectivity checks) go unanswered and the session fails.
    eventually("the vanished viewer ended", Duration::from_secs(120), || async {
        (metric(&t, "sluice_whep_viewers").await == Some(0)).then_some(())
    })
    .await;
    eprintln!("a WHEP viewer that vanished without DELETE ended after {:?}", gone.elapsed());
}
