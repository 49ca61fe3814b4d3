//! The order of checks (CONTRACT: Conventions): credential (401) → project (404) → scope or
//! role (403) → body and query (400/413/415) → resource (404) → state (409). A caller who may
//! not make a request never learns whether its body or query was valid.

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{error_message, spawn_app_with, Backend, TestApp};

/// Each test on both backends, with room for the many 401s it provokes from one address.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                use crate::support::Backend;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name(super::app(Backend::Sqlite).await).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name(super::app(Backend::Postgres).await).await
                }
            }
        )*
    };
}

on_both!(
    bodies_are_read_only_after_credential_project_and_scope,
    queries_are_read_only_after_them_too,
    a_role_is_checked_before_the_body_too,
);

async fn app(backend: Backend) -> TestApp {
    spawn_app_with(backend, |a| a.auth_failures_per_min = Some(10_000)).await
}

/// A body with every kind of problem: unknown field, wrong types.
fn bad_body() -> Value {
    json!({"name": 7, "url": false, "label": [], "filename": {}, "bogus": true})
}

/// The write operations with a body, as `(method, path under the project)`.
async fn writes(t: &TestApp) -> Vec<(Method, String)> {
    let stream = crate::streams::create(t, json!({"name": "order"})).await;
    let id = stream["_id"].as_str().expect("stream id");
    vec![
        (Method::POST, "/streams".to_string()),
        (Method::PATCH, format!("/streams/{id}")),
        (Method::POST, "/webhooks".to_string()),
        (Method::POST, "/api-keys".to_string()),
        (Method::POST, "/vod".to_string()),
        (Method::POST, format!("/streams/{id}/playback-ticket")),
    ]
}

async fn send(t: &TestApp, method: &Method, path: &str, key: Option<&str>, body: Body) -> reqwest::Response {
    let mut req = t.client.request(method.clone(), t.project_url(path));
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    req = match body {
        Body::Invalid => req.json(&bad_body()),
        Body::TooLarge => req.json(&json!({"name": "x".repeat(100 * 1024)})),
        Body::WrongType => req.header("content-type", "text/plain").body("name=x"),
        Body::Malformed => req.header("content-type", "application/json").body("{"),
    };
    req.send().await.expect("request")
}

#[derive(Clone, Copy, Debug)]
enum Body {
    Invalid,
    TooLarge,
    WrongType,
    Malformed,
}

async fn bodies_are_read_only_after_credential_project_and_scope(t: TestApp) {
    let other = t.other_project("other").await;
    // Reads of everything, writes of nothing: `streams:read` covers the playback ticket, so it
    // is left out to see the 403 there too.
    let read_only = t.create_key(&["vod:read", "webhooks:read", "api-keys:read"]).await;
    let unknown = format!("svc_{}", "Z".repeat(43));
    for (method, path) in writes(&t).await {
        let ticket = path.ends_with("playback-ticket");
        for body in [Body::Invalid, Body::TooLarge, Body::WrongType, Body::Malformed] {
            let what = format!("{method} {path} with a {body:?} body");
            // No credential, an unknown one: 401.
            error_message(send(&t, &method, &path, None, body).await, 401).await;
            error_message(send(&t, &method, &path, Some(&unknown), body).await, 401).await;
            // Another project's key: 404 (the project is not revealed either).
            let msg = error_message(send(&t, &method, &path, Some(&other), body).await, 404).await;
            assert_eq!(msg, "project not found", "{what}");
            // A key without the write scope: 403.
            let msg = error_message(send(&t, &method, &path, Some(&read_only), body).await, 403).await;
            assert!(msg.as_str().unwrap().contains("scope"), "{what}: {msg}");
            if ticket {
                continue;
            }
            // Only then is the body read.
            let expected = match body {
                Body::Invalid | Body::Malformed => 400,
                Body::TooLarge => 413,
                Body::WrongType => 415,
            };
            error_message(send(&t, &method, &path, Some(&t.key), body).await, expected).await;
        }
    }
    // The resource comes after the body: a bad body on a missing stream is 400, a good one 404.
    let resp = send(&t, &Method::PATCH, "/streams/nope", Some(&t.key), Body::Invalid).await;
    error_message(resp, 400).await;
    let resp = t
        .with_key(Method::PATCH, &t.project_url("/streams/nope"), &t.key)
        .json(&json!({"name": "fine"}))
        .send()
        .await
        .unwrap();
    error_message(resp, 404).await;
}

async fn queries_are_read_only_after_them_too(t: TestApp) {
    let other = t.other_project("other").await;
    let no_streams = t.create_key(&["vod:read"]).await;
    let url = t.project_url("/streams?limit=abc&skip=-1&status=nonsense");
    error_message(t.client.get(&url).send().await.unwrap(), 401).await;
    error_message(t.get_with(&url, &other).await, 404).await;
    error_message(t.get_with(&url, &no_streams).await, 403).await;
    error_message(t.get_with(&url, &t.key).await, 400).await;
    let url = t.project_url("/vod?limit=1000");
    error_message(t.client.get(&url).send().await.unwrap(), 401).await;
    error_message(t.get_with(&url, &other).await, 404).await;
    error_message(t.get_with(&t.project_url("/webhooks?limit=x"), &no_streams).await, 403).await;
    error_message(t.get_with(&url, &t.key).await, 400).await;
}

async fn a_role_is_checked_before_the_body_too(t: TestApp) {
    let m: Value = t
        .post_json_with(
            &t.project_url("/members"),
            &t.key,
            &json!({"email": "v@example.com", "role": "viewer"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let token = m["invitation"]["token"].as_str().expect("invitation");
    let resp = t
        .client
        .post(t.url("/v1/auth/accept-invitation"))
        .json(&json!({"token": token, "password": "viewer password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let viewer = t.signed_in("v@example.com", "viewer password").await;
    for body in [Body::Invalid, Body::TooLarge, Body::WrongType] {
        let req = viewer.post(t.project_url("/streams")).header("origin", &t.base);
        let req = match body {
            Body::Invalid | Body::Malformed => req.json(&bad_body()),
            Body::TooLarge => req.json(&json!({"name": "x".repeat(100 * 1024)})),
            Body::WrongType => req.header("content-type", "text/plain").body("name=x"),
        };
        let msg = error_message(req.send().await.unwrap(), 403).await;
        assert!(msg.as_str().unwrap().contains("role"), "{body:?}: {msg}");
    }
    // A person-only operation: an anonymous caller with a bad body is 401, a key 403.
    let resp = t.client.post(t.url("/v1/projects")).json(&bad_body()).send().await.unwrap();
    error_message(resp, 401).await;
    error_message(t.post_json_with(&t.url("/v1/projects"), &t.key, &bad_body()).await, 403).await;
}

/// Every operation of the committed OpenAPI document that needs a credential: with none, and
/// a malformed body and bad query, 401; another project's key, 404 (project routes) or 403
/// (person-only routes); a key with only `webhooks:read`, 403 on the stream, VOD, key and member
/// routes. So no operation reads its body or query before its caller is known and allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_checks_its_caller_before_its_input() {
    let t = app(Backend::Sqlite).await;
    let other = t.other_project("other").await;
    let webhooks_only = t.create_key(&["webhooks:read"]).await;
    let spec: Value = serde_json::from_str(include_str!("../../openapi/openapi.json")).expect("spec");
    let mut checked = 0;
    for (path, ops) in spec["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().expect("operations") {
            if op["security"].as_array().is_none_or(|s| s.is_empty()) {
                continue;
            }
            let id = op["operationId"].as_str().unwrap_or_default();
            let concrete = path.replace("{slug}", "demo").replace("{id}", "x").replace("{user_id}", "x");
            let has_query =
                op["parameters"].as_array().is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"));
            let url = t.url(&format!("{concrete}{}", if has_query { "?limit=abc&skip=-1" } else { "" }));
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let request = |key: Option<&str>| {
                let mut req = t.client.request(method.clone(), &url);
                if let Some(key) = key {
                    req = req.bearer_auth(key);
                }
                if op.get("requestBody").is_some() {
                    req = req.header("content-type", "text/plain").body("{");
                }
                req.send()
            };
            error_message(request(None).await.expect("request"), 401).await;
            let project_route = path.starts_with("/v1/projects/{slug}");
            let resp = request(Some(&other)).await.expect("request");
            assert_eq!(
                resp.status(),
                if project_route { 404 } else { 403 },
                "{id} with another project's key"
            );
            if ["/streams", "/vod", "/api-keys", "/members"].iter().any(|r| path.contains(r)) {
                let resp = request(Some(&webhooks_only)).await.expect("request");
                assert_eq!(resp.status(), 403, "{id} with a key of webhooks:read only");
            }
            checked += 1;
        }
    }
    assert!(checked >= 35, "only {checked} operations");
}
