//! Simulcast (CONTRACT: Simulcast): the node holding a push sends the publisher's own media to
//! the stream's enabled targets, one [`Sender`] each, fed from the push's tap.
//!
//! [`run`] keeps the senders in step with the store: every second (and at once when the API
//! changed a target on this node) it reads, in one query, the enabled targets of the streams
//! with an open tap here, starts a sender for each, stops the senders of targets deleted, disabled or of a
//! push that ended, and writes where each target stands (`status`, `lastError`, `connectedAt`,
//! `bytesSent`), with `stream.simulcast.live` when one connects and `stream.simulcast.error`
//! once per streak of failures. All of it is off the media threads: a database that does not
//! answer delays only the records, never the media.

mod sender;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

pub use sender::{Sender, QUEUE_BYTES};

use crate::domain::content_key::MasterKey;
use crate::domain::simulcast::{TargetStatus, TargetUrl};
use crate::events::catalog::SimulcastTargetData;
use crate::events::{payload, Event, Outbox};
use crate::media::live::taps::{Tap, Taps};
use crate::store::simulcast::{TargetProgress, TargetRow};
use crate::store::Db;

/// How often the targets are read again (a change on another node is seen within it).
const TICK: Duration = Duration::from_secs(1);
/// `bytesSent` is written at most this often while nothing else changes.
const BYTES_EVERY: Duration = Duration::from_secs(2);

pub struct Simulcast {
    db: Db,
    taps: Arc<Taps>,
    outbox: Outbox,
    master: MasterKey,
    allow_private: bool,
    wake: Notify,
    /// Targets by status on this node, as of the last pass (`sluice_simulcast_targets`).
    statuses: Mutex<HashMap<TargetStatus, usize>>,
    /// Bytes sent to targets by this node (`sluice_simulcast_bytes_total`).
    sent: AtomicU64,
}

/// A target being sent to.
struct Running {
    stream_id: String,
    tap: Arc<Tap>,
    sender: Arc<Sender>,
    written: Option<TargetProgress>,
    written_at: Instant,
    /// `stream.simulcast.error` was sent for the current streak of failures.
    failing: bool,
    name: String,
    /// Of the sender's bytes, those already counted in [`Simulcast::sent`].
    counted: i64,
}

impl Simulcast {
    pub fn new(db: Db, taps: Arc<Taps>, outbox: Outbox, master: MasterKey, allow_private: bool) -> Simulcast {
        Simulcast {
            db,
            taps,
            outbox,
            master,
            allow_private,
            wake: Notify::new(),
            statuses: Mutex::default(),
            sent: AtomicU64::new(0),
        }
    }

    /// A target was created, changed or deleted: look again now.
    pub fn changed(&self) {
        self.wake.notify_one();
    }

    /// Targets sent to from this node, by status.
    pub fn statuses(&self) -> HashMap<TargetStatus, usize> {
        self.statuses.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    fn start(&self, tap: &Arc<Tap>, row: &TargetRow) -> Result<Arc<Sender>, String> {
        let context = crate::store::secrets::simulcast_context(&row.id);
        let clear = crate::store::secrets::open(&self.master, &row.url, &context)
            .map_err(|_| "the target's URL does not open under this server's master key".to_string())?;
        let url = TargetUrl::parse(&clear)?;
        tracing::info!(stream = %row.stream_id, target_id = %row.id, url = %row.masked_url, "simulcast target starting");
        Ok(Sender::spawn(&row.id, url, tap.clone(), self.allow_private))
    }

    /// One pass: senders in step with the targets, progress written.
    async fn pass(&self, running: &mut HashMap<String, Running>) {
        let taps: HashMap<String, Arc<Tap>> =
            self.taps.list().into_iter().map(|t| (t.stream_id.clone(), t)).collect();
        let streams: Vec<&str> = taps.keys().map(String::as_str).collect();
        let mut wanted: HashSet<String> = HashSet::new();
        let targets = match self.db.enabled_targets_of(&streams).await {
            Ok(t) => t,
            Err(e) => {
                // Keep what runs for the pushes still here; the records catch up when the
                // database is back.
                tracing::debug!(error = %e, "reading simulcast targets");
                wanted.extend(
                    running
                        .iter()
                        .filter(|(_, r)| taps.get(&r.stream_id).is_some_and(|t| Arc::ptr_eq(t, &r.tap)))
                        .map(|(id, _)| id.clone()),
                );
                Vec::new()
            }
        };
        for row in targets {
            let Some(tap) = taps.get(&row.stream_id) else { continue };
            wanted.insert(row.id.clone());
            if let Some(r) = running.get_mut(&row.id) {
                if Arc::ptr_eq(&r.tap, tap) {
                    r.name = row.name.clone();
                    continue;
                }
            }
            if let Some(old) = running.remove(&row.id) {
                old.sender.stop();
            }
            let sender = match self.start(tap, &row) {
                Ok(s) => s,
                Err(why) => {
                    let failed = TargetProgress {
                        status: TargetStatus::Error,
                        last_error: Some(why),
                        connected_at: None,
                        bytes_sent: 0,
                    };
                    let _ = self.db.set_target_progress(&row.id, &failed).await;
                    wanted.remove(&row.id);
                    continue;
                }
            };
            running.insert(
                row.id.clone(),
                Running {
                    stream_id: row.stream_id.clone(),
                    tap: tap.clone(),
                    sender,
                    written: None,
                    written_at: Instant::now(),
                    failing: false,
                    name: row.name,
                    counted: 0,
                },
            );
        }
        let gone: Vec<String> = running.keys().filter(|id| !wanted.contains(*id)).cloned().collect();
        for id in gone {
            if let Some(r) = running.remove(&id) {
                r.sender.stop();
                let mut last = r.sender.progress();
                last.status = TargetStatus::Idle;
                self.count(&r, &last);
                if let Err(e) = self.db.set_target_progress(&id, &last).await {
                    tracing::debug!(target_id = %id, error = %e, "writing a simulcast target's end");
                }
            }
        }
        let mut statuses = HashMap::new();
        for (id, r) in running.iter_mut() {
            let now = r.sender.progress();
            *statuses.entry(now.status).or_insert(0) += 1;
            self.count(r, &now);
            r.counted = now.bytes_sent;
            self.report(id, r, &now).await;
        }
        *self.statuses.lock().unwrap_or_else(|p| p.into_inner()) = statuses;
    }

    fn count(&self, r: &Running, now: &TargetProgress) {
        let more = (now.bytes_sent - r.counted).max(0) as u64;
        self.sent.fetch_add(more, Ordering::Relaxed);
    }

    /// Writes where the target stands when it moved (its bytes at most every 2 s), with the
    /// event of a connection or of a streak's first failure.
    async fn report(&self, id: &str, r: &mut Running, now: &TargetProgress) {
        let before = r.written.as_ref();
        let moved = before.is_none_or(|b| b.status != now.status || b.last_error != now.last_error);
        let bytes_due =
            before.is_some_and(|b| b.bytes_sent != now.bytes_sent) && r.written_at.elapsed() >= BYTES_EVERY;
        if !moved && !bytes_due {
            return;
        }
        if let Err(e) = self.db.set_target_progress(id, now).await {
            tracing::debug!(target_id = %id, error = %e, "writing a simulcast target's progress");
            return;
        }
        let was = before.map(|b| b.status);
        r.written = Some(now.clone());
        r.written_at = Instant::now();
        let event = match now.status {
            TargetStatus::Live if was != Some(TargetStatus::Live) => {
                r.failing = false;
                true
            }
            TargetStatus::Error if !r.failing => {
                r.failing = true;
                true
            }
            _ => false,
        };
        if event {
            self.emit(id, r, now).await;
        }
    }

    async fn emit(&self, id: &str, r: &Running, now: &TargetProgress) {
        let stream = match self.db.stream_by_id(&r.stream_id).await {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(stream = %r.stream_id, error = %e, "reading the stream of a simulcast event");
                return;
            }
        };
        let target = SimulcastTargetData {
            id: id.to_string(),
            name: r.name.clone(),
            status: now.status,
            last_error: now.last_error.clone(),
        };
        let data = payload::simulcast(&stream, target);
        let event = if now.status == TargetStatus::Live {
            Event::StreamSimulcastLive(data)
        } else {
            Event::StreamSimulcastError(data)
        };
        if let Err(e) = self.outbox.emit(&stream.project_id, &event).await {
            tracing::error!(stream = %stream.id, error = %e, "queueing a simulcast event");
        }
    }
}

/// Keeps the senders in step until `simulcast` goes (the App dropped); then stops them.
pub async fn run(simulcast: Weak<Simulcast>) {
    let mut running: HashMap<String, Running> = HashMap::new();
    loop {
        let Some(this) = simulcast.upgrade() else { break };
        this.pass(&mut running).await;
        tokio::select! {
            () = this.wake.notified() => {}
            () = tokio::time::sleep(TICK) => {}
        }
    }
    for r in running.values() {
        r.sender.stop();
    }
}
