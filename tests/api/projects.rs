//! Projects and members: creation, roles and their scopes (CONTRACT: Scopes; Users and sessions).

use reqwest::Client;
use serde_json::{json, Value};

use crate::support::{both_backends, error_message, TestApp};

both_backends!(
    signed_in_user_creates_projects_and_slugs_are_unique,
    roles_map_to_scopes,
    the_last_admin_stays,
);

async fn signed_in_user_creates_projects_and_slugs_are_unique(app: TestApp) {
    let client = app.signed_in(&app.email, &app.password).await;
    let create =
        |body: Value| client.post(app.url("/v1/projects")).header("origin", &app.base).json(&body).send();
    let resp = create(json!({"slug": "second", "name": "Second"})).await.unwrap();
    assert_eq!(resp.status(), 201);
    let p: Value = resp.json().await.unwrap();
    assert_eq!(
        (p["slug"].as_str(), p["name"].as_str(), p["role"].as_str()),
        (Some("second"), Some("Second"), Some("admin"))
    );
    assert!(p["_id"].is_string() && p["createdAt"].as_str().unwrap().ends_with('Z'));

    assert_eq!(error_message(create(json!({"slug": "second"})).await.unwrap(), 409).await, "slug is taken");
    assert_eq!(error_message(create(json!({"slug": "demo"})).await.unwrap(), 409).await, "slug is taken");
    let msg = error_message(create(json!({"slug": "Not A Slug"})).await.unwrap(), 400).await;
    assert!(msg[0].as_str().unwrap().starts_with("slug must be"), "{msg}");

    let list: Value = client.get(app.url("/v1/projects")).send().await.unwrap().json().await.unwrap();
    assert_eq!(list["total"], 2);
    assert_eq!(list["items"][0]["slug"], "second", "newest first");

    // A key acts for its project, not for a person: it cannot create projects.
    let resp = app.post_json_with(&app.url("/v1/projects"), &app.key, &json!({"slug": "third"})).await;
    error_message(resp, 403).await;
    error_message(
        app.client.post(app.url("/v1/projects")).json(&json!({"slug": "x-y-z"})).send().await.unwrap(),
        401,
    )
    .await;
}

/// Adds `email` with `role` through the API; returns a client signed in as that user.
async fn add_member(app: &TestApp, admin: &Client, email: &str, role: &str) -> (String, Client) {
    let resp = admin
        .post(app.project_url("/members"))
        .header("origin", &app.base)
        .json(&json!({"email": email, "role": role}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let m: Value = resp.json().await.unwrap();
    assert_eq!(m["role"], role);
    assert!(m.get("password").is_none(), "no password is made up for the person: {m}");
    let token = m["invitation"]["token"].as_str().expect("a new account gets an invitation");
    let password = format!("{email} sets this");
    let resp = app
        .client
        .post(app.url("/v1/auth/accept-invitation"))
        .json(&json!({"token": token, "password": password}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    (m["_id"].as_str().unwrap().to_string(), app.signed_in(email, &password).await)
}

async fn roles_map_to_scopes(app: TestApp) {
    let admin = app.signed_in(&app.email, &app.password).await;
    let (viewer_id, viewer) = add_member(&app, &admin, "viewer@example.com", "viewer").await;
    let keys = app.project_url("/api-keys");
    let write = |c: &Client, body: Value| c.post(&keys).header("origin", &app.base).json(&body).send();

    // viewer: every :read, nothing else.
    assert_eq!(viewer.get(&keys).send().await.unwrap().status(), 200);
    error_message(write(&viewer, json!({"scopes": ["vod:read"]})).await.unwrap(), 403).await;
    error_message(viewer.get(app.project_url("/members")).send().await.unwrap(), 403).await;

    // member: the :write of streams, vod, webhooks, but not of api-keys.
    let resp = admin
        .patch(app.project_url(&format!("/members/{viewer_id}")))
        .header("origin", &app.base)
        .json(&json!({"role": "member"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    error_message(write(&viewer, json!({"scopes": ["vod:read"]})).await.unwrap(), 403).await;

    // admin: everything, including keys of any scope.
    let resp = admin
        .patch(app.project_url(&format!("/members/{viewer_id}")))
        .header("origin", &app.base)
        .json(&json!({"role": "admin"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(write(&viewer, json!({"scopes": ["*"]})).await.unwrap().status(), 201);

    // An existing account is added without a new password; a second add is 409.
    let resp = admin
        .post(app.project_url("/members"))
        .header("origin", &app.base)
        .json(&json!({"email": "viewer@example.com", "role": "viewer"}))
        .send()
        .await
        .unwrap();
    error_message(resp, 409).await;
    let members: Value = admin.get(app.project_url("/members")).send().await.unwrap().json().await.unwrap();
    assert_eq!(members["total"], 2);
    let msg = error_message(
        admin
            .post(app.project_url("/members"))
            .header("origin", &app.base)
            .json(&json!({"email": "x", "role": "boss"}))
            .send()
            .await
            .unwrap(),
        400,
    )
    .await;
    assert_eq!(msg, json!(["email must be an e-mail address", "role must be one of viewer, member, admin"]));
}

async fn the_last_admin_stays(app: TestApp) {
    let admin = app.signed_in(&app.email, &app.password).await;
    let members: Value = admin.get(app.project_url("/members")).send().await.unwrap().json().await.unwrap();
    let admin_id = members["items"][0]["_id"].as_str().unwrap().to_string();
    let resp = admin
        .patch(app.project_url(&format!("/members/{admin_id}")))
        .header("origin", &app.base)
        .json(&json!({"role": "viewer"}))
        .send()
        .await
        .unwrap();
    assert_eq!(error_message(resp, 409).await, "a project keeps at least one admin");
    let resp = admin
        .delete(app.project_url(&format!("/members/{admin_id}")))
        .header("origin", &app.base)
        .send()
        .await
        .unwrap();
    error_message(resp, 409).await;

    // With a second admin, the first can leave; then the project is gone for them.
    let (_, _) = add_member(&app, &admin, "second@example.com", "admin").await;
    let resp = admin
        .delete(app.project_url(&format!("/members/{admin_id}")))
        .header("origin", &app.base)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    error_message(admin.get(app.project_url("")).send().await.unwrap(), 404).await;
    // A key with `*` manages members too.
    let members: Value = app.get_with(&app.project_url("/members"), &app.key).await.json().await.unwrap();
    assert_eq!(members["total"], 1);
    let resp = app
        .with_key(reqwest::Method::DELETE, &app.project_url("/members/nobody"), &app.key)
        .send()
        .await
        .unwrap();
    error_message(resp, 404).await;
}
