//! The database: SQLite (default, one file in the data dir, WAL, foreign keys on) or Postgres,
//! through sqlx's `Any` driver so that one set of portable queries and migrations serves both.
//! Queries use `$n` placeholders, which both backends accept.

pub mod accounts;
pub mod api_keys;
pub mod credits;
pub mod events;
pub mod idempotency;
pub mod invitations;
pub mod keys;
pub mod nodes;
pub mod notify;
pub mod playback;
pub mod recordings;
pub mod secrets;
pub mod sessions;
pub mod simulcast;
pub mod slates;
pub mod streams;
pub mod viewers;
pub mod vods;
pub mod webhooks;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::pool::PoolConnectionMetadata;
use sqlx::{AnyConnection, AnyPool, Connection, Executor};

pub use sqlx::Error as DbError;

/// The longest a pooled connection is waited for: past it the database counts as unavailable
/// (503 at the API), so a database that refuses or hangs costs a caller this, not more.
pub const ACQUIRE_DEADLINE: Duration = Duration::from_secs(5);
/// The longest one Postgres statement runs before the server cancels it (`statement_timeout`).
pub const STATEMENT_DEADLINE: Duration = Duration::from_secs(15);

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("src/store/migrations");

/// Why the database could not be opened (start-up).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("connecting to {url}: {source}")]
    Connect {
        /// The URL with its password redacted.
        url: String,
        #[source]
        source: DbError,
    },
    #[error("applying database migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0}")]
    Db(#[from] DbError),
}

/// The file of a `sqlite://` URL.
fn sqlite_path(url: &str) -> &str {
    url.trim_start_matches("sqlite://").trim_start_matches("sqlite:").split('?').next().unwrap_or_default()
}

/// Makes the SQLite database file and its WAL files readable by the owner only: the database
/// holds password hashes and sealed secrets (SQLite gives its WAL files the database's mode).
fn owner_only(url: &str) -> Result<(), OpenError> {
    use std::os::unix::fs::PermissionsExt;
    let path = sqlite_path(url);
    if path.is_empty() || path.starts_with(':') {
        return Ok(());
    }
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{path}{suffix}");
        match std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(OpenError::Io {
                    what: format!("making {file} readable by its owner only"),
                    source: e,
                })
            }
            _ => {}
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A handle to the database; cheap to clone.
#[derive(Clone)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
    /// The URL it was opened with: Postgres notifications need a connection of their own,
    /// outside the pool (`notify::KillListener`). Never printed (it may carry a password).
    url: Arc<str>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("backend", &self.backend).finish_non_exhaustive()
    }
}

impl Db {
    /// Connects and applies the migrations. For SQLite the file (and its folder) is created.
    pub async fn connect(url: &str) -> Result<Db, OpenError> {
        sqlx::any::install_default_drivers();
        let (url, backend, max) = if url.starts_with("sqlite:") {
            let path = sqlite_path(url);
            if let Some(parent) = Path::new(path).parent() {
                if !parent.as_os_str().is_empty() {
                    std::fs::create_dir_all(parent).map_err(|source| OpenError::Io {
                        what: format!("creating {}", parent.display()),
                        source,
                    })?;
                }
            }
            let url = if url.contains('?') { url.to_string() } else { format!("{url}?mode=rwc") };
            (url, Backend::Sqlite, 8)
        } else {
            (url.to_string(), Backend::Postgres, 16)
        };
        let pool = AnyPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(ACQUIRE_DEADLINE)
            .after_connect(move |conn: &mut AnyConnection, _: PoolConnectionMetadata| {
                Box::pin(async move {
                    match backend {
                        Backend::Sqlite => {
                            conn.execute("PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 10000; PRAGMA synchronous = NORMAL;")
                                .await?;
                        }
                        Backend::Postgres => {
                            let ms = STATEMENT_DEADLINE.as_millis();
                            conn.execute(format!("SET statement_timeout = {ms}").as_str()).await?;
                        }
                    }
                    Ok(())
                })
            })
            .after_release(move |conn: &mut AnyConnection, _: PoolConnectionMetadata| {
                Box::pin(async move {
                    if backend != Backend::Sqlite {
                        return Ok(true);
                    }
                    // A COMMIT that failed with SQLITE_FULL may have rolled the transaction back
                    // in SQLite; sqlx's ROLLBACK then finds none, and the connection still counts
                    // one open, refusing every `BEGIN IMMEDIATE` after. Such a connection is
                    // closed here, before anyone takes it again.
                    match conn.begin_with("BEGIN").await {
                        Ok(tx) => tx.rollback().await.map(|()| true),
                        Err(DbError::InvalidSavePointStatement) => {
                            tracing::warn!("database: closing a connection left in a failed transaction");
                            Ok(false)
                        }
                        Err(e) => Err(e),
                    }
                })
            })
            .connect(&url)
            .await
            .map_err(|source| OpenError::Connect { url: crate::config::redact_url(&url), source })?;
        if backend == Backend::Sqlite {
            // WAL is a property of the database file; set once, it persists.
            sqlx::query("PRAGMA journal_mode = WAL").execute(&pool).await?;
            owner_only(&url)?;
        }
        MIGRATOR.run(&pool).await?;
        Ok(Db { pool, backend, url: url.into() })
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Begins a transaction that will write. On SQLite it takes the write lock up front
    /// (`BEGIN IMMEDIATE`): a deferred transaction that reads and then writes fails with
    /// SQLITE_BUSY_SNAPSHOT when another writer committed in between, and no busy timeout helps.
    pub async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, DbError> {
        match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.pool.begin().await,
        }
    }

    /// Round-trips a trivial query (readiness).
    pub async fn ping(&self) -> Result<(), DbError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map(|_| ())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Whether `conn` is a Postgres connection (the `Any` driver says which backend it reached).
pub(crate) fn is_postgres(conn: &AnyConnection) -> bool {
    conn.backend_name() == <sqlx::Postgres as sqlx::Database>::NAME
}

/// What a failed query says of the database, for the answer its caller gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// It did not answer, or not in time, or refused work for now (503, retry later).
    Unavailable,
    /// It has no room to write (507).
    Full,
    /// Anything else: a fault of the query or of the data (500).
    Other,
}

/// Classifies `err` ([`Fault`]).
pub fn fault(err: &DbError) -> Fault {
    match err {
        DbError::PoolTimedOut
        | DbError::PoolClosed
        | DbError::WorkerCrashed
        | DbError::Io(_)
        | DbError::Tls(_)
        | DbError::BeginFailed => Fault::Unavailable,
        DbError::Database(e) => {
            let code = e.code().unwrap_or_default();
            // Postgres says a SQLSTATE (five characters); SQLite its extended result code, whose
            // low byte is the primary one.
            let sqlite = (code.len() < 5).then(|| code.parse::<u32>().ok().map(|c| c & 0xff)).flatten();
            match (code.as_ref(), sqlite) {
                // SQLITE_FULL; Postgres disk_full.
                (_, Some(13)) | ("53100", None) => Fault::Full,
                // SQLITE_BUSY, SQLITE_LOCKED; Postgres: connection exceptions (08…),
                // insufficient resources (53…), a statement cancelled by its deadline (57014),
                // the server shutting down or starting (57P0…).
                (_, Some(5 | 6)) => Fault::Unavailable,
                (c, None) if c.starts_with("08") || c.starts_with("53") || c.starts_with("57") => {
                    Fault::Unavailable
                }
                _ => Fault::Other,
            }
        }
        _ => Fault::Other,
    }
}

/// `query`, given up after `deadline` as if the database had not answered (an unavailable
/// error): for callers that must not wait on a database that hangs (the media path).
pub async fn within<T>(
    deadline: Duration,
    query: impl std::future::Future<Output = Result<T, DbError>>,
) -> Result<T, DbError> {
    match tokio::time::timeout(deadline, query).await {
        Ok(result) => result,
        Err(_) => Err(DbError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the database did not answer within {} ms", deadline.as_millis()),
        ))),
    }
}

/// `$from, $from+1, …` for `n` values: the placeholders of an `IN (…)` list.
pub(crate) fn placeholders(from: usize, n: usize) -> String {
    (from..from + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// Whether the error is a unique-constraint violation (→ 409 at the API).
pub fn is_unique_violation(err: &DbError) -> bool {
    err.as_database_error().is_some_and(|e| e.is_unique_violation())
}

/// Reads a `COUNT(*)` row.
pub(crate) fn count(row: &AnyRow) -> Result<i64, DbError> {
    use sqlx::Row;
    row.try_get::<i64, _>(0)
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: i64,
}
