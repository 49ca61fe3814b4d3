//! Validation, body limits, content types and rate limits (CONTRACT: Conventions).

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{both_backends, error_message, TestApp};

both_backends!(
    unknown_field_is_400,
    every_problem_is_reported_naming_its_field,
    malformed_json_is_400,
    oversize_body_is_413,
    wrong_content_type_is_415,
    unknown_route_is_json_404,
    wrong_method_is_405_with_allow,
    key_over_its_rate_is_429_with_retry_after,
    client_failing_authentication_is_429,
);

async fn unknown_field_is_400(app: TestApp) {
    let resp =
        app.post_json_with(&app.project_url("/api-keys"), &app.key, &json!({"label": "x", "bogus": 1})).await;
    let msg = error_message(resp, 400).await;
    assert_eq!(msg, json!(["property bogus should not exist"]));
}

async fn every_problem_is_reported_naming_its_field(app: TestApp) {
    let body = json!({"label": 5, "scopes": ["vod:read", "vod:admin", 7]});
    let msg =
        error_message(app.post_json_with(&app.project_url("/api-keys"), &app.key, &body).await, 400).await;
    let msg: Vec<&str> = msg.as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert_eq!(msg.len(), 3, "{msg:?}");
    assert_eq!(msg[0], "label must be a string");
    assert!(msg[1].starts_with("scopes.1 must be one of streams:read"), "{msg:?}");
    assert_eq!(msg[2], "scopes.2 must be a string");

    let msg = error_message(
        app.post_json_with(&app.project_url("/api-keys"), &app.key, &json!({"scopes": "*"})).await,
        400,
    )
    .await;
    assert_eq!(msg, json!(["scopes must be an array"]));
    let msg = error_message(
        app.post_json_with(&app.project_url("/api-keys"), &app.key, &json!({"scopes": []})).await,
        400,
    )
    .await;
    assert_eq!(msg, json!(["scopes must have 1 to 9 elements"]));
    let long = "x".repeat(101);
    let msg = error_message(
        app.post_json_with(&app.project_url("/api-keys"), &app.key, &json!({"label": long})).await,
        400,
    )
    .await;
    assert_eq!(msg, json!(["label must be 0 to 100 characters long"]));
    // Nothing was created by any of these.
    let list: Value = app.get_with(&app.project_url("/api-keys"), &app.key).await.json().await.unwrap();
    assert_eq!(list["total"], 1);
}

async fn malformed_json_is_400(app: TestApp) {
    for body in ["{", "[1,2]", "\"text\"", ""] {
        let resp = app
            .with_key(Method::POST, &app.project_url("/api-keys"), &app.key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let msg = error_message(resp, 400).await;
        assert!(msg[0].as_str().unwrap().starts_with("body must be"), "{body:?}: {msg}");
    }
}

async fn oversize_body_is_413(app: TestApp) {
    let big = json!({"label": "x".repeat(100 * 1024)});
    let msg =
        error_message(app.post_json_with(&app.project_url("/api-keys"), &app.key, &big).await, 413).await;
    assert!(msg.as_str().unwrap().contains("exceeds"), "{msg}");
    // Also when the body is streamed without a length.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..100).map(|_| Ok(vec![b' '; 1024])).collect();
    let resp = app
        .with_key(Method::POST, &app.project_url("/api-keys"), &app.key)
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)))
        .send()
        .await;
    // The server answers 413 as soon as the limit is passed and closes the connection; a client
    // still writing the rest may see that close instead of the answer. Either way nothing was
    // created and the server carries on.
    match resp {
        Ok(resp) => {
            error_message(resp, 413).await;
        }
        Err(e) => assert!(e.is_request() || e.is_body(), "unexpected error: {e}"),
    }
    let list: Value = app.get_with(&app.project_url("/api-keys"), &app.key).await.json().await.unwrap();
    assert_eq!(list["total"], 1, "no key was created");
}

async fn wrong_content_type_is_415(app: TestApp) {
    let resp = app
        .with_key(Method::POST, &app.project_url("/api-keys"), &app.key)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    error_message(resp, 415).await;
    let resp =
        app.with_key(Method::POST, &app.project_url("/api-keys"), &app.key).body("{}").send().await.unwrap();
    error_message(resp, 415).await;
}

async fn unknown_route_is_json_404(app: TestApp) {
    let msg = error_message(app.get_with(&app.url("/v1/nothing-here"), &app.key).await, 404).await;
    assert_eq!(msg, "route not found");
}

/// Every path of the OpenAPI document, asked with a method it does not take, answers 405 with
/// `Allow` listing the methods it does (RFC 9110 15.5.6), and so do the plain routes.
async fn wrong_method_is_405_with_allow(app: TestApp) {
    let spec: Value = app.client.get(app.url("/v1/openapi.json")).send().await.unwrap().json().await.unwrap();
    let paths = spec["paths"].as_object().expect("paths");
    let mut checked = 0;
    let mut cases: Vec<(String, Vec<String>)> = paths
        .iter()
        .map(|(template, ops)| {
            let mut methods: Vec<String> = ops
                .as_object()
                .expect("operations")
                .keys()
                .filter(|m| ["get", "post", "put", "patch", "delete"].contains(&m.as_str()))
                .map(|m| m.to_uppercase())
                .collect();
            methods.sort();
            (template.replace("{slug}", &app.slug).replace('{', "x").replace('}', ""), methods)
        })
        .collect();
    cases.push(("/healthz".into(), vec!["GET".into()]));
    for (path, methods) in cases {
        let Some(other) =
            ["PUT", "PATCH", "DELETE", "POST", "GET"].into_iter().find(|m| !methods.iter().any(|x| x == m))
        else {
            continue;
        };
        let resp = app
            .with_key(Method::from_bytes(other.as_bytes()).unwrap(), &app.url(&path), &app.key)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 405, "{other} {path}");
        let allow = resp.headers().get("allow").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        assert_eq!(allow, methods.join(", "), "Allow of {other} {path}");
        checked += 1;
    }
    assert!(checked > 20, "{checked} paths checked");
}

async fn key_over_its_rate_is_429_with_retry_after(app: TestApp) {
    // Default limit: 50 requests/s sustained, burst 100. 400 requests from 16 connections arrive
    // far faster than 50/s can refill.
    let url = app.project_url("/api-keys/scopes");
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (client, url, key) = (app.client.clone(), url.clone(), app.key.clone());
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..25 {
                let resp = client.get(&url).bearer_auth(&key).send().await.unwrap();
                let retry_after =
                    resp.headers().get("retry-after").map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
                seen.push((resp.status().as_u16(), retry_after));
            }
            seen
        }));
    }
    let mut ok = 0;
    let mut limited = 0;
    for t in tasks {
        for (status, retry_after) in t.await.unwrap() {
            match status {
                200 => ok += 1,
                429 => {
                    limited += 1;
                    assert!(retry_after.is_some_and(|s| s >= 1), "429 carries Retry-After");
                }
                other => panic!("unexpected status {other}"),
            }
        }
    }
    assert!(ok >= 100, "the burst is served: {ok}");
    assert!(limited > 0, "some requests were limited ({ok} ok)");
    // The limit is per key: another key is unaffected.
    let other = app.other_project("other").await;
    assert_eq!(app.get_with(&app.url("/v1/projects/other/api-keys/scopes"), &other).await.status(), 200);
    // And the limited one answers 429 with the contract's body.
    let resp = app.get_with(&url, &app.key).await;
    if resp.status() == 429 {
        error_message(resp, 429).await;
    }
}

async fn client_failing_authentication_is_429(app: TestApp) {
    let bad = format!("svc_{}", "B".repeat(43));
    for i in 0..20 {
        let resp = app.get_with(&app.project_url("/api-keys"), &bad).await;
        assert_eq!(resp.status(), 401, "attempt {i}");
    }
    let resp = app.get_with(&app.project_url("/api-keys"), &bad).await;
    let retry_after: u64 = resp.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    error_message(resp, 429).await;
    // Anonymous and malformed attempts from the address are failing attempts too.
    error_message(app.client.get(app.project_url("/api-keys")).send().await.unwrap(), 429).await;
    // Only failing attempts are refused: a valid key from the same address answers at once, and
    // so does a right password; health stays open.
    assert_eq!(app.get_with(&app.project_url("/api-keys"), &app.key).await.status(), 200);
    app.signed_in(&app.email, &app.password).await;
    assert_eq!(app.client.get(app.url("/healthz")).send().await.unwrap().status(), 200);
    // Still limited for the next bad key.
    error_message(app.get_with(&app.project_url("/api-keys"), &bad).await, 429).await;
}
