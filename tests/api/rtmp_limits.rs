//! No RTMP peer can take the server down, and silent pushes end: a publish that sends no media,
//! a peer that never finishes the handshake, garbage, and a flood of connections are all bounded;
//! the server keeps serving real pushes. Also the idle auto-disable (`no_input`). Floods and
//! hostile bytes: `rtmp_hostile.rs`.

use std::time::{Duration, Instant};

use rml_rtmp::handshake::{Handshake, HandshakeProcessResult, PeerType};
use rml_rtmp::sessions::{
    ClientSession, ClientSessionConfig, ClientSessionEvent, ClientSessionResult, PublishRequestType,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::receiver::Receiver;
use crate::support::{eventually, spawn_app, spawn_app_with, Backend, TestApp};
use crate::webhooks::create_webhook;

pub async fn create_stream(app: &TestApp, name: &str) -> Value {
    let resp = app.post_json_with(&app.project_url("/streams"), &app.key, &json!({"name": name})).await;
    assert_eq!(resp.status(), 201);
    resp.json().await.unwrap()
}

/// A stream whose push session ends with its push (`reconnectWindow: 0`): for tests of when a
/// push ends, which a reconnect window would otherwise cover with the slate.
pub async fn create_stream_ending_with_push(app: &TestApp, name: &str) -> Value {
    let body = json!({"name": name, "reconnectWindow": 0});
    let resp = app.post_json_with(&app.project_url("/streams"), &app.key, &body).await;
    assert_eq!(resp.status(), 201);
    resp.json().await.unwrap()
}

pub async fn status(app: &TestApp, id: &str) -> Value {
    app.get_with(&app.project_url(&format!("/streams/{id}")), &app.key).await.json().await.unwrap()
}

fn write_results(out: &mut Vec<u8>, results: Vec<ClientSessionResult>, events: &mut Vec<ClientSessionEvent>) {
    for r in results {
        match r {
            ClientSessionResult::OutboundResponse(p) => out.extend(p.bytes),
            ClientSessionResult::RaisedEvent(e) => events.push(e),
            _ => {}
        }
    }
}

/// Handshakes, connects as ffmpeg would and publishes `stream_name`; returns the open socket
/// once the publish is accepted. Sends no media.
pub async fn publish_silently(addr: std::net::SocketAddr, stream_name: &str) -> TcpStream {
    publish(addr, stream_name).await.0
}

/// [`publish_silently`], with the client session that can then send media on the socket.
pub async fn publish(addr: std::net::SocketAddr, stream_name: &str) -> (TcpStream, ClientSession) {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let mut hs = Handshake::new(PeerType::Client);
    sock.write_all(&hs.generate_outbound_p0_and_p1().unwrap()).await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let leftover = loop {
        let n = sock.read(&mut buf).await.unwrap();
        assert!(n > 0, "server closed during the handshake");
        match hs.process_bytes(&buf[..n]).unwrap() {
            HandshakeProcessResult::InProgress { response_bytes } => {
                sock.write_all(&response_bytes).await.unwrap()
            }
            HandshakeProcessResult::Completed { response_bytes, remaining_bytes } => {
                sock.write_all(&response_bytes).await.unwrap();
                break remaining_bytes;
            }
        }
    };
    let mut config = ClientSessionConfig::new();
    config.flash_version = "FMLE/3.0 (compatible; Lavf59.27.100)".into();
    let (mut session, initial) = ClientSession::new(config).unwrap();
    let (mut out, mut events) = (Vec::new(), Vec::new());
    write_results(&mut out, initial, &mut events);
    write_results(&mut out, session.handle_input(&leftover).unwrap(), &mut events);
    write_results(&mut out, vec![session.request_connection("live".into()).unwrap()], &mut events);
    sock.write_all(&out).await.unwrap();
    let mut publishing_requested = false;
    loop {
        let n = sock.read(&mut buf).await.unwrap();
        assert!(n > 0, "server closed before the publish was accepted");
        let (mut out, mut events) = (Vec::new(), Vec::new());
        write_results(&mut out, session.handle_input(&buf[..n]).unwrap(), &mut events);
        for e in &events {
            match e {
                ClientSessionEvent::ConnectionRequestAccepted if !publishing_requested => {
                    publishing_requested = true;
                    let r = session.request_publishing(stream_name.into(), PublishRequestType::Live).unwrap();
                    write_results(&mut out, vec![r], &mut Vec::new());
                }
                ClientSessionEvent::PublishRequestAccepted => return (sock, session),
                ClientSessionEvent::ConnectionRequestRejected { description } => {
                    panic!("connect refused: {description}")
                }
                _ => {}
            }
        }
        sock.write_all(&out).await.unwrap();
    }
}

/// Reads until the server closes the connection; returns how long that took.
pub async fn closed_within(sock: &mut TcpStream, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = vec![0u8; 4096];
    loop {
        match tokio::time::timeout(limit.saturating_sub(started.elapsed()), sock.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => continue,
            Err(_) => panic!("the server did not close the connection within {limit:?}"),
        }
    }
}

pub fn credentials(s: &Value) -> String {
    format!(
        "{}?user={}&pass={}",
        s["streamKey"].as_str().unwrap(),
        s["pushUsername"].as_str().unwrap(),
        s["pushPassword"].as_str().unwrap()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_without_media_ends_after_10_s() {
    let app = spawn_app(Backend::Sqlite).await;
    let rx = Receiver::start().await;
    create_webhook(&app, &rx.url(), json!(["stream.live", "stream.ended"])).await;
    let s = create_stream_ending_with_push(&app, "silent").await;
    let id = s["_id"].as_str().unwrap();
    let addr = app.app.rtmp_addr().unwrap();
    let mut sock = publish_silently(addr, &credentials(&s)).await;
    assert_eq!(status(&app, id).await["status"], "live");
    let took = closed_within(&mut sock, Duration::from_secs(15)).await;
    assert!(took >= Duration::from_secs(8), "ended after {took:?}, not before about 10 s");
    eventually("idle again", Duration::from_secs(5), || async {
        (status(&app, id).await["status"] == "idle").then_some(())
    })
    .await;
    let got = rx.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(got[1].json()["event"], "stream.ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_garbage_peers_are_bounded() {
    let app = spawn_app(Backend::Sqlite).await;
    let addr = app.app.rtmp_addr().unwrap();

    // A peer that sends half a handshake and waits is closed after the start deadline.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(&[3u8; 100]).await.unwrap();
    // Garbage is closed at once.
    let mut garbage = TcpStream::connect(addr).await.unwrap();
    garbage.write_all(&[0x42u8; 4000]).await.unwrap();
    assert!(closed_within(&mut garbage, Duration::from_secs(3)).await < Duration::from_secs(3));

    // The slow one is closed by the deadline, not before.
    let took = closed_within(&mut slow, Duration::from_secs(15)).await;
    assert!(took >= Duration::from_secs(5), "closed after {took:?}");

    // And the server still takes a real push.
    let s = create_stream(&app, "after").await;
    let _sock = publish_silently(addr, &credentials(&s)).await;
    assert_eq!(status(&app, s["_id"].as_str().unwrap()).await["status"], "live");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_without_a_push_are_disabled_with_no_input() {
    let app = spawn_app_with(Backend::Sqlite, |a| a.stream_idle_disable = Some(2)).await;
    let rx = Receiver::start().await;
    create_webhook(&app, &rx.url(), json!(["stream.disabled"])).await;
    let s = create_stream(&app, "forgotten").await;
    let id = s["_id"].as_str().unwrap();
    let got = rx.wait_for(1, Duration::from_secs(15)).await;
    let data = got[0].json()["data"].clone();
    assert_eq!((data["id"].as_str(), data["reason"].as_str()), (Some(id), Some("no_input")));
    let s = status(&app, id).await;
    assert_eq!((s["status"].as_str(), s["disabledReason"].as_str()), (Some("disabled"), Some("no_input")));
    // Re-enabled, it is idle again and its clock starts over.
    let resp = app
        .with_key(reqwest::Method::PATCH, &app.project_url(&format!("/streams/{id}")), &app.key)
        .json(&json!({"enabled": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let reenabled_at = Instant::now();
    let got = rx.wait_for(2, Duration::from_secs(15)).await;
    assert!(
        reenabled_at.elapsed() >= Duration::from_secs(2),
        "disabled again only after another idle period"
    );
    assert_eq!(got[1].json()["data"]["reason"], "no_input");
}
