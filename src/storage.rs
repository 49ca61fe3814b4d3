//! Object storage for VOD sources and outputs, through `object_store`: a local folder
//! (`file://…`, the default) or any S3-compatible store
//! (`s3://bucket?endpoint=…&region=…[&access_key_id=…&secret_access_key=…]`; without keys in the
//! URL, the usual `AWS_*` environment variables apply).
//!
//! Keys: `vod/<id>/source`, `vod/<id>/<rendition>/…`, `vod/<id>/thumb.jpg`, `vod/<id>/master.m3u8`.
//! On the local store Sluice itself is the upload target ([`crate::upload`]) and writes the
//! source straight into the folder; on S3 the client uploads with the store's presigned URL.
//!
//! Large objects never pass through memory whole: [`Storage::read`] streams the bytes of one
//! range, [`Storage::put_file`] stores a file in parts ([`PART_SIZE`]).

pub mod spool;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::signer::Signer;
use object_store::{GetOptions, GetRange, GetResultPayload, ObjectStore, PutPayload, WriteMultipart};
use poem::http::Method;
use tokio::io::AsyncReadExt;

/// How long connecting to the S3 endpoint may take.
pub const S3_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one S3 request may take, its body included (a streamed read's is bounded by
/// [`READ_DEADLINE`] and [`READ_STALL`] instead).
pub const S3_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a request's retries may go on (ten at most): a transcode's writes ride out a store
/// that is away for that long.
pub const S3_RETRY_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a streamed read ([`Storage::read`]) may wait for the store's answer to begin, its
/// retries included (the origin gives its other reads of the store the same).
pub const READ_DEADLINE: Duration = Duration::from_secs(30);
/// How long a streamed read ([`Storage::read`]) may wait for its store's next bytes while its
/// reader waits for them; then its body ends in an error. A body has no deadline as a whole (a
/// slow reader is never cut), only this one, so a store that stalls mid-body frees the reader.
pub const READ_STALL: Duration = Duration::from_secs(10);
/// The chunks a streamed read of the local store reads at a time (object_store's own are 8 KiB,
/// each a trip to the blocking pool).
const FILE_CHUNK: usize = 64 * 1024;
/// The parts of [`Storage::put_file`]: a file up to this size is stored in one request, a
/// larger one in parts of this size (S3 takes 5 MiB to 5 GiB, at most 10,000 of them).
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// How many parts of one file are sent at a time (each held in memory meanwhile).
const PARTS_IN_FLIGHT: usize = 2;
/// The most parts S3 takes for one object: a file too large for [`PART_SIZE`] parts goes in
/// larger ones.
const MAX_PARTS: u64 = 10_000;

/// What went wrong with the store; the text names the step (for the log, never a client).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The storage URL of the settings is not usable.
    #[error("storage URL: {0}")]
    Url(String),
    #[error("{what}: {source}")]
    Store {
        what: String,
        #[source]
        source: object_store::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The store gave no answer (or no next bytes of one) in time.
    #[error("{what}: no answer within {within:?}")]
    Timeout { what: String, within: Duration },
}

fn store_error(what: impl Into<String>) -> impl FnOnce(object_store::Error) -> StorageError {
    move |source| StorageError::Store { what: what.into(), source }
}

fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StorageError {
    move |source| StorageError::Io { what: what.into(), source }
}

/// Where the store keeps things.
#[derive(Debug, Clone)]
enum Kind {
    Local(PathBuf),
    S3(Arc<AmazonS3>),
}

#[derive(Debug, Clone)]
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    /// The store of streamed reads: on S3 a client without a deadline on the whole request,
    /// which would cut a long body ([`READ_STALL`] bounds those instead); else `store`.
    reads: Arc<dyn ObjectStore>,
    kind: Kind,
}

/// Which bytes of an object a read wants: the forms of an HTTP byte range (RFC 9110 14.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// From this offset to the end.
    From(u64),
    /// From the first offset to the second, both included.
    Span(u64, u64),
    /// The last so many bytes.
    Last(u64),
}

impl ByteRange {
    /// The first and last byte of the range in an object of `len` bytes, or `None` when none
    /// of it lies within (RFC 9110 14.1.1: unsatisfiable; an empty object has no range).
    pub fn within(self, len: u64) -> Option<(u64, u64)> {
        let last = len.checked_sub(1)?;
        let (start, end) = match self {
            ByteRange::From(a) => (a, last),
            ByteRange::Span(a, b) => (a, b.min(last)),
            ByteRange::Last(0) => return None,
            ByteRange::Last(n) => (len - n.min(len), last),
        };
        (start <= end).then_some((start, end))
    }

    fn get_range(self) -> GetRange {
        match self {
            ByteRange::From(a) => GetRange::Offset(a),
            ByteRange::Span(a, b) => match b.checked_add(1) {
                Some(end) => GetRange::Bounded(a..end),
                None => GetRange::Offset(a),
            },
            ByteRange::Last(n) => GetRange::Suffix(n),
        }
    }
}

/// The bytes of a streamed read, in order; an error ends it.
pub type ByteStream = BoxStream<'static, Result<Bytes, StorageError>>;

/// What [`Storage::read`] found.
pub enum Read {
    /// The object's `size`, which of its bytes the `body` holds, and the body.
    Found { size: u64, range: Range<u64>, body: ByteStream },
    /// The range asked for lies outside the object of `size` bytes.
    Outside { size: u64 },
}

/// The source file of a VOD.
pub fn source_key(vod_id: &str) -> String {
    format!("vod/{vod_id}/source")
}

/// The folder of everything a VOD has in storage: its source and its outputs.
pub fn vod_prefix(vod_id: &str) -> String {
    format!("vod/{vod_id}")
}

impl Storage {
    pub fn open(url: &str) -> Result<Storage, StorageError> {
        if let Some(path) = url.strip_prefix("file://") {
            std::fs::create_dir_all(path).map_err(io_error(format!("creating storage folder {path}")))?;
            let root = std::fs::canonicalize(path).map_err(io_error(format!("storage folder {path}")))?;
            let store =
                LocalFileSystem::new_with_prefix(&root).map_err(store_error("opening the storage folder"))?;
            let store: Arc<dyn ObjectStore> = Arc::new(store);
            return Ok(Storage { reads: store.clone(), store, kind: Kind::Local(root) });
        }
        if url.starts_with("s3://") {
            let parsed = url::Url::parse(url).map_err(|e| StorageError::Url(e.to_string()))?;
            let bucket = parsed
                .host_str()
                .filter(|b| !b.is_empty())
                .ok_or_else(|| StorageError::Url("s3:// URL names no bucket".into()))?;
            // Explicit (docs/operations.md). A recording does not wait for them: its writes are
            // given 10 s, then go to the spool.
            let client = object_store::ClientOptions::new()
                .with_connect_timeout(S3_CONNECT_TIMEOUT)
                .with_timeout(S3_REQUEST_TIMEOUT);
            let retry = object_store::RetryConfig {
                backoff: object_store::BackoffConfig {
                    init_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_secs(15),
                    base: 2.0,
                },
                max_retries: 10,
                retry_timeout: S3_RETRY_TIMEOUT,
            };
            let build = |client: object_store::ClientOptions| {
                let mut b = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_client_options(client)
                    .with_retry(retry.clone());
                for (k, v) in parsed.query_pairs() {
                    b = match k.as_ref() {
                        "endpoint" => b.with_endpoint(v.as_ref()).with_allow_http(v.starts_with("http://")),
                        "region" => b.with_region(v.as_ref()),
                        "access_key_id" => b.with_access_key_id(v.as_ref()),
                        "secret_access_key" => b.with_secret_access_key(v.as_ref()),
                        other => return Err(StorageError::Url(format!("unknown parameter {other}"))),
                    };
                }
                b.build().map_err(store_error("configuring the S3 store"))
            };
            // reqwest's request timeout runs until the body's last byte: a streamed read would
            // be cut after 30 s (object_store resumes it, but only within its retries). Streamed
            // reads bound the answer's head and every wait for bytes instead (`read`).
            let reads = Arc::new(build(client.clone().with_timeout_disabled())?);
            let s3 = Arc::new(build(client)?);
            return Ok(Storage { store: s3.clone(), reads, kind: Kind::S3(s3) });
        }
        Err(StorageError::Url("it must start with file:// or s3://".into()))
    }

    /// The file behind a key on the local store.
    pub fn local_path(&self, key: &str) -> Option<PathBuf> {
        match &self.kind {
            Kind::Local(root) => Some(root.join(key)),
            Kind::S3(_) => None,
        }
    }

    /// The store's own presigned URL (S3 only; the local store's upload target is Sluice).
    pub async fn presigned(
        &self,
        method: Method,
        key: &str,
        expires_in: Duration,
    ) -> Result<Option<String>, StorageError> {
        match &self.kind {
            Kind::Local(_) => Ok(None),
            Kind::S3(s3) => Ok(Some(
                s3.signed_url(method, &Key::from(key), expires_in)
                    .await
                    .map_err(store_error("presigning"))?
                    .to_string(),
            )),
        }
    }

    /// A URI GStreamer can read the object from: the file, or a presigned GET good for `valid`.
    pub async fn read_uri(&self, key: &str, valid: Duration) -> Result<String, StorageError> {
        match &self.kind {
            // The root is absolute (canonicalized at open), so the path always makes a URL.
            Kind::Local(root) => url::Url::from_file_path(root.join(key))
                .map(|u| u.to_string())
                .map_err(|()| StorageError::Url(format!("{key} makes no file URL"))),
            Kind::S3(_) => Ok(self.presigned(Method::GET, key, valid).await?.unwrap_or_default()),
        }
    }

    /// The size of an object, or `None` when there is none.
    pub async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        match self.store.head(&Key::from(key)).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error("reading object metadata")(e)),
        }
    }

    /// The object, or one byte range of it, in memory (playlists, small objects); `None` when
    /// there is none. [`Storage::read`] streams instead.
    pub async fn get(&self, key: &str, range: Option<Range<u64>>) -> Result<Option<Bytes>, StorageError> {
        let key = Key::from(key);
        let got = match range {
            Some(r) => self.store.get_range(&key, r).await,
            None => match self.store.get(&key).await {
                Ok(r) => r.bytes().await,
                Err(e) => Err(e),
            },
        };
        match got {
            Ok(b) => Ok(Some(b)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error("reading an object")(e)),
        }
    }

    /// The bytes `range` names of an object (all of it without one), as a stream read from the
    /// store as its reader takes them; `None` when there is no object. The store's answer must
    /// begin within [`READ_DEADLINE`] (retries included) and each next bytes come within
    /// [`READ_STALL`] of being asked for, else the read (or its body) ends in an error.
    pub async fn read(&self, key: &str, range: Option<ByteRange>) -> Result<Option<Read>, StorageError> {
        tokio::time::timeout(READ_DEADLINE, self.start_read(key, range))
            .await
            .map_err(|_| StorageError::Timeout { what: format!("reading {key}"), within: READ_DEADLINE })?
    }

    async fn start_read(&self, key: &str, range: Option<ByteRange>) -> Result<Option<Read>, StorageError> {
        let options = GetOptions { range: range.map(ByteRange::get_range), ..GetOptions::default() };
        match self.reads.get_opts(&Key::from(key), options).await {
            Ok(got) => {
                let (size, got_range) = (got.meta.size, got.range.clone());
                // `bytes=-0`: object_store answers no bytes, HTTP none of the object.
                if range.is_some() && got_range.is_empty() {
                    return Ok(Some(Read::Outside { size }));
                }
                let body = match got.payload {
                    GetResultPayload::File(file, _) => file_chunks(file, got_range.clone()),
                    GetResultPayload::Stream(body) => body,
                };
                let body = stall_bounded(body, key.to_string());
                Ok(Some(Read::Found { size, range: got_range, body }))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => {
                // A range outside the object is an error of each store's own kind: its size
                // tells.
                if let Some(range) = range {
                    match self.size(key).await {
                        Ok(Some(size)) if range.within(size).is_none() => {
                            return Ok(Some(Read::Outside { size }))
                        }
                        Ok(None) => return Ok(None),
                        _ => {}
                    }
                }
                Err(store_error(format!("reading {key}"))(e))
            }
        }
    }

    /// Stores a local file under `key`: in one request up to [`PART_SIZE`], else in parts of
    /// that size, [`PARTS_IN_FLIGHT`] at a time, never the whole file in memory. A failed
    /// upload in parts is aborted (the store drops the parts it has); one dropped mid-way (a
    /// caller's deadline) leaves its parts on S3 until the bucket's lifecycle rule removes them.
    pub async fn put_file(&self, key: &str, file: &Path) -> Result<(), StorageError> {
        let what = || format!("reading {}", file.display());
        let mut f = tokio::fs::File::open(file).await.map_err(io_error(what()))?;
        let len = f.metadata().await.map_err(io_error(what()))?.len();
        if len <= PART_SIZE as u64 {
            let mut bytes = Vec::with_capacity(len as usize);
            f.read_to_end(&mut bytes).await.map_err(io_error(what()))?;
            return self.put(key, Bytes::from(bytes)).await;
        }
        let part = (PART_SIZE as u64).max(len.div_ceil(MAX_PARTS));
        let upload =
            self.store.put_multipart(&Key::from(key)).await.map_err(store_error(format!("storing {key}")))?;
        // usize holds it: object_store's parts are in memory.
        let mut parts = WriteMultipart::new_with_chunk_size(upload, part as usize);
        match send_parts(&mut parts, &mut f, part).await {
            Ok(()) => {
                parts.finish().await.map_err(store_error(format!("storing {key}")))?;
                Ok(())
            }
            Err(e) => {
                if let Err(abort) = parts.abort().await {
                    tracing::warn!(key, error = %abort, "storage: aborting an upload in parts");
                }
                Err(match e {
                    Sent::Read(e) => io_error(what())(e),
                    Sent::Store(e) => store_error(format!("storing {key}"))(e),
                })
            }
        }
    }

    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), StorageError> {
        self.store
            .put(&Key::from(key), PutPayload::from(bytes))
            .await
            .map_err(store_error(format!("storing {key}")))?;
        Ok(())
    }

    /// Removes every object under `prefix/` except those whose key is in `keep`.
    pub async fn delete_prefix(&self, prefix: &str, keep: &[String]) -> Result<usize, StorageError> {
        let mut listed = self.store.list(Some(&Key::from(prefix)));
        let mut removed = 0;
        while let Some(meta) = listed.next().await {
            let meta = meta.map_err(store_error("listing objects"))?;
            if keep.iter().any(|k| k.as_str() == meta.location.as_ref()) {
                continue;
            }
            match self.store.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => removed += 1,
                Err(e) => return Err(store_error("deleting an object")(e)),
            }
        }
        if let Kind::Local(root) = &self.kind {
            // object_store leaves empty folders behind.
            remove_empty_dirs(&root.join(prefix));
        }
        Ok(removed)
    }

    /// Whether the store answers (readiness).
    pub async fn check(&self) -> bool {
        match &self.kind {
            Kind::Local(root) => root.is_dir(),
            Kind::S3(_) => {
                let mut listed = self.store.list(Some(&Key::from("vod")));
                !matches!(listed.next().await, Some(Err(_)))
            }
        }
    }
}

/// Why [`send_parts`] stopped.
enum Sent {
    Read(std::io::Error),
    Store(object_store::Error),
}

/// Reads `file` part by part into `parts`, waiting while [`PARTS_IN_FLIGHT`] are being sent.
async fn send_parts(parts: &mut WriteMultipart, file: &mut tokio::fs::File, part: u64) -> Result<(), Sent> {
    loop {
        parts.wait_for_capacity(PARTS_IN_FLIGHT).await.map_err(Sent::Store)?;
        let mut buf = Vec::with_capacity(part as usize);
        (&mut *file).take(part).read_to_end(&mut buf).await.map_err(Sent::Read)?;
        if buf.is_empty() {
            return Ok(());
        }
        parts.put(Bytes::from(buf));
    }
}

/// The bytes `range` of a file of the local store, [`FILE_CHUNK`] at a time.
fn file_chunks(file: std::fs::File, range: Range<u64>) -> BoxStream<'static, object_store::Result<Bytes>> {
    use tokio::io::AsyncSeekExt;
    let read = async move {
        let mut file = tokio::fs::File::from_std(file);
        file.seek(std::io::SeekFrom::Start(range.start)).await?;
        Ok::<_, std::io::Error>(tokio_util::io::ReaderStream::with_capacity(
            file.take(range.end - range.start),
            FILE_CHUNK,
        ))
    };
    futures_util::stream::once(read)
        .try_flatten()
        .map_err(|e| object_store::Error::Generic { store: "LocalFileSystem", source: Box::new(e) })
        .boxed()
}

/// `body`, ended with an error when the store gives nothing for [`READ_STALL`] while it is
/// being read.
fn stall_bounded(body: BoxStream<'static, object_store::Result<Bytes>>, key: String) -> ByteStream {
    futures_util::stream::unfold(Some((body, key)), |state| async move {
        let (mut body, key) = state?;
        match tokio::time::timeout(READ_STALL, body.next()).await {
            Ok(None) => None,
            Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some((body, key)))),
            Ok(Some(Err(e))) => Some((Err(store_error(format!("reading {key}"))(e)), None)),
            Err(_) => Some((
                Err(StorageError::Timeout { what: format!("reading {key}"), within: READ_STALL }),
                None,
            )),
        }
    })
    .boxed()
}

fn remove_empty_dirs(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_dirs(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests;
