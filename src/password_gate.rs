//! Password hashing bounded in concurrency (CONTRACT: Conventions — at most 2 hashes at a time
//! per core, a queue of 32, beyond it 429 with `Retry-After`).
//!
//! One Argon2id hash holds about 19 MiB for tens of milliseconds of CPU. Unbounded, 200
//! concurrent sign-ins ran 200 hashes at once on the blocking pool: the process grew by
//! gigabytes and starved everything else. Every hash and verification of the server goes
//! through one gate: a semaphore of `2 × cores` slots, a queue of waiters of bounded length,
//! and the work itself on `spawn_blocking` holding its slot until it ends (also when the request
//! that asked for it has gone away, so a slot is never counted free while its memory is in use).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{Semaphore, TryAcquireError};

use crate::domain::password;

/// Why hashing did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// Every slot is busy and the queue is full: answer 429 and let the client come back.
    #[error("password hashing is busy")]
    Busy,
    /// The hash itself failed (it panicked, or the hasher refused its input).
    #[error("password hashing failed: {0}")]
    Failed(String),
}

/// Whether a caller may wait for a slot. A client address over its failed-authentication limit
/// does not: its attempts still run when a slot is free (a right password is never refused
/// because of the address), but never ahead of other clients waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    Wait,
    NoWait,
}

pub struct PasswordGate {
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_waiting: usize,
}

/// Seconds a client told "busy" is asked to wait.
pub const BUSY_RETRY_AFTER_SECS: u64 = 1;

impl PasswordGate {
    /// `running` hashes at once, `max_waiting` more queued.
    pub fn new(running: usize, max_waiting: usize) -> Self {
        PasswordGate {
            slots: Arc::new(Semaphore::new(running.max(1))),
            waiting: AtomicUsize::new(0),
            max_waiting,
        }
    }

    /// The contract's bounds for this machine: 2 per core, 32 waiting.
    pub fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        PasswordGate::new(2 * cores, 32)
    }

    /// Runs `work` on the blocking pool once a slot is free; `Busy` at once when the queue is full.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, GateError> {
        self.run_as(Queue::Wait, work).await
    }

    /// [`run`](Self::run), for a caller that may or may not wait in the queue. Slots freed go
    /// to the queue first (the semaphore is fair), so callers kept out of it only get a slot
    /// nobody waits for.
    pub async fn run_as<T: Send + 'static>(
        &self,
        queue: Queue,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, GateError> {
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(TryAcquireError::Closed) => return Err(GateError::Busy),
            Err(TryAcquireError::NoPermits) if queue == Queue::NoWait => return Err(GateError::Busy),
            Err(TryAcquireError::NoPermits) => {
                if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_waiting {
                    self.waiting.fetch_sub(1, Ordering::SeqCst);
                    return Err(GateError::Busy);
                }
                // Leaves the queue however the wait ends (also when the request is dropped).
                let _queued = Queued(&self.waiting);
                self.slots.clone().acquire_owned().await.map_err(|_| GateError::Busy)?
            }
        };
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            work()
        })
        .await
        .map_err(|e| GateError::Failed(e.to_string()))
    }

    /// Argon2id hash of a new password.
    pub async fn hash(&self, new_password: String) -> Result<String, GateError> {
        self.run(move || password::hash(&new_password)).await?.map_err(|e| GateError::Failed(e.to_string()))
    }

    /// Whether `candidate` matches `stored`. With no usable stored hash (no such user, or one
    /// who has not set a password yet) a dummy hash is checked, so the answer costs the same.
    pub async fn verify(
        &self,
        candidate: String,
        stored: Option<String>,
        queue: Queue,
    ) -> Result<bool, GateError> {
        self.run_as(queue, move || password::verify_or_dummy(&candidate, stored.as_deref())).await
    }

    /// Requests waiting for a slot right now.
    pub fn queued(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_at_most_its_slots_and_refuses_past_the_queue() {
        let gate = Arc::new(PasswordGate::new(2, 3));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = Arc::new(std::sync::Mutex::new(released));
        let mut tasks = Vec::new();
        for _ in 0..5 {
            let (gate, running, peak, released) =
                (gate.clone(), running.clone(), peak.clone(), released.clone());
            tasks.push(tokio::spawn(async move {
                gate.run(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    let _ = released.lock().unwrap().recv_timeout(Duration::from_secs(10));
                    running.fetch_sub(1, Ordering::SeqCst);
                })
                .await
            }));
        }
        // Two run, three wait: the sixth finds the queue full.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while gate.queued() < 3 {
            assert!(std::time::Instant::now() < deadline, "three queued");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(gate.run(|| ()).await, Err(GateError::Busy));
        for _ in 0..5 {
            release.send(()).unwrap();
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(()));
        }
        assert_eq!(peak.load(Ordering::SeqCst), 2);
        assert_eq!(gate.queued(), 0);
        assert_eq!(gate.run(|| 7).await, Ok(7), "free again");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_that_may_not_wait_is_busy_while_every_slot_runs() {
        let gate = Arc::new(PasswordGate::new(1, 8));
        let (started, has_started) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let holder = tokio::spawn({
            let gate = gate.clone();
            async move {
                gate.run(move || {
                    let _ = started.send(());
                    let _ = released.recv_timeout(Duration::from_secs(10));
                })
                .await
            }
        });
        let waited = tokio::task::spawn_blocking(move || has_started.recv_timeout(Duration::from_secs(10)));
        waited.await.unwrap().expect("the slot is taken");
        // Room in the queue, but this caller may not wait.
        assert_eq!(gate.run_as(Queue::NoWait, || ()).await, Err(GateError::Busy));
        release.send(()).unwrap();
        assert_eq!(holder.await.unwrap(), Ok(()));
        assert_eq!(gate.run_as(Queue::NoWait, || 1).await, Ok(1), "a free slot is taken");
    }

    #[tokio::test]
    async fn verifies_and_spends_a_hash_on_missing_passwords() {
        let gate = PasswordGate::new(1, 1);
        let stored = gate.hash("correct horse".into()).await.unwrap();
        assert_eq!(gate.verify("correct horse".into(), Some(stored.clone()), Queue::Wait).await, Ok(true));
        assert_eq!(gate.verify("wrong".into(), Some(stored), Queue::NoWait).await, Ok(false));
        assert_eq!(gate.verify("anything".into(), None, Queue::Wait).await, Ok(false));
        assert_eq!(gate.verify("".into(), Some(String::new()), Queue::Wait).await, Ok(false));
    }
}
