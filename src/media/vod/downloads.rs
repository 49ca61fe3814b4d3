//! MP4 downloads (CONTRACT: Clips, downloads, thumbnails): a download worker per process (beside
//! the transcode and clip workers, on the same durable queue, jobs of kind `mp4`) remuxes a
//! complete VOD that asks for them (`mp4`) into a progressive MP4 (`moov` first) of each video
//! rendition with the audio beside it, and an M4A of the audio alone, under `download/`.
//! Nothing is decoded: each rendition's initialization section and segments are written one
//! after the other into a fragmented file in the work folder, which `qtdemux` reads and `mp4mux`
//! (`faststart`) writes out again; the result is stored in parts ([`Storage::put_file`]).
//!
//! What is refused, for good (the record's `downloadsError`): encrypted media (a clear MP4 of a
//! `drmEnabled` VOD would undo its encryption), and a rendition whose initialization section
//! changes part-way (a recording whose publisher changed its encoding on a reconnect).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;
use tokio::io::AsyncWriteExt;

use super::clip::{read, rendition_uris};
use super::worker::{lease_loop, JobError, Transcoder};
use crate::domain::time::now_ms;
use crate::domain::vod::{MadeDownload, VodStatus};
use crate::media::cmaf;
use crate::media::hls::vod as hls;
use crate::storage::vod_prefix;
use crate::store::vods::{JobKind, Lease, LeasedJob};
use crate::store::Db;

/// Renewed between renditions; a remux of a rendition takes seconds per hour of video.
const LEASE: Duration = Duration::from_secs(600);
const MAX_ATTEMPTS: i64 = 3;
/// The wait before the second attempt; ten times as long before the third, so that an outage of
/// the store or the database fails the downloads only after 11 minutes (CONTRACT: Faults).
const RETRY_FIRST: Duration = Duration::from_secs(60);
/// How long one remux may take.
const REMUX_DEADLINE: Duration = Duration::from_secs(1800);
/// The slowest the store may take a download in: 1 MB/s, after a minute's grace.
const PUT_RATE: u64 = 1_000_000;

/// Starts the download worker.
pub fn spawn(app: &Arc<Transcoder>) {
    let run = |a: Arc<Transcoder>, job| async move { run(&a, job).await };
    tokio::spawn(lease_loop(Arc::downgrade(app), JobKind::Mp4, LEASE, run));
}

/// How a downloads job ended.
enum Outcome {
    Made(Vec<MadeDownload>),
    /// Cannot be made, for good.
    Refused(String),
    /// Not wanted any more (downloads off, the VOD archived or gone) or no longer ours.
    Gone,
    /// The process is stopping: the job goes back, the attempt not counted.
    Stopping,
}

async fn run(app: &Transcoder, job: LeasedJob) {
    let lease = Lease { owner: app.node_id.clone(), attempt: job.attempts };
    let id = job.vod_id.clone();
    let work = app.work_dir.join(format!("{id}-mp4"));
    let started = std::time::Instant::now();
    // A process that died in each attempt (its lease lapsed) never reached the count below.
    let outcome = match job.attempts > MAX_ATTEMPTS {
        true => Err(JobError::Unstored(format!("the worker stopped in each of {MAX_ATTEMPTS} attempts"))),
        false => body(app, &lease, &id, &work).await,
    };
    let _ = tokio::fs::remove_dir_all(&work).await;
    let ended = match outcome {
        Ok(Outcome::Made(made)) => {
            tracing::info!(vod = %id, files = made.len(), seconds = started.elapsed().as_secs_f64(), "downloads made");
            match serde_json::to_string(&made) {
                Ok(json) => finish(app, &lease, &id, Ok(json)).await,
                Err(e) => finish(app, &lease, &id, Err(e.to_string())).await,
            }
        }
        Ok(Outcome::Refused(problem)) => {
            tracing::info!(vod = %id, %problem, "downloads refused");
            remove(app, &id).await;
            finish(app, &lease, &id, Err(problem)).await
        }
        Ok(Outcome::Gone) => forget(app, &lease, &id).await,
        Ok(Outcome::Stopping) => app.db.return_job(&lease, &id).await.map_err(Into::into),
        Err(e) if job.attempts >= MAX_ATTEMPTS => {
            remove(app, &id).await;
            finish(
                app,
                &lease,
                &id,
                Err(format!("making the downloads failed {MAX_ATTEMPTS} times; last: {e}")),
            )
            .await
        }
        Err(e) => {
            tracing::warn!(vod = %id, error = %e, attempt = job.attempts, "downloads attempt failed; will retry");
            let wait = RETRY_FIRST.as_millis() as i64 * 10i64.pow(job.attempts.clamp(1, 3) as u32 - 1);
            app.db.retry_job_at(&lease, &id, now_ms() + wait, true).await.map_err(Into::into)
        }
    };
    if let Err(e) = ended {
        tracing::warn!(vod = %id, error = %e, "recording the end of a downloads job");
    }
}

/// What the job made (or why not) goes on the record and the job leaves the queue, if the job
/// is still ours.
async fn finish(
    app: &Transcoder,
    lease: &Lease,
    id: &str,
    made: Result<String, String>,
) -> Result<(), JobError> {
    let mut tx = app.db.begin_write().await?;
    if !Db::job_is_ours(&mut tx, lease, id).await? {
        return Ok(());
    }
    Db::set_vod_downloads(&mut tx, id, made, now_ms()).await?;
    Db::delete_job(&mut tx, id).await?;
    tx.commit().await?;
    Ok(())
}

/// The job leaves the queue (if still ours), and whatever it stored goes when the VOD no longer
/// asks for downloads.
async fn forget(app: &Transcoder, lease: &Lease, id: &str) -> Result<(), JobError> {
    let mut tx = app.db.begin_write().await?;
    if Db::job_is_ours(&mut tx, lease, id).await? {
        Db::delete_job(&mut tx, id).await?;
    }
    tx.commit().await?;
    if app.db.vod_by_id(id).await?.is_none_or(|v| v.mp4 != 1) {
        remove(app, id).await;
    }
    Ok(())
}

async fn remove(app: &Transcoder, id: &str) {
    if let Err(e) = app.storage.delete_prefix(&download_prefix(id), &[]).await {
        tracing::warn!(vod = %id, error = %e, "removing downloads");
    }
}

/// Where VOD `id`'s downloads are stored.
pub fn download_prefix(id: &str) -> String {
    format!("{}/download", vod_prefix(id))
}

async fn body(app: &Transcoder, lease: &Lease, id: &str, work: &Path) -> Result<Outcome, JobError> {
    let Some(row) = app.db.vod_by_id(id).await? else { return Ok(Outcome::Gone) };
    if row.mp4 != 1 || row.status() != VodStatus::Complete || row.archived_at.is_some() {
        return Ok(Outcome::Gone);
    }
    if row.drm_enabled == 1 {
        return Ok(Outcome::Refused("downloads are not made of encrypted (drmEnabled) media".into()));
    }
    let prefix = vod_prefix(id);
    let master = read(app, &format!("{prefix}/master.m3u8")).await?;
    let master = String::from_utf8_lossy(&master).into_owned();
    let _ = tokio::fs::remove_dir_all(work).await;
    tokio::fs::create_dir_all(work).await?;
    // The audio's fragmented file first: every video download carries it.
    let mut video = Vec::new();
    let mut audio = None;
    for (uri, size) in rendition_uris(&master) {
        let Some(name) = uri.strip_suffix("/index.m3u8") else { continue };
        match size {
            Some(_) => video.push(name.to_string()),
            None if audio.is_none() => match fragmented(app, &prefix, name, work).await? {
                Ok(path) => audio = Some(path),
                Err(problem) => return Ok(Outcome::Refused(problem)),
            },
            None => {}
        }
    }
    let mut made = Vec::new();
    let stop = app.vods.stopping();
    for name in video.iter().map(String::as_str).chain(audio.is_some().then_some("audio")) {
        if *stop.borrow() {
            return Ok(Outcome::Stopping);
        }
        if !app.db.renew_job(lease, id, now_ms() + LEASE.as_millis() as i64).await? {
            return Ok(Outcome::Gone);
        }
        let source = match name {
            "audio" => None,
            _ => match fragmented(app, &prefix, name, work).await? {
                Ok(path) => Some(path),
                Err(problem) => return Ok(Outcome::Refused(problem)),
            },
        };
        let file = MadeDownload::file_of(name);
        let out = work.join(&file);
        let (v, a, o) = (source.clone(), audio.clone(), out.clone());
        let remuxed = tokio::task::spawn_blocking(move || remux(v.as_ref(), a.as_ref(), &o))
            .await
            .map_err(|e| JobError::Unstored(e.to_string()))?;
        if let Err(problem) = remuxed {
            return Ok(Outcome::Refused(format!("{name}: {problem}")));
        }
        if let Some(v) = source {
            let _ = tokio::fs::remove_file(v.path).await;
        }
        let size = tokio::fs::metadata(&out).await?.len();
        let key = format!("{}/{file}", download_prefix(id));
        let deadline = Duration::from_secs(60 + size / PUT_RATE);
        match tokio::time::timeout(deadline, app.storage.put_file(&key, &out)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => return Err(JobError::Unstored(format!("storing {key}: not done within {deadline:?}"))),
        }
        let _ = tokio::fs::remove_file(&out).await;
        made.push(MadeDownload { rendition: name.to_string(), file, size });
    }
    Ok(Outcome::Made(made))
}

/// A rendition as one fragmented file of the work folder.
#[derive(Debug, Clone)]
struct Fragmented {
    path: PathBuf,
    /// Where its media starts and how long it runs, in seconds of its own timeline (the decode
    /// times of its fragments: the renditions of a VOD share it).
    start: f64,
    length: f64,
}

/// Rendition `name`'s initialization section and segments one after the other, in a file of the
/// work folder (gaps left out). `Err` names what cannot be made into one file.
async fn fragmented(
    app: &Transcoder,
    prefix: &str,
    name: &str,
    work: &Path,
) -> Result<Result<Fragmented, String>, JobError> {
    let text = read(app, &format!("{prefix}/{name}/index.m3u8")).await?;
    let text = String::from_utf8_lossy(&text);
    let Some(listed) = hls::read(&text) else {
        return Ok(Err(format!("{name}: the playlist does not read")));
    };
    let Some(first) = listed.iter().find(|l| !l.gap) else {
        return Ok(Err(format!("{name}: no media")));
    };
    if let Some(at) = listed.iter().position(|l| !l.gap && l.init != first.init) {
        return Ok(Err(format!(
            "{name} changes its encoding at segment {at} (a publisher's new settings on a reconnect); \
             a download is made of media with one"
        )));
    }
    let path = work.join(format!("{name}.fmp4"));
    let mut file = tokio::fs::File::create(&path).await?;
    let init = read(app, &format!("{prefix}/{name}/{}", first.init)).await?;
    let Some(scale) = cmaf::timescale(&init).filter(|s| *s > 0) else {
        return Ok(Err(format!("{name}: no timescale")));
    };
    file.write_all(&init).await?;
    let (mut start, mut ticks) = (None, 0u64);
    for l in listed.iter().filter(|l| !l.gap) {
        let segment = read(app, &format!("{prefix}/{name}/{}", l.uri)).await?;
        start = start.or_else(|| cmaf::decode_time(&segment));
        ticks += cmaf::duration_ticks(&segment).unwrap_or(0);
        file.write_all(&segment).await?;
    }
    file.flush().await?;
    let seconds = |t: u64| t as f64 / f64::from(scale);
    Ok(Ok(Fragmented { path, start: seconds(start.unwrap_or(0)), length: seconds(ticks) }))
}

/// Drops the buffers of `pad` outside `(from, to)`, seconds from its first buffer.
fn trim(pad: &gst::Pad, (from, to): (f64, f64)) {
    let first = std::sync::Mutex::new(None::<gst::ClockTime>);
    pad.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        let Some(gst::PadProbeData::Buffer(b)) = &info.data else { return gst::PadProbeReturn::Ok };
        let Some(pts) = b.pts() else { return gst::PadProbeReturn::Ok };
        let zero = *first.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(pts);
        let at = pts.saturating_sub(zero).nseconds() as f64 / 1e9;
        let end = at + b.duration().map_or(0.0, |d| d.nseconds() as f64 / 1e9);
        // A frame that straddles an end is kept.
        if end <= from + 1e-3 || at >= to - 1e-3 {
            gst::PadProbeReturn::Drop
        } else {
            gst::PadProbeReturn::Ok
        }
    });
}

/// Remuxes the fragmented `video` (its video track) and `audio` (its audio track) into a
/// progressive MP4 at `out`, `moov` first. Beside a video, the audio is kept to the video's time
/// (a clip's audio segments may reach past its video at either end). Blocking.
fn remux(video: Option<&Fragmented>, audio: Option<&Fragmented>, out: &Path) -> Result<(), String> {
    crate::media::gst::init()?;
    let make =
        |factory: &str| gst::ElementFactory::make(factory).build().map_err(|e| format!("{factory}: {e}"));
    let pipeline = gst::Pipeline::new();
    let mux = make("mp4mux")?;
    mux.set_property("faststart", true);
    // The media waits here (not in the system's temporary folder) until `moov` is written.
    mux.set_property("faststart-file", out.with_extension("mdat").to_string_lossy().to_string());
    let sink = make("filesink")?;
    sink.set_property("location", out.to_string_lossy().to_string());
    pipeline.add_many([&mux, &sink]).map_err(|e| e.to_string())?;
    mux.link(&sink).map_err(|e| e.to_string())?;
    // The audio's span on its own timeline that the video covers.
    let keep = video.zip(audio).map(|(v, a)| (v.start - a.start, v.start + v.length - a.start));
    for (file, kind) in [(video, "video"), (audio, "audio")] {
        let Some(file) = file else { continue };
        let src = make("filesrc")?;
        src.set_property("location", file.path.to_string_lossy().to_string());
        let demux = make("qtdemux")?;
        let queue = make("queue")?;
        pipeline.add_many([&src, &demux, &queue]).map_err(|e| e.to_string())?;
        src.link(&demux).map_err(|e| e.to_string())?;
        let into = mux.request_pad_simple(&format!("{kind}_%u")).ok_or("mp4mux refused a pad")?;
        queue.static_pad("src").ok_or("no queue pad")?.link(&into).map_err(|e| e.to_string())?;
        let queue_in = queue.static_pad("sink").ok_or("no queue pad")?;
        // The track of `kind` goes to the muxer; any other (a rendition with its own audio) is
        // dropped.
        demux.connect_pad_added(move |_, pad| {
            if pad.name().starts_with(kind) && !queue_in.is_linked() {
                if let (Some(span), "audio") = (keep, kind) {
                    trim(pad, span);
                }
                let _ = pad.link(&queue_in);
            } else {
                pad.add_probe(gst::PadProbeType::BUFFER, |_, _| gst::PadProbeReturn::Drop);
            }
        });
    }
    let pipeline = crate::media::gst::StopOnDrop(pipeline);
    pipeline.0.set_state(gst::State::Playing).map_err(|e| format!("remux: {e}"))?;
    let bus = pipeline.0.bus().ok_or("no bus")?;
    let deadline = gst::ClockTime::from_nseconds(REMUX_DEADLINE.as_nanos() as u64);
    match bus.timed_pop_filtered(deadline, &[gst::MessageType::Eos, gst::MessageType::Error]) {
        Some(m) => match m.view() {
            gst::MessageView::Eos(_) => Ok(()),
            gst::MessageView::Error(e) => Err(format!("remux: {}", e.error())),
            _ => Err("remux: unexpected message".into()),
        },
        None => Err(format!("remux: not done within {REMUX_DEADLINE:?}")),
    }
}
