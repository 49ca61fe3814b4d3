//! The console's simulcast panel (CONTRACT: Simulcast, Console) in real Chromium: on a stream's
//! page a member adds a target (a bad URL refused beside its field), sees it masked and `idle`,
//! then `live` once the stream is pushed to, with the bytes sent; pauses it and removes it.

use std::time::Duration;

use serde_json::Value;

use crate::simulcast::NginxRtmp;
use crate::support::browser::{testid, Browser};
use crate::support::{eventually, ffmpeg_push, free_port, spawn_app, Backend};

#[tokio::test]
async fn the_stream_page_adds_watches_and_removes_a_simulcast_target() {
    let t = spawn_app(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("a folder");
    let nginx = NginxRtmp::start(dir.path(), free_port());
    let b = Browser::start(1280).await;
    b.goto(&t.url("/")).await;
    b.sign_in(&t.email, &t.password).await;
    b.click(&testid("stream-new")).await;
    b.fill(&testid("stream-name"), "simulcast").await;
    b.click(&testid("stream-save")).await;
    let ingest =
        b.wait_shown(&testid("ingest-url"), Duration::from_secs(10), |s| s.starts_with("rtmp://")).await;
    b.wait_shown(&testid("simulcast-empty"), Duration::from_secs(10), |s| s == "No targets.").await;

    // A URL without a key: the server's reason beside the field, nothing added.
    b.fill(&testid("simulcast-url"), "rtmp://example.com/live").await;
    b.click(&testid("simulcast-add")).await;
    b.wait_shown(".field-error", Duration::from_secs(10), |s| s.contains("stream key")).await;
    assert!(b.exists(&testid("simulcast-empty")).await, "nothing added");

    // nginx as a target: listed masked and idle, then live once the stream is.
    b.fill(&testid("simulcast-url"), &nginx.url()).await;
    b.fill(&testid("simulcast-name"), "nginx").await;
    b.click(&testid("simulcast-add")).await;
    let row = testid("simulcast-target-nginx");
    let shown = b.wait_shown(&row, Duration::from_secs(10), |s| s.contains("idle")).await;
    assert!(shown.contains("simu****") && !shown.contains("simulcast-key"), "masked: {shown}");
    let _publisher = ffmpeg_push(&ingest, "testsrc=size=320x240:rate=15", 15, &[]);
    let shown =
        b.wait_shown(&row, Duration::from_secs(40), |s| s.contains("live") && s.contains("since")).await;
    println!("the panel: {shown}");

    // Paused: the record says so and the connection ends; removed: gone.
    b.click(&format!("{row} button")).await;
    b.wait_shown(&row, Duration::from_secs(10), |s| s.contains("disabled") && s.contains("Resume")).await;
    let id =
        b.client.current_url().await.expect("url").path().rsplit('/').next().unwrap_or_default().to_string();
    let targets: Value = t
        .get_with(&t.project_url(&format!("/streams/{id}/simulcast-targets")), &t.key)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(targets["items"][0]["enabled"], false, "{targets}");
    eventually("the paused target idle", Duration::from_secs(10), || async {
        let v: Value = t
            .get_with(&t.project_url(&format!("/streams/{id}/simulcast-targets")), &t.key)
            .await
            .json()
            .await
            .ok()?;
        (v["items"][0]["status"] == "idle").then_some(())
    })
    .await;
    b.click(&format!("{row} .actions button:nth-of-type(2)")).await;
    b.click(&format!("{row} .confirm button.danger")).await;
    b.wait_shown(&testid("simulcast-empty"), Duration::from_secs(10), |s| s == "No targets.").await;
}
