//! The stream lifecycle's events around a live push (CONTRACT: Recording and credits — "Whenever
//! a live stream is disabled (manual, deleted, credits, no input), `stream.ended` is sent before
//! `stream.disabled`"): a PATCH `enabled: false` and a DELETE of a live stream each give exactly
//! one `stream.ended` and then one `stream.disabled`, and the push's own end afterwards adds
//! nothing. The delivery log (written in the same transactions as the moves) is read once this
//! process holds no session any more, so a late extra event cannot slip by.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::receiver::Receiver;
use crate::support::{both_backends, eventually, ffmpeg_push, Killed, TestApp};
use crate::webhooks::create_webhook;

both_backends!(disabling_or_deleting_a_live_stream_sends_ended_then_disabled_once);

/// The test suite's publisher: 320×240 at 15 fps, a keyframe every 2 s.
pub fn push(url: &str) -> Killed {
    ffmpeg_push(url, "testsrc=size=320x240:rate=15", 30, &[])
}

pub async fn stream(app: &TestApp, id: &str) -> Value {
    app.get_with(&app.project_url(&format!("/streams/{id}")), &app.key).await.json().await.expect("json")
}

pub async fn wait_status(app: &TestApp, id: &str, want: &str, within: Duration) {
    eventually(&format!("status {want}"), within, || async {
        (stream(app, id).await["status"] == want).then_some(())
    })
    .await;
}

/// Waits until the app holds no push session: the end of the killed push has been recorded.
pub async fn no_sessions(app: &TestApp) {
    eventually("the push session to close", Duration::from_secs(15), || async {
        (app.app.push_sessions() == 0).then_some(())
    })
    .await;
}

/// The event of every delivery queued so far, oldest first (the log is newest first).
pub async fn logged(app: &TestApp) -> Vec<String> {
    let log: Value = app
        .get_with(&app.project_url("/webhooks/deliveries?limit=200"), &app.key)
        .await
        .json()
        .await
        .expect("json");
    let mut events: Vec<String> = log["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|d| d["event"].as_str().expect("event").to_string())
        .collect();
    events.reverse();
    events
}

/// `(event, data.reason)` of what the receiver got, in arrival order.
pub fn received(rx: &Receiver) -> Vec<(String, Option<String>)> {
    rx.received()
        .iter()
        .map(|r| {
            let b = r.json();
            (
                b["event"].as_str().expect("event").to_string(),
                b["data"]["reason"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
    list.iter().map(|(e, r)| (e.to_string(), r.map(str::to_string))).collect()
}

async fn disabling_or_deleting_a_live_stream_sends_ended_then_disabled_once(app: TestApp) {
    let rx = Receiver::start().await;
    create_webhook(&app, &rx.url(), json!(["stream.live", "stream.ended", "stream.disabled"])).await;
    let created = app.post_json_with(&app.project_url("/streams"), &app.key, &json!({"name": "cam"})).await;
    assert_eq!(created.status(), 201);
    let s: Value = created.json().await.expect("json");
    let id = s["_id"].as_str().expect("id").to_string();
    let url = s["ingestUrl"].as_str().expect("ingestUrl").to_string();
    let stream_url = app.project_url(&format!("/streams/{id}"));

    // PATCH enabled=false on the live stream, once its input is recorded (the answer must not
    // show the input of the push it ended).
    let mut pusher = push(&url);
    wait_status(&app, &id, "live", Duration::from_secs(20)).await;
    eventually("the push's input recorded", Duration::from_secs(20), || async {
        (stream(&app, &id).await["input"]["videoCodec"] == "h264").then_some(())
    })
    .await;
    let off =
        app.with_key(Method::PATCH, &stream_url, &app.key).json(&json!({"enabled": false})).send().await;
    let off: Value = off.expect("patch").json().await.expect("json");
    assert_eq!((off["status"].as_str(), off["disabledReason"].as_str()), (Some("disabled"), Some("manual")));
    assert!(off["input"].is_null(), "the push's input is cleared with the disable");
    pusher.exits(Duration::from_secs(10)).await;
    no_sessions(&app).await;
    assert_eq!(
        logged(&app).await,
        ["stream.live", "stream.ended", "stream.disabled"],
        "one ended, then one disabled"
    );
    rx.wait_for(3, Duration::from_secs(10)).await;
    let manual = [("stream.live", None), ("stream.ended", None), ("stream.disabled", Some("manual"))];
    assert_eq!(received(&rx), pairs(&manual));
    assert_eq!(stream(&app, &id).await["status"], "disabled", "the push's end does not undo the disable");

    // Re-enabled, pushed again, and DELETEd while live.
    let on = app.with_key(Method::PATCH, &stream_url, &app.key).json(&json!({"enabled": true})).send().await;
    assert_eq!(on.expect("patch").status(), 200);
    let mut pusher = push(&url);
    wait_status(&app, &id, "live", Duration::from_secs(20)).await;
    let deleted = app.with_key(Method::DELETE, &stream_url, &app.key).send().await.expect("delete");
    assert_eq!(deleted.status(), 200);
    pusher.exits(Duration::from_secs(10)).await;
    no_sessions(&app).await;
    let events = ["stream.live", "stream.ended", "stream.disabled"];
    assert_eq!(logged(&app).await, [events, events].concat());
    rx.wait_for(6, Duration::from_secs(10)).await;
    let all = [
        ("stream.live", None),
        ("stream.ended", None),
        ("stream.disabled", Some("manual")),
        ("stream.live", None),
        ("stream.ended", None),
        ("stream.disabled", Some("deleted")),
    ];
    assert_eq!(received(&rx), pairs(&all));
    let s = stream(&app, &id).await;
    assert_eq!((s["status"].as_str(), s["disabledReason"].as_str()), (Some("disabled"), Some("deleted")));
}
