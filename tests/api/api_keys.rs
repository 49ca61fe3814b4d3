//! API keys and the authentication outcomes of the interface (Authentication; Errors).

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::{both_backends, error_message, eventually, TestApp};

both_backends!(
    missing_key_is_401,
    malformed_key_is_401,
    unknown_key_is_401,
    revoked_key_is_401_on_the_next_request_and_stays_revoked,
    wrong_scope_is_403,
    key_of_another_project_is_404,
    escalation_is_403,
    created_key_is_shown_once_and_stored_hashed,
    scopes_endpoint_lists_every_scope,
    last_used_at_is_sampled,
    list_is_paginated_newest_first,
);

async fn missing_key_is_401(app: TestApp) {
    let resp = app.client.get(app.project_url("/api-keys")).send().await.unwrap();
    let msg = error_message(resp, 401).await;
    assert!(msg.as_str().unwrap().contains("missing credentials"), "{msg}");
}

async fn malformed_key_is_401(app: TestApp) {
    for bad in ["abc", "svc_short", &format!("key_{}", "a".repeat(43)), &format!("svc_{}", "a".repeat(44))] {
        let msg = error_message(app.get_with(&app.project_url("/api-keys"), bad).await, 401).await;
        assert!(msg.as_str().unwrap().contains("malformed"), "{bad}: {msg}");
    }
    // Another scheme entirely is no credential at all.
    let resp = app.client.get(app.project_url("/api-keys")).basic_auth("a", Some("b")).send().await.unwrap();
    error_message(resp, 401).await;
}

async fn unknown_key_is_401(app: TestApp) {
    let stranger = format!("svc_{}", "A".repeat(43));
    let msg = error_message(app.get_with(&app.project_url("/api-keys"), &stranger).await, 401).await;
    assert_eq!(msg, "invalid API key");
}

async fn revoked_key_is_401_on_the_next_request_and_stays_revoked(app: TestApp) {
    let key = app.create_key(&["api-keys:read"]).await;
    assert_eq!(app.get_with(&app.project_url("/api-keys"), &key).await.status(), 200);
    let list: Value = app.get_with(&app.project_url("/api-keys"), &app.key).await.json().await.unwrap();
    let id = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| key.starts_with(k["prefix"].as_str().unwrap()))
        .unwrap()["_id"]
        .as_str()
        .unwrap()
        .to_string();

    let revoked: Value = app
        .with_key(Method::DELETE, &app.project_url(&format!("/api-keys/{id}")), &app.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(revoked["revokedAt"].is_string(), "{revoked}");
    assert!(revoked.get("key").is_none() && revoked.get("hashedKey").is_none());

    // The very next request with it fails.
    let msg = error_message(app.get_with(&app.project_url("/api-keys"), &key).await, 401).await;
    assert_eq!(msg, "API key revoked");

    // Revoking again keeps the first time; there is no way back.
    let again: Value = app
        .with_key(Method::DELETE, &app.project_url(&format!("/api-keys/{id}")), &app.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["revokedAt"], revoked["revokedAt"]);
    error_message(app.get_with(&app.project_url("/api-keys"), &key).await, 401).await;

    // Unknown ids are 404.
    let resp =
        app.with_key(Method::DELETE, &app.project_url("/api-keys/nope"), &app.key).send().await.unwrap();
    error_message(resp, 404).await;
}

async fn wrong_scope_is_403(app: TestApp) {
    let key = app.create_key(&["streams:read", "vod:write"]).await;
    for path in ["/api-keys", "/api-keys/scopes"] {
        let msg = error_message(app.get_with(&app.project_url(path), &key).await, 403).await;
        assert!(msg.as_str().unwrap().contains("api-keys:read"), "{msg}");
    }
    let resp =
        app.post_json_with(&app.project_url("/api-keys"), &key, &json!({"scopes": ["streams:read"]})).await;
    error_message(resp, 403).await;
    // Members management is admin only: a key needs `*`.
    error_message(app.get_with(&app.project_url("/members"), &key).await, 403).await;
    // `api-keys:write` grants `api-keys:read`.
    let writer = app.create_key(&["api-keys:write"]).await;
    assert_eq!(app.get_with(&app.project_url("/api-keys"), &writer).await.status(), 200);
}

async fn key_of_another_project_is_404(app: TestApp) {
    let other_key = app.other_project("other").await;
    let msg = error_message(app.get_with(&app.project_url("/api-keys"), &other_key).await, 404).await;
    assert_eq!(msg, "project not found");
    // Same answer as for a project that does not exist: existence is not revealed.
    let msg =
        error_message(app.get_with(&app.url("/v1/projects/nosuch/api-keys"), &app.key).await, 404).await;
    assert_eq!(msg, "project not found");
    // And the other project's key works on its own project.
    assert_eq!(app.get_with(&app.url("/v1/projects/other/api-keys"), &other_key).await.status(), 200);
}

async fn escalation_is_403(app: TestApp) {
    let limited = app.create_key(&["api-keys:write", "streams:read"]).await;
    let url = app.project_url("/api-keys");
    for wanted in [
        json!({"scopes": ["*"]}),
        json!({"scopes": ["vod:read"]}),
        json!({"scopes": ["streams:write"]}),
        json!({}),
    ] {
        let resp = app.post_json_with(&url, &limited, &wanted).await;
        let msg = error_message(resp, 403).await;
        assert!(msg.as_str().unwrap().contains("does not hold"), "{wanted}: {msg}");
    }
    for allowed in
        [json!({"scopes": ["streams:read"]}), json!({"scopes": ["api-keys:read", "api-keys:write"]})]
    {
        assert_eq!(app.post_json_with(&url, &limited, &allowed).await.status(), 201, "{allowed}");
    }
}

async fn created_key_is_shown_once_and_stored_hashed(app: TestApp) {
    let resp = app.post_json_with(&app.project_url("/api-keys"), &app.key, &json!({"label": "ci"})).await;
    assert_eq!(resp.status(), 201);
    let created: Value = resp.json().await.unwrap();
    let key = created["key"].as_str().unwrap();
    assert!(key.starts_with("svc_") && key.len() == 47, "{key}");
    assert!(key[4..].bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    assert_eq!(created["prefix"], key[..12]);
    assert_eq!(created["scopes"], json!(["*"]), "default scope");
    assert_eq!(created["label"], "ci");
    assert!(created["lastUsedAt"].is_null() && created["revokedAt"].is_null());
    assert!(created.get("hashedKey").is_none());

    // Listing never shows the key or its hash.
    let list = app.get_with(&app.project_url("/api-keys"), key).await.text().await.unwrap();
    assert!(!list.contains(key) && !list.contains("hashedKey") && !list.contains("\"key\""), "{list}");

    // Only the SHA-256 hash and the prefix are stored.
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT prefix, hashed_key FROM api_keys WHERE id = $1")
        .bind(created["_id"].as_str().unwrap())
        .fetch_all(app.db.pool())
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].0, &key[..12]);
    assert_eq!(rows[0].1, hex::encode(Sha256::digest(key.as_bytes())));
}

async fn scopes_endpoint_lists_every_scope(app: TestApp) {
    let body: Value =
        app.get_with(&app.project_url("/api-keys/scopes"), &app.key).await.json().await.unwrap();
    assert_eq!(
        body["scopes"],
        json!([
            "streams:read",
            "streams:write",
            "vod:read",
            "vod:write",
            "webhooks:read",
            "webhooks:write",
            "api-keys:read",
            "api-keys:write",
            "*"
        ])
    );
}

async fn last_used_at_is_sampled(app: TestApp) {
    let key = app.create_key(&["api-keys:read"]).await;
    let prefix = key[..12].to_string();
    let last_used = |app: &TestApp| {
        let (url, admin, prefix) = (app.project_url("/api-keys"), app.key.clone(), prefix.clone());
        let client = app.client.clone();
        async move {
            let list: Value = client.get(url).bearer_auth(admin).send().await.unwrap().json().await.unwrap();
            list["items"].as_array().unwrap().iter().find(|k| k["prefix"] == prefix.as_str()).unwrap()
                ["lastUsedAt"]
                .clone()
        }
    };
    assert!(last_used(&app).await.is_null());
    assert_eq!(app.get_with(&app.project_url("/api-keys"), &key).await.status(), 200);
    let first = eventually("lastUsedAt to be written", Duration::from_secs(10), || async {
        let v = last_used(&app).await;
        v.is_string().then_some(v)
    })
    .await;
    // A second use within the minute does not write again. Then a first use of another key,
    // whose write must land: a (wrong) write of the second use, started before it, has had
    // its chance to land too once that one is in.
    let marker = app.create_key(&["api-keys:read"]).await;
    assert_eq!(app.get_with(&app.project_url("/api-keys"), &key).await.status(), 200);
    assert_eq!(app.get_with(&app.project_url("/api-keys"), &marker).await.status(), 200);
    eventually("the other key's lastUsedAt to be written", Duration::from_secs(10), || async {
        let list: Value = app.get_with(&app.project_url("/api-keys"), &app.key).await.json().await.unwrap();
        let items = list["items"].as_array().unwrap().clone();
        items.into_iter().find(|k| k["prefix"] == marker[..12]).filter(|k| k["lastUsedAt"].is_string())
    })
    .await;
    assert_eq!(last_used(&app).await, first);
}

async fn list_is_paginated_newest_first(app: TestApp) {
    for _ in 0..24 {
        app.create_key(&["vod:read"]).await;
    }
    let url = app.project_url("/api-keys");
    let page: Value = app.get_with(&url, &app.key).await.json().await.unwrap();
    assert_eq!(page["total"], 25);
    assert_eq!(page["skip"], 0);
    assert_eq!(page["limit"], 20);
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 20);
    let created: Vec<&str> = items.iter().map(|k| k["createdAt"].as_str().unwrap()).collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "newest first: {created:?}");
    assert_eq!(items.last().unwrap()["label"], "t");

    let rest: Value = app.get_with(&format!("{url}?skip=20&limit=100"), &app.key).await.json().await.unwrap();
    assert_eq!(rest["items"].as_array().unwrap().len(), 5);
    assert_eq!(rest["items"][4]["label"], "bootstrap", "oldest last");
    assert_eq!(rest["limit"], 100);

    for (query, field) in
        [("limit=101", "limit"), ("limit=0", "limit"), ("skip=-1", "skip"), ("limit=abc", "limit")]
    {
        let msg = error_message(app.get_with(&format!("{url}?{query}"), &app.key).await, 400).await;
        let first = msg[0].as_str().unwrap();
        assert!(first.starts_with(field), "{query}: {msg}");
    }
    let msg = error_message(app.get_with(&format!("{url}?limit=101&skip=-1"), &app.key).await, 400).await;
    assert_eq!(msg.as_array().unwrap().len(), 2, "both problems reported: {msg}");
}
