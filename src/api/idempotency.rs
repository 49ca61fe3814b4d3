//! `Idempotency-Key` on POST (CONTRACT: Conventions): a repeat of a request with the same key
//! and the same body, by the same credential's project, within 24 hours, gets the first answer
//! (with `Idempotent-Replayed: true`) and does nothing again; the key with another request is
//! 422; a repeat while the first still runs is 409.
//!
//! Decisions the contract leaves open (docs in the README, Conventions):
//! - Only answers that succeeded (2xx) are kept. A refused or failed request gives its key back,
//!   so a corrected or later retry runs; a request abandoned mid-way (the client went away)
//!   gives it back too, and one whose process died is taken over after [`STALE`].
//! - "The same request" is the method, the path and query, and the body's bytes.
//! - Requests with no valid credential, and the sign-in routes under `/v1/auth/` (whose answers
//!   are credentials), are served as if the header were absent.
//! - Raw secrets are never stored: [`SECRETS`] are set to `null` in the kept answer, and a
//!   replay names them in `Idempotent-Redacted`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use poem::http::{HeaderValue, Method, StatusCode};
use poem::{Body, Endpoint, IntoResponse, Request, Response};
use sha2::{Digest, Sha256};

use super::body::MAX_JSON_BODY;
use super::error::ApiError;
use crate::api::ApiState;
use crate::domain::time::now_ms;
use crate::store::idempotency::{Claim, StoredAnswer};
use crate::store::Db;

pub const HEADER: &str = "Idempotency-Key";
pub const REPLAYED: &str = "Idempotent-Replayed";
pub const REDACTED: &str = "Idempotent-Redacted";
/// How long a key's answer is kept.
pub const KEEP: Duration = Duration::from_secs(24 * 3600);
/// A request still running after this long is taken to have died with its process.
pub const STALE: Duration = Duration::from_secs(60);

/// The fields of answers that hold raw secrets, by schema: `null` in a replay.
pub const SECRETS: &[(&str, &str)] = &[
    ("StreamWithCredentials", "pushPassword"),
    ("StreamWithCredentials", "ingestUrl"),
    ("StreamWithCredentials", "srtUrl"),
    ("BackupIngest", "ingestUrl"),
    ("BackupIngest", "srtUrl"),
    ("CreatedWebhook", "secret"),
    ("CreatedApiKey", "key"),
    ("Invitation", "token"),
];

/// Whether the POST at `path` takes the header (documented so, too).
pub fn applies_to(path: &str) -> bool {
    path.starts_with("/v1/") && !path.starts_with("/v1/auth/") && !path.starts_with("/v1/whip")
}

/// A key: 1 to 255 printable ASCII characters.
fn parse_key(raw: &HeaderValue) -> Result<String, ApiError> {
    let bytes = raw.as_bytes();
    if bytes.is_empty() || bytes.len() > 255 || !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(ApiError::invalid(HEADER, "must be 1 to 255 printable ASCII characters"));
    }
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

fn fingerprint(method: &Method, path_and_query: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(method.as_str().as_bytes());
    h.update([0]);
    h.update(path_and_query.as_bytes());
    h.update([0]);
    h.update(body);
    hex::encode(h.finalize())
}

/// Sets every member named in [`SECRETS`] to `null`, wherever it is; returns their paths.
fn redact(value: &mut serde_json::Value, at: &str, found: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (name, member) in map.iter_mut() {
                let path = if at.is_empty() { name.clone() } else { format!("{at}.{name}") };
                if SECRETS.iter().any(|(_, field)| field == name) && !member.is_null() {
                    *member = serde_json::Value::Null;
                    found.push(path);
                } else {
                    redact(member, &path, found);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| redact(v, at, found)),
        _ => {}
    }
}

/// A claimed key: kept with the answer, given back with an error ([`Pending::release`]), or,
/// when the request is dropped mid-way (its client went away), given back from `Drop`.
struct Pending {
    db: Db,
    scope: String,
    key: String,
    settled: bool,
}

impl Pending {
    /// Gives the key back now.
    async fn release(&mut self) {
        if let Err(e) = self.db.release_idempotency(&self.scope, &self.key).await {
            tracing::warn!(error = %e, "giving back an idempotency key");
        }
        self.settled = true;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let (db, scope, key) =
            (self.db.clone(), std::mem::take(&mut self.scope), std::mem::take(&mut self.key));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = db.release_idempotency(&scope, &key).await {
                    tracing::warn!(error = %e, "giving back an idempotency key");
                }
            });
        }
    }
}

/// Reads up to [`MAX_JSON_BODY`] of the body. `Err` with a body to pass on as it is (larger:
/// the operation answers 413 itself).
async fn read_body(body: Body) -> Result<Vec<u8>, Body> {
    let mut chunks = body.into_bytes_stream();
    let mut read = Vec::new();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(chunk) => {
                read.extend_from_slice(&chunk);
                if read.len() > MAX_JSON_BODY {
                    let head =
                        futures_util::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from(read))]);
                    return Err(Body::from_bytes_stream(head.chain(chunks)));
                }
            }
            // The operation reports a body that cannot be read.
            Err(e) => {
                return Err(Body::from_bytes_stream(futures_util::stream::iter([Err::<bytes::Bytes, _>(e)])))
            }
        }
    }
    Ok(read)
}

/// The layer: around every route of the API, inside the cookie jar (sessions are read as the
/// operations read them) and inside the error layer (an error is passed on as it is).
pub async fn around<E: Endpoint<Output = Response>>(
    api: Arc<ApiState>,
    ep: Arc<E>,
    mut req: Request,
) -> poem::Result<Response> {
    let Some(raw) = req.headers().get(HEADER).cloned() else { return ep.call(req).await };
    if req.method() != Method::POST || !applies_to(req.uri().path()) {
        return ep.call(req).await;
    }
    // No valid credential: the operation answers 401, as without the header.
    let Some(scope) = api.idempotency_scope(&req).await else { return ep.call(req).await };
    let key = match parse_key(&raw) {
        Ok(key) => key,
        Err(refused) => return Ok(refused.into_response()),
    };
    let body = match read_body(req.take_body()).await {
        Ok(body) => body,
        Err(pass_on) => {
            req.set_body(pass_on);
            return ep.call(req).await;
        }
    };
    let path = req.uri().path_and_query().map_or_else(|| req.uri().path().to_string(), |p| p.to_string());
    let print = fingerprint(req.method(), &path, &body);
    let now = now_ms();
    let claim = api
        .db
        .claim_idempotency(
            &scope,
            &key,
            &print,
            now,
            now - KEEP.as_millis() as i64,
            now - STALE.as_millis() as i64,
        )
        .await
        .map_err(ApiError::from);
    match claim {
        Err(e) => return Ok(e.into_response()),
        Ok(Claim::Mismatch) => {
            return Ok(ApiError::unprocessable(format!(
                "{HEADER} {key:?} was used with another request; use a new key for a new request"
            ))
            .into_response())
        }
        Ok(Claim::Running) => {
            return Ok(ApiError::conflict(format!(
                "a request with {HEADER} {key:?} is still running; retry once it has answered"
            ))
            .into_response())
        }
        Ok(Claim::Done(answer)) => return Ok(replay(answer)),
        Ok(Claim::Claimed) => {}
    }
    let mut pending = Pending { db: api.db.clone(), scope, key, settled: false };
    req.set_body(body);
    // Only a success is kept. The key is given back before the answer leaves, so a retry sent
    // on receiving it finds the key free; an error goes on to the API's error layer as it is.
    let resp = match ep.call(req).await {
        Ok(resp) => resp.into_response(),
        Err(e) => {
            pending.release().await;
            return Err(e);
        }
    };
    if !resp.status().is_success() {
        pending.release().await;
        return Ok(resp);
    }
    let (parts, body) = resp.into_parts();
    let bytes =
        body.into_bytes().await.map_err(|e| ApiError::internal(format_args!("reading an answer: {e}")))?;
    let content_type =
        parts.headers.get(poem::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut kept = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
    let mut redacted = Vec::new();
    if let Some(value) = kept.as_mut() {
        redact(value, "", &mut redacted);
    }
    let answer = StoredAnswer {
        status: i64::from(parts.status.as_u16()),
        content_type,
        body: kept.map(|v| v.to_string()),
        redacted: (!redacted.is_empty()).then(|| redacted.join(", ")),
    };
    match api.db.finish_idempotency(&pending.scope, &pending.key, &answer).await {
        Ok(()) => pending.settled = true,
        // The answer stands; the key is given back (a repeat would run again).
        Err(e) => tracing::warn!(error = %e, "keeping an idempotent answer"),
    }
    Ok(Response::from_parts(parts, Body::from(bytes)))
}

/// The kept answer, marked as a replay.
fn replay(answer: StoredAnswer) -> Response {
    let status = u16::try_from(answer.status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut resp = Response::builder().status(status).header(REPLAYED, "true");
    if let Some(ct) = &answer.content_type {
        resp = resp.content_type(ct.as_str());
    }
    if let Some(fields) = &answer.redacted {
        resp = resp.header(REDACTED, fields.as_str());
    }
    resp.body(answer.body.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_1_to_255_printable_characters() {
        for good in ["a", "order-42 retry", &"k".repeat(255), "~!@#$%^&*()"] {
            assert!(parse_key(&HeaderValue::from_str(good).unwrap()).is_ok(), "{good:?}");
        }
        let long = "k".repeat(256);
        for bad in [&b""[..], long.as_bytes(), b"tab\there", "é".as_bytes()] {
            assert!(parse_key(&HeaderValue::from_bytes(bad).unwrap()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn secrets_are_set_to_null_wherever_they_are() {
        let mut v = serde_json::json!({
            "_id": "s1", "pushPassword": "pw", "ingestUrl": "rtmp://h/live/k?pass=pw", "srtUrl": null,
            "obs": {"server": "rtmp://h/live", "streamKey": "k"},
            "invitation": {"token": "t", "expiresAt": "x"},
        });
        let mut found = Vec::new();
        redact(&mut v, "", &mut found);
        found.sort();
        assert_eq!(found, ["ingestUrl", "invitation.token", "pushPassword"]);
        assert!(v["pushPassword"].is_null() && v["invitation"]["token"].is_null());
        assert_eq!(v["obs"]["streamKey"], "k", "what is not a secret stays");
        assert_eq!(v["invitation"]["expiresAt"], "x");
    }

    #[test]
    fn the_same_request_is_the_same_method_path_and_body() {
        let a = fingerprint(&Method::POST, "/v1/projects/p/streams", b"{\"name\":\"a\"}");
        assert_eq!(a, fingerprint(&Method::POST, "/v1/projects/p/streams", b"{\"name\":\"a\"}"));
        assert_ne!(a, fingerprint(&Method::POST, "/v1/projects/p/streams", b"{\"name\":\"b\"}"));
        assert_ne!(a, fingerprint(&Method::POST, "/v1/projects/q/streams", b"{\"name\":\"a\"}"));
    }
}
