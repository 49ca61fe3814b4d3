//! Every answer the test suite gets from `/v1/…` is checked against the OpenAPI document: its
//! status must be one the operation documents, and its JSON body must validate against that
//! status's schema (JSON Schema 2020-12, formats included). So every `null` a response carries
//! must be declared nullable, every field declared required must be there, every timestamp
//! must be a date-time. A violation turns the answer into status 599 with the reason as its
//! body (and on stderr), which fails the test that made the request.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use poem::endpoint::BoxEndpoint;
use poem::http::{Method, StatusCode};
use poem::{Endpoint, EndpointExt, Response};
use serde_json::{json, Value};

pub static DOCUMENT: LazyLock<Value> = LazyLock::new(|| {
    serde_json::from_str(&sluice::api::spec_json(&sluice::api::service())).expect("the document is JSON")
});

/// Compiled validators by what they check (`<operation> <status>`, `delivery of <event>`).
type Validators = HashMap<String, Arc<jsonschema::Validator>>;
static VALIDATORS: LazyLock<Mutex<Validators>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Wraps the server's routes with the check.
pub fn check(routes: BoxEndpoint<'static, Response>) -> BoxEndpoint<'static, Response> {
    routes
        .around(|ep, req| async move {
            let method = req.method().clone();
            let path = req.uri().path().to_string();
            let resp = ep.call(req).await?;
            if !path.starts_with("/v1/") || path == "/v1/openapi.json" {
                return Ok(resp);
            }
            // A stream of server-sent events never ends: its tests read its messages themselves.
            if resp
                .headers()
                .get("content-type")
                .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"))
            {
                return Ok(resp);
            }
            let (parts, body) = resp.into_parts();
            let bytes = body.into_vec().await.unwrap_or_default();
            match violation(&method, &path, parts.status, &bytes) {
                None => Ok(Response::from_parts(parts, bytes.into())),
                Some(problem) => {
                    let problem =
                        format!("contract violation: {method} {path} → {}: {problem}", parts.status);
                    eprintln!("{problem}");
                    Ok(Response::builder()
                        .status(StatusCode::from_u16(599).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
                        .body(problem))
                }
            }
        })
        .boxed()
}

/// The document's path template that `path` matches, preferring literal segments.
pub fn template_of(path: &str) -> Option<&'static str> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let paths = DOCUMENT["paths"].as_object()?;
    paths
        .keys()
        .filter_map(|template| {
            let parts: Vec<&str> = template.split('/').collect();
            if parts.len() != segments.len() {
                return None;
            }
            let mut literal = 0;
            for (t, s) in parts.iter().zip(&segments) {
                if t.starts_with('{') {
                    continue;
                }
                if t != s {
                    return None;
                }
                literal += 1;
            }
            Some((literal, template.as_str()))
        })
        .max_by_key(|(literal, _)| *literal)
        .map(|(_, t)| t)
}

/// What is wrong with an answer, if anything.
pub fn violation(method: &Method, path: &str, status: StatusCode, body: &[u8]) -> Option<String> {
    // Unknown routes and methods are answered outside any operation.
    let template = template_of(path)?;
    let op = DOCUMENT["paths"][template].get(method.as_str().to_ascii_lowercase())?;
    let id = op["operationId"].as_str().unwrap_or(template).to_string();
    let code = status.as_u16().to_string();
    let wildcard = format!("{}XX", &code[..1]);
    let Some((key, response)) = [code.as_str(), wildcard.as_str()]
        .into_iter()
        .find_map(|k| op["responses"].get(k).map(|r| (k.to_string(), r)))
    else {
        return Some(format!("{id} does not document status {code}"));
    };
    // An answer without a body schema (none here yet) has nothing more to check.
    let schema = response.get("content")?.as_object()?.values().next()?.get("schema")?;
    validate(&format!("{id} {key}"), schema, body)
}

/// Checks one webhook delivery body against the document's `webhooks` entry for its event.
pub fn delivery_violation(event: &str, body: &[u8]) -> Option<String> {
    let content = DOCUMENT["webhooks"].get(event)?["post"]["requestBody"]["content"].as_object()?;
    validate(&format!("delivery of {event}"), content.values().next()?.get("schema")?, body)
}

/// What is wrong with `body` as an instance of `schema` (the one of `what`), if anything. Each
/// schema is compiled once.
fn validate(what: &str, schema: &Value, body: &[u8]) -> Option<String> {
    let instance: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Some(format!("{what}: the body is not JSON ({e}): {}", String::from_utf8_lossy(body)))
        }
    };
    let validator = {
        let mut cache = VALIDATORS.lock().unwrap_or_else(|e| e.into_inner());
        match cache.get(what) {
            Some(v) => v.clone(),
            None => {
                let mut root = schema.clone();
                root["components"] = DOCUMENT["components"].clone();
                root["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
                let v = match jsonschema::options().should_validate_formats(true).build(&root) {
                    Ok(v) => Arc::new(v),
                    Err(e) => return Some(format!("the schema of {what} does not compile: {e}")),
                };
                cache.insert(what.to_string(), v.clone());
                v
            }
        }
    };
    let errors: Vec<String> =
        validator.iter_errors(&instance).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    (!errors.is_empty()).then(|| format!("{what}: {} in {instance}", errors.join("; ")))
}
