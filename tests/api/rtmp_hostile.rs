//! Attacks on RTMP ingest, each against the real server, which keeps serving through them
//! (issue 21; CONTRACT: Live media — a hostile client cannot take the server down): AMF nested
//! 100,000 deep in a `connect`, a 16 MiB chunk header, a flood of idle connections from one
//! address, a flood over many addresses past the global cap, a publisher that stops sending
//! keyframes, a process killed mid-push, publishers that send faster than real time (video, and
//! audio at a low bitrate) and one that switches its video codec mid-push.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rml_rtmp::handshake::{Handshake, HandshakeProcessResult, PeerType};
use serde_json::{json, Value};
use sluice::media::ingest::flv::flv_tags;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::live_hls::get_text;
use crate::rtmp_limits::{closed_within, create_stream, credentials, publish, publish_silently, status};
use crate::support::receiver::Receiver;
use crate::support::{
    bootstrap_key, eventually, ffmpeg_push, sluice_command, spawn_app, wait_ready, Backend, Killed,
};
use crate::webhooks_restart::create_hook;

/// Connects and completes the handshake; returns the socket ready for chunks.
async fn handshaken(addr: SocketAddr) -> TcpStream {
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    let mut hs = Handshake::new(PeerType::Client);
    sock.write_all(&hs.generate_outbound_p0_and_p1().expect("c0c1")).await.expect("write");
    let mut buf = vec![0u8; 8192];
    loop {
        let n = sock.read(&mut buf).await.expect("read");
        assert!(n > 0, "server closed during the handshake");
        match hs.process_bytes(&buf[..n]).expect("handshake") {
            HandshakeProcessResult::InProgress { response_bytes } => {
                sock.write_all(&response_bytes).await.expect("write")
            }
            HandshakeProcessResult::Completed { response_bytes, .. } => {
                sock.write_all(&response_bytes).await.expect("write");
                return sock;
            }
        }
    }
}

/// One message in 128-byte chunks (the size every peer starts with): a type-0 header, then
/// type-3 continuations, on chunk stream 3.
fn chunked(type_id: u8, body: &[u8]) -> Vec<u8> {
    let len = body.len() as u32;
    let mut out = vec![0x03, 0, 0, 0, (len >> 16) as u8, (len >> 8) as u8, len as u8, type_id, 0, 0, 0, 0];
    for (i, piece) in body.chunks(128).enumerate() {
        if i > 0 {
            out.push(0xC3);
        }
        out.extend_from_slice(piece);
    }
    out
}

/// An AMF0 `connect` command whose object nests `depth` objects.
fn deep_connect(depth: usize) -> Vec<u8> {
    let mut body = vec![0x02, 0, 7];
    body.extend_from_slice(b"connect");
    body.extend([0x00, 0x3F, 0xF0, 0, 0, 0, 0, 0, 0]); // number 1.0
    body.push(0x03);
    for _ in 0..depth {
        body.extend([0, 1, b'a', 0x03]);
    }
    body
}

/// The server answers HTTP and takes a real push after whatever came before.
async fn still_serving(app: &crate::support::TestApp, name: &str) {
    let health = app.client.get(app.url("/healthz")).send().await.expect("healthz");
    assert_eq!(health.status(), 200);
    let s = create_stream(app, name).await;
    let _sock = publish_silently(app.app.rtmp_addr().expect("rtmp"), &credentials(&s)).await;
    assert_eq!(status(app, s["_id"].as_str().expect("id")).await["status"], "live");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bytes_close_the_connection_and_nothing_else() {
    let app = spawn_app(Backend::Sqlite).await;
    let addr = app.app.rtmp_addr().unwrap();

    // A `connect` nesting objects 100,000 deep (400 KB): refused on its header, as too long for
    // a command; one nesting 16,000 deep fits in 64 KiB and is refused for its depth. Both used
    // to recurse in the AMF0 decoder until the stack overflowed and the process aborted.
    for depth in [100_000, 16_000] {
        let mut sock = handshaken(addr).await;
        let _ = sock.write_all(&chunked(20, &deep_connect(depth))).await;
        closed_within(&mut sock, Duration::from_secs(3)).await;
    }

    // A chunk header declaring a 16 MiB video message, then a trickle of its payload: refused
    // at once, before anything of it is buffered.
    let mut sock = handshaken(addr).await;
    sock.write_all(&[0x04, 0, 0, 0, 0xFF, 0xFF, 0xFF, 9, 1, 0, 0, 0]).await.unwrap();
    let _ = sock.write_all(&[0u8; 100]).await;
    closed_within(&mut sock, Duration::from_secs(3)).await;

    // A command of two values (rml_rtmp's `drain(..3)` panicked on it) and a chunk stream
    // that continues a message it never started.
    let mut sock = handshaken(addr).await;
    let _ = sock.write_all(&chunked(20, &deep_connect(0)[..19])).await;
    closed_within(&mut sock, Duration::from_secs(3)).await;
    let mut sock = handshaken(addr).await;
    let _ = sock.write_all(&[0xC7, 1, 2, 3]).await;
    closed_within(&mut sock, Duration::from_secs(3)).await;

    still_serving(&app, "after hostile bytes").await;
}

/// Opens `n` TCP connections to `addr` from the local address `from`.
async fn connections_from(from: &str, addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut out = Vec::new();
    for _ in 0..n {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.bind(format!("{from}:0").parse().expect("from")).expect("bind");
        if let Ok(c) = socket.connect(addr).await {
            out.push(c);
        }
    }
    out
}

/// How many of `conns` the server closed within `wait` (each read returns 0 or an error),
/// all watched at once.
async fn closed(conns: &mut [TcpStream], wait: Duration) -> usize {
    let reads = conns.iter_mut().map(|c| async move {
        let mut b = [0u8; 1];
        matches!(tokio::time::timeout(wait, c.read(&mut b)).await, Ok(Ok(0) | Err(_)))
    });
    futures_util::future::join_all(reads).await.into_iter().filter(|&shut| shut).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_one_address_leave_room_for_others() {
    let app = spawn_app(Backend::Sqlite).await;
    let addr = app.app.rtmp_addr().unwrap();
    // 200 idle connections from 127.0.0.2: all but the per-address cap (16) are closed at once.
    let mut flood = connections_from("127.0.0.2", addr, 200).await;
    // Within 3 s (well inside the 10-s start deadline that closes the others).
    let shut = closed(&mut flood, Duration::from_secs(3)).await;
    assert_eq!(shut, 200 - 16, "past the per-address cap, connections are closed on accept");
    // A publisher from 127.0.0.1 goes live meanwhile.
    still_serving(&app, "beside the flood").await;
    // The 16 that were let in are closed by the start deadline (10 s), not kept.
    let started = Instant::now();
    let left = closed(&mut flood, Duration::from_secs(15)).await;
    assert_eq!(left, 200, "every idle connection is closed in the end");
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_over_many_addresses_is_capped_and_prints_the_servers_memory() {
    let app = spawn_app(Backend::Sqlite).await;
    let addr = app.app.rtmp_addr().unwrap();
    let rss_before = rss_kib();
    // 40 addresses × 16 = 640 connections: the global cap (512) closes the rest.
    let mut flood = Vec::new();
    for host in 10..50 {
        flood.extend(connections_from(&format!("127.0.1.{host}"), addr, 16).await);
    }
    let opened = flood.len();
    let shut = closed(&mut flood, Duration::from_secs(3)).await;
    assert!(opened >= 600, "{opened} connections made");
    assert!(opened - shut <= 512, "{} held open, more than the cap of 512", opened - shut);
    assert!(opened - shut >= 500, "only {} held open", opened - shut);
    eprintln!(
        "rtmp flood: {} idle connections held; test process RSS {} MiB → {} MiB",
        opened - shut,
        rss_before / 1024,
        rss_kib() / 1024
    );
    drop(flood);
    eventually("the global slots to come back", Duration::from_secs(10), || async {
        let mut c = connections_from("127.0.0.3", addr, 1).await;
        (closed(&mut c, Duration::from_millis(500)).await == 0).then_some(())
    })
    .await;
}

/// This process's resident memory (the in-process server's, with the test's).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_without_keyframes_is_ended_after_30_s() {
    let app = spawn_app(Backend::Sqlite).await;
    let s = create_stream(&app, "one keyframe").await;
    let id = s["_id"].as_str().unwrap().to_string();
    // x264 with an endless GOP and no scene cuts: one IDR at the start, then none.
    let _pusher = ffmpeg_push(
        s["ingestUrl"].as_str().unwrap(),
        "testsrc=size=320x240:rate=15",
        100_000,
        &["-x264-params", "keyint=infinite:scenecut=0"],
    );
    eventually("live", Duration::from_secs(20), || async {
        (status(&app, &id).await["status"] == "live").then_some(())
    })
    .await;
    let live_at = Instant::now();
    let rss_live = rss_kib();
    eventually("the push to end", Duration::from_secs(45), || async {
        (status(&app, &id).await["status"] == "idle").then_some(())
    })
    .await;
    let after = live_at.elapsed();
    assert!(after >= Duration::from_secs(25), "ended after {after:?}, before the 30-s bound");
    eprintln!(
        "no-keyframe push ended after {:.1} s; RSS {} MiB while live, {} MiB at the end",
        after.as_secs_f64(),
        rss_live / 1024,
        rss_kib() / 1024
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_left_live_by_a_killed_process_ends_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let free = crate::support::free_port;
    let (port, rtmp) = (free(), free());
    let command = || {
        let mut c = sluice_command(dir.path(), port);
        c.env("SLUICE_RTMP_ADDR", format!("127.0.0.1:{rtmp}"));
        c
    };
    let key = bootstrap_key(command());
    let serve = || async {
        let s = Killed(command().arg("serve").stdout(std::process::Stdio::null()).spawn().expect("serve"));
        wait_ready(port).await;
        s
    };
    let mut server = serve().await;
    let base = format!("http://127.0.0.1:{port}/v1/projects/demo");
    let client = reqwest::Client::new();
    let rx = Receiver::start().await;
    create_hook(&client, &base, &key, &rx.url(), json!(["stream.live", "stream.ended"])).await;
    let s: Value = client
        .post(format!("{base}/streams"))
        .bearer_auth(&key)
        .json(&json!({"name": "crash"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = s["_id"].as_str().unwrap().to_string();
    let get = |id: String| {
        let (client, base, key) = (client.clone(), base.clone(), key.clone());
        async move {
            let r = client.get(format!("{base}/streams/{id}")).bearer_auth(&key).send().await.ok()?;
            r.json::<Value>().await.ok()
        }
    };
    let mut pusher = ffmpeg_push(s["ingestUrl"].as_str().unwrap(), "testsrc=size=320x240:rate=15", 30, &[]);
    eventually("live", Duration::from_secs(20), || async {
        get(id.clone()).await.filter(|v| v["status"] == "live")
    })
    .await;
    rx.wait_for(1, Duration::from_secs(10)).await;

    // SIGKILL: the process cannot end the push, the database says `live`.
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    let _ = pusher.0.kill();
    let _server = serve().await;
    eventually("idle after the restart", Duration::from_secs(10), || async {
        get(id.clone()).await.filter(|v| v["status"] == "idle")
    })
    .await;
    // Deliveries are at least once: the `stream.live` sent just before the kill may come again
    // (same envelope id). Distinct events: one `stream.live`, then one `stream.ended`.
    let events = eventually("stream.ended delivered", Duration::from_secs(15), || async {
        let mut seen: Vec<Value> = Vec::new();
        for e in rx.received().iter().map(|r| r.json()) {
            if !seen.iter().any(|s| s["id"] == e["id"]) {
                seen.push(e);
            }
        }
        seen.iter().any(|e| e["event"] == "stream.ended").then_some(seen)
    })
    .await;
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names, ["stream.live", "stream.ended"]);
    assert_eq!(events[1]["data"]["id"], id.as_str());
}

/// Where the media a playlist lists ends on the wall clock: its last `PROGRAM-DATE-TIME` plus
/// what follows it (the parts of that segment so far, or the whole segment).
fn listed_until(playlist: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let lines: Vec<&str> = playlist.lines().collect();
    let at = lines.iter().rposition(|l| l.starts_with("#EXT-X-PROGRAM-DATE-TIME:"))?;
    let start =
        chrono::DateTime::parse_from_rfc3339(lines[at].trim_start_matches("#EXT-X-PROGRAM-DATE-TIME:"))
            .ok()?;
    let seconds = |l: &str, key: &str| -> f64 {
        l.split(key)
            .nth(1)
            .and_then(|v| v.split([',', '\n']).next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let parts: f64 =
        lines[at..].iter().filter(|l| l.starts_with("#EXT-X-PART:")).map(|l| seconds(l, "DURATION=")).sum();
    let whole: f64 =
        lines[at..].iter().filter(|l| l.starts_with("#EXTINF:")).map(|l| seconds(l, "#EXTINF:")).sum();
    let listed = chrono::Duration::milliseconds((parts.max(whole) * 1000.0) as i64);
    Some(start.with_timezone(&chrono::Utc) + listed)
}

/// A publisher that sends a file as fast as it is read (ffmpeg without `-re`) is read at real
/// time: its media never runs more than the pacer's lead ahead of the clock, and the stream
/// plays, ladder included. Without the pacer, the whole file reached the pipeline in a fraction
/// of a second, the ladder's decoder dropped most of it, and the pipeline failed with the
/// stream still `live` and nothing to play.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_faster_than_real_time_is_read_at_real_time() {
    let app = spawn_app(Backend::Sqlite).await;
    let resp = app
        .post_json_with(
            &app.project_url("/streams"),
            &app.key,
            &json!({"name": "rushed", "qualities": ["240p"]}),
        )
        .await;
    assert_eq!(resp.status(), 201);
    let s: Value = resp.json().await.expect("json");
    let clip = crate::support::clip("vod-testsrc2-640x360-30fps-6s.mp4");
    let _pusher = crate::support::rush_file(&clip, s["ingestUrl"].as_str().expect("ingestUrl"));
    let master_url = s["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let base = master_url.trim_end_matches("master.m3u8").to_string();
    let get = |url: String| {
        let app = &app;
        async move {
            let (status, text) = get_text(app, &url).await;
            (status == 200).then_some(text)
        }
    };
    let master = eventually("the master playlist", Duration::from_secs(30), || get(master_url.clone())).await;
    let variant = |name: &str| {
        master.lines().find(|l| !l.starts_with('#') && l.contains(name)).map(|l| format!("{base}{l}"))
    };
    let (source, rung) = (variant("/source/").expect("source"), variant("/240p/").expect("240p"));
    let until = |url: String| async move { get(url).await.as_deref().and_then(listed_until) };
    let first = eventually("the source lists media", Duration::from_secs(20), || until(source.clone())).await;
    let mut last = first;
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = chrono::Utc::now();
        last = until(source.clone()).await.expect("the source playlist lists media");
        let ahead = (last - now).num_milliseconds() as f64 / 1000.0;
        assert!(ahead <= 4.0, "the source lists media {ahead:.1} s ahead of the clock");
    }
    let advanced = (last - first).num_milliseconds() as f64 / 1000.0;
    assert!(advanced >= 9.0, "the source listed {advanced:.1} s more media in 12 s");
    let rung_until = until(rung).await.expect("the 240p rung lists media");
    let behind = (last - rung_until).num_milliseconds() as f64 / 1000.0;
    assert!(behind <= 3.0, "the 240p rung lists media {behind:.1} s behind the source");
    eprintln!("rushed push: {advanced:.1} s listed in 12 s; 240p {behind:.1} s behind the source");
}

/// A rushed push at a low bitrate: one read of 64 KiB holds about 40 s of 12-kbit/s audio, so
/// the pacer holds the next read for longer than 10 s. Held media counts as media for the 10-s
/// no-media deadline (without that, such a push ended as `no media for 10 s`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rushed_push_at_a_low_bitrate_is_not_taken_for_a_silent_one() {
    let app = spawn_app(Backend::Sqlite).await;
    let s = create_stream(&app, "rushed audio").await;
    let id = s["_id"].as_str().expect("id").to_string();
    let clip = crate::support::clip("audio-aac-12k-120s.mp4");
    let _pusher = crate::support::rush_file(&clip, s["ingestUrl"].as_str().expect("ingestUrl"));
    eventually("live", Duration::from_secs(20), || async {
        (status(&app, &id).await["status"] == "live").then_some(())
    })
    .await;
    let live_at = Instant::now();
    while live_at.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = status(&app, &id).await["status"].clone();
        assert_eq!(now, "live", "{:.1} s after going live", live_at.elapsed().as_secs_f64());
    }
}

/// A publisher that switches its video from H.264 to another codec mid-push: the pipeline
/// cannot take the new caps and refuses every later frame. The push is ended at once with the
/// reason in the log, not left `live` with nothing to play (its keyframes still reached the
/// tee, so no watchdog would have ended it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_that_changes_its_video_codec_is_ended() {
    let app = spawn_app(Backend::Sqlite).await;
    let s = crate::rtmp_limits::create_stream_ending_with_push(&app, "codec change").await;
    let id = s["_id"].as_str().expect("id").to_string();
    let flv = std::fs::read(crate::support::clip("ingest-720p30-2500k-6s.flv")).expect("the clip");
    let tags = flv_tags(&flv);
    assert!(tags.len() > 60, "{} tags", tags.len());
    let (mut sock, mut session) = publish(app.app.rtmp_addr().expect("rtmp"), &credentials(&s)).await;
    let mut message = |kind: u8, ts: u32, data: Vec<u8>| {
        let (data, ts) = (bytes::Bytes::from(data), rml_rtmp::time::RtmpTimestamp::new(ts));
        let packet = match kind {
            8 => session.publish_audio_data(data, ts, false),
            _ => session.publish_video_data(data, ts, false),
        };
        match packet.expect("a media message") {
            rml_rtmp::sessions::ClientSessionResult::OutboundResponse(p) => p.bytes,
            other => panic!("not a packet: {other:?}"),
        }
    };
    let started = Instant::now();
    for (kind, ts, data) in &tags {
        if *kind == 8 || *kind == 9 {
            sock.write_all(&message(*kind, *ts, data.clone())).await.expect("write");
        }
    }
    // The frames sent so far play: the master playlist is there once a segment is.
    let master = s["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    eventually("the master playlist", Duration::from_secs(20), || async {
        (get_text(&app, &master).await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(status(&app, &id).await["status"], "live");
    // The same frames again, as Sorenson H.263 (FLV codec 2) from here on.
    let last = tags.last().map(|t| t.1).unwrap_or(0);
    for (kind, ts, data) in tags.iter().filter(|t| t.0 == 9) {
        let mut body = data.clone();
        body[0] = (body[0] & 0xF0) | 2;
        if sock.write_all(&message(*kind, last + 40 + ts, body)).await.is_err() {
            break; // the server closed the connection
        }
    }
    let after = closed_within(&mut sock, Duration::from_secs(20)).await;
    eventually("the push to end", Duration::from_secs(10), || async {
        (status(&app, &id).await["status"] == "idle").then_some(())
    })
    .await;
    eprintln!("codec change: the push ended {:.1} s after it began", started.elapsed().as_secs_f64());
    assert!(after < Duration::from_secs(10), "ended after {after:?}");
    still_serving(&app, "after a codec change").await;
}
