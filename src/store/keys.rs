//! The server's signing keys (see [`crate::domain::keyring`]), and this process's copy of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::{secrets, Db, DbError};
use crate::domain::content_key::MasterKey;
use crate::domain::keyring::KeyRing;
use crate::domain::{new_id, random_token, time::now_ms};

/// Reload the ring at least this often while signatures are made or checked (so a new key starts
/// signing).
const REFRESH: Duration = Duration::from_secs(60);
/// How long the reload for [`REFRESH`] (behind the request that found the ring old, which the
/// ring loaded last serves) waits for the database.
const REFRESH_WAIT: Duration = Duration::from_millis(500);
/// How long a request whose signature names a key this process does not know waits for it.
const UNKNOWN_KID_WAIT: Duration = Duration::from_secs(2);
/// A signature naming a key this process does not know reloads the ring, at most this often.
const UNKNOWN_KID_RELOAD: Duration = Duration::from_secs(1);

/// This process's key ring, kept in step with the database: a key added by
/// `sluice admin rotate-signing-key` is picked up the first time a signature names it (a URL
/// signed by a process that already knows it), and within [`REFRESH`] for signing, so rotation
/// needs no restart and no process refuses another's fresh signatures. Sign through
/// [`SigningKeys::ring_for`]`(None)`, which applies the refresh.
pub struct SigningKeys {
    db: Db,
    master: MasterKey,
    ring: RwLock<Arc<KeyRing>>,
    /// When the ring was last loaded, in ms since `started` (read without a lock: every signed
    /// playback request checks it; written under `for_unknown`'s lock, so one caller reloads).
    loaded_ms: AtomicU64,
    started: Instant,
    /// The last load an unknown key id asked for.
    for_unknown: Mutex<Option<Instant>>,
}

/// Why the signing keys could not be loaded (start-up).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "no signing key in the database opens with this master key ({0}): every process on one \
         database must share SLUICE_MASTER_KEY"
    )]
    OtherMaster(String),
    #[error("{0}")]
    Db(#[from] DbError),
}

impl SigningKeys {
    pub async fn load(db: &Db, master: &MasterKey) -> Result<SigningKeys, LoadError> {
        let ring = KeyRing::new(db.signing_keys(master).await?)
            .ok_or_else(|| LoadError::OtherMaster(master.id().to_string()))?;
        Ok(SigningKeys {
            db: db.clone(),
            master: master.clone(),
            ring: RwLock::new(Arc::new(ring)),
            loaded_ms: AtomicU64::new(0),
            started: Instant::now(),
            for_unknown: Mutex::new(None),
        })
    }

    fn since_start_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether the ring was loaded within [`REFRESH`].
    fn fresh(&self) -> bool {
        let age_ms = self.since_start_ms().saturating_sub(self.loaded_ms.load(Ordering::Relaxed));
        u128::from(age_ms) <= REFRESH.as_millis()
    }

    /// The ring as loaded last.
    fn ring(&self) -> Arc<KeyRing> {
        self.ring.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The ring to check a signature naming `kid` with: reloaded first when it does not know
    /// `kid`, or when it is older than [`REFRESH`] (rate-limited; a failed reload keeps the old).
    pub async fn ring_for(self: &Arc<Self>, kid: Option<&str>) -> Arc<KeyRing> {
        let ring = self.ring();
        let unknown = kid.is_some_and(|k| !ring.knows(k));
        if !unknown && self.fresh() {
            // The common case, with no lock taken.
            return ring;
        }
        {
            let mut for_unknown = self.for_unknown.lock().unwrap_or_else(|e| e.into_inner());
            let unknown = unknown && for_unknown.is_none_or(|at| at.elapsed() > UNKNOWN_KID_RELOAD);
            if !unknown && self.fresh() {
                return ring;
            }
            self.loaded_ms.store(self.since_start_ms(), Ordering::Relaxed);
            if unknown {
                *for_unknown = Some(Instant::now());
            }
        }
        if !unknown {
            // Only old: the ring it has verifies this request; the reload goes on behind it, so
            // a database that hangs costs the viewer nothing (it once waited up to 500 ms here,
            // on top of a policy refresh's 250 ms).
            let this = self.clone();
            tokio::spawn(async move {
                this.reload(REFRESH_WAIT).await;
            });
            return ring;
        }
        self.reload(UNKNOWN_KID_WAIT).await.unwrap_or(ring)
    }

    /// Loads the ring again, waiting `deadline` at most; the new ring, or `None` (kept as it was).
    async fn reload(&self, deadline: Duration) -> Option<Arc<KeyRing>> {
        // Boxed: a reload is rare, and its future would otherwise sit inside every request's.
        let reload = super::within(deadline, Box::pin(self.db.signing_keys(&self.master)));
        match reload.await.map(KeyRing::new) {
            Ok(Some(fresh)) => {
                let fresh = Arc::new(fresh);
                *self.ring.write().unwrap_or_else(|e| e.into_inner()) = fresh.clone();
                Some(fresh)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "reloading the signing keys");
                None
            }
        }
    }
}

impl Db {
    /// Every signing key, newest first, opened with `master` (a key that does not open, sealed
    /// by another master key, is left out with a warning); creates the first one when there is
    /// none. Two processes starting at once may each create one: both are kept, and both verify.
    pub async fn signing_keys(&self, master: &MasterKey) -> Result<Vec<(String, Vec<u8>)>, DbError> {
        let load = || async {
            sqlx::query_as::<_, (String, String)>(
                "SELECT kid, secret FROM signing_keys ORDER BY created_at DESC, kid",
            )
            .fetch_all(self.pool())
            .await
        };
        let mut keys = load().await?;
        if keys.is_empty() {
            self.add_signing_key(master).await?;
            keys = load().await?;
        }
        Ok(keys
            .into_iter()
            .filter_map(|(kid, stored)| match secrets::open(master, &stored, &secrets::signing_context(&kid)) {
                Ok(secret) => Some((kid, secret.into_bytes())),
                Err(e) => {
                    tracing::warn!(kid = %kid, error = %e, "a signing key does not open with this master key");
                    None
                }
            })
            .collect())
    }

    /// Adds a new key (rotation): running processes verify with it as soon as they meet it and
    /// sign with it within a minute.
    pub async fn add_signing_key(&self, master: &MasterKey) -> Result<String, DbError> {
        let kid = new_id()[..8].to_string();
        sqlx::query("INSERT INTO signing_keys (kid, secret, created_at) VALUES ($1, $2, $3)")
            .bind(&kid)
            .bind(master.seal(random_token(48).as_bytes(), &secrets::signing_context(&kid)))
            .bind(now_ms())
            .execute(self.pool())
            .await?;
        Ok(kid)
    }
}
