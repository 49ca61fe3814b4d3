//! The spool (CONTRACT: Faults): objects the store did not take, kept in order in a folder of the
//! data dir, bounded by `SLUICE_SPOOL_BYTES`, and stored by [`Spool::drain`] once the store
//! answers again. While anything waits in it the store counts as failing: new objects go
//! straight to the spool, behind the others, and only the drain asks the store.
//!
//! Each object is one file, `<seq>-<key in hex>`: the order and the key survive a restart, when
//! [`Spool::open`] lists them again. An object whose file is gone when its turn comes (the disk
//! lost it) is given up and remembered as lost, so the recording that wrote it lists a gap.
//! Memory holds only the queue's names and sizes.

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;

use super::Storage;

/// How long the drain waits between two tries of an object the store refused.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(10);
/// How long one store of an object may take before it counts as failed.
pub const PUT_DEADLINE: Duration = Duration::from_secs(10);

/// Why an object was not kept.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("the spool is full ({0} bytes)")]
    Full(u64),
    #[error("writing to the spool: {0}")]
    Io(#[from] std::io::Error),
}

struct Item {
    seq: u64,
    key: String,
    len: u64,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    bytes: u64,
    next: u64,
    /// Keys given up (their file was gone), until [`Spool::forget_lost`].
    lost: BTreeSet<String>,
}

pub struct Spool {
    dir: PathBuf,
    limit: u64,
    queue: Mutex<Queue>,
    wake: Notify,
}

impl Spool {
    /// The spool in `dir` (created), holding at most `limit` bytes; what a previous run left in
    /// it is queued again, in its order.
    pub fn open(dir: &Path, limit: u64) -> std::io::Result<Spool> {
        std::fs::create_dir_all(dir)?;
        let mut items = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let parsed = name.split_once('-').and_then(|(seq, key)| {
                let key = hex::decode(key).ok().and_then(|k| String::from_utf8(k).ok())?;
                Some((seq.parse::<u64>().ok()?, key))
            });
            match parsed {
                Some((seq, key)) => items.push(Item { seq, key, len: entry.metadata()?.len() }),
                // A write cut short (`.part`), or a stranger: not ours to keep.
                None => std::fs::remove_file(entry.path())?,
            }
        }
        items.sort_by_key(|i| i.seq);
        let bytes = items.iter().map(|i| i.len).sum();
        let next = items.last().map_or(0, |i| i.seq + 1);
        let queue = Queue { items: items.into(), bytes, next, lost: BTreeSet::new() };
        Ok(Spool { dir: dir.to_path_buf(), limit, queue: Mutex::new(queue), wake: Notify::new() })
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self, seq: u64, key: &str) -> PathBuf {
        self.dir.join(format!("{seq:020}-{}", hex::encode(key)))
    }

    /// Bytes waiting (`sluice_spool_bytes`, `/readyz`).
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Whether anything waits: the store failed, and has not taken everything back yet.
    pub fn holds(&self) -> bool {
        !self.lock().items.is_empty()
    }

    /// How many objects under `prefix/` wait.
    pub fn waiting_under(&self, prefix: &str) -> usize {
        let prefix = format!("{prefix}/");
        self.lock().items.iter().filter(|i| i.key.starts_with(&prefix)).count()
    }

    /// The keys under `prefix/` that were given up.
    pub fn lost_under(&self, prefix: &str) -> BTreeSet<String> {
        let prefix = format!("{prefix}/");
        self.lock().lost.iter().filter(|k| k.starts_with(&prefix)).cloned().collect()
    }

    /// Forgets the keys under `prefix/` that were given up (their recording is complete).
    pub fn forget_lost(&self, prefix: &str) {
        let prefix = format!("{prefix}/");
        self.lock().lost.retain(|k| !k.starts_with(&prefix));
    }

    /// The file of the `n`-th object waiting (tests play a disk that loses one).
    pub fn file_of(&self, n: usize) -> Option<(String, PathBuf)> {
        let queue = self.lock();
        queue.items.get(n).map(|i| (i.key.clone(), self.path(i.seq, &i.key)))
    }

    /// Keeps `data` for `key`, behind everything waiting.
    pub async fn keep(&self, key: &str, data: Bytes) -> Result<(), SpoolError> {
        let len = data.len() as u64;
        let seq = {
            let mut queue = self.lock();
            if queue.bytes + len > self.limit {
                return Err(SpoolError::Full(self.limit));
            }
            // Counted now, so two writers cannot both pass the bound.
            queue.bytes += len;
            queue.next += 1;
            queue.next - 1
        };
        let path = self.path(seq, key);
        let part = path.with_extension("part");
        let written = async {
            tokio::fs::write(&part, &data).await?;
            tokio::fs::rename(&part, &path).await
        }
        .await;
        let mut queue = self.lock();
        if let Err(e) = written {
            queue.bytes -= len;
            drop(queue);
            let _ = std::fs::remove_file(&part);
            return Err(e.into());
        }
        // In sequence order: a later writer may have finished first.
        let at = queue.items.iter().position(|i| i.seq > seq).unwrap_or(queue.items.len());
        queue.items.insert(at, Item { seq, key: key.to_string(), len });
        drop(queue);
        self.wake.notify_one();
        Ok(())
    }

    /// Stores what waits, in order, for as long as the spool lives: an object the store refuses
    /// is tried again (backing off to [`RETRY_MAX`]), and nothing behind it goes first.
    pub async fn drain(self: Arc<Self>, storage: Storage) {
        let mut wait = RETRY_FIRST;
        loop {
            let front = self.lock().items.front().map(|i| (i.seq, i.key.clone(), i.len));
            let Some((seq, key, len)) = front else {
                self.wake.notified().await;
                continue;
            };
            let path = self.path(seq, &key);
            let data = match tokio::fs::read(&path).await {
                Ok(data) => Bytes::from(data),
                Err(e) => {
                    tracing::error!(key = %key, error = %e, "spool: an object is lost (its file is gone)");
                    self.done(seq, len, Some(key));
                    continue;
                }
            };
            match tokio::time::timeout(PUT_DEADLINE, storage.put(&key, data)).await {
                Ok(Ok(())) => {
                    let _ = tokio::fs::remove_file(&path).await;
                    self.done(seq, len, None);
                    wait = RETRY_FIRST;
                }
                failed => {
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {PUT_DEADLINE:?}"),
                    };
                    tracing::warn!(key = %key, error = %why, waiting = self.bytes(), "spool: the store does not take objects yet");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// The front object `seq` is stored (or `lost`).
    fn done(&self, seq: u64, len: u64, lost: Option<String>) {
        let mut queue = self.lock();
        if queue.items.front().is_some_and(|i| i.seq == seq) {
            queue.items.pop_front();
            queue.bytes -= len;
        }
        if let Some(key) = lost {
            queue.lost.insert(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storage(dir: &Path) -> Storage {
        Storage::open(&format!("file://{}", dir.display())).unwrap()
    }

    #[tokio::test]
    async fn it_keeps_in_order_within_its_bound_and_lists_again_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(&dir.path().join("spool"), 10).unwrap();
        spool.keep("vod/a/240p/s0.m4s", Bytes::from_static(b"0123")).await.unwrap();
        spool.keep("vod/a/240p/s1.m4s", Bytes::from_static(b"4567")).await.unwrap();
        assert!(matches!(
            spool.keep("vod/a/240p/s2.m4s", Bytes::from_static(b"890")).await,
            Err(SpoolError::Full(10))
        ));
        assert_eq!((spool.bytes(), spool.waiting_under("vod/a"), spool.waiting_under("vod/b")), (8, 2, 0));
        drop(spool);
        let again = Spool::open(&dir.path().join("spool"), 10).unwrap();
        assert_eq!(again.bytes(), 8);
        assert_eq!(again.file_of(0).unwrap().0, "vod/a/240p/s0.m4s");
        assert_eq!(again.file_of(1).unwrap().0, "vod/a/240p/s1.m4s");
    }

    #[tokio::test]
    async fn the_drain_stores_everything_and_a_file_the_disk_lost_is_said_lost() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Arc::new(Spool::open(&dir.path().join("spool"), 1 << 20).unwrap());
        for i in 0..3 {
            spool.keep(&format!("vod/a/240p/s{i}.m4s"), Bytes::from(vec![i as u8; 100])).await.unwrap();
        }
        let (_, lost) = spool.file_of(1).unwrap();
        std::fs::remove_file(lost).unwrap();
        let store = storage(&dir.path().join("store"));
        let drain = tokio::spawn(spool.clone().drain(store.clone()));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while spool.holds() {
            assert!(std::time::Instant::now() < deadline, "the drain never emptied the spool");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drain.abort();
        assert_eq!(spool.bytes(), 0);
        assert_eq!(store.get("vod/a/240p/s0.m4s", None).await.unwrap().unwrap().len(), 100);
        assert!(store.get("vod/a/240p/s1.m4s", None).await.unwrap().is_none());
        assert_eq!(store.get("vod/a/240p/s2.m4s", None).await.unwrap().unwrap().len(), 100);
        let lost = spool.lost_under("vod/a");
        assert_eq!(lost.into_iter().collect::<Vec<_>>(), ["vod/a/240p/s1.m4s"]);
        spool.forget_lost("vod/a");
        assert!(spool.lost_under("vod/a").is_empty());
        assert_eq!(std::fs::read_dir(dir.path().join("spool")).unwrap().count(), 0, "its files are gone");
    }
}
