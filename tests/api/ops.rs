//! Health, readiness, metrics and the OpenAPI document.

use serde_json::Value;

use crate::support::{both_backends, TestApp};

both_backends!(health_readiness_and_metrics, openapi_is_served_as_committed);

async fn health_readiness_and_metrics(app: TestApp) {
    assert_eq!(app.client.get(app.url("/healthz")).send().await.unwrap().status(), 200);
    let ready: Value = app.client.get(app.url("/readyz")).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        ready,
        serde_json::json!({"status": "ready", "database": "ok", "storage": "ok", "spool": {"bytes": 0}})
    );
    assert_eq!(app.get_with(&app.project_url("/api-keys"), &app.key).await.status(), 200);
    assert_eq!(app.client.get(app.project_url("/api-keys")).send().await.unwrap().status(), 401);
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains(
            r#"sluice_http_requests_total{method="GET",route="/v1/projects/:slug/api-keys",status="200"} 1"#
        ),
        "{metrics}"
    );
    assert!(metrics.contains(r#"route="/v1/projects/:slug/api-keys",status="401"} 1"#));
    assert!(metrics.contains("sluice_http_request_duration_seconds_bucket"));
    assert!(metrics.contains("sluice_dependency_up{dependency=\"database\"} 1"), "{metrics}");
    assert!(metrics.contains("sluice_reconciled_total{kind=\"push_ended\"} 0"), "{metrics}");

    // Readiness follows the database.
    app.db.close().await;
    let resp = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    let ready: Value = resp.json().await.unwrap();
    assert_eq!(
        ready,
        serde_json::json!({"status": "unavailable", "database": "down", "storage": "ok", "spool": {"bytes": 0}})
    );
    // The API says so too: 503 with `Retry-After`, nothing changed.
    let resp = app.get_with(&app.project_url("/api-keys"), &app.key).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("5"));
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["statusCode"], 503);
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("sluice_dependency_up{dependency=\"database\"} 0"), "{metrics}");
    assert_eq!(app.client.get(app.url("/healthz")).send().await.unwrap().status(), 200);
}

async fn openapi_is_served_as_committed(app: TestApp) {
    let served = app.client.get(app.url("/v1/openapi.json")).send().await.unwrap().text().await.unwrap();
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json")).unwrap();
    assert!(served == committed, "GET /v1/openapi.json differs from openapi/openapi.json");
    let docs = app.client.get(app.url("/docs")).send().await.unwrap();
    assert_eq!(docs.status(), 200);
    assert!(docs.text().await.unwrap().contains("swagger"));
    let _: Value = serde_json::from_str(&served).unwrap();
}
