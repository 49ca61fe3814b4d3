//! The OpenAPI document as published: poem-openapi writes OpenAPI 3.0 from the code; this
//! makes it the exact OpenAPI 3.1 document that SDK generators and fuzzers read.
//!
//! What it changes, each a rule over the whole document rather than a patch of one place:
//! - `openapi: 3.1.0` (the document has top-level `webhooks`, which only 3.1 has);
//! - a `$ref` that poem wraps in `allOf` to give it a description becomes a plain `$ref` with
//!   the description beside it (3.1 allows that; generators refuse `allOf` of a non-object);
//! - in what the server sends (responses and webhook deliveries) an `Option` field is always
//!   present, `null` when absent, so it is declared required and nullable; the few fields that
//!   are left out instead of `null` are listed in [`OMITTED_WHEN_ABSENT`];
//! - what clients send (request bodies) admits no unknown property (the body reader refuses
//!   them: `additionalProperties: false`);
//! - every property named `…At` is a timestamp: `format: date-time`;
//! - a schema's `example` becomes 2020-12's `examples`;
//! - every POST that takes `Idempotency-Key` declares it, with its 409 and 422, and the raw
//!   secrets a replay leaves out are nullable ([`idempotency`]);
//! - each operation lists exactly the statuses it can answer ([`statuses`]).

use serde_json::{json, Map, Value};

use super::idempotency as idem;

/// Fields of server-sent objects that are left out, not `null`, when they have no value
/// (`#[oai(skip_serializing_if_is_none)]`): `(schema, property)`.
pub const OMITTED_WHEN_ABSENT: &[(&str, &str)] = &[
    ("PlaybackUrls", "hls"),
    ("PlaybackUrls", "webrtc"),
    ("PlaybackUrls", "rtsp"),
    ("StreamTicket", "hls"),
    ("StreamTicket", "webrtc"),
    ("StreamTicket", "rtsp"),
    ("StreamEventData", "reason"),
    ("VodEventData", "error"),
];

/// The statuses besides success that an operation can answer, by `operationId`, beyond those
/// every operation can: 401 (credentials), 403 (scope, role, or a cross-site request), 429
/// (rate limits), 500 and 503 (the database is away or too slow, CONTRACT: Faults). 400 is added
/// for every operation with a body or a query parameter, 413 and 415 for every operation with a
/// body, 404 for every operation with a path parameter, 507 (no room to write) for every
/// operation that writes (every method but GET).
/// An operation missing here fails the document's tests: each new one needs its line.
const EXTRA_STATUSES: &[(&str, &[u16])] = &[
    ("login", &[]),
    ("refresh", &[]),
    ("logout", &[]),
    ("me", &[]),
    ("acceptInvitation", &[404]),
    ("changePassword", &[]),
    ("createProject", &[409]),
    ("listProjects", &[]),
    ("getProject", &[]),
    ("listMembers", &[]),
    ("addMember", &[409]),
    ("updateMember", &[409]),
    ("removeMember", &[409]),
    ("listScopes", &[]),
    ("listApiKeys", &[]),
    ("createApiKey", &[]),
    ("revokeApiKey", &[]),
    ("listStreams", &[]),
    ("createStream", &[409]),
    ("getStream", &[]),
    ("updateStream", &[409]),
    ("deleteStream", &[409]),
    ("rotateStreamPush", &[409]),
    ("putStreamSlate", &[409]),
    ("getStreamSlate", &[]),
    ("deleteStreamSlate", &[]),
    ("listSimulcastTargets", &[]),
    ("createSimulcastTarget", &[409]),
    ("updateSimulcastTarget", &[409]),
    ("deleteSimulcastTarget", &[]),
    ("listVods", &[]),
    ("createVod", &[404, 409]),
    ("getVod", &[]),
    ("updateVod", &[409]),
    ("deleteVod", &[409]),
    ("markVodUploaded", &[409]),
    ("vodUploadHeartbeat", &[409]),
    ("setStreamSignedPlayback", &[409]),
    ("createStreamPlaybackTicket", &[409]),
    ("setVodSignedPlayback", &[]),
    ("createVodPlaybackTicket", &[409]),
    ("listWebhookEvents", &[]),
    ("listWebhooks", &[]),
    ("createWebhook", &[]),
    ("listWebhookDeliveries", &[]),
    ("redeliverWebhookDelivery", &[409]),
    ("getWebhook", &[]),
    ("updateWebhook", &[]),
    ("deleteWebhook", &[]),
    ("testWebhook", &[409]),
    ("listEvents", &[]),
    ("listNodes", &[]),
];

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// Turns poem-openapi's document into the published one.
pub fn publish(raw: &str) -> Result<String, String> {
    let mut doc: Value = serde_json::from_str(raw).map_err(|e| format!("poem's document: {e}"))?;
    doc["openapi"] = json!("3.1.0");
    unwrap_all_of(&mut doc);
    let (inputs, outputs) = schema_uses(&doc);
    let schemas = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
        .ok_or("the document has no components")?;
    for (name, schema) in schemas.iter_mut() {
        let (input, output) = (inputs.contains(name), outputs.contains(name));
        if input && output && has_optional(schema) {
            return Err(format!("{name} is both sent and received and has optional fields"));
        }
        if output {
            declare_nulls(name, schema);
        }
        if input && schema.get("properties").is_some() {
            // The body reader takes `null` for an optional field as its absence.
            declare_optional_nulls(schema);
            schema["additionalProperties"] = json!(false);
        }
        timestamps(schema);
        // 3.1 schemas are JSON Schema 2020-12, whose keyword is `examples` (a list).
        if let Some(example) = schema.as_object_mut().and_then(|m| m.remove("example")) {
            schema["examples"] = json!([example]);
        }
    }
    idempotency(&mut doc);
    statuses(&mut doc)?;
    acknowledgements(&mut doc);
    describe_successes(&mut doc);
    whole_numbers(&mut doc);
    let mut text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    text.push('\n');
    Ok(text)
}

/// Keywords that only annotate a schema (they may sit beside a `$ref` in 3.1).
const ANNOTATIONS: [&str; 7] =
    ["description", "title", "default", "example", "readOnly", "writeOnly", "deprecated"];

/// `{description, allOf: [{$ref}, {description}]}` → `{$ref, description}`, everywhere.
fn unwrap_all_of(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(parts)) = map.get("allOf") {
                let refs: Vec<&Value> = parts.iter().filter(|p| p.get("$ref").is_some()).collect();
                let annotations_only = parts.iter().filter(|p| p.get("$ref").is_none()).all(|p| {
                    p.as_object().is_some_and(|o| o.keys().all(|k| ANNOTATIONS.contains(&k.as_str())))
                });
                if refs.len() == 1 && annotations_only {
                    let parts = match map.remove("allOf") {
                        Some(Value::Array(parts)) => parts,
                        _ => Vec::new(),
                    };
                    for part in parts {
                        if let Value::Object(part) = part {
                            for (k, v) in part {
                                map.entry(k).or_insert(v);
                            }
                        }
                    }
                }
            }
            map.values_mut().for_each(unwrap_all_of);
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_all_of),
        _ => {}
    }
}

/// The component schemas reachable from request bodies (what clients send) and from responses
/// and webhook deliveries (what the server sends).
fn schema_uses(doc: &Value) -> (Vec<String>, Vec<String>) {
    let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
    for (section, inbound) in [("paths", true), ("webhooks", false)] {
        for item in doc.get(section).and_then(Value::as_object).into_iter().flat_map(|m| m.values()) {
            for op in METHODS.iter().filter_map(|m| item.get(*m)) {
                if let Some(body) = op.get("requestBody") {
                    reach(doc, body, if inbound { &mut inputs } else { &mut outputs });
                }
                if let Some(responses) = op.get("responses") {
                    reach(doc, responses, &mut outputs);
                }
            }
        }
    }
    (inputs, outputs)
}

/// Adds every component schema `value` refers to, directly or through others, to `seen`.
fn reach(doc: &Value, value: &Value, seen: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(name) = map.get("$ref").and_then(Value::as_str).and_then(component_name) {
                if !seen.iter().any(|s| s == name) {
                    seen.push(name.to_string());
                    if let Some(schema) = doc.pointer(&format!("/components/schemas/{name}")) {
                        reach(doc, schema, seen);
                    }
                }
            }
            map.values().for_each(|v| reach(doc, v, seen));
        }
        Value::Array(items) => items.iter().for_each(|v| reach(doc, v, seen)),
        _ => {}
    }
}

fn component_name(reference: &str) -> Option<&str> {
    reference.strip_prefix("#/components/schemas/")
}

fn required(schema: &Value) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

fn has_optional(schema: &Value) -> bool {
    let required = required(schema);
    schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| p.keys().any(|k| !required.contains(k)))
}

/// Every optional property of a server-sent object is present and may be `null` (but those of
/// [`OMITTED_WHEN_ABSENT`], which are left out).
fn declare_nulls(name: &str, schema: &mut Value) {
    let required = required(schema);
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else { return };
    let mut present = required.clone();
    for (property, prop_schema) in properties.iter_mut() {
        if required.contains(property) || OMITTED_WHEN_ABSENT.contains(&(name, property.as_str())) {
            continue;
        }
        *prop_schema = nullable(std::mem::take(prop_schema));
        present.push(property.clone());
    }
    set_required(schema, present);
}

/// An optional property of a client-sent object may also be `null`, which means absent.
fn declare_optional_nulls(schema: &mut Value) {
    let required = required(schema);
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else { return };
    for (property, prop_schema) in properties.iter_mut() {
        if !required.contains(property) {
            *prop_schema = nullable(std::mem::take(prop_schema));
        }
    }
}

fn set_required(schema: &mut Value, required: Vec<String>) {
    if let Some(map) = schema.as_object_mut() {
        if required.is_empty() {
            map.remove("required");
        } else {
            map.insert("required".into(), json!(required));
        }
    }
}

/// The schema, or `null`.
fn nullable(schema: Value) -> Value {
    let Value::Object(mut map) = schema else { return schema };
    if let Some(reference) = map.remove("$ref") {
        let mut outer = Map::new();
        for key in ANNOTATIONS {
            if let Some(v) = map.remove(key) {
                outer.insert(key.to_string(), v);
            }
        }
        outer.insert("anyOf".into(), json!([{"$ref": reference}, {"type": "null"}]));
        return Value::Object(outer);
    }
    if let Some(Value::String(ty)) = map.get("type").cloned() {
        map.insert("type".into(), json!([ty, "null"]));
    }
    if let Some(Value::Array(forms)) = map.get_mut("anyOf") {
        forms.push(json!({"type": "null"}));
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        values.push(Value::Null);
    }
    Value::Object(map)
}

/// Properties named `…At` hold ISO 8601 UTC timestamps (CONTRACT: Conventions).
fn timestamps(schema: &mut Value) {
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else { return };
    for (property, prop_schema) in properties.iter_mut() {
        let is_string = match prop_schema.get("type") {
            Some(Value::String(t)) => t == "string",
            Some(Value::Array(types)) => types.iter().any(|t| t == "string"),
            _ => false,
        };
        if property.ends_with("At") && is_string {
            prop_schema["format"] = json!("date-time");
        }
    }
}

/// Keeps, of each operation's responses, its successes and the errors it can answer.
fn statuses(doc: &mut Value) -> Result<(), String> {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return Ok(()) };
    for (path, item) in paths.iter_mut() {
        for method in METHODS {
            let Some(op) = item.get_mut(method) else { continue };
            let id = op.get("operationId").and_then(Value::as_str).unwrap_or_default().to_string();
            let extra = EXTRA_STATUSES
                .iter()
                .find(|(op_id, _)| *op_id == id)
                .map(|(_, extra)| *extra)
                .ok_or_else(|| format!("{method} {path} ({id}) has no line in EXTRA_STATUSES"))?;
            let params = op.get("parameters").and_then(Value::as_array).cloned().unwrap_or_default();
            let has_in =
                |place: &str| params.iter().any(|p| p.get("in").and_then(Value::as_str) == Some(place));
            let has_body = op.get("requestBody").is_some();
            let mut allowed: Vec<u16> = vec![401, 403, 429, 500, 503];
            allowed.extend_from_slice(extra);
            if method != "get" {
                allowed.push(507);
            }
            if params.iter().any(|p| p.get("name").and_then(Value::as_str) == Some(idem::HEADER)) {
                allowed.extend([409, 422]);
            }
            if has_body || has_in("query") || has_in("header") {
                allowed.push(400);
            }
            if has_body {
                allowed.extend([413, 415]);
            }
            if has_in("path") {
                allowed.push(404);
            }
            if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
                responses.retain(|status, _| {
                    status.starts_with('2') || status.parse::<u16>().is_ok_and(|s| allowed.contains(&s))
                });
            }
        }
    }
    Ok(())
}

/// `Idempotency-Key` on every POST that takes it ([`idem::applies_to`]), and the fields a
/// replay sets to `null` ([`idem::SECRETS`]) nullable where they are sent.
fn idempotency(doc: &mut Value) {
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (_, item) in paths.iter_mut().filter(|(path, _)| idem::applies_to(path)) {
            let Some(op) = item.get_mut("post").and_then(Value::as_object_mut) else { continue };
            let params = op.entry("parameters").or_insert_with(|| json!([]));
            if let Some(params) = params.as_array_mut() {
                params.push(json!({
                    "name": idem::HEADER,
                    "in": "header",
                    "required": false,
                    "description": format!(
                        "Makes a retry safe: a repeat with the same key and the same request within 24 h \
                         answers the first answer (with `{}: true`) and does nothing again; the same key \
                         with another request is 422, a repeat while the first still runs 409. Raw secrets \
                         are `null` in a replayed answer (`{}` names them).",
                        idem::REPLAYED,
                        idem::REDACTED
                    ),
                    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"},
                }));
            }
        }
    }
    for (schema, field) in idem::SECRETS {
        if let Some(property) = doc.pointer_mut(&format!("/components/schemas/{schema}/properties/{field}")) {
            let note = "`null` in an answer replayed for an `Idempotency-Key`.";
            let description = property.get("description").and_then(Value::as_str).unwrap_or_default();
            let description = format!("{description} {note}").trim().to_string();
            *property = nullable(std::mem::take(property));
            property["description"] = json!(description);
        }
    }
}

/// A webhook delivery is acknowledged by any 2xx; poem leaves the description empty.
fn acknowledgements(doc: &mut Value) {
    let Some(hooks) = doc.get_mut("webhooks").and_then(Value::as_object_mut) else { return };
    for item in hooks.values_mut() {
        for method in METHODS {
            if let Some(responses) =
                item.pointer_mut(&format!("/{method}/responses")).and_then(Value::as_object_mut)
            {
                responses.clear();
                responses.insert(
                    "2XX".into(),
                    json!({"description": "Any 2xx within 10 s acknowledges the delivery; anything else is retried."}),
                );
            }
        }
    }
}

/// poem leaves a plain `Json<T>` success without a description (which 3.1 requires to say
/// something useful): it gets the operation's summary.
fn describe_successes(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return };
    for item in paths.values_mut() {
        for method in METHODS {
            let Some(op) = item.get_mut(method) else { continue };
            let summary = op.get("summary").and_then(Value::as_str).unwrap_or("Success").to_string();
            let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else { continue };
            for (status, response) in responses.iter_mut() {
                let empty = response.get("description").and_then(Value::as_str).is_none_or(str::is_empty);
                if status.starts_with('2') && empty {
                    response["description"] = json!(summary);
                }
            }
        }
    }
}

/// poem writes bounds as floats (`60.0`); a whole number is written as an integer.
fn whole_numbers(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15) {
                *value = json!(f as i64);
            }
        }
        Value::Object(map) => map.values_mut().for_each(whole_numbers),
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        _ => {}
    }
}
