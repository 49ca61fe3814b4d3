//! Clips (CONTRACT: Clips, downloads, thumbnails): a clip worker per process (beside the
//! transcode workers, on the same durable queue, jobs of kind `clip`) cuts a VOD out of another,
//! uploaded or recorded, or out of a live stream's DVR window (a job only the node holding the
//! push takes), without decoding or encoding a frame. Each rendition keeps the source's
//! chunks (CMAF parts) from the last one that starts with a keyframe at or before the start
//! through the one that holds the end ([`crate::domain::clip::cut`]); the source's segments stay
//! segments, the first and last shortened. What the clip stores is at most its own bytes. The
//! master playlist is the source's (the same renditions), the thumbnail the first picture.
//! A clip of encrypted media (a `drmEnabled` VOD, a live stream with a content key) is
//! encrypted again under the clip's own key.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};

use super::worker::{
    complete, fail, lease_loop, put_patiently, remove_outputs, still_ours, Ending, JobError, Transcoder,
};
use crate::domain::clip::{cut, Chunk, ClipOf};
use crate::domain::content_key::ContentKey;
use crate::domain::time::now_ms;
use crate::domain::vod::{Bitrate, ProducedRendition, VodMove, VodStatus};
use crate::media::cmaf;
use crate::media::hls::master::read_variants;
use crate::media::hls::vod::{self as hls, Listed};
use crate::media::live::channel::Channel;
use crate::media::still::{picture, Ask};
use crate::services::policy::Resource;
use crate::services::vods::VodError;
use crate::storage::vod_prefix;
use crate::store::vods::{JobKind, Lease, LeasedJob};
use crate::store::Db;

/// A clip is copies: seconds for a 10-minute one. A lease that runs out lets another take it.
const LEASE: Duration = Duration::from_secs(300);
const MAX_ATTEMPTS: i64 = 3;
/// How long one read of the source may take.
const READ_DEADLINE: Duration = Duration::from_secs(30);

/// Starts the clip worker.
pub fn spawn(app: &Arc<Transcoder>) {
    let run = |a: Arc<Transcoder>, job| async move { run(&a, job).await };
    tokio::spawn(lease_loop(Arc::downgrade(app), JobKind::Clip, LEASE, run));
}

async fn run(app: &Transcoder, job: LeasedJob) {
    let lease = Lease { owner: app.node_id.clone(), attempt: job.attempts };
    let id = job.vod_id.clone();
    let started = std::time::Instant::now();
    let ending = match body(app, &job, &lease).await {
        Ok(e) => e,
        Err(e) => Ending::Retry(e.to_string()),
    };
    let outcome = match ending {
        Ending::Done => {
            tracing::info!(vod = %id, seconds = started.elapsed().as_secs_f64(), "clip complete");
            Ok(())
        }
        Ending::Cancelled => match app.db.job_exists(&id).await {
            Ok(false) => {
                app.storage.delete_prefix(&vod_prefix(&id), &[]).await.map(|_| ()).map_err(JobError::from)
            }
            Ok(true) => Ok(()),
            Err(e) => Err(e.into()),
        },
        Ending::Failed(error) => {
            if still_ours(app, &lease, &id).await {
                remove_outputs(app, &id).await;
            }
            fail(app, &lease, &id, error).await
        }
        Ending::Retry(error) if job.attempts >= MAX_ATTEMPTS => {
            if still_ours(app, &lease, &id).await {
                remove_outputs(app, &id).await;
            }
            fail(app, &lease, &id, format!("cutting the clip failed {MAX_ATTEMPTS} times; last: {error}"))
                .await
        }
        Ending::Retry(error) | Ending::Wait(error) => {
            tracing::warn!(vod = %id, %error, attempt = job.attempts, "clip attempt failed; will retry");
            app.db.retry_job_at(&lease, &id, now_ms() + 5_000, true).await.map_err(Into::into)
        }
        Ending::Returned => app.db.return_job(&lease, &id).await.map_err(Into::into),
    };
    if let Err(e) = outcome {
        tracing::warn!(vod = %id, error = %e, "recording the end of a clip job");
    }
}

async fn body(app: &Transcoder, job: &LeasedJob, lease: &Lease) -> Result<Ending, JobError> {
    let id = &job.vod_id;
    let mut tx = app.db.begin_write().await?;
    let Some(mut row) = Db::vod_in(&mut tx, &job.project_id, id).await? else {
        Db::delete_job(&mut tx, id).await?;
        tx.commit().await?;
        return Ok(Ending::Cancelled);
    };
    let Some(clip) = row.clip_of.as_deref().and_then(|j| serde_json::from_str::<ClipOf>(j).ok()) else {
        drop(tx);
        return Ok(Ending::Failed("the clip's source is not recorded".into()));
    };
    match app.vods.apply(tx, &mut row, VodMove::Started).await {
        Ok(()) => {}
        Err(VodError::Refused(_)) => {
            let mut tx = app.db.begin_write().await?;
            Db::delete_job(&mut tx, id).await?;
            tx.commit().await?;
            return Ok(Ending::Cancelled);
        }
        Err(e) => return Err(e.into()),
    }
    let clip_key = match row.drm_enabled == 1 {
        true => app.policies.content_key(&Resource::Vod(id), true).await?,
        false => None,
    };
    let (source, range, renditions) = match &clip {
        ClipOf::Vod(c) => {
            let Some(source) = app.db.vod(&job.project_id, &c.vod_id).await? else {
                return Ok(Ending::Failed("the source VOD is gone".into()));
            };
            if source.status() != VodStatus::Complete || source.archived_at.is_some() {
                return Ok(Ending::Failed("the source VOD is no longer playable".into()));
            }
            let key = match source.drm_enabled == 1 {
                true => app.policies.content_key(&Resource::Vod(&source.id), false).await?,
                false => None,
            };
            let from = Source::Stored { prefix: vod_prefix(&source.id), key };
            (from, (c.start_sec, c.end_sec), Some(source.renditions()))
        }
        ClipOf::Stream(c) => {
            let (Some(channel), Some((start, end))) = (app.channels.get(&c.stream_id), c.instants()) else {
                return Ok(Ending::Failed("the live stream's DVR window is gone".into()));
            };
            let seconds = (end - start).num_milliseconds() as f64 / 1000.0;
            (Source::Live { channel, zero: start }, (0.0, seconds), None)
        }
    };
    let Some(master) = source.master(app).await? else {
        return Ok(Ending::Failed("the source has no master playlist".into()));
    };
    let mut produced = Vec::new();
    let mut thumbnail = None;
    let (mut duration, mut bytes): (f64, u64) = (0.0, 0);
    let mut nearest: Option<f64> = None;
    for (uri, size) in rendition_uris(&master) {
        let Some(name) = uri.strip_suffix("/index.m3u8") else { continue };
        let cut = match cut_rendition(app, (&source, name), (id, range), clip_key).await? {
            Ok(cut) => cut,
            Err(problem) => return Ok(Ending::Failed(problem)),
        };
        bytes += cut.bytes;
        // The video rendition cut nearest the start asked for (a rung at its parts, rather than
        // `source` at the publisher's keyframe before) gives the length and the thumbnail; the
        // audio's chunks (whole segments of a transcode) may reach further at either end.
        let Some((width, height)) = size else { continue };
        let (peak, average) = cut.bitrates;
        let known = renditions.as_ref().and_then(|r| r.iter().find(|r| r.name == name));
        produced.push(match known {
            Some(r) => ProducedRendition { peak_bandwidth: peak, average_bandwidth: average, ..r.clone() },
            None => ProducedRendition {
                name: name.to_string(),
                width,
                height,
                video_bitrate: Bitrate(((average / 1000) as u32).clamp(Bitrate::MIN_KBPS, Bitrate::MAX_KBPS))
                    .name(),
                average_bandwidth: average,
                peak_bandwidth: peak,
                uri: uri.to_string(),
            },
        });
        if nearest.is_none_or(|at| cut.start > at + 0.001) {
            (nearest, duration, thumbnail) = (Some(cut.start), cut.duration, cut.first);
        }
    }
    let Some((init, first)) = thumbnail else {
        return Ok(Ending::Failed("the range holds no picture".into()));
    };
    let jpeg = tokio::task::spawn_blocking(move || picture(&init, &first, Ask::FIRST))
        .await
        .map_err(|e| JobError::Unstored(e.to_string()))?;
    let jpeg = match jpeg {
        Ok(j) => j,
        Err(e) => return Ok(Ending::Failed(format!("no thumbnail: {e}"))),
    };
    let to = vod_prefix(id);
    let stop = app.vods.stopping();
    put_patiently(app, id, format!("{to}/thumb.jpg"), jpeg.into(), stop.clone()).await?;
    put_patiently(app, id, format!("{to}/master.m3u8"), master.into(), stop).await?;
    let mut tx = app.db.begin_write().await?;
    if let Some(mut row) = Db::vod_by_id_in(&mut tx, id).await? {
        row.source_size = Some(bytes as i64);
        Db::update_vod(&mut tx, &row).await?;
    }
    tx.commit().await?;
    complete(app, lease, id, produced, Some(duration)).await
}

/// Every media playlist a master lists: the variants with their picture size, and the audio
/// rendition.
pub(super) fn rendition_uris(master: &str) -> Vec<(&str, Option<(u32, u32)>)> {
    let mut out: Vec<_> = read_variants(master).into_iter().map(|(uri, w, h)| (uri, Some((w, h)))).collect();
    for line in master.lines().filter(|l| l.starts_with("#EXT-X-MEDIA:")) {
        if let Some(uri) = line.split("URI=\"").nth(1).and_then(|r| r.split('"').next()) {
            out.push((uri, None));
        }
    }
    out
}

/// Where a clip's media comes from.
enum Source {
    /// A VOD in storage: its folder, and its key when encrypted.
    Stored { prefix: String, key: Option<ContentKey> },
    /// A live stream's DVR window on this node; its dates become seconds from `zero`.
    Live { channel: Arc<Channel>, zero: DateTime<Utc> },
}

/// A segment of the source on the clip's timeline.
struct SourceSegment {
    init: String,
    uri: String,
    /// Its sequence number (an encrypted segment's IV).
    msn: u64,
    start: f64,
    duration: f64,
    gap: bool,
}

impl Source {
    /// The master playlist, its media playlists named `<rendition>/index.m3u8`.
    async fn master(&self, app: &Transcoder) -> Result<Option<String>, JobError> {
        match self {
            Source::Stored { prefix, .. } => {
                let master = read(app, &format!("{prefix}/master.m3u8")).await?;
                Ok(Some(String::from_utf8_lossy(&master).into_owned()))
            }
            Source::Live { channel, .. } => {
                Ok(channel.master().map(|m| m.replace(&format!("{}/", channel.session), "")))
            }
        }
    }

    /// Rendition `name`'s segments; `Err` names what does not read.
    async fn segments(
        &self,
        app: &Transcoder,
        name: &str,
    ) -> Result<Result<Vec<SourceSegment>, String>, JobError> {
        match self {
            Source::Stored { prefix, .. } => {
                let text = read(app, &format!("{prefix}/{name}/index.m3u8")).await?;
                let text = String::from_utf8_lossy(&text);
                let Some(listed) = hls::read(&text) else {
                    return Ok(Err(format!("{name}: the playlist does not read")));
                };
                let mut start = 0.0;
                let mut out = Vec::new();
                for (i, l) in listed.into_iter().enumerate() {
                    let (init, uri, gap) = (l.init.to_string(), l.uri.to_string(), l.gap);
                    out.push(SourceSegment { init, uri, msn: i as u64, start, duration: l.duration, gap });
                    start += l.duration;
                }
                Ok(Ok(out))
            }
            Source::Live { channel, zero } => {
                let all = channel.closed_segments();
                let Some((_, _, segments)) = all.into_iter().find(|(n, _, _)| n == name) else {
                    return Ok(Err(format!("{name}: the rendition is gone")));
                };
                Ok(Ok(segments
                    .into_iter()
                    .filter_map(|s| {
                        let start = (s.program_date_time? - *zero).num_microseconds()? as f64 / 1e6;
                        let (init, uri) = (s.init_uri, s.uri);
                        Some(SourceSegment { init, uri, msn: s.msn, start, duration: s.duration, gap: s.gap })
                    })
                    .collect()))
            }
        }
    }

    /// File `file` of rendition `name` (segment `msn`, or an initialization section), clear.
    async fn get(
        &self,
        app: &Transcoder,
        name: &str,
        file: &str,
        msn: Option<u64>,
    ) -> Result<Bytes, JobError> {
        match self {
            Source::Stored { prefix, key } => {
                let data = read(app, &format!("{prefix}/{name}/{file}")).await?;
                match (key, msn) {
                    (Some(key), Some(msn)) => key
                        .decrypt(msn, &data)
                        .map(Bytes::from)
                        .ok_or_else(|| JobError::Unstored(format!("{name}/{file} does not decrypt"))),
                    _ => Ok(data),
                }
            }
            Source::Live { channel, .. } => channel
                .clear_file(name, file, msn)
                .await
                .ok_or_else(|| JobError::Unstored(format!("{name}/{file} left the DVR window"))),
        }
    }
}

pub(super) async fn read(app: &Transcoder, key: &str) -> Result<Bytes, JobError> {
    match tokio::time::timeout(READ_DEADLINE, app.storage.get(key, None)).await {
        Ok(Ok(Some(b))) => Ok(b),
        Ok(Ok(None)) => Err(JobError::Unstored(format!("{key} is not in storage"))),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(JobError::Unstored(format!("reading {key}: no answer within {READ_DEADLINE:?}"))),
    }
}

/// What one rendition's cut gave.
struct Cut {
    /// Where on the source's timeline it starts.
    start: f64,
    duration: f64,
    /// Media bytes stored.
    bytes: u64,
    /// (peak, average) bits per second.
    bitrates: (u64, u64),
    /// The initialization section and first segment, clear (a video rendition's make the
    /// thumbnail).
    first: Option<(Bytes, Vec<u8>)>,
}

/// Cuts rendition `name` of `source` for the clip `id` of `range` (seconds on the source's
/// timeline): its chunks in the range stored as the clip's segments, its initialization
/// sections, its playlist. An error the source's media explains is `Ok(Err(problem))`.
async fn cut_rendition(
    app: &Transcoder,
    (source, name): (&Source, &str),
    (id, (from, to)): (&str, (f64, f64)),
    clip_key: Option<ContentKey>,
) -> Result<Result<Cut, String>, JobError> {
    let listed = match source.segments(app, name).await? {
        Ok(listed) => listed,
        Err(problem) => return Ok(Err(problem)),
    };
    // The segments the range touches, with their chunks.
    let mut chunks: Vec<(usize, std::ops::Range<usize>, Chunk)> = Vec::new();
    let mut segments: Vec<(usize, Option<Bytes>)> = Vec::new();
    let mut inits: std::collections::HashMap<&str, Bytes> = Default::default();
    for (index, s) in listed.iter().enumerate() {
        if s.start + s.duration <= from || s.start >= to {
            continue;
        }
        if s.gap {
            segments.push((index, None));
            continue;
        }
        if !inits.contains_key(s.init.as_str()) {
            inits.insert(&s.init, source.get(app, name, &s.init, None).await?);
        }
        let Some(scale) = inits.get(s.init.as_str()).and_then(|i| cmaf::timescale(i)) else {
            return Ok(Err(format!("{name}/{}: no timescale", s.init)));
        };
        let data = source.get(app, name, &s.uri, Some(s.msn)).await?;
        let Some(ranges) = cmaf::chunks(&data) else { return Ok(Err(format!("{name}/{}: not CMAF", s.uri))) };
        let mut at = s.start;
        for range in ranges {
            let bytes = &data[range.clone()];
            let length = cmaf::duration_ticks(bytes).map_or(0.0, |t| t as f64 / f64::from(scale));
            let independent = cmaf::starts_with_sync_sample(bytes).unwrap_or(false);
            chunks.push((segments.len(), range, Chunk { start: at, duration: length, independent }));
            at += length;
        }
        segments.push((index, Some(data)));
    }
    let plain: Vec<Chunk> = chunks.iter().map(|(_, _, c)| *c).collect();
    let Some(kept) = cut(&plain, from, to) else {
        return Ok(Err(format!("{name}: no keyframe in the range")));
    };
    // The kept chunks, segment by segment (a gap inside the range stays a gap).
    let to = vod_prefix(id);
    let stop = app.vods.stopping();
    let mut out: Vec<(String, String, f64, bool, u64)> = Vec::new();
    let mut first = None;
    let first_segment = chunks[kept.start].0;
    let last_segment = chunks[kept.end - 1].0;
    for (position, (index, data)) in segments.iter().enumerate() {
        if position < first_segment || position > last_segment {
            continue;
        }
        let init = listed[*index].init.clone();
        let Some(data) = data else {
            out.push((init, format!("s{}.m4s", out.len()), listed[*index].duration, true, 0));
            continue;
        };
        let mine: Vec<&(usize, std::ops::Range<usize>, Chunk)> =
            chunks[kept.clone()].iter().filter(|(p, _, _)| *p == position).collect();
        let (Some(a), Some(b)) = (mine.first(), mine.last()) else { continue };
        let bytes = &data[a.1.start..b.1.end];
        let length: f64 = mine.iter().map(|(_, _, c)| c.duration).sum();
        let n = out.len();
        if first.is_none() {
            if let Some(i) = inits.get(init.as_str()) {
                first = Some((i.clone(), bytes.to_vec()));
            }
        }
        let stored = match &clip_key {
            Some(key) => key.encrypt(n as u64, bytes),
            None => bytes.to_vec(),
        };
        let uri = format!("s{n}.m4s");
        put_patiently(app, id, format!("{to}/{name}/{uri}"), stored.into(), stop.clone()).await?;
        out.push((init, uri, length, false, bytes.len() as u64));
    }
    for (init, bytes) in &inits {
        if out.iter().any(|(i, ..)| i == init) {
            put_patiently(app, id, format!("{to}/{name}/{init}"), bytes.clone(), stop.clone()).await?;
        }
    }
    let listed: Vec<Listed> = out
        .iter()
        .map(|(init, uri, d, gap, _)| Listed { init, uri, duration: *d, gap: *gap, date: None })
        .collect();
    let key_uri = clip_key.map(|_| hls::KEY_URI);
    let playlist = hls::media_playlist(listed.first().map(|l| l.init), &listed, key_uri);
    put_patiently(app, id, format!("{to}/{name}/index.m3u8"), playlist.into(), stop).await?;
    let bitrates = hls::bitrates_of(out.iter().filter(|o| !o.3).map(|(_, _, d, _, b)| (*d, *b)));
    let duration = out.iter().map(|(_, _, d, _, _)| d).sum();
    let bytes = out.iter().map(|o| o.4).sum();
    let start = plain[kept.start].start;
    Ok(Ok(Cut { start, duration, bytes, bitrates, first }))
}
