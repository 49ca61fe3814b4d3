//! Streams API: defaults, credentials, validation, list filters, the status moves and their
//! events (interface: Streams; CONTRACT: Streams).

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use sluice::domain::stream::push_password_matches;

use crate::support::receiver::Receiver;
use crate::support::{both_backends, error_message, eventually, TestApp};
use crate::webhooks::create_webhook;

both_backends!(
    create_applies_defaults_and_returns_credentials_once,
    create_validates_every_field,
    list_filters_and_paginates,
    disable_enable_delete_move_status_and_fire_events,
    rotate_push_replaces_the_credentials,
    stream_scopes,
);

/// Creates a stream (201) and returns its record.
pub async fn create(app: &TestApp, body: Value) -> Value {
    let resp = app.post_json_with(&app.project_url("/streams"), &app.key, &body).await;
    assert_eq!(resp.status(), 201);
    resp.json().await.unwrap()
}

async fn patch(app: &TestApp, id: &str, body: Value) -> reqwest::Response {
    app.with_key(Method::PATCH, &app.project_url(&format!("/streams/{id}")), &app.key)
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The stored push credentials, the verifier opened (it is kept sealed under the master key).
async fn stored(app: &TestApp, id: &str) -> (String, String, String) {
    let (user, salt, sealed): (String, String, String) =
        sqlx::query_as("SELECT push_username, push_salt, push_verifier FROM streams WHERE id = $1")
            .bind(id)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert!(sluice::domain::content_key::is_sealed(&sealed), "the verifier is sealed at rest");
    let context = sluice::store::secrets::push_context(id);
    (user, salt, app.app.master_key.open_text(&sealed, &context).expect("opens"))
}

async fn create_applies_defaults_and_returns_credentials_once(app: TestApp) {
    let rx = Receiver::start().await;
    create_webhook(&app, &rx.url(), json!(["stream.created"])).await;
    let s = create(&app, json!({"name": "Studio A"})).await;
    let id = s["_id"].as_str().unwrap();
    let key = s["streamKey"].as_str().unwrap();
    let (user, pass) = (s["pushUsername"].as_str().unwrap(), s["pushPassword"].as_str().unwrap());
    assert_eq!(s["status"], "idle");
    assert_eq!(s["qualities"], json!(["720p", "480p"]));
    assert_eq!(s["protocols"], json!(["llhls"]));
    assert_eq!(
        (s["vodEnabled"].as_bool(), s["dvrEnabled"].as_bool(), s["drmEnabled"].as_bool()),
        (Some(false), Some(false), Some(false))
    );
    assert_eq!(s["dvrDuration"], 3600);
    assert_eq!(s["reconnectWindow"], 10, "the contract's default window");
    let rtmp = app.app.rtmp_port();
    assert_eq!(s["rtmpPort"], rtmp);
    assert_eq!(s["ingestUrl"], format!("rtmp://127.0.0.1:{rtmp}/live/{key}?user={user}&pass={pass}"));
    assert_eq!(s["obs"], json!({"server": format!("rtmp://127.0.0.1:{rtmp}/live"), "streamKey": key}));
    let play = app.app.playback_base();
    assert_eq!(play, format!("{}/play", app.base), "the bound port, not the 0 asked for");
    assert_eq!(s["playbackUrls"], json!({"hls": format!("{play}/live/{id}/master.m3u8")}));
    assert!(s["whipUrl"].as_str().unwrap().ends_with(&format!("/v1/whip/{key}")));
    assert!(pass.len() >= 32);

    // The password is never shown again, and only a verifier is stored.
    let got = app.get_with(&app.project_url(&format!("/streams/{id}")), &app.key).await.text().await.unwrap();
    assert!(!got.contains(pass) && !got.contains("pushPassword") && !got.contains("ingestUrl"), "{got}");
    let (u, salt, verifier) = stored(&app, id).await;
    assert!(push_password_matches(&u, &salt, pass, &verifier));
    assert!(!verifier.contains(pass));

    // stream.created reached the webhook with the interface's payload.
    let hook = rx.wait_for(1, Duration::from_secs(10)).await;
    let body = hook[0].json();
    assert_eq!(body["event"], "stream.created");
    assert_eq!(
        body["data"],
        json!({"id": id, "name": "Studio A", "streamKey": key, "status": "idle", "projectId": app.project_id,
               "vodEnabled": false, "createdAt": s["createdAt"]})
    );

    let all = create(&app, json!({"name": "Full", "qualities": ["480p", "1080p", "480p"], "protocols": ["webrtc", "rtsp", "llhls"],
        "vodEnabled": true, "dvrEnabled": true, "dvrDuration": 60, "drmEnabled": true})).await;
    assert_eq!(all["qualities"], json!(["1080p", "480p"]), "sorted high to low, no repeats");
    assert_eq!(all["protocols"], json!(["llhls", "webrtc", "rtsp"]));
    let fid = all["_id"].as_str().unwrap();
    assert_eq!(all["playbackUrls"]["webrtc"], format!("{play}/live/{fid}/whep"));
    let rtsp = all["playbackUrls"]["rtsp"].as_str().expect("rtsp");
    let port = rtsp.trim_start_matches("rtsp://127.0.0.1:").split('/').next().expect("port");
    assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "the RTSP listener's bound port: {rtsp}");
    assert_eq!(rtsp, format!("rtsp://127.0.0.1:{port}/live/{fid}"));
}

async fn create_validates_every_field(app: TestApp) {
    let url = app.project_url("/streams");
    let msg = error_message(app.post_json_with(&url, &app.key, &json!({})).await, 400).await;
    assert_eq!(msg, json!(["name is required"]));
    let msg = error_message(
        app.post_json_with(
            &url,
            &app.key,
            &json!({"name": "", "qualities": ["720p", "721p"], "protocols": ["hls"],
            "dvrDuration": 30, "reconnectWindow": 1801, "vodEnabled": "yes", "bogus": 1}),
        )
        .await,
        400,
    )
    .await;
    assert_eq!(
        msg,
        json!([
            "name must be 1 to 100 characters long",
            "qualities.1 must be one of 2160p, 1440p, 1080p, 720p, 480p, 360p, 240p",
            "protocols.0 must be one of llhls, webrtc, rtsp",
            "vodEnabled must be a boolean",
            "dvrDuration must be an integer from 60 to 43200",
            "reconnectWindow must be an integer from 0 to 1800",
            "property bogus should not exist"
        ])
    );
    create(&app, json!({"name": "cam"})).await;
    let msg = error_message(app.post_json_with(&url, &app.key, &json!({"name": "cam"})).await, 409).await;
    assert_eq!(msg, "a stream with this name exists");
    // Names are unique per project, not across projects.
    let other = app.other_project("other").await;
    assert_eq!(
        app.post_json_with(&app.url("/v1/projects/other/streams"), &other, &json!({"name": "cam"}))
            .await
            .status(),
        201
    );
    let list: Value = app.get_with(&url, &app.key).await.json().await.unwrap();
    assert_eq!(list["total"], 1, "nothing was created by the refused requests");
}

async fn list_filters_and_paginates(app: TestApp) {
    let a = create(&app, json!({"name": "Cam A"})).await;
    let before_b = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    // b must be created in a later millisecond than `before_b`: wait for the clock to move on.
    eventually("the clock to pass before_b", Duration::from_secs(1), || async {
        (chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true) > before_b).then_some(())
    })
    .await;
    let b = create(&app, json!({"name": "cam b", "vodEnabled": true})).await;
    let c = create(&app, json!({"name": "Lobby 100%"})).await;
    let url = app.project_url("/streams");
    let list = |q: &str| {
        let u = format!("{url}{q}");
        let (client, key) = (app.client.clone(), app.key.clone());
        async move { client.get(u).bearer_auth(key).send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let all = list("").await;
    assert_eq!(all["total"], 3);
    let names: Vec<&str> =
        all["items"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Lobby 100%", "cam b", "Cam A"], "newest first");
    let item = &all["items"][1];
    assert_eq!(item["_id"], b["_id"]);
    assert_eq!(item["vodEnabled"], true);
    for field in ["_id", "name", "status", "streamKey", "vodEnabled", "createdAt"] {
        assert!(item.get(field).is_some(), "list items carry {field}");
    }

    assert_eq!(list("?q=CAM").await["total"], 2, "case-insensitive name search");
    assert_eq!(list("?q=100%25").await["total"], 1, "% is matched literally");
    assert_eq!(list("?q=_").await["total"], 0, "_ is matched literally");
    assert_eq!(patch(&app, a["_id"].as_str().unwrap(), json!({"enabled": false})).await.status(), 200);
    let disabled = list("?status=disabled").await;
    assert_eq!(
        (disabled["total"].as_i64(), disabled["items"][0]["_id"].clone()),
        (Some(1), a["_id"].clone())
    );
    assert_eq!(list("?status=idle").await["total"], 2);
    let from = list(&format!("?from={before_b}")).await;
    assert_eq!(from["total"], 2);
    let to = list(&format!("?to={before_b}")).await;
    assert_eq!((to["total"].as_i64(), to["items"][0]["_id"].clone()), (Some(1), a["_id"].clone()));
    let page = list("?skip=1&limit=1").await;
    assert_eq!((page["total"].as_i64(), page["items"][0]["_id"].clone()), (Some(3), b["_id"].clone()));
    let _ = c;

    let msg =
        error_message(app.get_with(&format!("{url}?from=yesterday&to=2026-13-01"), &app.key).await, 400)
            .await;
    let wanted = "must be an ISO 8601 date or date-time, e.g. 2024-05-01 or 2024-05-01T12:00:00Z";
    assert_eq!(msg, json!([format!("from {wanted}"), format!("to {wanted}")]));
    // Any ISO 8601 date names its whole period; a date-time without an offset is UTC.
    let day = &a["createdAt"].as_str().unwrap()[..10];
    assert_eq!(list(&format!("?from={day}&to={day}")).await["total"], 3, "a date names its whole day");
    assert_eq!(list(&format!("?to={}", day.replace('-', ""))).await["total"], 3, "basic form");
    assert_eq!(list("?from=2000-W01-1&to=2000-12").await["total"], 0, "week date, month");
    assert_eq!(list("?from=2000-001T00:00").await["total"], 3, "ordinal date-time without offset");
    error_message(app.get_with(&format!("{url}?status=asleep"), &app.key).await, 400).await;
    error_message(app.get_with(&format!("{url}?limit=101"), &app.key).await, 400).await;
}

async fn disable_enable_delete_move_status_and_fire_events(app: TestApp) {
    let rx = Receiver::start().await;
    let (hook_id, _) = create_webhook(&app, &rx.url(), json!(["stream.disabled"])).await;
    let s = create(&app, json!({"name": "cam"})).await;
    let id = s["_id"].as_str().unwrap();

    let off: Value = patch(&app, id, json!({"enabled": false})).await.json().await.unwrap();
    assert_eq!((off["status"].as_str(), off["disabledReason"].as_str()), (Some("disabled"), Some("manual")));
    // Disabling again changes nothing and fires nothing.
    assert_eq!(patch(&app, id, json!({"enabled": false})).await.status(), 200);
    let on: Value = patch(&app, id, json!({"enabled": true, "name": "cam 2", "qualities": ["1080p"]}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!((on["status"].as_str(), on["disabledReason"].clone()), (Some("idle"), Value::Null));
    assert_eq!((on["name"].as_str(), on["qualities"].clone()), (Some("cam 2"), json!(["1080p"])));

    let deleted = app
        .with_key(Method::DELETE, &app.project_url(&format!("/streams/{id}")), &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    let deleted: Value = deleted.json().await.unwrap();
    assert_eq!(
        (deleted["status"].as_str(), deleted["disabledReason"].as_str()),
        (Some("disabled"), Some("deleted"))
    );

    // A deleted stream refuses every change.
    for body in [json!({"enabled": true}), json!({"name": "again"}), json!({})] {
        assert_eq!(error_message(patch(&app, id, body).await, 409).await, "stream is deleted");
    }
    let again = app
        .with_key(Method::DELETE, &app.project_url(&format!("/streams/{id}")), &app.key)
        .send()
        .await
        .unwrap();
    error_message(again, 409).await;
    let rotate = app
        .with_key(Method::POST, &app.project_url(&format!("/streams/{id}/rotate-push")), &app.key)
        .send()
        .await
        .unwrap();
    error_message(rotate, 409).await;
    // Its name is still taken (the record stays, disabled).
    error_message(
        app.post_json_with(&app.project_url("/streams"), &app.key, &json!({"name": "cam 2"})).await,
        409,
    )
    .await;

    let events = rx.wait_for(2, Duration::from_secs(10)).await;
    let reasons: Vec<Value> = events.iter().map(|r| r.json()["data"]["reason"].clone()).collect();
    assert_eq!(reasons, [json!("manual"), json!("deleted")]);
    assert!(events.iter().all(|r| r.json()["data"]["status"] == "disabled"));
    // Then a test ping: deliveries to a webhook leave in order, so an event fired by the
    // repeated disable (queued before the ping) would arrive before it.
    let ping = app
        .with_key(Method::POST, &app.project_url(&format!("/webhooks/{hook_id}/test")), &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(ping.status(), 201);
    let marker = ping.json::<Value>().await.unwrap()["_id"].as_str().unwrap().to_string();
    let got = rx.wait_for(3, Duration::from_secs(10)).await;
    assert_eq!(got[2].id(), marker, "the ping is the next delivery");
    let got: Vec<_> = got.into_iter().filter(|r| r.id() != marker).collect();
    assert_eq!(got.len(), 2, "the repeated disable fired nothing");
    error_message(app.get_with(&app.project_url("/streams/nope"), &app.key).await, 404).await;
}

async fn rotate_push_replaces_the_credentials(app: TestApp) {
    let s = create(&app, json!({"name": "cam"})).await;
    let id = s["_id"].as_str().unwrap();
    let old_pass = s["pushPassword"].as_str().unwrap().to_string();
    let resp = app
        .with_key(Method::POST, &app.project_url(&format!("/streams/{id}/rotate-push")), &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let r: Value = resp.json().await.unwrap();
    let new_pass = r["pushPassword"].as_str().unwrap();
    assert_ne!(new_pass, old_pass);
    assert_ne!(r["pushUsername"], s["pushUsername"]);
    assert_eq!(r["streamKey"], s["streamKey"], "the key stays; the credentials change");
    assert!(r["ingestUrl"].as_str().unwrap().ends_with(&format!("&pass={new_pass}")));
    let (u, salt, verifier) = stored(&app, id).await;
    assert!(push_password_matches(&u, &salt, new_pass, &verifier));
    assert!(!push_password_matches(&u, &salt, &old_pass, &verifier));
}

async fn stream_scopes(app: TestApp) {
    let reader = app.create_key(&["streams:read"]).await;
    let url = app.project_url("/streams");
    assert_eq!(app.get_with(&url, &reader).await.status(), 200);
    error_message(app.post_json_with(&url, &reader, &json!({"name": "x"})).await, 403).await;
    let vod = app.create_key(&["vod:write"]).await;
    error_message(app.get_with(&url, &vod).await, 403).await;
    let writer = app.create_key(&["streams:write"]).await;
    assert_eq!(app.post_json_with(&url, &writer, &json!({"name": "x"})).await.status(), 201);
}
