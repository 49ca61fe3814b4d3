//! Credits with `SLUICE_BILLING=on` (CONTRACT: Recording and credits), balances changed with the
//! real `sluice admin credits` on the test's database: a project with no balance is refused at
//! connect on RTMP, SRT and WHIP and nothing changes; a 4-s balance is drained by a live push,
//! which is ended and its stream disabled with `insufficient_credits` (`stream.ended`, then
//! `stream.disabled`, once each, on a real receiver); re-enabling and pushing are refused until
//! `--add 1m`, after which the stream is re-enabled and goes live again.

use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::lifecycle::{logged, no_sessions, push, received, stream, wait_status};
use crate::support::receiver::Receiver;
use crate::support::webrtc::WhipPublisher;
use crate::support::{error_message, ffmpeg_push_ts, sluice_command, TestApp};
use crate::webhooks::create_webhook;

mod credit_kill {
    use crate::support::{spawn_app_with, Backend};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::credit_kill(spawn_app_with(Backend::Sqlite, super::billing_on).await).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::credit_kill(spawn_app_with(Backend::Postgres, super::billing_on).await).await
    }
}

fn billing_on(args: &mut sluice::config::ConfigArgs) {
    args.billing = Some(sluice::config::Billing::On);
}

/// `sluice admin credits --project demo ARGS --json` on the app's database; its JSON.
fn credits(app: &TestApp, args: &[&str]) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let out: std::process::Output = {
        let mut cmd: Command = sluice_command(dir.path(), 0);
        cmd.env("SLUICE_DATABASE_URL", &app.app.settings.database_url)
            .env("SLUICE_BILLING", "on")
            .args(["admin", "credits", "--project", &app.slug, "--json"])
            .args(args);
        cmd.output().expect("sluice runs")
    };
    assert!(out.status.success(), "admin credits {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("credits JSON");
    assert_eq!((v["project"].as_str(), v["billing"].as_str()), (Some(app.slug.as_str()), Some("on")));
    v
}

fn balance(app: &TestApp, args: &[&str]) -> i64 {
    credits(app, args)["balanceSeconds"].as_i64().expect("balanceSeconds")
}

async fn metric_balance(app: &TestApp) -> Option<i64> {
    let text = app.client.get(app.url("/metrics")).send().await.ok()?.text().await.ok()?;
    let prefix = format!("sluice_credits_balance_seconds{{project=\"{}\"}} ", app.slug);
    text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
}

async fn patch_enabled(app: &TestApp, id: &str, enabled: bool) -> reqwest::Response {
    app.with_key(Method::PATCH, &app.project_url(&format!("/streams/{id}")), &app.key)
        .json(&json!({"enabled": enabled}))
        .send()
        .await
        .expect("patch")
}

async fn credit_kill(app: TestApp) {
    let rx = Receiver::start().await;
    create_webhook(&app, &rx.url(), json!(["stream.live", "stream.ended", "stream.disabled"])).await;
    let created = app.post_json_with(&app.project_url("/streams"), &app.key, &json!({"name": "paid"})).await;
    assert_eq!(created.status(), 201);
    let s: Value = created.json().await.expect("json");
    let id = s["_id"].as_str().expect("id").to_string();
    let rtmp = s["ingestUrl"].as_str().expect("ingestUrl").to_string();

    // No balance: refused at connect on every protocol, and nothing changes.
    assert_eq!(balance(&app, &[]), 0);
    push(&rtmp).exits(Duration::from_secs(20)).await;
    ffmpeg_push_ts(s["srtUrl"].as_str().expect("srtUrl"), "testsrc=size=320x240:rate=15", 30, &[])
        .exits(Duration::from_secs(20))
        .await;
    let whip =
        WhipPublisher::try_publish(s["whipUrl"].as_str().expect("whipUrl"), s["pushPassword"].as_str())
            .await
            .err()
            .expect("WHIP refused");
    assert_eq!(whip.status, 409, "{}", whip.body);
    assert!(whip.body.contains("insufficient credits"), "{}", whip.body);
    let unchanged = stream(&app, &id).await;
    assert_eq!(unchanged["status"], "idle");
    assert!(unchanged["lastPushAt"].is_null(), "no push session was opened");
    assert!(logged(&app).await.is_empty(), "no event");
    assert_eq!(metric_balance(&app).await, Some(0));

    // 4 s of live time: the push goes live and is ended when they run out.
    assert_eq!(balance(&app, &["--set", "4s"]), 4);
    let mut pusher = push(&rtmp);
    wait_status(&app, &id, "live", Duration::from_secs(20)).await;
    let live_at = Instant::now();
    wait_status(&app, &id, "disabled", Duration::from_secs(20)).await;
    let lived = live_at.elapsed();
    println!("a 4-s balance was killed after {lived:?} live");
    assert!(lived >= Duration::from_secs(2), "killed after {lived:?}: before the balance ran out");
    assert_eq!(stream(&app, &id).await["disabledReason"], "insufficient_credits");
    pusher.exits(Duration::from_secs(10)).await;
    no_sessions(&app).await;
    assert_eq!(logged(&app).await, ["stream.live", "stream.ended", "stream.disabled"]);
    rx.wait_for(3, Duration::from_secs(10)).await;
    let want = [
        ("stream.live".to_string(), None),
        ("stream.ended".to_string(), None),
        ("stream.disabled".to_string(), Some("insufficient_credits".to_string())),
    ];
    assert_eq!(received(&rx), want);
    let left = balance(&app, &[]);
    assert!((-5..=0).contains(&left), "a few seconds below zero at most: {left}");

    // Out of credits: neither re-enabling nor pushing changes anything.
    let refused = error_message(patch_enabled(&app, &id, true).await, 409).await;
    assert!(refused.as_str().is_some_and(|m| m.contains("insufficient credits")), "{refused}");
    push(&rtmp).exits(Duration::from_secs(20)).await;
    let s = stream(&app, &id).await;
    assert_eq!(
        (s["status"].as_str(), s["disabledReason"].as_str()),
        (Some("disabled"), Some("insufficient_credits"))
    );
    assert_eq!(logged(&app).await.len(), 3, "no event");

    // Topped up: re-enabled, it pushes again.
    let topped = balance(&app, &["--add", "1m"]);
    assert!((55..=60).contains(&topped), "{topped}");
    let on = patch_enabled(&app, &id, true).await;
    assert_eq!(on.status(), 200);
    let _pusher = push(&rtmp);
    wait_status(&app, &id, "live", Duration::from_secs(20)).await;
    assert!(metric_balance(&app).await.is_some_and(|b| b <= topped), "/metrics shows the balance");
}
