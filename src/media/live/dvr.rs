//! The DVR writer of a channel: closed segments go to disk on a thread of their own, so neither
//! the media thread that closes a segment nor a request that reads the channel ever waits for
//! the disk. The channel keeps each segment in memory until the writer says it is on disk.
//!
//! Bounded: at most [`WRITE_QUEUE`] segments wait for the writer. When the disk cannot keep up
//! and the queue is full, the segment is not written (a warning says so) and leaves memory with
//! the live window like any other: the DVR has a hole, but the media thread never blocks and
//! memory never grows without bound. A thread rather than a tokio task because segments are
//! closed on GStreamer's streaming threads, outside any runtime, and the writes block.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;

use bytes::Bytes;

/// Segments (of all renditions of a channel) that may wait for the writer: eight seconds of a
/// four-rendition ladder of 2-second segments.
pub const WRITE_QUEUE: usize = 16;

/// Where DVR segments go. The disk in production; tests inject a slow or failing one.
pub trait SegmentSink: Send + Sync + 'static {
    /// Writes one segment file, creating its folder.
    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()>;
    /// Removes a channel's folder with everything in it.
    fn remove_all(&self, dir: &Path) -> io::Result<()>;
}

/// The file system.
pub struct DiskSink;

impl SegmentSink for DiskSink {
    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, data)
    }

    fn remove_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(dir)
    }
}

/// A segment for the writer.
pub(super) struct Write {
    pub rendition: String,
    pub msn: u64,
    pub data: Bytes,
}

/// Why a segment was not queued.
pub(super) enum NotQueued {
    /// [`WRITE_QUEUE`] segments wait already.
    Full,
    /// The writer is gone (it could not be started).
    Closed,
}

/// The sending half. Dropping it (the channel is dropped) lets the writer finish the queued
/// segments, remove the channel's folder and end; [`Writer::retire`] (the channel left its map)
/// first tells the writer to write none of the queued segments: a channel that left the map
/// writes nothing more, so once the folder is gone it stays gone.
pub(super) struct Writer {
    tx: SyncSender<Write>,
    retired: Arc<AtomicBool>,
    /// Set by the writer once it removed the folder and ended.
    #[cfg(test)]
    finished: Arc<AtomicBool>,
}

impl Writer {
    /// Starts the writer of the channel whose folder is `dir`. `written(rendition, msn, stored)`
    /// is called on the writer's thread once it is done with a segment: on disk (`true`), or not
    /// (`false`, with a warning: the disk failed or is full). `None` when no thread could be started (then the channel keeps no DVR).
    pub fn start(
        dir: PathBuf,
        sink: Arc<dyn SegmentSink>,
        written: impl Fn(&str, u64, bool) + Send + 'static,
    ) -> Option<Writer> {
        let (tx, rx) = mpsc::sync_channel::<Write>(WRITE_QUEUE);
        let retired = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        #[cfg(test)]
        let finished_here = finished.clone();
        let retired_ = retired.clone();
        let run = move || {
            for w in rx {
                // A write begun before the retirement ends before the folder goes (below).
                let mut stored = false;
                if !retired_.load(Ordering::Acquire) {
                    let path = dir.join(&w.rendition).join(format!("s{}.m4s", w.msn));
                    match sink.write(&path, &w.data) {
                        Ok(()) => stored = true,
                        Err(e) => {
                            tracing::warn!(error = %e, path = %path.display(), "DVR: writing a segment")
                        }
                    }
                }
                written(&w.rendition, w.msn, stored);
            }
            // Every sender is gone: the channel left its map (or was dropped). Its folder goes
            // with it, here and only here, so teardown happens once and never in a `Drop`.
            match sink.remove_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(error = %e, dir = %dir.display(), "DVR: removing a channel's folder")
                }
            }
            finished.store(true, Ordering::Release);
        };
        match std::thread::Builder::new().name("dvr-writer".into()).spawn(run) {
            Ok(_) => Some(Writer {
                tx,
                retired,
                #[cfg(test)]
                finished: finished_here,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "DVR: no writer thread; this push keeps no DVR");
                None
            }
        }
    }

    /// The channel left its map: the segments still queued are not written, and the writer
    /// removes the folder and ends once the one it may be writing is done.
    pub fn retire(self) {
        self.retired.store(true, Ordering::Release);
    }

    /// Set once the writer has removed the folder and ended (tests wait on it).
    #[cfg(test)]
    pub fn finished(&self) -> Arc<AtomicBool> {
        self.finished.clone()
    }

    /// Queues a segment without waiting.
    pub fn try_queue(&self, w: Write) -> Result<(), NotQueued> {
        self.tx.try_send(w).map_err(|e| match e {
            TrySendError::Full(_) => NotQueued::Full,
            TrySendError::Disconnected(_) => NotQueued::Closed,
        })
    }
}
