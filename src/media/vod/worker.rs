//! Transcode workers: `SLUICE_TRANSCODE_WORKERS` loops per process that lease jobs from the
//! database queue ([`crate::store::vods`]), run the ladder pipeline, upload the outputs (master
//! playlist last) and move the VOD on, with its event, in one transaction.
//!
//! While a job runs its lease is renewed every [`RENEW`]. A renewal that fails means the job is no
//! longer this worker's: the pipeline stops. If the VOD was cancelled (its job is gone), the
//! output is removed; if the lease lapsed and another worker took the job over, nothing is
//! touched: the files are the new holder's now. A worker that dies leaves its lease to run out
//! (or to the restart of its process, which frees its leases at once), and another takes the job
//! up again: at most [`MAX_ATTEMPTS`] times. Every write a worker makes to its job (renew, retry,
//! return, complete, fail) and every removal of files is fenced by its [`Lease`] (owner and
//! attempt), so a worker that lost its lease never deletes or overwrites the record.
//!
//! The object store failing costs no VOD: outputs wait in the work folder while the store does
//! not take them ([`STORE_WAIT`]), and a pipeline that could not read its source while the store
//! does not serve it goes back to the queue, the attempt not counted ([`STORE_RETRY`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use super::probe::{probe, SourceInfo};
use super::transcode::{self, Failure, Output};
use crate::domain::time::now_ms;
use crate::domain::vod::{self, ProducedRendition, VodMove};
use crate::media::hls::master::{render_master, AudioRendition, Variant};
use crate::media::hls::vod as hls;
use crate::services::policy::{KeyError, Policies, Resource};
use crate::services::vods::{VodError, Vods};
use crate::storage::spool::PUT_DEADLINE;
use crate::storage::{source_key, vod_prefix, Storage, StorageError};
use crate::store::vods::{JobKind, Lease, LeasedJob};
use crate::store::{Db, DbError};

/// Why a job's step did not finish: the job is tried again later (the text is logged and, once
/// the attempts run out, kept as the VOD's `error`).
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("database: {0}")]
    Db(#[from] DbError),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Key(#[from] KeyError),
    #[error("{0}")]
    Vod(#[from] VodError),
    #[error("work folder: {0}")]
    Io(#[from] std::io::Error),
    #[error("stored JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the pipeline produced no thumbnail")]
    NoThumbnail,
    #[error("storage: {0}")]
    Unstored(String),
}

/// What the transcode workers work with.
pub struct Transcoder {
    pub db: Db,
    pub storage: Storage,
    pub vods: Arc<Vods>,
    /// Content keys of `drmEnabled` VODs.
    pub policies: Arc<Policies>,
    /// This process's identity (owner of its leases).
    pub node_id: String,
    /// `SLUICE_TRANSCODE_WORKERS`.
    pub workers: u32,
    /// Scratch space of running jobs: `<data dir>/work`.
    pub work_dir: PathBuf,
    /// Operators' pipeline descriptions (`SLUICE_PIPELINES_DIR`).
    pub pipelines_dir: Option<PathBuf>,
    /// The live channels held here: the DVR windows clips are cut from.
    pub channels: Arc<crate::media::live::channel::Channels>,
}

pub const LEASE: Duration = Duration::from_secs(30);
pub const RENEW: Duration = Duration::from_secs(2);
pub const MAX_ATTEMPTS: i64 = 3;
/// How long a presigned source URL (S3) stays valid for a transcode.
const SOURCE_URL_VALID: Duration = Duration::from_secs(24 * 3600);
/// How long a transcode's outputs wait in its work folder (on disk) for a store that fails or
/// does not answer, each tried again backing off to 10 s, before the attempt counts as failed.
const STORE_WAIT: Duration = Duration::from_secs(15 * 60);
/// When a job whose source the store could not serve is tried again.
const STORE_RETRY: Duration = Duration::from_secs(20);

/// Starts the workers. Leases this process held before a restart are freed first.
pub fn spawn(app: &Arc<Transcoder>) {
    let weak = Arc::downgrade(app);
    let workers = app.workers;
    tokio::spawn(async move {
        if let Some(app) = weak.upgrade() {
            match app.db.release_jobs(&app.node_id).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(jobs = n, "took back transcode jobs interrupted by the last stop"),
                Err(e) => tracing::warn!(error = %e, "freeing old transcode leases"),
            }
        }
        for i in 0..workers {
            tokio::spawn(worker(weak.clone(), i));
        }
    });
}

async fn worker(app: Weak<Transcoder>, index: u32) {
    lease_loop(app, JobKind::Transcode, LEASE, move |a, job| async move {
        tracing::info!(worker = index, vod = %job.vod_id, attempt = job.attempts, "transcode job leased");
        run_job(&a, job).await;
    })
    .await
}

/// The loop of one worker of the queue: leases the oldest job of `kind` it may take (for
/// `lease`), runs it with `run`, and when there is none waits for a wake, the stop or a second.
/// Ends when the process stops.
pub(super) async fn lease_loop<F, Fut>(app: Weak<Transcoder>, kind: JobKind, lease: Duration, run: F)
where
    F: Fn(Arc<Transcoder>, LeasedJob) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        let Some(a) = app.upgrade() else { return };
        let mut stop = a.vods.stopping();
        if *stop.borrow() {
            return;
        }
        let now = now_ms();
        match a.db.claim_job_of(kind, &a.node_id, now, now + lease.as_millis() as i64).await {
            Ok(Some(job)) => run(a, job).await,
            Ok(None) => {
                let wake = a.vods.wake();
                drop(a);
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.changed() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, kind = kind.as_str(), "leasing a job");
                drop(a);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// How a job ended, for the queue.
pub(super) enum Ending {
    Done,
    Failed(String),
    /// Cancelled meanwhile: the output is removed.
    Cancelled,
    /// Shutdown: the job goes back to the queue, the attempt not counted.
    Returned,
    /// A passing problem (storage, database): tried again later, the attempt counted.
    Retry(String),
    /// The store did not serve the source: tried again after [`STORE_RETRY`], the attempt not
    /// counted (an outage of the store fails no VOD).
    Wait(String),
}

async fn run_job(app: &Arc<Transcoder>, job: LeasedJob) {
    let lease = Lease { owner: app.node_id.clone(), attempt: job.attempts };
    let work = app.work_dir.join(&job.vod_id);
    let ending = match job_body(app, &job, &lease, &work).await {
        Ok(e) => e,
        Err(e) => Ending::Retry(e.to_string()),
    };
    let _ = tokio::fs::remove_dir_all(&work).await;
    let id = &job.vod_id;
    // Files are removed only while the job is still ours, or after it was cancelled: never once
    // another worker holds it.
    let outcome = match ending {
        Ending::Done => Ok(()),
        Ending::Failed(error) => {
            tracing::info!(vod = %id, %error, "transcode failed");
            if still_ours(app, &lease, id).await {
                remove_outputs(app, id).await;
            }
            fail(app, &lease, id, error).await
        }
        Ending::Cancelled => match app.db.job_exists(id).await {
            Ok(false) => {
                tracing::info!(vod = %id, "transcode stopped: the VOD was cancelled");
                // Everything goes, the source too, as DELETE does (it may have run before our
                // last upload landed).
                app.storage.delete_prefix(&vod_prefix(id), &[]).await.map(|_| ()).map_err(JobError::from)
            }
            Ok(true) => {
                tracing::warn!(vod = %id, attempt = lease.attempt, "transcode lease lost to another worker; its files are left to it");
                Ok(())
            }
            Err(e) => Err(e.into()),
        },
        Ending::Returned => app.db.return_job(&lease, id).await.map_err(Into::into),
        Ending::Retry(error) if job.attempts >= MAX_ATTEMPTS => {
            tracing::warn!(vod = %id, %error, "transcode failed for good");
            if still_ours(app, &lease, id).await {
                remove_outputs(app, id).await;
            }
            fail(app, &lease, id, format!("transcoding failed {MAX_ATTEMPTS} times; last: {error}")).await
        }
        Ending::Wait(error) => {
            tracing::warn!(vod = %id, %error, "transcode: the store did not serve the source; waiting for it");
            app.db
                .retry_job_at(&lease, id, now_ms() + STORE_RETRY.as_millis() as i64, false)
                .await
                .map_err(Into::into)
        }
        Ending::Retry(error) => {
            tracing::warn!(vod = %id, %error, attempt = job.attempts, "transcode attempt failed; will retry");
            if still_ours(app, &lease, id).await {
                remove_outputs(app, id).await;
            }
            app.db.retry_job_at(&lease, id, now_ms() + 10_000, true).await.map_err(Into::into)
        }
    };
    if let Err(e) = outcome {
        // The lease runs out and the job is tried again.
        tracing::warn!(vod = %id, error = %e, "recording the end of a transcode job");
    }
}

/// Whether `lease` still holds the job (an error counts as no: nothing is removed on doubt).
pub(super) async fn still_ours(app: &Transcoder, lease: &Lease, id: &str) -> bool {
    match app.db.pool().acquire().await {
        Ok(mut conn) => Db::job_is_ours(&mut conn, lease, id).await.unwrap_or(false),
        Err(_) => false,
    }
}

/// Everything but the source.
pub(super) async fn remove_outputs(app: &Transcoder, id: &str) {
    if let Err(e) = app.storage.delete_prefix(&vod_prefix(id), &[source_key(id)]).await {
        tracing::warn!(vod = %id, error = %e, "removing partial output");
    }
}

async fn job_body(
    app: &Arc<Transcoder>,
    job: &LeasedJob,
    lease: &Lease,
    work: &std::path::Path,
) -> Result<Ending, JobError> {
    let id = job.vod_id.clone();
    if job.attempts > MAX_ATTEMPTS {
        return Ok(Ending::Failed(format!(
            "transcoding was interrupted {MAX_ATTEMPTS} times (the worker stopped each time)"
        )));
    }
    // Moves the VOD to processing; `vod.processing` fires once, when it leaves the queue.
    let mut tx = app.db.begin_write().await?;
    let Some(mut row) = Db::vod_in(&mut tx, &job.project_id, &id).await? else {
        Db::delete_job(&mut tx, &id).await?;
        tx.commit().await?;
        return Ok(Ending::Cancelled);
    };
    row.progress = 0;
    match app.vods.apply(tx, &mut row, VodMove::Started).await {
        Ok(()) => {}
        Err(VodError::Refused(_)) => {
            let mut tx = app.db.begin_write().await?;
            Db::delete_job(&mut tx, &id).await?;
            tx.commit().await?;
            return Ok(Ending::Cancelled);
        }
        Err(e) => return Err(e.into()),
    }

    let uri = app.storage.read_uri(&source_key(&id), SOURCE_URL_VALID).await?;
    // What `uploaded` found; probed again only if the row lacks it.
    let known: Option<SourceInfo> = row.source_info.as_deref().and_then(|j| serde_json::from_str(j).ok());
    let source = match known {
        Some(s) => s,
        None => match probe(uri.clone()).await {
            Ok(s) => s,
            Err(e) => return Ok(Ending::Failed(e)),
        },
    };
    let ladder = row.ladder()?;
    let aspect = row.aspect_ratio();
    let rungs = vod::plan(&ladder, aspect, source.width, source.height);
    let _ = tokio::fs::remove_dir_all(work).await;
    tokio::fs::create_dir_all(work).await?;
    let t = transcode::Job {
        uri,
        work_dir: work.to_path_buf(),
        rungs,
        source: source.clone(),
        descriptions: transcode::Descriptions::load(app.pipelines_dir.as_deref()),
    };

    // The lease keeper: renews, records progress, and stops the pipeline when the job is no
    // longer ours (cancelled) or the process stops.
    let (stop_tx, stop_rx) = watch::channel(false);
    let progress = Arc::new(AtomicI64::new(0));
    let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let keeper = {
        let (app, id, lease, progress, cancelled) =
            (app.clone(), id.clone(), lease.clone(), progress.clone(), cancelled.clone());
        let mut shutdown = app.vods.stopping();
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RENEW);
            let mut recorded = -1;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.changed() => {}
                }
                if *shutdown.borrow() {
                    let _ = stop_tx.send(true);
                    return;
                }
                match app.db.renew_job(&lease, &id, now_ms() + LEASE.as_millis() as i64).await {
                    Ok(true) => {}
                    Ok(false) => {
                        cancelled.store(true, Ordering::SeqCst);
                        let _ = stop_tx.send(true);
                        return;
                    }
                    Err(e) => tracing::warn!(vod = %id, error = %e, "renewing a transcode lease"),
                }
                let p = progress.load(Ordering::Relaxed);
                if p != recorded {
                    if let Err(e) = app.db.set_vod_progress(&id, p).await {
                        tracing::debug!(error = %e, "recording progress");
                    }
                    recorded = p;
                }
            }
        })
    };
    let progress_in = progress.clone();
    let stop_rx_publish = stop_rx.clone();
    let result =
        transcode::run(&t, move |p| progress_in.store((p * 99.0) as i64, Ordering::Relaxed), stop_rx).await;
    let stopped = |cancelled: &std::sync::atomic::AtomicBool| {
        if cancelled.load(Ordering::SeqCst) {
            Ending::Cancelled
        } else {
            Ending::Returned
        }
    };
    let ending = match result {
        Err(Failure::Stopped) => stopped(&cancelled),
        Err(Failure::Media(e)) if source_unserved(app, &id).await => Ending::Wait(e),
        Err(Failure::Media(e)) => Ending::Failed(e),
        Ok(output) => {
            let published =
                publish(app, &id, work, &output, &source, row.drm_enabled == 1, &stop_rx_publish).await;
            // Stopped meanwhile (an upload given up on included): what stopped it decides.
            match published {
                _ if *stop_tx.borrow() => stopped(&cancelled),
                Ok(renditions) => {
                    keeper.abort();
                    complete(app, lease, &id, renditions, source.duration).await?
                }
                Err(e) => Ending::Retry(format!("storing the renditions: {e}")),
            }
        }
    };
    keeper.abort();
    Ok(ending)
}

/// Uploads every rendition, the thumbnail, and the master playlist last. With `drm`, segments
/// are stored encrypted with the VOD's content key (AES-128, IV = the segment's sequence number,
/// which is its index: the playlists start at 0); init sections, playlists and the thumbnail
/// stay clear.
async fn publish(
    app: &Transcoder,
    id: &str,
    work: &std::path::Path,
    out: &Output,
    source: &SourceInfo,
    drm: bool,
    stop: &watch::Receiver<bool>,
) -> Result<Vec<ProducedRendition>, JobError> {
    let put = |object: String, data: Bytes| put_patiently(app, id, object, data, stop.clone());
    let prefix = vod_prefix(id);
    let key = match drm {
        true => app.policies.content_key(&Resource::Vod(id), true).await?,
        false => None,
    };
    let key_uri = key.map(|_| hls::KEY_URI);
    let put_dir = |name: String, playlist: String| {
        let dir: PathBuf = work.join(&name);
        let prefix = prefix.clone();
        async move {
            for entry in std::fs::read_dir(&dir)? {
                let path = entry?.path();
                let Some(file) = path.file_name().and_then(|f| f.to_str()) else { continue };
                let object = format!("{prefix}/{name}/{file}");
                let segment =
                    file.strip_prefix('s').and_then(|f| f.strip_suffix(".m4s")?.parse::<u64>().ok());
                let data = tokio::fs::read(&path).await?;
                let data = match (key, segment) {
                    (Some(key), Some(msn)) => key.encrypt(msn, &data),
                    _ => data,
                };
                put(object, data.into()).await?;
            }
            put(format!("{prefix}/{name}/index.m3u8"), playlist.into()).await?;
            Ok::<_, JobError>(())
        }
    };
    let audio = match &out.audio {
        Some(a) => {
            put_dir(a.name.clone(), hls::transcoded_playlist("init.mp4", &a.segments, key_uri)).await?;
            Some((hls::bitrates(&a.segments).0, a))
        }
        None => None,
    };
    let mut produced = Vec::new();
    let mut variants = Vec::new();
    for r in &out.video {
        put_dir(r.name.clone(), hls::transcoded_playlist("init.mp4", &r.segments, key_uri)).await?;
        let (peak, average) = hls::bitrates(&r.segments);
        let uri = format!("{}/index.m3u8", r.name);
        variants.push(Variant {
            uri: uri.clone(),
            bandwidth: peak + audio.as_ref().map_or(0, |(p, _)| *p),
            width: r.width,
            height: r.height,
            codec: r.codec.clone().unwrap_or_default(),
            frame_rate: source.frame_rate,
        });
        produced.push(ProducedRendition {
            name: r.name.clone(),
            width: r.width,
            height: r.height,
            video_bitrate: vod::Bitrate(r.kbps).name(),
            average_bandwidth: average,
            peak_bandwidth: peak,
            uri,
        });
    }
    // A VOD is `complete` only with its thumbnail (`thumbnailUrl` must serve): without one the
    // attempt fails and is tried again, up to `failed`.
    if !out.thumbnail {
        return Err(JobError::NoThumbnail);
    }
    put(format!("{prefix}/thumb.jpg"), tokio::fs::read(work.join("thumb.jpg")).await?.into()).await?;
    let audio_rendition = audio.map(|(_, a)| AudioRendition {
        uri: format!("{}/index.m3u8", a.name),
        codec: a.codec.clone().unwrap_or_default(),
        channels: a.channels,
    });
    let master = render_master(&variants, audio_rendition.as_ref());
    put(format!("{prefix}/master.m3u8"), master.into()).await?;
    Ok(produced)
}

/// Stores one output, trying again while the store fails or does not answer (each try bounded
/// by [`PUT_DEADLINE`], backing off from 0.5 to 10 s) for up to [`STORE_WAIT`]; the outputs wait
/// in the work folder meanwhile. Stops trying when the job is stopped (cancelled, shutdown).
pub(super) async fn put_patiently(
    app: &Transcoder,
    id: &str,
    object: String,
    data: Bytes,
    mut stop: watch::Receiver<bool>,
) -> Result<(), JobError> {
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(500);
    loop {
        let error = match tokio::time::timeout(PUT_DEADLINE, app.storage.put(&object, data.clone())).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("storing {object}: no answer within {PUT_DEADLINE:?}"),
        };
        if started.elapsed() >= STORE_WAIT || *stop.borrow() {
            return Err(JobError::Unstored(error));
        }
        tracing::warn!(vod = %id, %error, "transcode: the store did not take an output; trying again");
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.changed() => {}
        }
        pause = (pause * 2).min(Duration::from_secs(10));
    }
}

/// Whether the store fails to serve the source of `id` now (it errs or does not answer): a
/// pipeline that could not read its source then waits for the store rather than failing the VOD.
async fn source_unserved(app: &Transcoder, id: &str) -> bool {
    !matches!(tokio::time::timeout(PUT_DEADLINE, app.storage.size(&source_key(id))).await, Ok(Ok(_)))
}

/// `complete` and `vod.complete`, if the job is still ours (else it was cancelled meanwhile).
pub(super) async fn complete(
    app: &Transcoder,
    lease: &Lease,
    id: &str,
    renditions: Vec<ProducedRendition>,
    duration: Option<f64>,
) -> Result<Ending, JobError> {
    let mut tx = app.db.begin_write().await?;
    if !Db::job_is_ours(&mut tx, lease, id).await? {
        return Ok(Ending::Cancelled);
    }
    let Some(mut row) = Db::vod_by_id_in(&mut tx, id).await? else { return Ok(Ending::Cancelled) };
    let now = now_ms();
    row.progress = 100;
    row.renditions = Some(serde_json::to_string(&renditions)?);
    row.duration = duration.or(row.duration);
    row.completed_at = Some(now);
    match app.vods.apply(tx, &mut row, VodMove::Finished).await {
        Ok(()) => {}
        Err(VodError::Refused(_)) => return Ok(Ending::Cancelled),
        Err(e) => return Err(e.into()),
    }
    tracing::info!(vod = %id, renditions = renditions.len(), "VOD complete");
    Ok(Ending::Done)
}

/// `failed` with `error` and `vod.failed`; the job leaves the queue.
pub(super) async fn fail(app: &Transcoder, lease: &Lease, id: &str, error: String) -> Result<(), JobError> {
    let mut tx = app.db.begin_write().await?;
    if !Db::job_is_ours(&mut tx, lease, id).await? {
        return Ok(());
    }
    let Some(mut row) = Db::vod_by_id_in(&mut tx, id).await? else {
        Db::delete_job(&mut tx, id).await?;
        tx.commit().await?;
        return Ok(());
    };
    row.error = Some(error);
    match app.vods.apply(tx, &mut row, VodMove::Errored).await {
        // Whatever became of the VOD meanwhile, the job leaves the queue.
        Err(VodError::Refused(_)) => {
            let mut tx = app.db.begin_write().await?;
            Db::delete_job(&mut tx, id).await?;
            tx.commit().await?;
            Ok(())
        }
        other => other.map_err(Into::into),
    }
}
