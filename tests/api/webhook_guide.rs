//! The receiver of docs/webhooks.md, run against a real Sluice: it accepts signed deliveries,
//! processes a redelivered one once, and refuses a forged one.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use sluice::events::Event;

use crate::support::{eventually, spawn_app, Backend};
use crate::webhooks::{create_webhook, stream_data};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_receiver_verifies_and_dedupes() {
    let app = spawn_app(Backend::Sqlite).await;
    let port = crate::support::free_port();
    let url = format!("http://127.0.0.1:{port}/sluice");
    let (_, secret) = create_webhook(&app, &url, json!(["*"])).await;

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/webhook_receiver.py");
    let mut child = Command::new("python3")
        .arg(script)
        .args(["--port", &port.to_string()])
        .env("SLUICE_WEBHOOK_SECRET", &secret)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs the documented receiver");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let stdout = child.stdout.take().unwrap();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    // Ready when it accepts connections.
    eventually("the receiver to listen", Duration::from_secs(10), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok().map(|_| ())
    })
    .await;

    app.app.emit(&app.project_id, &Event::StreamLive(stream_data(&app, "a"))).await.unwrap();
    app.app.emit(&app.project_id, &Event::StreamEnded(stream_data(&app, "a"))).await.unwrap();
    let processed = eventually("two events processed", Duration::from_secs(10), || async {
        let l = lines.lock().unwrap().clone();
        (l.len() >= 2).then_some(l)
    })
    .await;
    let first: serde_json::Value = serde_json::from_str(&processed[0]).unwrap();
    assert_eq!(first["event"], "stream.live");

    // Redeliver the first: the receiver acknowledges it but does not process it again.
    let id = first["id"].as_str().unwrap();
    let delivered = eventually("the deliveries to be recorded", Duration::from_secs(10), || async {
        let v: serde_json::Value =
            app.get_with(&app.project_url("/webhooks/deliveries"), &app.key).await.json().await.unwrap();
        let items = v["items"].as_array().unwrap().clone();
        items.iter().all(|d| d["status"] == "success").then_some(items)
    })
    .await;
    assert!(delivered.iter().all(|d| d["responseCode"] == 204));
    let resp = app
        .with_key(Method::POST, &app.project_url(&format!("/webhooks/deliveries/{id}/redeliver")), &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    eventually("the redelivery to be acknowledged", Duration::from_secs(10), || async {
        let v: serde_json::Value =
            app.get_with(&app.project_url("/webhooks/deliveries"), &app.key).await.json().await.unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["_id"] == id && d["status"] == "success")
            .then_some(())
    })
    .await;
    assert_eq!(lines.lock().unwrap().len(), 2, "the duplicate was not processed again");

    // A forged delivery is refused.
    let forged = reqwest::Client::new()
        .post(&url)
        .header("x-service-delivery", "forged")
        .header("x-service-signature", format!("sha256={}", "0".repeat(64)))
        .body(r#"{"id":"forged","event":"stream.live","createdAt":"x","data":{}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    assert_eq!(lines.lock().unwrap().len(), 2);
    let _ = child.kill();
    let _ = child.wait();
}
