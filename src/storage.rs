//! Object storage for VOD sources and outputs, through `object_store`: a local folder
//! (`file://…`, the default) or any S3-compatible store
//! (`s3://bucket?endpoint=…&region=…[&access_key_id=…&secret_access_key=…]`; without keys in the
//! URL, the usual `AWS_*` environment variables apply).
//!
//! Keys: `vod/<id>/source`, `vod/<id>/<rendition>/…`, `vod/<id>/thumb.jpg`, `vod/<id>/master.m3u8`.
//! On the local store Sluice itself is the upload target ([`crate::upload`]) and writes the
//! source straight into the folder; on S3 the client uploads with the store's presigned URL.

pub mod spool;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::signer::Signer;
use object_store::{ObjectStore, PutPayload};
use poem::http::Method;

/// How long connecting to the S3 endpoint may take.
pub const S3_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one S3 request may take.
pub const S3_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a request's retries may go on (ten at most): a transcode's writes ride out a store
/// that is away for that long.
pub const S3_RETRY_TIMEOUT: Duration = Duration::from_secs(180);

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
    kind: Kind,
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
            return Ok(Storage { store: Arc::new(store), kind: Kind::Local(root) });
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
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_client_options(client)
                .with_retry(retry);
            for (k, v) in parsed.query_pairs() {
                b = match k.as_ref() {
                    "endpoint" => b.with_endpoint(v.as_ref()).with_allow_http(v.starts_with("http://")),
                    "region" => b.with_region(v.as_ref()),
                    "access_key_id" => b.with_access_key_id(v.as_ref()),
                    "secret_access_key" => b.with_secret_access_key(v.as_ref()),
                    other => return Err(StorageError::Url(format!("unknown parameter {other}"))),
                };
            }
            let s3 = Arc::new(b.build().map_err(store_error("configuring the S3 store"))?);
            return Ok(Storage { store: s3.clone(), kind: Kind::S3(s3) });
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

    /// The object, or one byte range of it; `None` when there is none.
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

    /// Stores a local file under `key` (outputs are segments of a few MB at most).
    pub async fn put_file(&self, key: &str, file: &Path) -> Result<(), StorageError> {
        let bytes = tokio::fs::read(file).await.map_err(io_error(format!("reading {}", file.display())))?;
        self.put(key, Bytes::from(bytes)).await
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
