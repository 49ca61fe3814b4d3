//! Sign-in sessions: cookies, refresh rotation, logout and the CSRF origin check
//! (CONTRACT: Users and sessions).

use serde_json::{json, Value};

use crate::support::{both_backends, error_message, TestApp};

both_backends!(
    sign_in_sets_http_only_cookies_with_the_contract_lifetimes,
    wrong_password_and_unknown_user_are_the_same_401,
    session_cookie_authenticates_project_routes,
    cookie_writes_need_our_origin,
    refresh_rotates_and_a_replay_revokes_the_family,
    logout_ends_the_session,
    sessions_are_stored_hashed,
    sign_ins_are_limited_per_email,
);

async fn sign_in_sets_http_only_cookies_with_the_contract_lifetimes(app: TestApp) {
    let resp = app
        .client
        .post(app.url("/v1/auth/login"))
        .json(&json!({"email": app.email.to_uppercase(), "password": app.password}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let cookies: Vec<String> =
        resp.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    let find = |name: &str| cookies.iter().find(|c| c.starts_with(&format!("{name}="))).cloned().unwrap();
    let session = find("sluice_session");
    let refresh = find("sluice_refresh");
    for c in [&session, &refresh] {
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Lax") && c.contains("Path=/"), "{c}");
        assert!(!c.contains("Secure"), "plain-http public URL: no Secure flag: {c}");
    }
    assert!(session.contains("Max-Age=900"), "{session}");
    assert!(refresh.contains("Max-Age=2592000"), "{refresh}");
    let user: Value = resp.json().await.unwrap();
    assert_eq!(user["email"], app.email);
    assert!(user.get("passwordHash").is_none() && user.get("password").is_none());
}

async fn wrong_password_and_unknown_user_are_the_same_401(app: TestApp) {
    for body in [
        json!({"email": app.email, "password": "wrong"}),
        json!({"email": "nobody@example.com", "password": "wrong"}),
        json!({"email": "not-an-email", "password": "wrong"}),
    ] {
        let resp = app.client.post(app.url("/v1/auth/login")).json(&body).send().await.unwrap();
        assert!(resp.headers().get("set-cookie").is_none());
        assert_eq!(error_message(resp, 401).await, "invalid e-mail or password");
    }
    let msg =
        error_message(app.client.post(app.url("/v1/auth/login")).json(&json!({})).send().await.unwrap(), 400)
            .await;
    assert_eq!(msg, json!(["email is required", "password is required"]));
}

async fn session_cookie_authenticates_project_routes(app: TestApp) {
    let client = app.signed_in(&app.email, &app.password).await;
    let me: Value = client.get(app.url("/v1/auth/me")).send().await.unwrap().json().await.unwrap();
    assert_eq!(me["email"], app.email);
    let keys = client.get(app.project_url("/api-keys")).send().await.unwrap();
    assert_eq!(keys.status(), 200);
    let project: Value = client.get(app.project_url("")).send().await.unwrap().json().await.unwrap();
    assert_eq!(project["slug"], "demo");
    assert_eq!(project["role"], "admin");
    // A project the user is not a member of is 404.
    app.other_project("elsewhere").await;
    error_message(client.get(app.url("/v1/projects/elsewhere/api-keys")).send().await.unwrap(), 404).await;
    // /me with an API key: the key is valid but is not a person.
    error_message(app.get_with(&app.url("/v1/auth/me"), &app.key).await, 403).await;
    error_message(app.client.get(app.url("/v1/auth/me")).send().await.unwrap(), 401).await;
}

async fn cookie_writes_need_our_origin(app: TestApp) {
    let client = app.signed_in(&app.email, &app.password).await;
    let url = app.project_url("/api-keys");
    let body = json!({"label": "from browser", "scopes": ["vod:read"]});
    let msg = error_message(client.post(&url).json(&body).send().await.unwrap(), 403).await;
    assert!(msg.as_str().unwrap().contains("Origin"), "{msg}");
    let msg = error_message(
        client.post(&url).header("origin", "https://evil.example").json(&body).send().await.unwrap(),
        403,
    )
    .await;
    assert!(msg.as_str().unwrap().contains("cross-site"), "{msg}");
    let resp = client.post(&url).header("origin", &app.base).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 201);
    // Reads need no Origin, and bearer-authenticated writes are not cookie-borne.
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    assert_eq!(app.post_json_with(&url, &app.key, &body).await.status(), 201);
    // Nothing was created by the refused requests.
    let list: Value = client.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(list["total"], 3);
}

async fn refresh_rotates_and_a_replay_revokes_the_family(app: TestApp) {
    let resp = app
        .client
        .post(app.url("/v1/auth/login"))
        .json(&json!({"email": app.email, "password": app.password}))
        .send()
        .await
        .unwrap();
    let refresh_of = |resp: &reqwest::Response| {
        resp.headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap())
            .find(|c| c.starts_with("sluice_refresh="))
            .map(|c| c.split(';').next().unwrap().to_string())
            .unwrap()
    };
    let first = refresh_of(&resp);
    let post_refresh = |cookie: String| {
        app.client
            .post(app.url("/v1/auth/refresh"))
            .header("cookie", cookie)
            .header("origin", &app.base)
            .send()
    };
    let resp = post_refresh(first.clone()).await.unwrap();
    assert_eq!(resp.status(), 200);
    let second = refresh_of(&resp);
    assert_ne!(first, second, "the refresh token rotates");
    // Replaying the used token fails and revokes the whole family, including the new token.
    assert_eq!(
        error_message(post_refresh(first).await.unwrap(), 401).await,
        "refresh token already used; sign in"
    );
    error_message(post_refresh(second).await.unwrap(), 401).await;
    error_message(post_refresh("sluice_refresh=garbage".into()).await.unwrap(), 401).await;
    error_message(app.client.post(app.url("/v1/auth/refresh")).send().await.unwrap(), 401).await;
}

async fn logout_ends_the_session(app: TestApp) {
    let client = app.signed_in(&app.email, &app.password).await;
    assert_eq!(client.get(app.url("/v1/auth/me")).send().await.unwrap().status(), 200);
    let resp = client.post(app.url("/v1/auth/logout")).header("origin", &app.base).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    error_message(client.get(app.url("/v1/auth/me")).send().await.unwrap(), 401).await;
    let (sessions,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM sessions").fetch_one(app.db.pool()).await.unwrap();
    let (refresh,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM refresh_tokens").fetch_one(app.db.pool()).await.unwrap();
    assert_eq!((sessions, refresh), (0, 0));
}

async fn sessions_are_stored_hashed(app: TestApp) {
    let resp = app
        .client
        .post(app.url("/v1/auth/login"))
        .json(&json!({"email": app.email, "password": app.password}))
        .send()
        .await
        .unwrap();
    let values: Vec<String> = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().split_once('=').unwrap().1.to_string())
        .collect();
    assert_eq!(values.len(), 2);
    let (stored,): (String,) =
        sqlx::query_as("SELECT token_hash FROM sessions").fetch_one(app.db.pool()).await.unwrap();
    assert!(!values.contains(&stored));
    assert!(values.iter().any(|v| sluice::domain::ApiKeyHash::of(v).0 == stored));
    let (pw,): (String,) =
        sqlx::query_as("SELECT password_hash FROM users").fetch_one(app.db.pool()).await.unwrap();
    assert!(pw.starts_with("$argon2id$"), "Argon2id: {pw}");
}

async fn sign_ins_are_limited_per_email(app: TestApp) {
    let login = |email: &str, password: &str| {
        app.client.post(app.url("/v1/auth/login")).json(&json!({"email": email, "password": password})).send()
    };
    for i in 0..10 {
        assert_eq!(login(&app.email, "wrong").await.unwrap().status(), 401, "failure {i}");
    }
    // The eleventh failure in 15 minutes is refused, with Retry-After.
    let resp = login(&app.email, "wrong").await.unwrap();
    let retry_after: u64 = resp.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=90).contains(&retry_after), "{retry_after}");
    error_message(resp, 429).await;
    // While locked out, even the right password is refused without being checked (no oracle);
    // it is accepted once the lockout has passed (the limiter's own tests move its clock).
    let resp = login(&app.email.to_uppercase(), &app.password).await.unwrap();
    assert!(resp.headers().get("set-cookie").is_none());
    error_message(resp, 429).await;
    // Other addresses are not affected.
    error_message(login("someone-else@example.com", "wrong").await.unwrap(), 401).await;
}
