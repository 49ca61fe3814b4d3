//! Webhook delivery is fair between projects (issue 21; CONTRACT: Webhooks): one project whose
//! 40 endpoints accept connections and never answer cannot delay another project's first
//! attempt by more than a second.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::receiver::Receiver;
use crate::support::{eventually, spawn_app, Backend};
use crate::webhooks::create_webhook;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_endpoints_of_one_project_do_not_delay_another() {
    let app = spawn_app(Backend::Sqlite).await;
    // Project A: 40 endpoints that take every request and answer after the attempt timeout.
    let hanging = Receiver::start().await;
    hanging.answer(200, Duration::from_secs(60));
    for i in 0..40 {
        create_webhook(&app, &format!("{}?endpoint={i}", hanging.url()), json!(["stream.created"])).await;
    }
    // Project B: one endpoint that answers at once.
    let key_b = app.other_project("other").await;
    let fast = Receiver::start().await;
    let resp = app
        .post_json_with(
            &app.url("/v1/projects/other/webhooks"),
            &key_b,
            &json!({"url": fast.url(), "events": ["stream.created"]}),
        )
        .await;
    assert_eq!(resp.status(), 201);

    // A's events: three streams, 120 deliveries, whose attempts hang.
    for n in 0..3 {
        let r = app
            .post_json_with(&app.project_url("/streams"), &app.key, &json!({"name": format!("a{n}")}))
            .await;
        assert_eq!(r.status(), 201);
    }
    eventually("A's attempts to be hanging", Duration::from_secs(10), || async {
        (hanging.arrivals() >= 8).then_some(())
    })
    .await;

    // B's event is delivered within a second.
    let r = app.post_json_with(&app.url("/v1/projects/other/streams"), &key_b, &json!({"name": "b"})).await;
    assert_eq!(r.status(), 201);
    let created = Instant::now();
    fast.wait_for(1, Duration::from_secs(15)).await;
    let took = created.elapsed();
    eprintln!(
        "another project's first attempt arrived after {} ms, beside {} hanging attempts",
        took.as_millis(),
        hanging.arrivals()
    );
    assert!(took < Duration::from_secs(1), "B waited {took:?} behind A's hanging endpoints");
}
