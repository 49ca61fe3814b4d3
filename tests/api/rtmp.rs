//! RTMP ingest with real clients: ffmpeg pushing to `ingestUrl`, and GStreamer's rtmp2sink
//! answering the Adobe challenge with the push username and password (what OBS's "Use
//! authentication" does). Status moves and `stream.live` / `stream.ended` are observed through
//! GET and a real webhook receiver.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::receiver::Receiver;
use crate::support::{both_backends, eventually, ffmpeg_push, rtmp2sink, Killed, TestApp};
use crate::webhooks::create_webhook;

both_backends!(
    ffmpeg_push_goes_live_then_ends,
    adobe_authentication_with_rtmp2sink,
    refused_pushes_never_go_live
);

/// The test suite's publisher: 320×240 at 15 fps, a keyframe every 2 s.
fn push(url: &str) -> Killed {
    ffmpeg_push(url, "testsrc=size=320x240:rate=15", 30, &[])
}

async fn create_stream(app: &TestApp, name: &str) -> Value {
    let resp = app.post_json_with(&app.project_url("/streams"), &app.key, &json!({"name": name})).await;
    assert_eq!(resp.status(), 201);
    resp.json().await.unwrap()
}

async fn status(app: &TestApp, id: &str) -> String {
    let s: Value =
        app.get_with(&app.project_url(&format!("/streams/{id}")), &app.key).await.json().await.unwrap();
    s["status"].as_str().unwrap().to_string()
}

async fn wait_status(app: &TestApp, id: &str, want: &str, within: Duration) {
    eventually(&format!("status {want}"), within, || async { (status(app, id).await == want).then_some(()) })
        .await;
}

fn events_of(rx: &Receiver) -> Vec<(String, String)> {
    rx.received()
        .iter()
        .map(|r| {
            let b = r.json();
            (b["event"].as_str().unwrap().to_string(), b["data"]["id"].as_str().unwrap().to_string())
        })
        .collect()
}

async fn ffmpeg_push_goes_live_then_ends(app: TestApp) {
    let rx = Receiver::start().await;
    create_webhook(&app, &rx.url(), json!(["stream.live", "stream.ended"])).await;
    let s = create_stream(&app, "cam").await;
    let id = s["_id"].as_str().unwrap();
    let mut pusher = push(s["ingestUrl"].as_str().unwrap());
    wait_status(&app, id, "live", Duration::from_secs(20)).await;
    let live: Value =
        app.get_with(&app.project_url(&format!("/streams/{id}")), &app.key).await.json().await.unwrap();
    assert!(live["lastPushAt"].is_string());
    rx.wait_for(1, Duration::from_secs(10)).await;

    // The input format (from the ingest pipeline's caps) and the measured bitrate are recorded.
    let input = eventually("the input format and bitrate", Duration::from_secs(20), || async {
        let s: Value =
            app.get_with(&app.project_url(&format!("/streams/{id}")), &app.key).await.json().await.unwrap();
        let input = s["input"].clone();
        (input["bitrateKbps"].as_i64().is_some() && input["audioCodec"].is_string()).then_some(input)
    })
    .await;
    assert_eq!(input["videoCodec"], "h264");
    assert_eq!((input["width"].as_i64(), input["height"].as_i64()), (Some(320), Some(240)));
    assert_eq!(input["frameRate"], 15.0);
    assert_eq!((input["audioCodec"].as_str(), input["audioSampleRate"].as_i64()), (Some("aac"), Some(44100)));
    let kbps = input["bitrateKbps"].as_i64().unwrap();
    assert!((20..5000).contains(&kbps), "measured {kbps} kbps");

    // A second publisher is refused while the first is live.
    let mut second = push(s["ingestUrl"].as_str().unwrap());
    second.exits(Duration::from_secs(20)).await;
    assert_eq!(status(&app, id).await, "live");

    // The push disconnects: idle again, and stream.ended.
    let _ = pusher.0.kill();
    wait_status(&app, id, "idle", Duration::from_secs(20)).await;
    let idle: Value =
        app.get_with(&app.project_url(&format!("/streams/{id}")), &app.key).await.json().await.unwrap();
    assert!(idle["input"].is_null(), "no input once the push ended");
    rx.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(
        events_of(&rx),
        [("stream.live".to_string(), id.to_string()), ("stream.ended".to_string(), id.to_string())]
    );

    // DELETE ends a live push at once.
    let _pusher = push(s["ingestUrl"].as_str().unwrap());
    wait_status(&app, id, "live", Duration::from_secs(20)).await;
    let resp = app
        .with_key(Method::DELETE, &app.project_url(&format!("/streams/{id}")), &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    rx.wait_for(4, Duration::from_secs(15)).await;
    let ended = events_of(&rx);
    assert_eq!(ended[3].0, "stream.ended");
    assert_eq!(status(&app, id).await, "disabled", "a deleted stream stays disabled after its push ends");
}

async fn adobe_authentication_with_rtmp2sink(app: TestApp) {
    let rx = Receiver::start().await;
    create_webhook(&app, &rx.url(), json!(["stream.live", "stream.ended"])).await;
    let s = create_stream(&app, "obs").await;
    let id = s["_id"].as_str().unwrap();
    let location =
        format!("{}/{}", s["obs"]["server"].as_str().unwrap(), s["obs"]["streamKey"].as_str().unwrap());
    let user = s["pushUsername"].as_str().unwrap();

    // Wrong password: the challenge is answered wrongly and the stream never goes live.
    let mut wrong = rtmp2sink(&location, user, "not-the-password");
    wrong.exits(Duration::from_secs(20)).await;
    assert_eq!(status(&app, id).await, "idle");

    let mut pusher = rtmp2sink(&location, user, s["pushPassword"].as_str().unwrap());
    wait_status(&app, id, "live", Duration::from_secs(20)).await;
    let _ = pusher.0.kill();
    wait_status(&app, id, "idle", Duration::from_secs(20)).await;
    rx.wait_for(2, Duration::from_secs(10)).await;
    let names: Vec<String> = events_of(&rx).into_iter().map(|(e, _)| e).collect();
    assert_eq!(names, ["stream.live", "stream.ended"]);
}

async fn refused_pushes_never_go_live(app: TestApp) {
    let rx = Receiver::start().await;
    create_webhook(&app, &rx.url(), json!(["stream.live"])).await;
    let s = create_stream(&app, "cam").await;
    let id = s["_id"].as_str().unwrap();
    let ingest = s["ingestUrl"].as_str().unwrap().to_string();
    let key = s["streamKey"].as_str().unwrap();

    let wrong_key = ingest.replace(key, "not-a-key");
    let pass = s["pushPassword"].as_str().unwrap();
    let wrong_pass = ingest.replace(&format!("pass={pass}"), "pass=wrong");
    let no_creds = ingest.split('?').next().unwrap().to_string();
    for url in [wrong_key, wrong_pass, no_creds] {
        let mut p = push(&url);
        p.exits(Duration::from_secs(20)).await;
    }
    // Rotated-away credentials.
    let resp = app
        .with_key(Method::POST, &app.project_url(&format!("/streams/{id}/rotate-push")), &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    push(&ingest).exits(Duration::from_secs(20)).await;
    // A disabled stream.
    let rotated: Value = resp.json().await.unwrap();
    let resp = app
        .with_key(Method::PATCH, &app.project_url(&format!("/streams/{id}")), &app.key)
        .json(&json!({"enabled": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    push(rotated["ingestUrl"].as_str().unwrap()).exits(Duration::from_secs(20)).await;

    assert_eq!(status(&app, id).await, "disabled");
    let s: Value =
        app.get_with(&app.project_url(&format!("/streams/{id}")), &app.key).await.json().await.unwrap();
    assert!(s["lastPushAt"].is_null(), "no push session was ever opened");
    let log: Value =
        app.get_with(&app.project_url("/webhooks/deliveries"), &app.key).await.json().await.unwrap();
    assert_eq!(log["items"], json!([]), "stream.live never fired");
    assert!(rx.received().is_empty());
}
