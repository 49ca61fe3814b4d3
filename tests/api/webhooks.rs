//! Webhooks against a real receiving HTTP server (interface: Webhook signatures; Delivery;
//! Response handling and retries; CONTRACT: Webhooks).

use std::time::Duration;

use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::{json, Value};
use sha2::Sha256;
use sluice::events::catalog::{StreamEventData, VodEventData};
use sluice::events::Event;

use crate::support::receiver::Receiver;
use crate::support::{both_backends, error_message, eventually, spawn_app_with, Backend, TestApp};

both_backends!(
    crud_shows_the_secret_once_and_validates,
    catalog_lists_the_twelve_events,
    deliveries_carry_the_headers_and_a_signature_over_the_raw_bytes,
    retries_follow_the_schedule_with_identical_ids_and_bytes_then_fail,
    consecutive_failures_count_and_reset,
    filtering_and_disabled_webhooks,
    delivery_log_filters_and_limits,
    redeliver_and_test_ping,
    redirects_are_not_followed,
    a_slow_receiver_holds_up_only_its_own_deliveries,
);

pub fn stream_data(app: &TestApp, name: &str) -> StreamEventData {
    StreamEventData {
        id: format!("st_{name}"),
        name: name.into(),
        stream_key: "key123".into(),
        status: sluice::domain::stream::StreamStatus::Live,
        project_id: app.project_id.clone(),
        vod_enabled: false,
        created_at: "2026-11-22T00:00:00.000Z".into(),
        reason: None,
    }
}

fn vod_data(app: &TestApp) -> VodEventData {
    VodEventData {
        id: "vod1".into(),
        name: "clip".into(),
        status: sluice::domain::vod::VodStatus::Failed,
        project_id: app.project_id.clone(),
        output_format: sluice::domain::vod::OutputFormat::Hls,
        playback_url: "http://x/play/vod/vod1/master.m3u8".into(),
        thumbnail_url: "http://x/play/vod/vod1/thumb.jpg".into(),
        source_size: Some(42),
        completed_at: None,
        error: Some("no video stream".into()),
    }
}

/// Creates a webhook through the API; returns (id, secret).
pub async fn create_webhook(app: &TestApp, url: &str, events: Value) -> (String, String) {
    let resp = app
        .post_json_with(&app.project_url("/webhooks"), &app.key, &json!({"url": url, "events": events}))
        .await;
    assert_eq!(resp.status(), 201);
    let w: Value = resp.json().await.unwrap();
    (w["_id"].as_str().unwrap().to_string(), w["secret"].as_str().unwrap().to_string())
}

async fn webhook(app: &TestApp, id: &str) -> Value {
    app.get_with(&app.project_url(&format!("/webhooks/{id}")), &app.key).await.json().await.unwrap()
}

async fn deliveries(app: &TestApp, query: &str) -> Vec<Value> {
    let v: Value = app
        .get_with(&app.project_url(&format!("/webhooks/deliveries{query}")), &app.key)
        .await
        .json()
        .await
        .unwrap();
    v["items"].as_array().unwrap().clone()
}

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

async fn crud_shows_the_secret_once_and_validates(app: TestApp) {
    let url = app.project_url("/webhooks");
    let resp = app
        .post_json_with(&url, &app.key, &json!({"url": "http://127.0.0.1:9/hook", "events": ["stream.live", "stream.live", "vod.failed"], "description": "ops"}))
        .await;
    assert_eq!(resp.status(), 201);
    let created: Value = resp.json().await.unwrap();
    let secret = created["secret"].as_str().unwrap();
    assert!(secret.len() == 32 && secret.bytes().all(|b| b.is_ascii_hexdigit()), "{secret}");
    assert_eq!(created["events"], json!(["stream.live", "vod.failed"]));
    assert_eq!(
        (created["enabled"].as_bool(), created["consecutiveFailures"].as_i64()),
        (Some(true), Some(0))
    );
    let id = created["_id"].as_str().unwrap();

    let listed = app.get_with(&url, &app.key).await.text().await.unwrap();
    assert!(!listed.contains(secret) && !listed.contains("\"secret\""), "{listed}");
    let got = webhook(&app, id).await;
    assert!(got.get("secret").is_none());
    assert_eq!(got["description"], "ops");

    let patched: Value = app
        .with_key(Method::PATCH, &app.project_url(&format!("/webhooks/{id}")), &app.key)
        .json(&json!({"enabled": false, "events": ["*"], "url": "http://127.0.0.1:10/other"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!((patched["enabled"].as_bool(), patched["events"].clone()), (Some(false), json!(["*"])));
    assert_eq!(patched["url"], "http://127.0.0.1:10/other");
    assert!(patched.get("secret").is_none());

    let msg = error_message(app.post_json_with(&url, &app.key, &json!({})).await, 400).await;
    assert_eq!(msg, json!(["url is required", "events is required"]));
    let msg = error_message(
        app.post_json_with(
            &url,
            &app.key,
            &json!({"url": "nope", "events": ["stream.gone"], "description": "x".repeat(201)}),
        )
        .await,
        400,
    )
    .await;
    let msg: Vec<&str> = msg.as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert_eq!(msg.len(), 2, "{msg:?}");
    assert!(msg[0].starts_with("description must be 0 to 200"), "{msg:?}");
    assert!(msg[1].starts_with("events.0 must be * or one of stream.created"), "{msg:?}");
    let msg =
        error_message(app.post_json_with(&url, &app.key, &json!({"url": "nope", "events": []})).await, 400)
            .await;
    assert_eq!(msg, json!(["events must have 1 to 32 elements"]));
    let msg = error_message(
        app.post_json_with(&url, &app.key, &json!({"url": "ftp://x/", "events": ["*"]})).await,
        400,
    )
    .await;
    assert!(msg[0].as_str().unwrap().starts_with("url must be"), "{msg}");

    // Scopes: webhooks:read lists, webhooks:write is needed to change.
    let reader = app.create_key(&["webhooks:read"]).await;
    assert_eq!(app.get_with(&url, &reader).await.status(), 200);
    error_message(
        app.post_json_with(&url, &reader, &json!({"url": "http://127.0.0.1:9/", "events": ["*"]})).await,
        403,
    )
    .await;
    let other = app.create_key(&["streams:write"]).await;
    error_message(app.get_with(&url, &other).await, 403).await;

    let deleted = app
        .with_key(Method::DELETE, &app.project_url(&format!("/webhooks/{id}")), &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    error_message(app.get_with(&app.project_url(&format!("/webhooks/{id}")), &app.key).await, 404).await;
}

async fn catalog_lists_the_twelve_events(app: TestApp) {
    let v: Value = app.get_with(&app.project_url("/webhooks/events"), &app.key).await.json().await.unwrap();
    assert_eq!(
        v["events"],
        json!([
            "stream.created",
            "stream.live",
            "stream.ended",
            "stream.disabled",
            "stream.input_switched",
            "stream.simulcast.live",
            "stream.simulcast.error",
            "vod.uploaded",
            "vod.processing",
            "vod.complete",
            "vod.failed",
            "vod.cancelled"
        ])
    );
}

async fn deliveries_carry_the_headers_and_a_signature_over_the_raw_bytes(app: TestApp) {
    let rx = Receiver::start().await;
    let (_, secret) = create_webhook(&app, &rx.url(), json!(["stream.created", "vod.failed"])).await;
    app.app.emit(&app.project_id, &Event::StreamCreated(stream_data(&app, "cam1"))).await.unwrap();
    app.app.emit(&app.project_id, &Event::VodFailed(vod_data(&app))).await.unwrap();
    let got = rx.wait_for(2, Duration::from_secs(10)).await;
    let first = &got[0];
    assert_eq!(first.header("content-type"), "application/json");
    assert_eq!(first.header("user-agent"), "service-webhook/1.0");
    assert_eq!(first.header("x-service-event"), "stream.created");
    let sig = first.header("x-service-signature");
    assert_eq!(sig, format!("sha256={}", hmac_hex(&secret, &first.body)), "signature over the exact bytes");
    assert!(sluice::events::signing::verify(&secret, &first.body, sig));
    let body = first.json();
    assert_eq!(body["id"], first.id(), "envelope id = X-Service-Delivery");
    assert_eq!(body["event"], "stream.created");
    assert!(body["createdAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        body["data"],
        json!({"id": "st_cam1", "name": "cam1", "streamKey": "key123", "status": "live", "projectId": app.project_id,
               "vodEnabled": false, "createdAt": "2026-11-22T00:00:00.000Z"})
    );
    let second = got[1].json();
    assert_eq!(second["event"], "vod.failed");
    assert_eq!(second["data"]["error"], "no video stream");
    assert_eq!(second["data"]["sourceSize"], 42);
    assert_eq!(second["data"]["playbackUrl"], "http://x/play/vod/vod1/master.m3u8");
    assert_ne!(got[0].id(), got[1].id());
}

async fn retries_follow_the_schedule_with_identical_ids_and_bytes_then_fail(app: TestApp) {
    // Retry scale 0.01: 0, 50 ms, 300 ms, 1.2 s, 6 s.
    let rx = Receiver::start().await;
    rx.answer(500, Duration::ZERO);
    let (hook_id, secret) = create_webhook(&app, &rx.url(), json!(["*"])).await;
    app.app.emit(&app.project_id, &Event::StreamLive(stream_data(&app, "cam"))).await.unwrap();
    let got = rx.wait_for(5, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 5);
    for r in &got[1..] {
        assert_eq!(r.id(), got[0].id(), "same delivery id on every attempt");
        assert_eq!(r.body, got[0].body, "same bytes on every attempt");
        assert_eq!(r.header("x-service-signature"), format!("sha256={}", hmac_hex(&secret, &r.body)));
    }
    let expected = [50u64, 300, 1200, 6000];
    for (i, pair) in got.windows(2).enumerate() {
        let gap = pair[1].at.duration_since(pair[0].at).as_millis() as u64;
        assert!(gap >= expected[i] * 9 / 10, "gap {i}: {gap} ms, want ≥ {} ms", expected[i]);
        assert!(gap <= expected[i] + 2000, "gap {i}: {gap} ms, want about {} ms", expected[i]);
    }
    let d = eventually("the delivery to be marked failed", Duration::from_secs(5), || async {
        let items = deliveries(&app, "").await;
        (items[0]["status"] == "failed").then(|| items[0].clone())
    })
    .await;
    assert_eq!(d["attempts"], 5);
    assert_eq!(d["responseCode"], 500);
    assert!(d["error"].as_str().unwrap().contains("500"));
    assert!(d["nextAttemptAt"].is_null());
    assert_eq!(d["_id"], got[0].id());
    assert_eq!(webhook(&app, &hook_id).await["consecutiveFailures"], 5);
    // No sixth attempt. A webhook's due deliveries leave in order, one at a time, so a test
    // ping queued now arrives after any attempt of the failed delivery still due: once the ping
    // is in, the failed delivery has had its chance to show a sixth one.
    rx.answer(204, Duration::ZERO);
    let marker = ping(&app, &hook_id).await["_id"].as_str().unwrap().to_string();
    let got = rx.wait_for(6, Duration::from_secs(10)).await;
    assert_eq!(got[5].id(), marker, "the ping is the next request after the fifth attempt");
    let got: Vec<_> = got.into_iter().filter(|r| r.id() != marker).collect();
    assert_eq!(got.len(), 5);
}

/// Queues a test ping to `hook_id` (201); returns the queued delivery.
async fn ping(app: &TestApp, hook_id: &str) -> Value {
    let resp = app
        .with_key(Method::POST, &app.project_url(&format!("/webhooks/{hook_id}/test")), &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    resp.json::<Value>().await.unwrap()
}

async fn consecutive_failures_count_and_reset(app: TestApp) {
    let rx = Receiver::start().await;
    rx.answer(503, Duration::ZERO);
    let (hook_id, _) = create_webhook(&app, &rx.url(), json!(["*"])).await;
    app.app.emit(&app.project_id, &Event::StreamLive(stream_data(&app, "cam"))).await.unwrap();
    rx.wait_for(2, Duration::from_secs(10)).await;
    eventually("two failures counted", Duration::from_secs(5), || async {
        (webhook(&app, &hook_id).await["consecutiveFailures"].as_i64() == Some(2)).then_some(())
    })
    .await;
    rx.answer(204, Duration::ZERO);
    let got = rx.wait_for(3, Duration::from_secs(10)).await;
    assert_eq!(got[2].answered, 204);
    eventually("the counter to reset", Duration::from_secs(5), || async {
        (webhook(&app, &hook_id).await["consecutiveFailures"].as_i64() == Some(0)).then_some(())
    })
    .await;
    let d = &deliveries(&app, "").await[0];
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_i64(), d["responseCode"].as_i64()),
        (Some("success"), Some(3), Some(204))
    );
}

async fn filtering_and_disabled_webhooks(app: TestApp) {
    let (live_rx, all_rx, off_rx) =
        (Receiver::start().await, Receiver::start().await, Receiver::start().await);
    let (live_id, _) = create_webhook(&app, &live_rx.url(), json!(["stream.live"])).await;
    create_webhook(&app, &all_rx.url(), json!(["*"])).await;
    let (off_id, _) = create_webhook(&app, &off_rx.url(), json!(["*"])).await;
    let resp = app
        .with_key(Method::PATCH, &app.project_url(&format!("/webhooks/{off_id}")), &app.key)
        .json(&json!({"enabled": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // A webhook of another project hears nothing of this one.
    let other_key = app.other_project("other").await;
    let other_rx = Receiver::start().await;
    let resp = app
        .post_json_with(
            &app.url("/v1/projects/other/webhooks"),
            &other_key,
            &json!({"url": other_rx.url(), "events": ["*"]}),
        )
        .await;
    assert_eq!(resp.status(), 201);

    app.app.emit(&app.project_id, &Event::StreamCreated(stream_data(&app, "a"))).await.unwrap();
    app.app.emit(&app.project_id, &Event::StreamLive(stream_data(&app, "b"))).await.unwrap();
    app.app.emit(&app.project_id, &Event::VodFailed(vod_data(&app))).await.unwrap();

    let all = all_rx.wait_for(3, Duration::from_secs(10)).await;
    let events: Vec<String> = all.iter().map(|r| r.header("x-service-event").to_string()).collect();
    assert_eq!(events, ["stream.created", "stream.live", "vod.failed"], "in the order they happened");
    let live = live_rx.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(live[0].json()["data"]["name"], "b");
    // Nothing was queued for the disabled webhook or the other project: their logs are empty.
    assert!(deliveries(&app, &format!("?webhookId={off_id}")).await.is_empty());
    assert_eq!(deliveries(&app, &format!("?webhookId={live_id}")).await.len(), 1);
    let other: Value = app
        .get_with(&app.url("/v1/projects/other/webhooks/deliveries"), &other_key)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(other["items"], json!([]));
    assert!(off_rx.received().is_empty() && other_rx.received().is_empty());
    assert_eq!(live_rx.received().len(), 1);
}

async fn delivery_log_filters_and_limits(app: TestApp) {
    let (a_rx, b_rx) = (Receiver::start().await, Receiver::start().await);
    let (a, _) = create_webhook(&app, &a_rx.url(), json!(["stream.live"])).await;
    let (b, _) = create_webhook(&app, &b_rx.url(), json!(["stream.ended"])).await;
    for i in 0..55 {
        app.app.emit(&app.project_id, &Event::StreamLive(stream_data(&app, &format!("s{i}")))).await.unwrap();
    }
    app.app.emit(&app.project_id, &Event::StreamEnded(stream_data(&app, "end"))).await.unwrap();
    a_rx.wait_for(55, Duration::from_secs(20)).await;
    b_rx.wait_for(1, Duration::from_secs(10)).await;

    let default = deliveries(&app, "").await;
    assert_eq!(default.len(), 50, "default limit 50");
    assert_eq!(default[0]["event"], "stream.ended", "newest first");
    let only_a = deliveries(&app, &format!("?webhookId={a}&limit=200")).await;
    assert_eq!(only_a.len(), 55);
    assert!(only_a.iter().all(|d| d["webhookId"] == a.as_str() && d["status"] == "success"));
    let only_b = deliveries(&app, &format!("?webhookId={b}")).await;
    assert_eq!(only_b.len(), 1);
    assert_eq!(only_b[0]["responseCode"], 200);
    let two = deliveries(&app, "?limit=2").await;
    assert_eq!(two.len(), 2);
    let msg =
        error_message(app.get_with(&app.project_url("/webhooks/deliveries?limit=201"), &app.key).await, 400)
            .await;
    assert_eq!(msg, json!(["limit must be an integer from 1 to 200"]));
}

async fn redeliver_and_test_ping(app: TestApp) {
    let rx = Receiver::start().await;
    let (hook_id, secret) = create_webhook(&app, &rx.url(), json!(["vod.complete"])).await;
    let queued = ping(&app, &hook_id).await;
    assert_eq!(queued["event"], "webhook.test");
    let got = rx.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got[0].id(), queued["_id"].as_str().unwrap());
    assert_eq!(got[0].header("x-service-event"), "webhook.test");
    assert!(sluice::events::signing::verify(&secret, &got[0].body, got[0].header("x-service-signature")));
    assert_eq!(got[0].json()["data"]["webhookId"], hook_id.as_str());

    // Redeliver the finished ping: same id, same bytes.
    let id = queued["_id"].as_str().unwrap();
    eventually("the ping to be recorded", Duration::from_secs(5), || async {
        (deliveries(&app, "").await[0]["status"] == "success").then_some(())
    })
    .await;
    rx.answer(200, Duration::from_millis(1500));
    let resp = app
        .with_key(Method::POST, &app.project_url(&format!("/webhooks/deliveries/{id}/redeliver")), &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let requeued: Value = resp.json().await.unwrap();
    assert_eq!((requeued["status"].as_str(), requeued["attempts"].as_i64()), (Some("pending"), Some(0)));
    // While it is pending, a second redeliver is a conflict.
    let resp = app
        .with_key(Method::POST, &app.project_url(&format!("/webhooks/deliveries/{id}/redeliver")), &app.key)
        .send()
        .await
        .unwrap();
    error_message(resp, 409).await;
    let got = rx.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(got[1].id(), got[0].id());
    assert_eq!(got[1].body, got[0].body);
    let resp = app
        .with_key(Method::POST, &app.project_url("/webhooks/deliveries/nope/redeliver"), &app.key)
        .send()
        .await
        .unwrap();
    error_message(resp, 404).await;

    // A disabled webhook gets no test ping.
    app.with_key(Method::PATCH, &app.project_url(&format!("/webhooks/{hook_id}")), &app.key)
        .json(&json!({"enabled": false}))
        .send()
        .await
        .unwrap();
    let resp = app
        .with_key(Method::POST, &app.project_url(&format!("/webhooks/{hook_id}/test")), &app.key)
        .send()
        .await
        .unwrap();
    error_message(resp, 409).await;
}

async fn redirects_are_not_followed(app: TestApp) {
    let rx = Receiver::start().await;
    create_webhook(&app, &format!("{}/redirect", rx.base), json!(["*"])).await;
    app.app.emit(&app.project_id, &Event::StreamLive(stream_data(&app, "cam"))).await.unwrap();
    let d = eventually("a first attempt", Duration::from_secs(10), || async {
        let items = deliveries(&app, "").await;
        (items[0]["attempts"].as_i64() >= Some(1)).then(|| items[0].clone())
    })
    .await;
    assert_eq!(d["responseCode"], 307);
    assert!(rx.received().is_empty(), "the redirect target was not called");
}

/// Production mode: https only, and no loopback/private targets at create or at delivery.
#[tokio::test]
async fn production_mode_refuses_private_targets() {
    let app = spawn_app_with(Backend::Sqlite, |args| {
        args.mode = Some(sluice::config::Mode::Production);
    })
    .await;
    let url = app.project_url("/webhooks");
    for (target, problem) in [
        ("http://93.184.216.34/hook", "must use https"),
        ("https://127.0.0.1/hook", "loopback"),
        ("https://[::1]/hook", "loopback"),
        ("https://10.1.2.3/hook", "private"),
        ("https://169.254.169.254/latest", "link-local"),
        ("https://localhost/hook", "must not resolve to"),
    ] {
        let msg = error_message(
            app.post_json_with(&url, &app.key, &json!({"url": target, "events": ["*"]})).await,
            400,
        )
        .await;
        assert!(msg[0].as_str().unwrap().contains(problem), "{target}: {msg}");
    }
    let (id, _) = create_webhook(&app, "https://93.184.216.34/hook", json!(["*"])).await;

    // At delivery the name is resolved again: one that now points inside gets a failed attempt
    // (as after DNS rebinding), and the receiver on loopback hears nothing.
    let rx = Receiver::start().await;
    sqlx::query("UPDATE webhooks SET url = $1 WHERE id = $2")
        .bind(format!("https://localhost:{}/hook", rx.port()))
        .bind(&id)
        .execute(app.db.pool())
        .await
        .unwrap();
    app.app.emit(&app.project_id, &Event::StreamLive(stream_data(&app, "cam"))).await.unwrap();
    let d = eventually("a failed first attempt", Duration::from_secs(10), || async {
        let items = deliveries(&app, "").await;
        (items[0]["attempts"].as_i64() >= Some(1)).then(|| items[0].clone())
    })
    .await;
    assert!(d["error"].as_str().unwrap().contains("no public address"), "{d}");
    assert!(d["responseCode"].is_null());
    assert!(rx.received().is_empty());
}

async fn a_slow_receiver_holds_up_only_its_own_deliveries(app: TestApp) {
    let (slow, fast) = (Receiver::start().await, Receiver::start().await);
    slow.answer(200, Duration::from_secs(4));
    create_webhook(&app, &slow.url(), json!(["*"])).await;
    create_webhook(&app, &fast.url(), json!(["*"])).await;
    for name in ["a", "b", "c"] {
        app.app.emit(&app.project_id, &Event::StreamLive(stream_data(&app, name))).await.unwrap();
    }
    let got = fast.wait_for(3, Duration::from_secs(3)).await;
    let names: Vec<Value> = got.iter().map(|r| r.json()["data"]["name"].clone()).collect();
    assert_eq!(names, [json!("a"), json!("b"), json!("c")]);
    // The slow one is still on its first delivery: its deliveries go one at a time, in order.
    assert_eq!(slow.arrivals(), 1);
    assert!(slow.received().is_empty());
}
