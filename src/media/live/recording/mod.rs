//! Recording live to VOD (CONTRACT: Recording and credits). A `vodEnabled` stream's channel
//! hands every segment it closes — the same CMAF segments the origin serves, before any
//! encryption, so nothing is encoded twice — and every initialization section to a
//! [`Recorder`]; the recording's task writes them to storage under the VOD's prefix as they
//! come (`vod/<id>/<rendition>/init<g>.mp4`, `s<idx>.m4s`, encrypted with the VOD's own key
//! when `drmEnabled`) and notes each one in the database once it is stored.
//!
//! When the channel ends (the push ended and no reconnect came within the grace period, so a
//! reconnect continues the same recording), the recorder is dropped and the task completes the
//! recording: the media playlists, the master playlist and the thumbnail are written from the
//! noted segments, then the VOD row appears `complete` with `vod.complete` in the transaction
//! that removes the recording's rows ([`crate::services::vods::Vods::recorded`]). A process that
//! was killed mid-recording completes what its dead run left at its next start
//! ([`Recordings::recover`]) the same way, from what reached storage: the VOD plays up to the
//! last segment noted. Nothing is served as a VOD before its playlists are complete.

mod complete;
pub mod playlist;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, Notify};

use self::playlist::{init_uri, segment_uri};
use crate::domain::content_key::ContentKey;
use crate::domain::time::{iso, now_ms};
pub use crate::media::live::segments::RenditionInfo;
use crate::media::live::segments::{Record, SegmentOutput};
use crate::services::policy::{KeyError, Policies, Resource};
use crate::services::vods::{VodError, Vods};
use crate::storage::spool::{Spool, PUT_DEADLINE};
use crate::storage::{vod_prefix, Storage, StorageError};
use crate::store::recordings::{RecordedSegmentRow, RecordingRow};
use crate::store::streams::StreamRow;
use crate::store::{Db, DbError};

/// Segments and sections that may wait for the recording's task: a minute of a four-rendition
/// ladder of 2-s segments. Beyond it (storage far behind) a segment is not recorded, with a
/// warning; the media thread never waits.
const QUEUE: usize = 128;
/// Tries of a storage write before the segment is given up.
const TRIES: u32 = 3;
/// The longest wait between two tries to complete a recording whose database or store is away.
const RETRY_MAX: Duration = Duration::from_secs(10);
/// Stored segments noted in one transaction at most.
const PENDING_NOTES: usize = 32;
/// Stored segments kept waiting for a database that does not answer (an hour of a
/// four-rendition ladder).
const MAX_PENDING: usize = 8192;

#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("database: {0}")]
    Db(#[from] DbError),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("content key: {0}")]
    Key(#[from] KeyError),
    #[error("{0}")]
    Vod(#[from] VodError),
    #[error("recording: {0}")]
    Other(String),
    /// Segments still wait in the spool for the store.
    #[error("{0} objects wait in the spool for the store")]
    Spooled(usize),
}

impl RecordingError {
    /// Whether it may go away by itself: the database or the store did not answer.
    fn is_transient(&self) -> bool {
        let db = |e: &DbError| crate::store::fault(e) != crate::store::Fault::Other;
        match self {
            RecordingError::Db(e)
            | RecordingError::Key(KeyError::Db(e))
            | RecordingError::Vod(VodError::Db(e)) => db(e),
            RecordingError::Storage(_) | RecordingError::Spooled(_) => true,
            _ => false,
        }
    }
}

/// The channel's end of a recording: dropping it ends the recording (its task then completes
/// it once the queued items are stored).
pub struct Recorder {
    tx: mpsc::Sender<Record>,
    id: String,
}

impl SegmentOutput for Recorder {
    /// Queues without waiting.
    fn record(&self, item: Record) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(item) {
            tracing::warn!(recording = %self.id, "recording: storage is behind; a segment is not recorded");
        }
    }
}

/// The recordings of this process.
pub struct Recordings {
    db: Db,
    storage: Storage,
    /// Where segments wait while the store does not take them.
    spool: Arc<Spool>,
    policies: Arc<Policies>,
    vods: Arc<Vods>,
    node: String,
    /// Recording tasks running (shutdown waits for them).
    running: AtomicUsize,
    idle: Notify,
    /// Recordings completed late ([`Recordings::reconciled`]).
    reconciled: std::sync::atomic::AtomicU64,
}

impl Recordings {
    pub fn new(
        db: Db,
        storage: Storage,
        spool: Arc<Spool>,
        policies: Arc<Policies>,
        vods: Arc<Vods>,
        node: String,
    ) -> Recordings {
        Recordings {
            db,
            storage,
            spool,
            policies,
            vods,
            node,
            running: AtomicUsize::new(0),
            idle: Notify::new(),
            reconciled: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Starts recording a push session of `stream` (its channel's `session`).
    pub async fn start(
        self: &Arc<Self>,
        stream: &StreamRow,
        session: &str,
    ) -> Result<Recorder, RecordingError> {
        let now = now_ms();
        let row = RecordingRow {
            id: crate::domain::new_id(),
            project_id: stream.project_id.clone(),
            stream_id: stream.id.clone(),
            session_id: session.to_string(),
            name: format!("{} {}", stream.name, iso(now)),
            drm_enabled: stream.drm_enabled,
            signed_playback: stream.signed_playback,
            node: self.node.clone(),
            renditions: None,
            started_at: now,
            updated_at: now,
        };
        let key = match row.drm_enabled == 1 {
            true => self.policies.content_key(&Resource::Vod(&row.id), true).await?,
            false => None,
        };
        self.db.insert_recording(&row).await?;
        tracing::info!(stream = %stream.id, recording = %row.id, "recording started");
        let (tx, rx) = mpsc::channel(QUEUE);
        self.running.fetch_add(1, Ordering::SeqCst);
        let (this, id) = (self.clone(), row.id.clone());
        tokio::spawn(async move {
            this.run(&id, key, rx).await;
            if this.running.fetch_sub(1, Ordering::SeqCst) == 1 {
                this.idle.notify_waiters();
            }
        });
        Ok(Recorder { tx, id: row.id })
    }

    /// Stores what the channel hands over until the recorder is dropped, then completes.
    async fn run(&self, id: &str, key: Option<ContentKey>, mut rx: mpsc::Receiver<Record>) {
        let prefix = vod_prefix(id);
        let mut next: BTreeMap<String, u64> = BTreeMap::new();
        let mut renditions: Vec<RenditionInfo> = Vec::new();
        // Stored segments waiting to be noted: noted together once the queue is empty (the
        // renditions close their segments at the same keyframe, so one transaction notes them
        // all), kept and noted again after a failed note.
        let mut pending: Vec<(RecordedSegmentRow, RenditionInfo)> = Vec::new();
        // The renditions changed since they were last noted.
        let mut dirty = false;
        // Initialization sections the store did not take yet.
        let mut unstored_inits: Vec<(String, Bytes)> = Vec::new();
        while let Some(item) = rx.recv().await {
            match item {
                Record::Init { rendition, generation, data } => {
                    let object = format!("{prefix}/{rendition}/{}", init_uri(generation));
                    if !self.store(id, &object, data.clone()).await {
                        // Small, and every segment of its generation needs it: kept, and stored
                        // before the recording completes.
                        unstored_inits.push((object, data));
                    }
                }
                Record::Segment { info, generation, duration, date, data } => {
                    let idx = *next.entry(info.name.clone()).or_default();
                    let stored = match key {
                        Some(key) => Bytes::from(key.encrypt(idx, &data)),
                        None => data,
                    };
                    let object = format!("{prefix}/{}/{}", info.name, segment_uri(idx));
                    let mut bytes = stored.len() as i64;
                    // Noted all the same when lost: it keeps its index and time, as a gap.
                    let lost = !self.store(id, &object, stored).await;
                    if lost {
                        bytes = 0;
                    }
                    let row = RecordedSegmentRow {
                        rendition: info.name.clone(),
                        idx: idx as i64,
                        generation: i64::from(generation),
                        duration,
                        bytes,
                        lost: i64::from(lost),
                        pdt: date,
                    };
                    next.insert(info.name.clone(), idx + 1);
                    pending.push((row, info));
                }
            }
            if rx.is_empty() || pending.len() >= PENDING_NOTES {
                let _ = self.note(id, &mut pending, &mut renditions, &mut dirty).await;
            }
        }
        self.finish(id, &mut pending, &mut renditions, &mut dirty, &mut unstored_inits).await;
    }

    /// Notes what is left and completes the recording; what fails because the database or the
    /// store is away is tried again, backing off to [`RETRY_MAX`], until it answers (CONTRACT:
    /// Faults). Any other failure leaves the recording to the next start.
    async fn finish(
        &self,
        id: &str,
        pending: &mut Vec<(RecordedSegmentRow, RenditionInfo)>,
        renditions: &mut Vec<RenditionInfo>,
        dirty: &mut bool,
        unstored_inits: &mut Vec<(String, Bytes)>,
    ) {
        let mut wait = Duration::from_secs(1);
        let mut late = false;
        loop {
            if let Err(e) = self.note(id, pending, renditions, dirty).await {
                if crate::store::fault(&e) == crate::store::Fault::Other {
                    // Not the database being away: trying again would not help. The recording
                    // completes with what was noted (it ends at its first segment not noted).
                    tracing::error!(recording = %id, error = %e, segments = pending.len(), "recording: segments that cannot be noted are left out");
                    pending.clear();
                }
            }
            let mut left = Vec::new();
            for (object, data) in unstored_inits.drain(..) {
                if !self.store(id, &object, data.clone()).await {
                    left.push((object, data));
                }
            }
            *unstored_inits = left;
            if pending.is_empty() && unstored_inits.is_empty() {
                match self.complete(id).await {
                    Ok(Some(vod)) => {
                        tracing::info!(recording = %id, vod = %vod.id, late, "recording complete");
                        if late {
                            self.reconciled.fetch_add(1, Ordering::Relaxed);
                        }
                        return;
                    }
                    Ok(None) => return,
                    Err(e) if e.is_transient() => {
                        tracing::warn!(recording = %id, error = %e, "recording: completing (tried again)")
                    }
                    Err(e) => {
                        return tracing::error!(recording = %id, error = %e, "recording: completing (retried at the next start)");
                    }
                }
            }
            late = true;
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(RETRY_MAX);
        }
    }

    /// Where segments wait while the store does not take them.
    pub fn spool(&self) -> &Arc<Spool> {
        &self.spool
    }

    /// How many recordings completed late, once what they stand on answered again
    /// (`sluice_reconciled_total`).
    pub fn reconciled(&self) -> u64 {
        self.reconciled.load(Ordering::Relaxed)
    }

    /// Stores `data` under `object`: in the store, or in the spool when the store does not take
    /// it (or is failing already: while the spool holds anything, only its drain asks the
    /// store). `false` when neither took it: the object is lost.
    async fn store(&self, id: &str, object: &str, data: Bytes) -> bool {
        if !self.spool.holds() {
            match tokio::time::timeout(PUT_DEADLINE, self.put(object, data.clone())).await {
                Ok(Ok(())) => return true,
                Ok(Err(e)) => {
                    tracing::warn!(recording = %id, error = %e, "recording: the store refused a segment; spooled")
                }
                Err(_) => {
                    tracing::warn!(recording = %id, "recording: the store did not answer in time; spooled")
                }
            }
        }
        match self.spool.keep(object, data).await {
            Ok(()) => true,
            Err(e) => {
                // A segment plays as a gap; an initialization section is kept and tried again.
                tracing::warn!(recording = %id, object, error = %e, "recording: neither the store nor the spool took an object");
                false
            }
        }
    }

    async fn put(&self, object: &str, data: Bytes) -> Result<(), StorageError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.storage.put(object, data.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) if tries >= TRIES => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(200 * u64::from(tries))).await,
            }
        }
    }

    /// Notes the stored segments of `pending` (and their renditions when new or changed) in one
    /// transaction; on failure they stay pending for the next try, and the error is returned.
    async fn note(
        &self,
        id: &str,
        pending: &mut Vec<(RecordedSegmentRow, RenditionInfo)>,
        renditions: &mut Vec<RenditionInfo>,
        dirty: &mut bool,
    ) -> Result<(), DbError> {
        if pending.is_empty() {
            return Ok(());
        }
        for (_, info) in pending.iter() {
            if !renditions.contains(info) {
                renditions.retain(|r| r.name != info.name);
                renditions.push(info.clone());
                *dirty = true;
            }
        }
        let json = match *dirty {
            true => serde_json::to_string(renditions).ok(),
            false => None,
        };
        let rows: Vec<RecordedSegmentRow> = pending.iter().map(|(row, _)| row.clone()).collect();
        match self.db.note_recorded_segments(id, &rows, json.as_deref(), now_ms()).await {
            Ok(()) => {
                pending.clear();
                *dirty = false;
                Ok(())
            }
            Err(e) => {
                tracing::warn!(recording = %id, error = %e, "recording: segments not noted yet (tried again)");
                // Bounded: a database away for that long loses the oldest notes (the recording
                // then ends at its first gap).
                if pending.len() > MAX_PENDING {
                    pending.drain(..pending.len() - MAX_PENDING);
                }
                Err(e)
            }
        }
    }

    /// The recordings a dead run of this node left in progress (at start, before ingest
    /// listens: afterwards the list would include this run's own).
    pub async fn left_in_progress(&self) -> Result<Vec<RecordingRow>, RecordingError> {
        Ok(self.db.recordings_of_node(&self.node).await?)
    }

    /// Completes recordings a dead run left, from what reached storage. Returns how many
    /// became VODs.
    pub async fn recover(&self, left: Vec<RecordingRow>) -> usize {
        let mut completed = 0;
        for r in left {
            // Its segments may still wait in the spool, or the store be away: tried again
            // while that is why.
            let mut wait = Duration::from_secs(1);
            loop {
                match self.complete(&r.id).await {
                    Ok(Some(_)) => completed += 1,
                    Ok(None) => {}
                    Err(e) if e.is_transient() => {
                        tracing::warn!(recording = %r.id, error = %e, "recordings: completing one left in progress (tried again)");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(RETRY_MAX);
                        continue;
                    }
                    Err(e) => {
                        tracing::error!(recording = %r.id, error = %e, "recordings: completing one left in progress")
                    }
                }
                break;
            }
        }
        completed
    }

    /// Waits (up to `within`) for the recordings under way to complete (shutdown).
    pub async fn drain(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.running.load(Ordering::SeqCst) > 0 {
            let idle = self.idle.notified();
            if self.running.load(Ordering::SeqCst) == 0
                || tokio::time::timeout_at(deadline, idle).await.is_err()
            {
                break;
            }
        }
    }
}
