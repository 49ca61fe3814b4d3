//! Secrets at rest (issue 21): signing keys, webhook secrets and push verifiers are sealed under
//! the master key, so a copy of the database alone reveals none of them; the data dir and the
//! database file are readable by their owner only; a database from before sealing is sealed in
//! place at start, and everything keeps working with the same secrets.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::{json, Value};
use sluice::domain::content_key::is_sealed;
use sluice::store::secrets;

use crate::helpers::{spawn_app, Backend, TestApp};
use crate::receiver::Receiver;

async fn stream_and_webhook(app: &TestApp, rx: &Receiver) -> (Value, Value) {
    let webhook: Value = app
        .post_json_with(
            &app.project_url("/webhooks"),
            &app.key,
            &json!({"url": rx.url(), "events": ["stream.created"]}),
        )
        .await
        .json()
        .await
        .unwrap();
    let stream: Value = app
        .post_json_with(&app.project_url("/streams"), &app.key, &json!({"name": "sealed"}))
        .await
        .json()
        .await
        .unwrap();
    (stream, webhook)
}

/// Every stored secret of the three kinds: (table, id, value).
async fn stored_secrets(app: &TestApp) -> Vec<(String, String, String)> {
    let mut all = Vec::new();
    for (table, id, column) in
        [("signing_keys", "kid", "secret"), ("webhooks", "id", "secret"), ("streams", "id", "push_verifier")]
    {
        let rows: Vec<(String, String)> = sqlx::query_as(&format!("SELECT {id}, {column} FROM {table}"))
            .fetch_all(app.db.pool())
            .await
            .unwrap();
        all.extend(rows.into_iter().map(|(k, v)| (table.to_string(), k, v)));
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_sealed_and_files_are_the_owners() {
    let app = spawn_app(Backend::Sqlite).await;
    let rx = Receiver::start().await;
    let (stream, webhook) = stream_and_webhook(&app, &rx).await;
    let secret = webhook["secret"].as_str().unwrap();
    let all = stored_secrets(&app).await;
    assert!(all.len() >= 3);
    for (table, key, value) in &all {
        assert!(is_sealed(value), "{table} {key} is stored sealed");
    }
    let dump = all.iter().map(|(_, _, v)| v.as_str()).collect::<Vec<_>>().join(" ");
    assert!(!dump.contains(secret), "the webhook secret is not in the database");
    let verifier = sluice::domain::stream::push_verifier(
        stream["pushUsername"].as_str().unwrap(),
        &sqlx::query_as::<_, (String,)>("SELECT push_salt FROM streams WHERE id = $1")
            .bind(stream["_id"].as_str().unwrap())
            .fetch_one(app.db.pool())
            .await
            .unwrap()
            .0,
        stream["pushPassword"].as_str().unwrap(),
    );
    assert!(!dump.contains(&verifier), "the push verifier is not in the database");

    // Deliveries are still signed with the secret the create response gave.
    let got = rx.wait_for(1, Duration::from_secs(10)).await;
    let signature = got[0].header("x-service-signature");
    assert!(sluice::events::signing::verify(secret, &got[0].body, signature), "signed with the same secret");

    let dir = &app.app.settings.data_dir;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir), 0o700, "data dir");
    assert_eq!(mode(&dir.join("sluice.db")), 0o600, "database file");
    assert_eq!(mode(&dir.join("master.key")), 0o600, "master key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_with_clear_secrets_is_sealed_in_place() {
    let app = spawn_app(Backend::Sqlite).await;
    let rx = Receiver::start().await;
    let (stream, webhook) = stream_and_webhook(&app, &rx).await;
    let (stream_id, webhook_id) = (stream["_id"].as_str().unwrap(), webhook["_id"].as_str().unwrap());
    // Put the secrets back in the clear, as a database written before sealing holds them.
    let master = &app.app.master_key;
    let mut clear = Vec::new();
    for (table, key, value) in stored_secrets(&app).await {
        let (id, column, context) = match table.as_str() {
            "signing_keys" => ("kid", "secret", secrets::signing_context(&key)),
            "webhooks" => ("id", "secret", secrets::webhook_context(&key)),
            _ => ("id", "push_verifier", secrets::push_context(&key)),
        };
        let plain = master.open_text(&value, &context).expect("opens");
        sqlx::query(&format!("UPDATE {table} SET {column} = $1 WHERE {id} = $2"))
            .bind(&plain)
            .bind(&key)
            .execute(app.db.pool())
            .await
            .unwrap();
        clear.push((table, key, plain));
    }
    assert!(stored_secrets(&app).await.iter().all(|(_, _, v)| !is_sealed(v)));

    // A process starting on that database seals every one in place, to the same values.
    let settings = app.app.settings.clone();
    let second = sluice::app::App::build(settings).await.expect("starts on the old database");
    for (table, key, value) in stored_secrets(&app).await {
        assert!(is_sealed(&value), "{table} {key} sealed at start");
        let context = match table.as_str() {
            "signing_keys" => secrets::signing_context(&key),
            "webhooks" => secrets::webhook_context(&key),
            _ => secrets::push_context(&key),
        };
        let was = clear.iter().find(|(t, k, _)| *t == table && *k == key).map(|(_, _, v)| v.clone());
        assert_eq!(second.master_key.open_text(&value, &context).ok(), was, "{table} {key} keeps its value");
    }
    assert!(stored_secrets(&app).await.iter().any(|(t, k, _)| t == "webhooks" && k == webhook_id));
    assert!(stored_secrets(&app).await.iter().any(|(t, k, _)| t == "streams" && k == stream_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_with_another_master_key_says_so() {
    let app = spawn_app(Backend::Sqlite).await;
    let mut settings = app.app.settings.clone();
    settings.master_key = Some(sluice::domain::content_key::MasterKey::random().to_hex());
    let refused = sluice::app::App::build(settings).await.err().expect("refused");
    let text = format!("{refused:#}");
    assert!(text.contains("SLUICE_MASTER_KEY"), "{text}");
}
