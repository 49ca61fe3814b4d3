//! Invitations and password changes (CONTRACT: Users and sessions): adding a member never sets
//! or reveals a password; the person redeems a single-use invitation to set their own, and can
//! change it later, which ends their other sessions.

use reqwest::{Client, Response};
use serde_json::{json, Value};

use crate::support::{both_backends, error_message, TestApp};

both_backends!(
    an_invited_member_sets_their_own_password,
    an_invitation_is_single_use_and_expires,
    existing_accounts_are_added_without_invitation,
    changing_the_password_ends_other_sessions,
);

async fn invite(t: &TestApp, email: &str, role: &str) -> Value {
    let resp =
        t.post_json_with(&t.project_url("/members"), &t.key, &json!({"email": email, "role": role})).await;
    assert_eq!(resp.status(), 201);
    resp.json().await.expect("json")
}

async fn accept(t: &TestApp, token: &str, password: &str) -> Response {
    t.client
        .post(t.url("/v1/auth/accept-invitation"))
        .json(&json!({"token": token, "password": password}))
        .send()
        .await
        .expect("request")
}

async fn login(t: &TestApp, client: &Client, email: &str, password: &str) -> Response {
    client
        .post(t.url("/v1/auth/login"))
        .json(&json!({"email": email, "password": password}))
        .send()
        .await
        .expect("request")
}

async fn an_invited_member_sets_their_own_password(t: TestApp) {
    let m = invite(&t, "new@example.com", "member").await;
    assert!(m.get("password").is_none(), "{m}");
    assert_eq!((m["email"].as_str(), m["role"].as_str()), (Some("new@example.com"), Some("member")));
    let token = m["invitation"]["token"].as_str().expect("token");
    let expires =
        chrono::DateTime::parse_from_rfc3339(m["invitation"]["expiresAt"].as_str().unwrap()).unwrap();
    let days = (expires.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_minutes() as f64 / 1440.0;
    assert!((6.99..=7.0).contains(&days), "valid 7 days: {days}");
    // Stored hashed; no password exists before the person sets one.
    let (stored,): (String,) =
        sqlx::query_as("SELECT token_hash FROM invitations").fetch_one(t.db.pool()).await.unwrap();
    assert_eq!(stored, sluice::domain::ApiKeyHash::of(token).0);
    error_message(login(&t, &t.client, "new@example.com", "").await, 400).await;
    error_message(login(&t, &t.client, "new@example.com", "anything at all").await, 401).await;

    // Too short a password is refused and uses nothing up.
    let msg = error_message(accept(&t, token, "short").await, 400).await;
    assert_eq!(msg, json!(["password must be 8 to 1024 characters long"]));
    let resp = accept(&t, token, "my own secret").await;
    assert_eq!(resp.status(), 200);
    let user: Value = resp.json().await.unwrap();
    assert_eq!(user["email"], "new@example.com");

    // Now a member who signs in with their own password and acts with their role.
    let client = t.signed_in("new@example.com", "my own secret").await;
    let streams = client.get(t.project_url("/streams")).send().await.unwrap();
    assert_eq!(streams.status(), 200);
}

async fn an_invitation_is_single_use_and_expires(t: TestApp) {
    let token =
        invite(&t, "once@example.com", "viewer").await["invitation"]["token"].as_str().unwrap().to_string();
    assert_eq!(accept(&t, &token, "first password").await.status(), 200);
    // Used: refused, and the password stays the first one.
    let msg = error_message(accept(&t, &token, "second password").await, 404).await;
    assert_eq!(msg, "invitation not found, used or expired");
    t.signed_in("once@example.com", "first password").await;
    error_message(login(&t, &t.client, "once@example.com", "second password").await, 401).await;
    error_message(accept(&t, "made-up", "some password").await, 404).await;

    // Expired: refused.
    let token =
        invite(&t, "late@example.com", "viewer").await["invitation"]["token"].as_str().unwrap().to_string();
    sqlx::query("UPDATE invitations SET expires_at = 0 WHERE used_at IS NULL")
        .execute(t.db.pool())
        .await
        .unwrap();
    error_message(accept(&t, &token, "too late now").await, 404).await;
    error_message(login(&t, &t.client, "late@example.com", "too late now").await, 401).await;
    // Adding them again to another project hands out a fresh invitation (no password set yet),
    // and redeeming it uses up every invitation of the account.
    let other = t.other_project("other").await;
    let again = t
        .post_json_with(
            &t.url("/v1/projects/other/members"),
            &other,
            &json!({"email": "late@example.com", "role": "viewer"}),
        )
        .await;
    assert_eq!(again.status(), 201);
    let again: Value = again.json().await.unwrap();
    let fresh = again["invitation"]["token"].as_str().expect("a fresh invitation").to_string();
    let third = invite_existing(&t, "late@example.com").await;
    assert_eq!(accept(&t, &fresh, "finally mine").await.status(), 200);
    error_message(accept(&t, &third, "hijacked").await, 404).await;
    t.signed_in("late@example.com", "finally mine").await;
}

/// Adds an existing, password-less account to a third project; returns its invitation.
async fn invite_existing(t: &TestApp, email: &str) -> String {
    let key = t.other_project("third").await;
    let resp = t
        .post_json_with(
            &t.url("/v1/projects/third/members"),
            &key,
            &json!({"email": email, "role": "viewer"}),
        )
        .await;
    assert_eq!(resp.status(), 201);
    let m: Value = resp.json().await.unwrap();
    m["invitation"]["token"].as_str().expect("invitation").to_string()
}

async fn existing_accounts_are_added_without_invitation(t: TestApp) {
    t.other_project("other").await;
    // The other project's admin has a password: added here with no invitation and no password.
    let resp = t
        .post_json_with(
            &t.project_url("/members"),
            &t.key,
            &json!({"email": "admin@other.test", "role": "viewer"}),
        )
        .await;
    assert_eq!(resp.status(), 201);
    let m: Value = resp.json().await.unwrap();
    assert!(m["invitation"].is_null() && m.get("password").is_none(), "{m}");
}

async fn changing_the_password_ends_other_sessions(t: TestApp) {
    let laptop = t.signed_in(&t.email, &t.password).await;
    let phone = t.signed_in(&t.email, &t.password).await;
    let change =
        |body: Value| laptop.post(t.url("/v1/auth/password")).header("origin", &t.base).json(&body).send();
    // The current password is needed.
    let resp = change(json!({"currentPassword": "wrong", "newPassword": "brand new secret"})).await.unwrap();
    error_message(resp, 403).await;
    let msg = error_message(change(json!({"currentPassword": t.password})).await.unwrap(), 400).await;
    assert_eq!(msg, json!(["newPassword is required"]));
    // Not with an API key, nor anonymously.
    let resp = t
        .post_json_with(
            &t.url("/v1/auth/password"),
            &t.key,
            &json!({"currentPassword": t.password, "newPassword": "brand new secret"}),
        )
        .await;
    error_message(resp, 403).await;
    let resp = t.client.post(t.url("/v1/auth/password")).json(&json!({"bogus": 1})).send().await.unwrap();
    error_message(resp, 401).await;

    let resp =
        change(json!({"currentPassword": t.password, "newPassword": "brand new secret"})).await.unwrap();
    assert_eq!(resp.status(), 200);
    // This session goes on; the other one has ended, its refresh token too.
    assert_eq!(laptop.get(t.url("/v1/auth/me")).send().await.unwrap().status(), 200);
    error_message(phone.get(t.url("/v1/auth/me")).send().await.unwrap(), 401).await;
    let refreshed = phone.post(t.url("/v1/auth/refresh")).header("origin", &t.base).send().await.unwrap();
    error_message(refreshed, 401).await;
    let refreshed = laptop.post(t.url("/v1/auth/refresh")).header("origin", &t.base).send().await.unwrap();
    assert_eq!(refreshed.status(), 200, "the current sign-in keeps its refresh token");
    // The new password signs in; the old one no longer does.
    t.signed_in(&t.email, "brand new secret").await;
    error_message(login(&t, &t.client, &t.email, &t.password).await, 401).await;
}
