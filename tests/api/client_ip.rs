//! The client address behind reverse proxies (CONTRACT: `SLUICE_TRUSTED_PROXIES`): the
//! failed-auth limit, sign-in limits and `allowIp` pinning see the address a trusted proxy
//! forwarded, and nothing a client writes in `X-Forwarded-For` when no proxy is trusted.

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{error_message, spawn_app, spawn_app_with, Backend, TestApp};

const A: &str = "203.0.113.10";
const B: &str = "198.51.100.20";

fn bad_key() -> String {
    format!("svc_{}", "C".repeat(43))
}

async fn as_from(t: &TestApp, key: &str, forwarded: &str) -> reqwest::Response {
    t.with_key(Method::GET, &t.project_url("/streams"), key)
        .header("x-forwarded-for", forwarded)
        .send()
        .await
        .expect("request")
}

/// Behind a trusted proxy (loopback), each forwarded client has its own failed-auth budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_forwarded_client_is_limited_alone() {
    let t = spawn_app_with(Backend::Sqlite, |a| a.trusted_proxies = Some("127.0.0.1, ::1".into())).await;
    for i in 0..20 {
        // A client-written entry to the left of A is not believed: A is what the proxy saw.
        let resp = as_from(&t, &bad_key(), &format!("6.6.6.{i}, {A}")).await;
        assert_eq!(resp.status(), 401, "attempt {i}");
    }
    error_message(as_from(&t, &bad_key(), A).await, 429).await;
    // Another client behind the same proxy is not locked out by A's failures.
    error_message(as_from(&t, &bad_key(), B).await, 401).await;
    // Nor is A itself, with a valid key.
    assert_eq!(as_from(&t, &t.key, A).await.status(), 200);
    // Sign-ins from B go through; from A, a wrong one is refused as limited.
    let login = |from: &'static str, password: String| {
        t.client
            .post(t.url("/v1/auth/login"))
            .header("x-forwarded-for", from)
            .json(&json!({"email": t.email, "password": password}))
            .send()
    };
    error_message(login(A, "wrong".into()).await.unwrap(), 429).await;
    error_message(login(B, "wrong".into()).await.unwrap(), 401).await;
    assert_eq!(login(A, t.password.clone()).await.unwrap().status(), 200);
}

/// With no trusted proxy, `X-Forwarded-For` is the client's own word and is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_trusted_proxies_a_forged_header_does_not_escape_the_limit() {
    let t = spawn_app(Backend::Sqlite).await;
    for i in 0..20 {
        assert_eq!(as_from(&t, &bad_key(), &format!("10.0.0.{i}")).await.status(), 401, "attempt {i}");
    }
    error_message(as_from(&t, &bad_key(), B).await, 429).await;
    error_message(as_from(&t, &bad_key(), "").await, 429).await;
}

/// `allowIp` pins a ticket to the address the edge resolved for the viewer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_ip_pins_to_the_forwarded_client() {
    let t = spawn_app_with(Backend::Sqlite, |a| a.trusted_proxies = Some("127.0.0.0/8".into())).await;
    let stream = crate::streams::create(&t, json!({"name": "pinned"})).await;
    let id = stream["_id"].as_str().unwrap();
    let resp = t
        .with_key(Method::PATCH, &t.project_url(&format!("/streams/{id}/signed-playback")), &t.key)
        .json(&json!({"enabled": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let ticket: Value = t
        .post_json_with(
            &t.project_url(&format!("/streams/{id}/playback-ticket")),
            &t.key,
            &json!({"allowIp": A}),
        )
        .await
        .json()
        .await
        .unwrap();
    let hls = ticket["hls"].as_str().unwrap();
    let fetch = |from: &'static str| t.client.get(hls).header("x-forwarded-for", from).send();
    let other = fetch(B).await.unwrap();
    assert_eq!(other.status(), 401);
    assert_eq!(other.headers()["x-deny-reason"], "ip_mismatch");
    // From A the token is accepted (the stream is not live, so there is nothing to play yet).
    let ours = fetch(A).await.unwrap();
    assert_ne!(ours.status(), 401, "{:?}", ours.headers().get("x-deny-reason"));
    // Without the header the proxy itself (loopback) is the client: not A.
    assert_eq!(t.client.get(hls).send().await.unwrap().status(), 401);
}
