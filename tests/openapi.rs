//! The committed OpenAPI document matches the code, and documents every operation fully.

use serde_json::Value;

/// The check every answer of the API tests goes through (`tests/support/contract.rs`); its own
/// test runs here, with the pure tests.
#[allow(dead_code)]
#[path = "support/contract.rs"]
mod contract;

const REFRESH: &str = "cargo run -q -- openapi > openapi/openapi.json";

fn committed() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json"))
        .unwrap_or_else(|e| panic!("openapi/openapi.json is missing ({e}); create it with `{REFRESH}`"))
}

#[test]
fn committed_document_matches_the_code() {
    let generated = sluice::api::spec_json(&sluice::api::service());
    assert!(
        generated == committed(),
        "openapi/openapi.json has drifted from the code; refresh it with `{REFRESH}` and commit it"
    );
}

#[test]
fn cli_prints_the_same_bytes() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice")).arg("openapi").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout).unwrap() == committed(), "`sluice openapi` differs from the file");
}

#[test]
fn the_document_is_openapi_3_1_without_allof_wrappers() {
    let text = committed();
    let spec: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(spec["openapi"], "3.1.0");
    assert!(spec["webhooks"].as_object().is_some_and(|w| !w.is_empty()));
    assert!(!text.contains("\"allOf\""), "a $ref wrapped in allOf (generators refuse it)");
    assert!(!text.contains("\"nullable\""), "3.0's nullable in a 3.1 document");
}

#[test]
fn examples_are_valid_and_the_main_operations_have_them() {
    let spec: Value = serde_json::from_str(&committed()).unwrap();
    let schemas = spec["components"]["schemas"].as_object().unwrap();
    let mut with_examples = Vec::new();
    for (name, schema) in schemas {
        let Some(examples) = schema.get("examples").and_then(Value::as_array) else { continue };
        let mut root = schema.clone();
        root["components"] = spec["components"].clone();
        let validator = jsonschema::options().should_validate_formats(true).build(&root).unwrap();
        for example in examples {
            let errors: Vec<String> = validator.iter_errors(example).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "the example of {name} is invalid: {errors:?}");
        }
        with_examples.push(name.as_str());
    }
    for name in [
        "CreateStream",
        "StreamWithCredentials",
        "Stream",
        "CreateVod",
        "VodWithUpload",
        "CreateWebhook",
        "CreatedWebhook",
    ] {
        assert!(with_examples.contains(&name), "{name} has no example");
    }
}

#[test]
fn every_operation_has_summary_tag_security_and_statuses() {
    let spec: Value = serde_json::from_str(&committed()).unwrap();
    let public = ["login", "refresh", "logout", "acceptInvitation"];
    let mut seen = 0;
    for (path, ops) in spec["paths"].as_object().unwrap() {
        assert!(path.starts_with("/v1/"), "{path}");
        for (method, op) in ops.as_object().unwrap() {
            seen += 1;
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path}: operationId"));
            assert!(op["summary"].as_str().is_some_and(|s| !s.is_empty()), "{id}: summary");
            assert!(op["tags"].as_array().is_some_and(|t| !t.is_empty()), "{id}: tag");
            let responses = op["responses"].as_object().unwrap();
            assert!(responses.keys().any(|k| k.starts_with('2')), "{id}: success status");
            for status in ["401", "403", "429", "500", "503"] {
                assert!(responses.contains_key(status), "{id}: documents {status}");
            }
            // Exactly the statuses it can answer: a body brings 400, 413 and 415; a path
            // parameter 404; a GET never answers 409, 413 or 415.
            let has_body = op.get("requestBody").is_some();
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            let has = |place: &str| params.iter().any(|p| p["in"] == place);
            for (status, expected) in [
                ("400", has_body || has("query") || has("header")),
                ("413", has_body),
                ("415", has_body),
                ("404", has("path") || id == "acceptInvitation"),
                // Every write may find no room for it (CONTRACT: Faults).
                ("507", method != "get"),
            ] {
                assert_eq!(responses.contains_key(status), expected, "{id}: documents {status}");
            }
            if method == "get" {
                assert!(!responses.contains_key("409"), "{id}: a GET documents 409");
            }
            // Every POST but signing in takes an Idempotency-Key, with its 409 and 422.
            let idempotent = params.iter().any(|p| p["name"] == "Idempotency-Key" && p["in"] == "header");
            let takes_key = method == "post" && !path.starts_with("/v1/auth/");
            assert_eq!(idempotent, takes_key, "{id}: declares Idempotency-Key");
            assert_eq!(responses.contains_key("422"), takes_key, "{id}: documents 422");
            if takes_key {
                assert!(responses.contains_key("409"), "{id}: documents 409");
            }
            if !public.contains(&id) {
                let security = op["security"].as_array().unwrap_or_else(|| panic!("{id}: security"));
                assert!(!security.is_empty(), "{id}: security");
            }
            for status in ["429", "503"] {
                assert!(
                    responses[status]["headers"].get("RETRY-AFTER").is_some()
                        || responses[status]["headers"].get("Retry-After").is_some(),
                    "{id}: {status} documents Retry-After: {}",
                    responses[status]
                );
            }
        }
    }
    assert!(seen >= 15, "only {seen} operations");
}

/// The contract check of the API tests can fail: it finds what is wrong with an answer.
#[test]
fn a_violation_is_found() {
    use contract::{template_of, violation, DOCUMENT};
    use poem::http::{Method, StatusCode};
    let doc = &*DOCUMENT;
    let path = "/v1/projects/demo/streams/abc";
    assert_eq!(template_of(path), Some("/v1/projects/{slug}/streams/{id}"));
    assert_eq!(template_of("/v1/projects/demo/webhooks/events"), Some("/v1/projects/{slug}/webhooks/events"));
    assert!(doc["paths"].as_object().is_some());
    // A stream without its required fields, a null where none is declared, an undocumented status.
    let bad = violation(&Method::GET, path, StatusCode::OK, br#"{"_id":"x","name":null}"#);
    assert!(bad.as_deref().is_some_and(|b| b.contains("required") && b.contains("null")), "{bad:?}");
    let undocumented = violation(&Method::GET, path, StatusCode::CONFLICT, b"{}");
    assert!(undocumented.is_some_and(|b| b.contains("does not document status 409")));
    let error = br#"{"statusCode":404,"error":"Not Found","message":"stream not found"}"#;
    assert_eq!(violation(&Method::GET, path, StatusCode::NOT_FOUND, error), None);
    let stamp = br#"{"items":[],"total":0,"skip":0,"limit":20}"#;
    assert_eq!(violation(&Method::GET, "/v1/projects/demo/streams", StatusCode::OK, stamp), None);
}
