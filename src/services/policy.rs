//! The origin's read-through cache of each resource's playback policy (signed? playable?) and of
//! unwrapped content keys, so the hot path (parts, blocking reloads) does not
//! query the database on every request.
//!
//! A policy is kept for [`POLICY_TTL`]. The API calls [`Policies::forget`] when it changes one,
//! so on this process a change applies to the very next request; another process sharing the
//! database sees it within the TTL.
//!
//! The media path never waits on the database (CONTRACT: Faults): past its TTL a policy is
//! refreshed by one request at a time, which waits [`REFRESH_WAIT`] at most (the refresh goes on
//! without it); every other request meanwhile, and every request while the database fails, is
//! served the last known answer. Only a policy never loaded waits, up to [`FIRST_LOAD_WAIT`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::domain::content_key::{ContentKey, MasterKey, UnwrapError};
use crate::store::playback::PlaybackRow;
use crate::store::{Db, DbError};

pub const POLICY_TTL: Duration = Duration::from_secs(1);
/// How long the request that refreshes a stale policy waits for the database.
pub const REFRESH_WAIT: Duration = Duration::from_millis(250);
/// How long a refresh may take at all (a database that hangs does not hold it for ever).
const REFRESH_DEADLINE: Duration = Duration::from_secs(5);
/// How long a request for a policy never loaded waits for the database (then 503).
pub const FIRST_LOAD_WAIT: Duration = Duration::from_secs(3);
/// Beyond this many cached policies the cache starts over (ids of requests for unknown
/// resources cannot grow it without bound).
const MAX_ENTRIES: usize = 100_000;

/// What a playback request reads (and what tokens and content keys are named after).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource<'a> {
    Stream(&'a str),
    Vod(&'a str),
}

impl Resource<'_> {
    /// As tokens and content keys name it: `stream:<id>`, `vod:<id>`.
    pub fn name(&self) -> String {
        match self {
            Resource::Stream(id) => format!("stream:{id}"),
            Resource::Vod(id) => format!("vod:{id}"),
        }
    }
}

/// Why a content key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("database: {0}")]
    Db(#[from] DbError),
    #[error("content key: {0}")]
    Unwrap(#[from] UnwrapError),
}

pub struct Policies {
    db: Db,
    master: MasterKey,
    /// Shared with the refreshes, which outlive the request that started them.
    policies: Arc<Mutex<Cached>>,
    keys: Mutex<HashMap<String, ContentKey>>,
}

/// A policy as read, and when; and whether a refresh of it is under way.
#[derive(Clone, Copy)]
struct Entry {
    row: Option<PlaybackRow>,
    at: Instant,
    refreshing: bool,
}

/// The cached policies by id, streams and VODs apart: a lookup takes the id as the request
/// has it, with no `stream:<id>` to format first (every playlist reload looks one up).
#[derive(Default)]
struct Cached {
    streams: HashMap<String, Entry>,
    vods: HashMap<String, Entry>,
}

impl Cached {
    /// The map that holds `resource`'s kind, and its key there.
    fn of<'r>(&mut self, resource: &Resource<'r>) -> (&mut HashMap<String, Entry>, &'r str) {
        match *resource {
            Resource::Stream(id) => (&mut self.streams, id),
            Resource::Vod(id) => (&mut self.vods, id),
        }
    }

    /// Keeps `row` as `resource`'s policy, read now.
    fn keep(&mut self, resource: &Resource<'_>, row: Option<PlaybackRow>) {
        if self.streams.len() + self.vods.len() >= MAX_ENTRIES {
            *self = Cached::default();
        }
        let (cached, id) = self.of(resource);
        cached.insert(id.to_string(), Entry { row, at: Instant::now(), refreshing: false });
    }

    /// A refresh of `resource` failed: the last known answer serves for another TTL.
    fn refresh_failed(&mut self, resource: &Resource<'_>) {
        let (cached, id) = self.of(resource);
        if let Some(entry) = cached.get_mut(id) {
            entry.refreshing = false;
            entry.at = Instant::now();
        }
    }
}

/// What a resource is, owned (a refresh outlives its request).
#[derive(Clone)]
enum Owned {
    Stream(String),
    Vod(String),
}

impl Owned {
    fn of(resource: &Resource<'_>) -> Owned {
        match *resource {
            Resource::Stream(id) => Owned::Stream(id.to_string()),
            Resource::Vod(id) => Owned::Vod(id.to_string()),
        }
    }

    fn resource(&self) -> Resource<'_> {
        match self {
            Owned::Stream(id) => Resource::Stream(id),
            Owned::Vod(id) => Resource::Vod(id),
        }
    }
}

/// Reads `resource`'s policy from the database.
async fn read(db: &Db, resource: &Resource<'_>) -> Result<Option<PlaybackRow>, DbError> {
    match resource {
        Resource::Stream(id) => db.stream_playback(id).await,
        Resource::Vod(id) => db.vod_playback(id).await,
    }
}

impl Policies {
    pub fn new(db: Db, master: MasterKey) -> Policies {
        Policies { db, master, policies: Arc::default(), keys: Mutex::default() }
    }

    /// The policy of `resource`; `None` when it does not exist. An error only when it was never
    /// loaded and the database did not answer within [`FIRST_LOAD_WAIT`].
    pub async fn policy(&self, resource: &Resource<'_>) -> Result<Option<PlaybackRow>, DbError> {
        let last = {
            // Released before the database is read.
            let mut policies = self.lock_policies();
            let (cached, id) = policies.of(resource);
            match cached.get_mut(id) {
                Some(entry) if entry.at.elapsed() < POLICY_TTL || entry.refreshing => return Ok(entry.row),
                Some(entry) => {
                    entry.refreshing = true;
                    Some(entry.row)
                }
                None => None,
            }
        };
        match last {
            // Boxed: a miss is rare, and its future would otherwise sit inside every request's.
            Some(last) => Ok(Box::pin(self.refresh(resource)).await.unwrap_or(last)),
            None => {
                let row = crate::store::within(FIRST_LOAD_WAIT, Box::pin(read(&self.db, resource))).await?;
                self.lock_policies().keep(resource, row);
                Ok(row)
            }
        }
    }

    /// Reads `resource`'s policy again, in a task of its own that keeps what it reads; waits for
    /// it [`REFRESH_WAIT`] at most. `None` when it failed or is not done yet.
    async fn refresh(&self, resource: &Resource<'_>) -> Option<Option<PlaybackRow>> {
        let (db, cache, owned) = (self.db.clone(), self.policies.clone(), Owned::of(resource));
        let task = tokio::spawn(async move {
            let resource = owned.resource();
            let read = crate::store::within(REFRESH_DEADLINE, read(&db, &resource)).await;
            let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            match read {
                Ok(row) => {
                    cache.keep(&resource, row);
                    Some(row)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "playback: refreshing a playback policy (the last known one serves)");
                    cache.refresh_failed(&resource);
                    None
                }
            }
        });
        tokio::time::timeout(REFRESH_WAIT, task).await.ok()?.ok()?
    }

    /// Drops what is cached of `resource`: its next request reads the database.
    pub fn forget(&self, resource: &Resource<'_>) {
        let mut policies = self.lock_policies();
        let (cached, id) = policies.of(resource);
        cached.remove(id);
    }

    fn lock_policies(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.policies.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The content key of `resource`, created (and stored wrapped) when `create` and it has none.
    pub async fn content_key(
        &self,
        resource: &Resource<'_>,
        create: bool,
    ) -> Result<Option<ContentKey>, KeyError> {
        let (db, master) = (&self.db, &self.master);
        let name = resource.name();
        if let Some(key) = self.lock_keys().get(&name) {
            return Ok(Some(*key));
        }
        let wrapped = match crate::store::within(FIRST_LOAD_WAIT, db.content_key(&name)).await? {
            Some(w) => w,
            None if create => {
                let wrapped = master.wrap(&ContentKey::random(), &name);
                crate::store::within(FIRST_LOAD_WAIT, db.insert_content_key(&name, &wrapped)).await?
            }
            None => return Ok(None),
        };
        let key = master.unwrap(&wrapped, &name)?;
        self.lock_keys().insert(name, key);
        Ok(Some(key))
    }

    fn lock_keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, ContentKey>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }
}
