//! Secrets at rest (issue 21): signing keys, webhook secrets and push verifiers are sealed under
//! the master key, so a copy of the database alone reveals none of them; the data dir and the
//! database file are readable by their owner only; a database from before sealing is sealed in
//! place at start, and everything keeps working with the same secrets.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::{json, Value};
use sluice::domain::content_key::is_sealed;
use sluice::store::secrets::{SealedColumn, SEALED_COLUMNS};

use crate::support::receiver::Receiver;
use crate::support::{spawn_app, Backend, TestApp};

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
    let stream = crate::streams::create(app, json!({"name": "sealed"})).await;
    (stream, webhook)
}

/// Every stored secret of the sealed columns: (column, row id, value).
async fn stored_secrets(app: &TestApp) -> Vec<(&'static SealedColumn, String, String)> {
    let mut all = Vec::new();
    for col in &SEALED_COLUMNS {
        let rows: Vec<(String, String)> =
            sqlx::query_as(&format!("SELECT {}, {} FROM {}", col.id, col.column, col.table))
                .fetch_all(app.db.pool())
                .await
                .unwrap();
        all.extend(rows.into_iter().map(|(k, v)| (col, k, v)));
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
    for (col, key, value) in &all {
        assert!(is_sealed(value), "{} {key} is stored sealed", col.table);
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
    for (col, key, value) in stored_secrets(&app).await {
        let plain = master.open_text(&value, &(col.context)(&key)).expect("opens");
        sqlx::query(&format!("UPDATE {} SET {} = $1 WHERE {} = $2", col.table, col.column, col.id))
            .bind(&plain)
            .bind(&key)
            .execute(app.db.pool())
            .await
            .unwrap();
        clear.push((col.table, col.column, key, plain));
    }
    assert!(stored_secrets(&app).await.iter().all(|(_, _, v)| !is_sealed(v)));

    // A process starting on that database seals every one in place, to the same values.
    let settings = (*app.app.settings).clone();
    let second = sluice::app::App::build(settings).await.expect("starts on the old database");
    for (col, key, value) in stored_secrets(&app).await {
        let (table, column) = (col.table, col.column);
        assert!(is_sealed(&value), "{table}.{column} {key} sealed at start");
        // A table may hold several sealed columns (streams: the push verifier and password).
        let was = clear
            .iter()
            .find(|(t, c, k, _)| *t == table && *c == column && *k == key)
            .map(|(_, _, _, v)| v.clone());
        let opened = second.master_key.open_text(&value, &(col.context)(&key)).ok();
        assert_eq!(opened, was, "{table}.{column} {key} keeps its value");
    }
    assert!(stored_secrets(&app).await.iter().any(|(c, k, _)| c.table == "webhooks" && k == webhook_id));
    assert!(stored_secrets(&app).await.iter().any(|(c, k, _)| c.table == "streams" && k == stream_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_with_another_master_key_says_so() {
    let app = spawn_app(Backend::Sqlite).await;
    let mut settings = (*app.app.settings).clone();
    settings.master_key = Some(sluice::domain::content_key::MasterKey::random().to_hex());
    let refused = sluice::app::App::build(settings).await.err().expect("refused");
    let text = format!("{refused:#}");
    assert!(text.contains("SLUICE_MASTER_KEY"), "{text}");
}
