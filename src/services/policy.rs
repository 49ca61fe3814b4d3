//! The origin's read-through cache of each resource's playback policy (signed? playable?) and of
//! unwrapped content keys, so the hot path (parts, blocking reloads) does not
//! query the database on every request.
//!
//! A policy is kept for [`POLICY_TTL`]. The API calls [`Policies::forget`] when it changes one,
//! so on this process a change applies to the very next request; another process sharing the
//! database sees it within the TTL.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::content_key::{ContentKey, MasterKey, UnwrapError};
use crate::store::playback::PlaybackRow;
use crate::store::{Db, DbError};

pub const POLICY_TTL: Duration = Duration::from_secs(1);
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
    policies: Mutex<Cached>,
    keys: Mutex<HashMap<String, ContentKey>>,
}

/// A policy as read, and when.
type Entry = (Option<PlaybackRow>, Instant);

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
}

impl Policies {
    pub fn new(db: Db, master: MasterKey) -> Policies {
        Policies { db, master, policies: Mutex::default(), keys: Mutex::default() }
    }

    /// The policy of `resource`; `None` when it does not exist.
    pub async fn policy(&self, resource: &Resource<'_>) -> Result<Option<PlaybackRow>, DbError> {
        let db = &self.db;
        {
            // Released before the database is read.
            let mut policies = self.lock_policies();
            let (cached, id) = policies.of(resource);
            if let Some((row, at)) = cached.get(id) {
                if at.elapsed() < POLICY_TTL {
                    return Ok(*row);
                }
            }
        }
        // Boxed: a miss is rare, and its future would otherwise sit inside every request's.
        let row = match resource {
            Resource::Stream(id) => Box::pin(db.stream_playback(id)).await?,
            Resource::Vod(id) => Box::pin(db.vod_playback(id)).await?,
        };
        let mut policies = self.lock_policies();
        if policies.streams.len() + policies.vods.len() >= MAX_ENTRIES {
            *policies = Cached::default();
        }
        let (cached, id) = policies.of(resource);
        cached.insert(id.to_string(), (row, Instant::now()));
        Ok(row)
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
        let wrapped = match db.content_key(&name).await? {
            Some(w) => w,
            None if create => {
                db.insert_content_key(&name, &master.wrap(&ContentKey::random(), &name)).await?
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
