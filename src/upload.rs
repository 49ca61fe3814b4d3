//! The upload target of the local store: `PUT /upload/vod/<id>?expires=<unix s>&sig=<kid>.<hex>`,
//! the presigned URL that `POST /vod` and `heartbeat` hand out (CONTRACT: VOD).
//!
//! The body is streamed to disk, never held in memory. A whole file is one plain PUT. A resumable
//! upload sends chunks with `Content-Range: bytes <first>-<last>/<total>`, each starting at or
//! before what has arrived and replacing everything from its first byte on;
//! `Content-Range: bytes */<total>` asks how much has arrived. A chunk that leaves the file
//! incomplete is answered 202 with `Range: bytes=0-<last received>`; the last one with 200.
//! Chunks wait in `source.part`, and the file becomes `source` only once whole.
//!
//! Errors: a bad signature or an expired URL 403, a VOD no longer waiting for its file 409, a
//! file over `SLUICE_MAX_UPLOAD_BYTES` 413 (and what arrived is removed), a chunk that starts past
//! what arrived 416.
//!
//! A refusal is answered only after the rest of the body has been read and dropped (at most
//! [`DRAIN_BYTES`] more, for at most [`DRAIN_TIME`]): a client that sends its body without
//! waiting for `100 Continue` (most do) would otherwise have the connection reset under it
//! while still sending, and lose the answer. A client that asked `Expect: 100-continue` and was
//! refused before its body was read is not asked for it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use poem::http::{header, StatusCode};
use poem::web::{Data, Path};
use poem::{handler, put, Body, Request, Response, Route};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use crate::domain::keyring::KeyRing;
use crate::domain::time::now_ms;
use crate::domain::vod::VodStatus;
use crate::services::endpoints::Endpoints;
use crate::storage::{source_key, Storage};
use crate::store::keys::SigningKeys;
use crate::store::Db;

/// What the upload target works with.
pub struct Uploads {
    pub db: Db,
    pub storage: Storage,
    /// Keys of the signed upload URLs.
    pub keys: Arc<SigningKeys>,
    pub endpoints: Arc<Endpoints>,
    /// `SLUICE_MAX_UPLOAD_BYTES`.
    pub max_bytes: u64,
    /// Uploads running on this process.
    pub uploading: Uploading,
}

/// The most of a refused body read (and dropped) before the answer.
const DRAIN_BYTES: u64 = 8 << 20;
/// The longest a refused body is read before the answer.
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// The signed message of an upload URL.
pub fn message(vod_id: &str, expires: i64) -> String {
    format!("PUT\n{}\n{expires}", source_key(vod_id))
}

impl Uploads {
    /// The upload URL of a VOD on the local store, valid until `expires` (unix seconds).
    pub async fn url(&self, vod_id: &str, expires: i64) -> String {
        let sig = self.keys.ring_for(None).await.sign(&message(vod_id, expires));
        format!("{}/upload/vod/{vod_id}?expires={expires}&sig={sig}", self.endpoints.public_url())
    }
}

pub fn routes() -> Route {
    Route::new().at("/vod/:id", put(upload).options(preflight))
}

/// VODs with an upload running in this process: one writer per file.
#[derive(Default)]
pub struct Uploading(Mutex<HashSet<String>>);

struct Busy<'a>(&'a Uploading, String);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0 .0.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.1);
    }
}

impl Uploading {
    fn enter(&self, id: &str) -> Option<Busy<'_>> {
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        set.insert(id.to_string()).then(|| Busy(self, id.to_string()))
    }
}

fn answer(code: StatusCode, message: &str) -> Response {
    let reason = code.canonical_reason().unwrap_or("Error");
    Response::builder()
        .status(code)
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .content_type("application/json")
        .body(
            serde_json::json!({"statusCode": code.as_u16(), "error": reason, "message": message}).to_string(),
        )
}

/// The answer to a failed write of the disk: 507 when it is full (what was received stays, for
/// a resume), else 500.
fn disk_failed(e: &std::io::Error, what: &str) -> Response {
    if e.kind() == std::io::ErrorKind::StorageFull {
        tracing::error!(error = %e, "upload: {what}: the disk is full");
        return answer(
            StatusCode::INSUFFICIENT_STORAGE,
            "the service has no room for this upload now; resume it later with Content-Range",
        );
    }
    tracing::error!(error = %e, "upload: {what}");
    answer(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
}

/// `bytes a-b/total` → (Some((a, b)), total); `bytes */total` → (None, total).
fn content_range(value: &str) -> Option<(Option<(u64, u64)>, u64)> {
    let spec = value.trim().strip_prefix("bytes ")?;
    let (range, total) = spec.split_once('/')?;
    let total: u64 = total.trim().parse().ok()?;
    if range.trim() == "*" {
        return Some((None, total));
    }
    let (a, b) = range.split_once('-')?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    (a <= b && b < total).then_some((Some((a, b)), total))
}

fn received(len: u64) -> Option<String> {
    (len > 0).then(|| format!("bytes=0-{}", len - 1))
}

fn incomplete(len: u64, total: u64) -> Response {
    let mut r = Response::builder()
        .status(StatusCode::ACCEPTED)
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::ACCESS_CONTROL_EXPOSE_HEADERS, "Range")
        .content_type("application/json");
    if let Some(range) = received(len) {
        r = r.header(header::RANGE, range);
    }
    r.body(serde_json::json!({"received": len, "total": total}).to_string())
}

/// A request body as it is read.
type BodyStream = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

#[handler]
async fn upload(req: &Request, body: Body, app: Data<&Arc<Uploads>>, Path(id): Path<String>) -> Response {
    let mut stream: BodyStream = Box::pin(body.into_bytes_stream());
    let mut polled = false;
    let response = receive(req, &mut stream, &mut polled, app.0.as_ref(), &id).await;
    if !response.status().is_success() {
        let continue_asked = req
            .headers()
            .get(header::EXPECT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
        if polled || !continue_asked {
            drain(&mut stream).await;
        }
    }
    response
}

/// Reads and drops what is left of a refused body, within [`DRAIN_BYTES`] and [`DRAIN_TIME`].
async fn drain(stream: &mut BodyStream) {
    let mut left = DRAIN_BYTES;
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            left = left.saturating_sub(chunk.len() as u64);
            if left == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, read).await;
}

/// The upload itself; `polled` is set once the body has been read from.
async fn receive(
    req: &Request,
    stream: &mut BodyStream,
    polled: &mut bool,
    app: &Uploads,
    id: &str,
) -> Response {
    let q: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()).into_owned().collect();
    let expires = q.get("expires").and_then(|e| e.parse::<i64>().ok());
    let (Some(expires), Some(sig)) = (expires, q.get("sig")) else {
        return answer(StatusCode::FORBIDDEN, "upload URL is not signed");
    };
    let keys = app.keys.ring_for(KeyRing::kid_of(sig)).await;
    if !keys.verify(&message(id, expires), sig) {
        return answer(StatusCode::FORBIDDEN, "upload URL signature is invalid");
    }
    if expires.saturating_mul(1000) < now_ms() {
        return answer(
            StatusCode::FORBIDDEN,
            "upload URL has expired; POST /vod/<id>/heartbeat gives a new one",
        );
    }
    let row = match app.db.vod_by_id(id).await {
        Ok(Some(row)) => row,
        Ok(None) => return answer(StatusCode::NOT_FOUND, "VOD not found"),
        Err(e) if crate::store::fault(&e) == crate::store::Fault::Unavailable => {
            tracing::warn!(error = %e, "upload: reading the VOD");
            let mut resp =
                answer(StatusCode::SERVICE_UNAVAILABLE, "the database is not answering; retry later");
            resp.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
            return resp;
        }
        Err(e) => {
            tracing::error!(error = %e, "upload: reading the VOD");
            return answer(StatusCode::INTERNAL_SERVER_ERROR, "internal error");
        }
    };
    if row.status() != VodStatus::PendingUpload {
        return answer(StatusCode::CONFLICT, "this VOD is not waiting for an upload");
    }
    let Some(path) = app.storage.local_path(&source_key(id)) else {
        return answer(StatusCode::NOT_FOUND, "uploads go to the storage's own presigned URL");
    };
    let Some(_busy) = app.uploading.enter(id) else {
        return answer(StatusCode::CONFLICT, "another upload of this VOD is in progress");
    };
    let max = app.max_bytes;
    let length =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let range =
        match req.headers().get(header::CONTENT_RANGE).map(|v| v.to_str().ok().and_then(content_range)) {
            None => None,
            Some(None) => {
                return answer(StatusCode::BAD_REQUEST, "Content-Range must be bytes <first>-<last>/<total>")
            }
            Some(Some(r)) => Some(r),
        };
    let partial = path.with_file_name("source.part");
    let total = range.map(|(_, t)| t).or(length);
    if total.is_some_and(|t| t > max) || length.is_some_and(|l: u64| l > max) {
        let _ = tokio::fs::remove_file(&partial).await;
        return answer(StatusCode::PAYLOAD_TOO_LARGE, &format!("the file is larger than {max} bytes"));
    }
    if let Some(parent) = path.parent() {
        if let Err(e) = tokio::fs::create_dir_all(parent).await {
            return disk_failed(&e, "creating the folder");
        }
    }
    let have = tokio::fs::metadata(&partial).await.map_or(0, |m| m.len());
    let (start, declared) = match range {
        Some((None, total)) => return incomplete(have.min(total), total),
        Some((Some((a, _)), _)) if a > have => {
            let mut r = answer(StatusCode::RANGE_NOT_SATISFIABLE, "the chunk starts past the bytes received");
            if let Some(v) = received(have).and_then(|v| v.parse().ok()) {
                r.headers_mut().insert(header::RANGE, v);
            }
            return r;
        }
        Some((Some((a, b)), _)) => (a, Some(b - a + 1)),
        None => (0, None),
    };
    *polled = true;
    match write(&partial, start, declared, max, stream).await {
        Ok(written) => {
            let len = start + written;
            let whole = match range {
                Some((_, total)) => len >= total,
                None => true,
            };
            if !whole {
                return incomplete(len, total.unwrap_or(len));
            }
            if let Err(e) = tokio::fs::rename(&partial, &path).await {
                return disk_failed(&e, "moving the file in place");
            }
            tracing::info!(vod = %id, bytes = len, "source uploaded");
            Response::builder()
                .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
                .content_type("application/json")
                .body(serde_json::json!({"received": len, "total": len}).to_string())
        }
        Err(WriteError::TooLarge) => {
            let _ = tokio::fs::remove_file(&partial).await;
            answer(StatusCode::PAYLOAD_TOO_LARGE, &format!("the file is larger than {max} bytes"))
        }
        Err(WriteError::TooLong) => {
            answer(StatusCode::BAD_REQUEST, "the body is longer than its Content-Range")
        }
        // Only the disk says it is full; the client's side fails otherwise.
        Err(WriteError::Io(e)) if e.kind() == std::io::ErrorKind::StorageFull => disk_failed(&e, "writing"),
        Err(WriteError::Io(e)) => {
            tracing::warn!(vod = %id, error = %e, "upload interrupted");
            answer(StatusCode::BAD_REQUEST, "the upload was interrupted; resume it with Content-Range")
        }
    }
}

enum WriteError {
    TooLarge,
    TooLong,
    Io(std::io::Error),
}

/// Writes the body at `start` (dropping anything after it first), in constant memory. Returns the
/// bytes written; what arrived before an interruption stays for a resume.
async fn write(
    partial: &std::path::Path,
    start: u64,
    declared: Option<u64>,
    max: u64,
    stream: &mut BodyStream,
) -> Result<u64, WriteError> {
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(partial)
        .await
        .map_err(WriteError::Io)?;
    file.set_len(start).await.map_err(WriteError::Io)?;
    file.seek(std::io::SeekFrom::Start(start)).await.map_err(WriteError::Io)?;
    let mut written = 0u64;
    let mut failure = None;
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                failure = Some(WriteError::Io(e));
                break;
            }
        };
        written += chunk.len() as u64;
        if start + written > max {
            return Err(WriteError::TooLarge);
        }
        if declared.is_some_and(|d| written > d) {
            failure = Some(WriteError::TooLong);
            break;
        }
        if let Err(e) = file.write_all(&chunk).await {
            failure = Some(WriteError::Io(e));
            break;
        }
    }
    file.flush().await.map_err(WriteError::Io)?;
    file.sync_all().await.map_err(WriteError::Io)?;
    match failure {
        Some(f) => Err(f),
        None => Ok(written),
    }
}

#[handler]
fn preflight() -> Response {
    Response::builder()
        .status(StatusCode::NO_CONTENT)
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::ACCESS_CONTROL_ALLOW_METHODS, "PUT, OPTIONS")
        .header(header::ACCESS_CONTROL_ALLOW_HEADERS, "Content-Type, Content-Range")
        .header(header::ACCESS_CONTROL_EXPOSE_HEADERS, "Range")
        .header(header::ACCESS_CONTROL_MAX_AGE, "86400")
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges() {
        assert_eq!(content_range("bytes 0-99/1000"), Some((Some((0, 99)), 1000)));
        assert_eq!(content_range("bytes */1000"), Some((None, 1000)));
        assert_eq!(content_range("bytes 99-0/1000"), None);
        assert_eq!(content_range("bytes 0-1000/1000"), None);
        assert_eq!(content_range("items 0-1/2"), None);
    }
}
