//! The live edge of one stream, in memory: the renditions' playlists, initialization sections,
//! parts and segments, fed by the packaging pipeline and read by the origin. Plain data behind
//! one short-held lock; every change bumps a `watch` version so blocked requests wake the moment
//! a part exists (RFC 8216bis 6.2.5.2) without polling. A reconnect within
//! [`RECONNECT_GRACE`] continues the same playlists after an `EXT-X-DISCONTINUITY`; otherwise the
//! playlists end (`EXT-X-ENDLIST`).
//!
//! The rule: no IO while holding `state` or the map of [`Channels`]. Requests (and the media
//! threads that feed) take those locks, so a disk that stalls must stall neither: DVR segments
//! go to disk on the channel's writer thread ([`super::dvr`]) and stay in memory until they are
//! there; a channel's folder is removed by that writer once the channel has left the map, never
//! in a `Drop`; and the map lock is released before a channel that left it is retired.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::dvr::{DiskSink, NotQueued, SegmentSink, Write, Writer};
use super::ladder::{self, AudioRendition, Variant};
use super::playlist::{Config, MediaPlaylist, Part, RenditionReport, Wait, Window};
use crate::domain::content_key::ContentKey;

/// How long after a push ends a new push continues the same playlists.
pub const RECONNECT_GRACE: Duration = Duration::from_secs(10);
/// Segments a playlist keeps without DVR: long enough that delta updates (CAN-SKIP-UNTIL = six
/// target durations) have something to skip.
pub const LIVE_WINDOW_SEGMENTS: usize = 8;
/// How long ended playlists stay playable (longer with DVR: its window).
pub const ENDED_KEEP: Duration = Duration::from_secs(600);
/// Segments kept in memory when DVR keeps the older ones on disk.
const MEMORY_SEGMENTS: usize = 10;

/// What a rendition carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Video { width: u32, height: u32, kbps: Option<u32>, frame_rate: Option<f64> },
    Audio { channels: u32 },
}

/// Output of a rendition's muxer.
#[derive(Debug, Clone)]
pub enum Chunk {
    /// The initialization section (`ftyp` + `moov`).
    Init(Bytes),
    /// A CMAF chunk (`moof` + `mdat`): one part.
    Part {
        /// The first part of a segment (it starts with a keyframe).
        starts_segment: bool,
        independent: bool,
        duration: f64,
        /// Wall-clock time of its first sample.
        pdt: Option<DateTime<Utc>>,
        data: Bytes,
    },
}

/// Durations and window of a channel.
#[derive(Debug, Clone)]
pub struct ChannelConfig {
    pub part: f64,
    pub segment: f64,
    /// DVR: seconds kept, and the folder segments are written to.
    pub dvr: Option<(f64, PathBuf)>,
    /// `drmEnabled`: parts and segments are encrypted with this key (AES-128, IV = the
    /// segment's media sequence number); the init sections stay clear.
    pub key: Option<ContentKey>,
}

/// Where a media playlist (`/live/<id>/<session>/<rendition>/index.m3u8`) finds the stream's key.
pub const KEY_URI: &str = "../../key";

/// A rendition's `EXT-X-TARGETDURATION` and `PART-TARGET`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub target_duration: u32,
    pub part_target: f64,
}

impl ChannelConfig {
    fn playlist_config(&self, timing: Timing) -> Config {
        Config {
            target_duration: timing.target_duration,
            part_target: timing.part_target,
            window: match &self.dvr {
                Some((seconds, _)) => Window::Seconds(*seconds),
                None => Window::Segments(LIVE_WINDOW_SEGMENTS),
            },
            key_uri: self.key.map(|_| KEY_URI.to_string()),
        }
    }
}

struct Rendition {
    kind: Kind,
    codec: Option<String>,
    playlist: MediaPlaylist,
    inits: HashMap<u32, Bytes>,
    /// Recent parts by number (`p<n>.m4s`); the oldest are dropped once no playlist lists them.
    parts: VecDeque<(u64, Bytes)>,
    next_part: u64,
    /// Chunks of the open segment.
    open: Vec<Bytes>,
    segments: BTreeMap<u64, Bytes>,
    /// Segments queued for the DVR writer and not yet on disk: they stay in `segments` meanwhile.
    pending: BTreeSet<u64>,
    /// Highest bits per second of a complete segment.
    peak_bps: f64,
    /// The rendition's media lags the wall clock by more than two segments (said once).
    behind: bool,
}

impl Rendition {
    fn segment_bytes(&self) -> Bytes {
        let mut all = Vec::with_capacity(self.open.iter().map(Bytes::len).sum());
        for c in &self.open {
            all.extend_from_slice(c);
        }
        Bytes::from(all)
    }
}

struct State {
    renditions: BTreeMap<String, Rendition>,
    /// The push generation: bumped by each push; chunks of an older generation are ignored.
    generation: u32,
    /// A push feeds the channel now.
    live: bool,
    ended: bool,
    /// When the playlists ended.
    ended_at: Option<std::time::Instant>,
    /// The DVR writer; `None` without DVR and once the channel is retired.
    writer: Option<Writer>,
}

/// Why a file or playlist could not be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    NotFound,
    /// A blocking request too far ahead of the live edge (400).
    TooFarAhead,
}

pub struct Channel {
    /// Names this channel in playback URLs, so a later push's parts never reuse a cached URL.
    pub session: String,
    config: ChannelConfig,
    state: Mutex<State>,
    version: watch::Sender<u64>,
}

/// What a media playlist request asks for.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlaylistQuery {
    pub msn: Option<u64>,
    pub part: Option<u64>,
    pub skip: bool,
}

impl Channel {
    pub fn new(config: ChannelConfig) -> Arc<Channel> {
        Channel::with_sink(config, Arc::new(DiskSink))
    }

    /// A channel whose DVR segments go to `sink` (tests make the disk slow).
    pub fn with_sink(config: ChannelConfig, sink: Arc<dyn SegmentSink>) -> Arc<Channel> {
        Arc::new_cyclic(|me: &std::sync::Weak<Channel>| {
            let writer = config.dvr.as_ref().and_then(|(_, dir)| {
                let me = me.clone();
                Writer::start(dir.clone(), sink, move |rendition, msn| {
                    if let Some(c) = me.upgrade() {
                        c.written(rendition, msn);
                    }
                })
            });
            Channel {
                session: crate::domain::random_token(8),
                config,
                state: Mutex::new(State {
                    renditions: BTreeMap::new(),
                    generation: 0,
                    live: true,
                    ended: false,
                    ended_at: None,
                    writer,
                }),
                version: watch::channel(0).0,
            }
        })
    }

    pub fn config(&self) -> &ChannelConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// The current push generation.
    pub fn generation(&self) -> u32 {
        self.lock().generation
    }

    /// A new push continues this channel: every playlist gets a discontinuity and the next
    /// generation's initialization section. Returns the new generation.
    pub fn reconnect(&self) -> u32 {
        let mut s = self.lock();
        s.generation += 1;
        s.live = true;
        let generation = s.generation;
        let State { renditions, writer, .. } = &mut *s;
        for (name, r) in renditions.iter_mut() {
            if !r.playlist.open_parts().is_empty() {
                self.close_segment(name, r, writer.as_ref());
            }
            r.playlist.discontinuity(format!("init{generation}.mp4"), |msn| format!("s{msn}.m4s"));
            r.playlist.set_preload_hint(Some(format!("p{}.m4s", r.next_part)));
        }
        drop(s);
        self.changed();
        generation
    }

    /// Declares a rendition of generation `generation` (its sizes and bitrate for the master
    /// playlist). A rendition the channel had before continues.
    pub fn add_rendition(&self, generation: u32, name: &str, kind: Kind, timing: Timing) {
        let mut s = self.lock();
        if s.generation != generation || s.ended {
            return;
        }
        let config = self.config.playlist_config(timing);
        let r = s.renditions.entry(name.to_string()).or_insert_with(|| Rendition {
            kind: kind.clone(),
            codec: None,
            playlist: MediaPlaylist::new(config, format!("init{generation}.mp4")),
            inits: HashMap::new(),
            parts: VecDeque::new(),
            next_part: 0,
            open: Vec::new(),
            segments: BTreeMap::new(),
            pending: BTreeSet::new(),
            peak_bps: 0.0,
            behind: false,
        });
        r.kind = kind;
        if r.playlist.last_part().is_none() {
            r.playlist.set_preload_hint(Some(format!("p{}.m4s", r.next_part)));
        }
        drop(s);
        self.changed();
    }

    /// Renditions of an earlier push that this push does not feed end now.
    pub fn retire_others(&self, generation: u32, keep: &[String]) {
        let mut s = self.lock();
        if s.generation != generation {
            return;
        }
        for (name, r) in s.renditions.iter_mut() {
            if !keep.contains(name) && !r.playlist.is_ended() {
                r.playlist.end();
            }
        }
        drop(s);
        self.changed();
    }

    /// Records the codec string (`avc1.…`, `mp4a.…`) of a rendition.
    pub fn set_codec(&self, generation: u32, name: &str, codec: String) {
        let mut s = self.lock();
        if s.generation != generation {
            return;
        }
        if let Some(r) = s.renditions.get_mut(name) {
            r.codec = Some(codec);
        }
        drop(s);
        self.changed();
    }

    /// Takes a muxer's output. Chunks of an older generation are ignored.
    pub fn feed(&self, generation: u32, name: &str, chunk: Chunk) {
        let mut s = self.lock();
        if s.generation != generation || s.ended {
            return;
        }
        let State { renditions, writer, .. } = &mut *s;
        let Some(r) = renditions.get_mut(name) else { return };
        match chunk {
            Chunk::Init(data) => {
                r.inits.insert(generation, data);
            }
            Chunk::Part { starts_segment, independent, duration, pdt, data } => {
                if starts_segment && !r.playlist.open_parts().is_empty() {
                    self.close_segment(name, r, writer.as_ref());
                }
                let n = r.next_part;
                r.next_part += 1;
                // Each part on its own, under the IV of the segment it belongs to.
                let served = match &self.config.key {
                    Some(key) => Bytes::from(key.encrypt(r.playlist.next_msn(), &data)),
                    None => data.clone(),
                };
                r.open.push(data);
                r.parts.push_back((n, served));
                r.playlist.push_part(Part { duration, independent, uri: format!("p{n}.m4s") }, pdt);
                r.playlist.set_preload_hint(Some(format!("p{}.m4s", n + 1)));
                // Keep the parts a playlist can list (three target durations) and some more.
                let keep = ((4.0 * self.config.segment) / self.config.part).ceil() as usize + 8;
                while r.parts.len() > keep {
                    r.parts.pop_front();
                }
            }
        }
        drop(s);
        self.changed();
    }

    /// Closes the open segment of rendition `name` and queues it for the DVR writer.
    fn close_segment(&self, name: &str, r: &mut Rendition, writer: Option<&Writer>) {
        let bytes = r.segment_bytes();
        r.open.clear();
        let duration: f64 = r.playlist.open_parts().iter().map(|p| p.duration).sum();
        if duration > 0.0 {
            r.peak_bps = r.peak_bps.max(bytes.len() as f64 * 8.0 / duration);
        }
        let Some(msn) = r.playlist.close_segment(format!("s{}.m4s", r.playlist.next_msn())) else { return };
        let bytes = match &self.config.key {
            Some(key) => Bytes::from(key.encrypt(msn, &bytes)),
            None => bytes,
        };
        // A rendition whose encoder cannot keep up falls behind the clock: say so once.
        if let Some(seg) = r.playlist.segments().next_back().filter(|s| s.msn == msn) {
            if let Some(pdt) = seg.program_date_time {
                let end = pdt + chrono::Duration::milliseconds((seg.duration * 1000.0) as i64);
                let lag = (Utc::now() - end).num_milliseconds() as f64 / 1000.0;
                let behind = lag > 2.0 * self.config.segment;
                if behind && !r.behind {
                    tracing::warn!(rendition = %name, lag_s = lag, "live rendition is falling behind real time (encoder overloaded?)");
                } else if !behind && r.behind {
                    tracing::info!(rendition = %name, lag_s = lag, "live rendition caught up");
                }
                r.behind = behind;
            }
        }
        if let Some(writer) = writer {
            // Never waits: a full queue means the disk is behind (see `super::dvr`).
            match writer.try_queue(Write { rendition: name.to_string(), msn, data: bytes.clone() }) {
                Ok(()) => {
                    r.pending.insert(msn);
                }
                Err(NotQueued::Full) => {
                    tracing::warn!(rendition = %name, msn, "DVR: the disk is behind; a segment is not kept")
                }
                Err(NotQueued::Closed) => tracing::warn!(rendition = %name, msn, "DVR: the writer is gone"),
            }
        }
        r.segments.insert(msn, bytes);
        self.evict(r);
    }

    /// Drops the segments memory need not keep: those the playlist no longer lists, or with DVR
    /// those older than [`MEMORY_SEGMENTS`] that are on disk (or never will be).
    fn evict(&self, r: &mut Rendition) {
        let keep_from = match self.config.dvr {
            Some(_) => r.playlist.next_msn().saturating_sub(MEMORY_SEGMENTS as u64),
            None => r.playlist.media_sequence(),
        };
        let pending = &r.pending;
        r.segments.retain(|msn, _| *msn >= keep_from || pending.contains(msn));
    }

    /// The writer is done with segment `msn` of `rendition`: it is on disk, or could not be
    /// written (the writer said why) and leaves memory with the window all the same.
    fn written(&self, rendition: &str, msn: u64) {
        let mut s = self.lock();
        if let Some(r) = s.renditions.get_mut(rendition) {
            r.pending.remove(&msn);
            self.evict(r);
        }
    }

    /// The channel left its map: it writes no more, and its writer removes the DVR folder once
    /// the queued segments are done. Called with no lock held.
    fn retire(&self) {
        let writer = self.lock().writer.take();
        drop(writer);
    }

    /// Whether segment `msn` of `rendition` is held in memory.
    #[cfg(test)]
    fn in_memory(&self, rendition: &str, msn: u64) -> bool {
        self.lock().renditions.get(rendition).is_some_and(|r| r.segments.contains_key(&msn))
    }

    /// Segments of `rendition` in memory, and how many of them wait for the writer.
    #[cfg(test)]
    fn held(&self, rendition: &str) -> (usize, usize) {
        self.lock().renditions.get(rendition).map_or((0, 0), |r| (r.segments.len(), r.pending.len()))
    }

    /// The push ended: the open segments close with the parts they have. The playlists end
    /// unless [`Channel::reconnect`] comes within [`RECONNECT_GRACE`] (see [`Channel::finish`]).
    pub fn push_ended(&self, generation: u32) {
        let mut s = self.lock();
        if s.generation != generation {
            return;
        }
        s.live = false;
        let State { renditions, writer, .. } = &mut *s;
        for (name, r) in renditions.iter_mut() {
            if !r.playlist.open_parts().is_empty() {
                self.close_segment(name, r, writer.as_ref());
            }
        }
        drop(s);
        self.changed();
    }

    /// Ends the playlists (`EXT-X-ENDLIST`) if no push continued generation `generation`.
    pub fn finish(&self, generation: u32) -> bool {
        let mut s = self.lock();
        if s.generation != generation || s.live || s.ended {
            return false;
        }
        s.ended = true;
        s.ended_at = Some(std::time::Instant::now());
        for r in s.renditions.values_mut() {
            r.playlist.end();
        }
        drop(s);
        self.changed();
        true
    }

    pub fn is_live(&self) -> bool {
        self.lock().live
    }

    /// The master playlist, once every rendition has published media and knows its codec.
    pub fn master(&self) -> Option<String> {
        let s = self.lock();
        let mut variants = Vec::new();
        let mut audio = None;
        for (name, r) in &s.renditions {
            // A rendition an earlier push had and this one does not feed is left out.
            if r.playlist.is_ended() && !s.ended {
                continue;
            }
            r.playlist.last_part()?;
            let codec = r.codec.clone()?;
            match r.kind {
                Kind::Audio { channels } => {
                    let uri = format!("{}/{name}/index.m3u8", self.session);
                    audio = Some(AudioRendition { uri, codec, channels });
                }
                Kind::Video { width, height, kbps, frame_rate } => {
                    let configured = kbps.map_or(0.0, |k| f64::from(k) * 1000.0 * 1.1);
                    let bandwidth = configured.max(r.peak_bps).max(current_bps(r)).round() as u64;
                    variants.push(Variant {
                        uri: format!("{}/{name}/index.m3u8", self.session),
                        bandwidth,
                        width,
                        height,
                        codec,
                        frame_rate,
                    });
                }
            }
        }
        // Audio caps come with the first packets; until a segment is complete, a master
        // without audio may just be early.
        let segment_done = s.renditions.values().any(|r| r.playlist.segments().next().is_some());
        if variants.is_empty() || audio.is_none() && !segment_done {
            return None;
        }
        let audio_bps = s
            .renditions
            .get(ladder::AUDIO)
            .map(|r| r.peak_bps.max(current_bps(r)))
            .filter(|_| audio.is_some())
            .map_or(0, |bps| (bps.max(ladder::AUDIO_KBPS_GUESS as f64 * 1000.0)).round() as u64);
        for v in &mut variants {
            v.bandwidth += audio_bps;
        }
        Some(ladder::render_master(&variants, audio.as_ref()))
    }

    /// A media playlist, now, or `None` when the request must wait (blocking reload).
    fn try_playlist(&self, name: &str, q: PlaylistQuery) -> Result<Option<String>, Miss> {
        let s = self.lock();
        let r = s.renditions.get(name).ok_or(Miss::NotFound)?;
        if r.playlist.last_part().is_none() && !r.playlist.is_ended() {
            return Ok(None);
        }
        if let Some(msn) = q.msn {
            match r.playlist.wait_for(msn, q.part) {
                Wait::Ready => {}
                Wait::Hold => return Ok(None),
                Wait::TooFarAhead => return Err(Miss::TooFarAhead),
            }
        }
        let reports: Vec<RenditionReport> = s
            .renditions
            .iter()
            .filter(|(other, _)| other.as_str() != name)
            .filter_map(|(other, o)| o.playlist.report(&format!("../{other}/index.m3u8")))
            .collect();
        Ok(Some(r.playlist.render(q.skip, &reports)))
    }

    /// A media playlist; a blocking request (`_HLS_msn`/`_HLS_part`) waits until the playlist
    /// has what it asks for, up to `timeout` (then 503 per RFC 8216bis 6.2.5.2's "three times
    /// the target duration").
    pub async fn playlist(
        &self,
        name: &str,
        q: PlaylistQuery,
        timeout: Duration,
    ) -> Result<Option<String>, Miss> {
        self.wait(timeout, || self.try_playlist(name, q)).await
    }

    /// The master playlist, waiting up to `timeout` for the first media.
    pub async fn master_waiting(&self, timeout: Duration) -> Option<String> {
        self.wait(timeout, || Ok(self.master())).await.ok().flatten()
    }

    /// A file of a rendition: `init<g>.mp4`, `p<n>.m4s` (a part; the next part is waited for:
    /// the preload hint) or `s<msn>.m4s` (a segment, from memory or the DVR folder).
    pub async fn file(&self, name: &str, file: &str, timeout: Duration) -> Result<Bytes, Miss> {
        if let Some(msn) = number(file, "s", ".m4s") {
            let (in_memory, listed, dir) = {
                let s = self.lock();
                let r = s.renditions.get(name).ok_or(Miss::NotFound)?;
                let listed = r.playlist.segments().any(|seg| seg.msn == msn);
                (r.segments.get(&msn).cloned(), listed, self.config.dvr.as_ref().map(|(_, d)| d.join(name)))
            };
            if let Some(b) = in_memory {
                return Ok(b);
            }
            // Older DVR segments are read back from disk while the playlist lists them.
            return match dir {
                Some(dir) if listed => {
                    tokio::fs::read(dir.join(file)).await.map(Bytes::from).map_err(|_| Miss::NotFound)
                }
                _ => Err(Miss::NotFound),
            };
        }
        let lookup = || -> Result<Option<Bytes>, Miss> {
            let s = self.lock();
            let r = s.renditions.get(name).ok_or(Miss::NotFound)?;
            if let Some(g) = number(file, "init", ".mp4") {
                if g > u64::from(s.generation) {
                    return Err(Miss::NotFound);
                }
                return Ok(r.inits.get(&(g as u32)).cloned());
            }
            let n = number(file, "p", ".m4s").ok_or(Miss::NotFound)?;
            if let Some((_, b)) = r.parts.iter().find(|(k, _)| *k == n) {
                return Ok(Some(b.clone()));
            }
            // The hinted part (and a couple past it) is held until it exists.
            if n >= r.next_part && n < r.next_part + 3 && !r.playlist.is_ended() {
                return Ok(None);
            }
            Err(Miss::NotFound)
        };
        match self.wait(timeout, lookup).await {
            Ok(Some(b)) => Ok(b),
            Ok(None) => Err(Miss::NotFound),
            Err(e) => Err(e),
        }
    }

    /// Runs `try_now` until it gives an answer (`Some`), an error, or `timeout` passes
    /// (`Ok(None)`). Woken by every change of the channel, never by polling.
    async fn wait<T>(
        &self,
        timeout: Duration,
        mut try_now: impl FnMut() -> Result<Option<T>, Miss>,
    ) -> Result<Option<T>, Miss> {
        let mut rx = self.version.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            rx.borrow_and_update();
            if let Some(v) = try_now()? {
                return Ok(Some(v));
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Ok(None),
            }
        }
    }
}

/// Bits per second of the open segment so far (before any segment is complete).
fn current_bps(r: &Rendition) -> f64 {
    let duration: f64 = r.playlist.open_parts().iter().map(|p| p.duration).sum();
    if duration < 0.5 {
        return 0.0;
    }
    r.open.iter().map(Bytes::len).sum::<usize>() as f64 * 8.0 / duration
}

/// `<prefix><number><suffix>` → number.
fn number(file: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = file.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 18 {
        return None;
    }
    digits.parse().ok()
}

/// The channels of this process, by stream id. A channel outlives its push so viewers get the
/// ended playlists (and DVR) until the next push replaces it.
#[derive(Default)]
pub struct Channels {
    map: Mutex<HashMap<String, Arc<Channel>>>,
}

impl Channels {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Channel>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, stream_id: &str) -> Option<Arc<Channel>> {
        self.lock().get(stream_id).cloned()
    }

    /// The channel a new push feeds, and its generation: the same channel after a discontinuity
    /// when the last push ended within [`RECONNECT_GRACE`] with the same settings, else a new one.
    /// The caller holds the stream's push session (one at a time): a channel still draining
    /// the previous push is continued too, and that push's late output is ignored.
    pub fn start_push(&self, stream_id: &str, config: ChannelConfig) -> (Arc<Channel>, u32) {
        let mut map = self.lock();
        if let Some(c) = map.get(stream_id) {
            let compatible = c.config.part == config.part
                && c.config.segment == config.segment
                && c.config.dvr.as_ref().map(|d| d.0) == config.dvr.as_ref().map(|d| d.0)
                && c.config.key == config.key;
            let s = c.lock();
            let continues = compatible && !s.ended;
            drop(s);
            if continues {
                let generation = c.reconnect();
                return (c.clone(), generation);
            }
        }
        let channel = Channel::new(config);
        let replaced = map.insert(stream_id.to_string(), channel.clone());
        drop(map);
        if let Some(old) = replaced {
            old.retire();
        }
        (channel, 0)
    }

    /// Whether a push still feeds any channel.
    pub fn any_live(&self) -> bool {
        self.lock().values().any(|c| c.is_live())
    }

    /// Ends every channel no push feeds, without waiting for the reconnect grace (shutdown).
    pub fn finish_all(&self) {
        for c in self.lock().values() {
            c.finish(c.generation());
        }
    }

    /// Forgets the channels whose playlists ended longer ago than they keep: [`ENDED_KEEP`], or
    /// the DVR window when that is longer. Returns how many.
    pub fn sweep(&self) -> usize {
        let gone: Vec<Arc<Channel>> = {
            let mut map = self.lock();
            let expired: Vec<String> = map
                .iter()
                .filter(|(_, c)| {
                    let keep = c
                        .config
                        .dvr
                        .as_ref()
                        .map_or(ENDED_KEEP, |(s, _)| ENDED_KEEP.max(Duration::from_secs_f64(*s)));
                    c.lock().ended_at.is_some_and(|at| at.elapsed() >= keep)
                })
                .map(|(id, _)| id.clone())
                .collect();
            expired.iter().filter_map(|id| map.remove(id)).collect()
        };
        for c in &gone {
            c.retire();
        }
        gone.len()
    }

    /// Forgets a stream's channel (the stream was deleted).
    pub fn remove(&self, stream_id: &str) {
        let gone = self.lock().remove(stream_id);
        if let Some(c) = gone {
            c.retire();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMING: Timing = Timing { target_duration: 2, part_target: 0.37 };

    fn config() -> ChannelConfig {
        ChannelConfig { part: 1.0 / 3.0, segment: 2.0, dvr: None, key: None }
    }

    fn part(starts_segment: bool, byte: u8) -> Chunk {
        Chunk::Part {
            starts_segment,
            independent: starts_segment,
            duration: 1.0 / 3.0,
            pdt: None,
            data: Bytes::from(vec![byte; 100]),
        }
    }

    fn video() -> Kind {
        Kind::Video { width: 640, height: 360, kbps: Some(800), frame_rate: Some(30.0) }
    }

    /// Feeds `segments` segments of six parts to rendition `name`.
    fn feed(c: &Channel, generation: u32, name: &str, segments: usize) {
        for _ in 0..segments {
            for i in 0..6 {
                c.feed(generation, name, part(i == 0, i as u8));
            }
        }
    }

    #[tokio::test]
    async fn parts_and_segments_are_served_and_segments_are_their_parts() {
        let c = Channel::new(config());
        c.add_rendition(0, "360p", video(), TIMING);
        c.feed(0, "360p", Chunk::Init(Bytes::from_static(b"init")));
        feed(&c, 0, "360p", 2);
        c.feed(0, "360p", part(true, 9)); // closes segment 1
        let t = Duration::from_millis(10);
        assert_eq!(c.file("360p", "init0.mp4", t).await.unwrap(), Bytes::from_static(b"init"));
        assert_eq!(c.file("360p", "p3.m4s", t).await.unwrap(), Bytes::from(vec![3u8; 100]));
        let seg = c.file("360p", "s1.m4s", t).await.unwrap();
        assert_eq!(seg.len(), 600);
        assert_eq!(&seg[..100], &[0u8; 100][..]);
        assert_eq!(c.file("360p", "s2.m4s", t).await, Err(Miss::NotFound), "segment 2 is open");
        assert_eq!(c.file("360p", "p99.m4s", t).await, Err(Miss::NotFound));
        assert_eq!(c.file("360p", "x.m4s", t).await, Err(Miss::NotFound));
        assert_eq!(c.file("480p", "p0.m4s", t).await, Err(Miss::NotFound));
        let text = c.playlist("360p", PlaylistQuery::default(), t).await.unwrap().unwrap();
        assert!(text.contains("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"p13.m4s\""));
        assert!(text.contains("#EXT-X-MAP:URI=\"init0.mp4\""));
    }

    #[tokio::test]
    async fn a_blocked_request_wakes_when_its_part_arrives() {
        let c = Channel::new(config());
        c.add_rendition(0, "360p", video(), TIMING);
        feed(&c, 0, "360p", 1);
        c.feed(0, "360p", part(true, 1)); // msn 1, part 0
        let q = PlaylistQuery { msn: Some(1), part: Some(1), skip: false };
        let waiter = {
            let c = c.clone();
            tokio::spawn(async move { c.playlist("360p", q, Duration::from_secs(5)).await })
        };
        let hint = {
            let c = c.clone();
            tokio::spawn(async move { c.file("360p", "p7.m4s", Duration::from_secs(5)).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        c.feed(0, "360p", part(false, 7));
        let text = waiter.await.unwrap().unwrap().unwrap();
        assert!(text.contains("URI=\"p7.m4s\""));
        assert_eq!(hint.await.unwrap().unwrap(), Bytes::from(vec![7u8; 100]));
        // Too far ahead: refused at once.
        let far = PlaylistQuery { msn: Some(9), part: None, skip: false };
        assert_eq!(c.playlist("360p", far, Duration::from_secs(5)).await, Err(Miss::TooFarAhead));
        // Not there within the timeout: no answer.
        let next = PlaylistQuery { msn: Some(1), part: Some(3), skip: false };
        assert_eq!(c.playlist("360p", next, Duration::from_millis(20)).await, Ok(None));
    }

    #[tokio::test]
    async fn a_reconnect_continues_after_a_discontinuity_and_the_end_ends_the_playlists() {
        let channels = Channels::default();
        let (c, g) = channels.start_push("st", config());
        assert_eq!(g, 0);
        c.add_rendition(g, "360p", video(), TIMING);
        feed(&c, g, "360p", 2);
        c.push_ended(g);
        let (again, g1) = channels.start_push("st", config());
        assert!(Arc::ptr_eq(&c, &again), "the same channel continues");
        assert_eq!(g1, 1);
        c.feed(0, "360p", part(true, 5)); // a late chunk of the old push is ignored
        c.add_rendition(g1, "360p", video(), TIMING);
        feed(&c, g1, "360p", 1);
        c.feed(g1, "360p", part(true, 1));
        let t = Duration::from_millis(10);
        let text = c.playlist("360p", PlaylistQuery::default(), t).await.unwrap().unwrap();
        assert_eq!(text.matches("#EXT-X-DISCONTINUITY\n").count(), 1);
        assert!(text.contains("#EXT-X-MAP:URI=\"init1.mp4\""));
        assert_eq!(text.matches("#EXTINF:").count(), 3, "two segments before, one after");
        assert!(!c.finish(g), "an old generation cannot end the playlists");
        c.push_ended(g1);
        assert!(c.finish(g1));
        let text = c.playlist("360p", PlaylistQuery::default(), t).await.unwrap().unwrap();
        assert!(text.ends_with("#EXT-X-ENDLIST\n") || text.contains("#EXT-X-ENDLIST\n"));
        assert_eq!(text.matches("#EXTINF:").count(), 4, "the open segment was closed at the end");
        // After the end a push starts afresh.
        let (fresh, g) = channels.start_push("st", config());
        assert!(!Arc::ptr_eq(&c, &fresh));
        assert_eq!(g, 0);
    }

    #[tokio::test]
    async fn the_master_waits_for_every_rendition_and_lists_audio() {
        let c = Channel::new(config());
        c.add_rendition(0, "360p", video(), TIMING);
        c.add_rendition(0, ladder::AUDIO, Kind::Audio { channels: 2 }, TIMING);
        feed(&c, 0, "360p", 1);
        c.set_codec(0, "360p", "avc1.64001e".into());
        assert_eq!(c.master(), None, "audio has no media yet");
        feed(&c, 0, ladder::AUDIO, 1);
        c.set_codec(0, ladder::AUDIO, "mp4a.40.2".into());
        let master = c.master().unwrap();
        assert!(master.contains(&format!("\n{}/360p/index.m3u8\n", c.session)), "{master}");
        assert!(master.contains("RESOLUTION=640x360,CODECS=\"avc1.64001e,mp4a.40.2\""), "{master}");
        assert!(master.contains("BANDWIDTH=1040000"), "880k video + 160k audio: {master}");
    }

    #[tokio::test]
    async fn dvr_segments_leave_memory_for_disk_and_are_still_served() {
        let dir = tempfile::tempdir().unwrap();
        let c = Channel::new(ChannelConfig { dvr: Some((60.0, dir.path().to_path_buf())), ..config() });
        c.add_rendition(0, "360p", video(), TIMING);
        feed(&c, 0, "360p", 16);
        c.feed(0, "360p", part(true, 1));
        let t = Duration::from_millis(10);
        // Served throughout: from memory while the writer works, then from the DVR folder.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while c.in_memory("360p", 0) {
            assert_eq!(c.file("360p", "s0.m4s", t).await.unwrap().len(), 600, "from memory");
            assert!(std::time::Instant::now() < deadline, "segment 0 never left memory");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(dir.path().join("360p/s0.m4s").exists(), "it left memory only once on disk");
        let s0 = c.file("360p", "s0.m4s", t).await.unwrap();
        assert_eq!(s0.len(), 600, "segment 0 is read back from the DVR folder");
        assert!(c.in_memory("360p", 15), "the newest segments stay in memory");
        let text = c.playlist("360p", PlaylistQuery::default(), t).await.unwrap().unwrap();
        assert!(text.contains("#EXT-X-MEDIA-SEQUENCE:0"), "16 segments of 2 s fit in 60 s");
    }

    #[tokio::test]
    async fn a_channel_that_leaves_the_map_has_its_dvr_folder_removed_once_written() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("push");
        let channels = Channels::default();
        let dvr = ChannelConfig { dvr: Some((60.0, folder.clone())), ..config() };
        let (c, g) = channels.start_push("st", dvr);
        c.add_rendition(g, "360p", video(), TIMING);
        feed(&c, g, "360p", 3);
        c.feed(g, "360p", part(true, 1));
        channels.remove("st");
        assert!(channels.get("st").is_none());
        // The channel is still held (by its pipeline here) and yet its folder goes.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while folder.exists() {
            assert!(std::time::Instant::now() < deadline, "the DVR folder was never removed");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        c.feed(g, "360p", part(true, 2)); // a late segment is not written any more
        drop(c);
        assert!(!folder.exists());
    }

    /// A disk that takes `delay` for every segment (and keeps nothing).
    struct SlowDisk {
        delay: Duration,
        writes: std::sync::atomic::AtomicUsize,
    }

    impl SegmentSink for SlowDisk {
        fn write(&self, _: &std::path::Path, _: &[u8]) -> std::io::Result<()> {
            std::thread::sleep(self.delay);
            self.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }

        fn remove_all(&self, _: &std::path::Path) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn percentile(sorted: &[Duration], p: f64) -> Duration {
        sorted[((sorted.len() - 1) as f64 * p).round() as usize]
    }

    /// 200 blocking playlist requests (`_HLS_msn`/`_HLS_part`) wait for each part while a slow
    /// disk writes DVR segments: each wakes within a few milliseconds of the part being fed,
    /// however far behind the writer is, and no later at the end than at the start.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocked_readers_wake_promptly_while_dvr_segments_are_written_slowly() {
        use std::time::Instant;
        const READERS: usize = 200;
        const SEGMENTS: u64 = 12;
        const PARTS: u64 = 6;
        let write = Duration::from_millis(100);
        let disk = Arc::new(SlowDisk { delay: write, writes: 0.into() });
        let dir = tempfile::tempdir().unwrap();
        let dvr = ChannelConfig { dvr: Some((600.0, dir.path().to_path_buf())), ..config() };
        let c = Channel::with_sink(dvr, disk.clone());
        c.add_rendition(0, "360p", video(), TIMING);
        c.feed(0, "360p", part(true, 0));
        let mut rounds: Vec<Vec<Duration>> = Vec::new();
        let mut writing = 0;
        for n in 1..SEGMENTS * PARTS {
            let (msn, p) = (n / PARTS, n % PARTS);
            let q = PlaylistQuery { msn: Some(msn), part: Some(p), skip: false };
            let readers: Vec<_> = (0..READERS)
                .map(|_| {
                    let c = c.clone();
                    tokio::spawn(async move {
                        (c.playlist("360p", q, Duration::from_secs(10)).await, Instant::now())
                    })
                })
                .collect();
            // Every reader is blocked: each holds a subscription while it waits.
            let deadline = Instant::now() + Duration::from_secs(10);
            while c.version.receiver_count() < READERS {
                assert!(Instant::now() < deadline, "the readers never blocked");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            assert!(readers.iter().all(|r| !r.is_finished()), "a reader answered before its part");
            if c.held("360p").1 > 0 {
                writing += 1;
            }
            // Fed from a thread of its own, as GStreamer's streaming thread does.
            let fed_at = {
                let c = c.clone();
                tokio::task::spawn_blocking(move || {
                    let at = Instant::now();
                    c.feed(0, "360p", part(p == 0, n as u8));
                    at
                })
                .await
                .unwrap()
            };
            let mut round = Vec::with_capacity(READERS);
            for r in readers {
                let (text, at) = r.await.unwrap();
                let text = text.unwrap().unwrap();
                assert!(text.contains(&format!("URI=\"p{n}.m4s\"")), "part {n} is listed");
                round.push(at.saturating_duration_since(fed_at));
            }
            round.sort();
            rounds.push(round);
            let (in_memory, _) = c.held("360p");
            assert!(in_memory <= MEMORY_SEGMENTS + super::super::dvr::WRITE_QUEUE + 1, "memory is bounded");
        }
        let mut all: Vec<Duration> = rounds.iter().flatten().copied().collect();
        all.sort();
        let (p50, p99) = (percentile(&all, 0.5), percentile(&all, 0.99));
        // Growth is judged on the typical round of a stretch (the median of the rounds' p99), so
        // that one round slowed by a busy machine does not count as a trend.
        let typical = |rounds: &[Vec<Duration>]| {
            let mut each: Vec<Duration> = rounds.iter().map(|r| percentile(r, 0.99)).collect();
            each.sort();
            percentile(&each, 0.5)
        };
        let three = (3 * PARTS) as usize;
        let early = typical(&rounds[PARTS as usize..][..three]);
        let late = typical(&rounds[rounds.len() - three..]);
        eprintln!(
            "wake latency of {READERS} readers with {write:?} writes: p50 {p50:?}, p99 {p99:?}, max {:?}; \
             typical round p99 {early:?} in segments 1-3, {late:?} in the last 3; \
             {writing} of {} parts fed while writes were pending",
            all[all.len() - 1],
            rounds.len()
        );
        assert!(p99 < write / 4, "p99 wake latency {p99:?} is not far below a write ({write:?})");
        assert!(
            late <= early * 3 + Duration::from_millis(5),
            "wake latency grows: {early:?} early, {late:?} late"
        );
        assert!(writing >= 2 * PARTS, "the readers waited while the disk was busy ({writing} parts)");
        // The writer catches up and memory shrinks back to the live window.
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.held("360p") != (MEMORY_SEGMENTS, 0) {
            assert!(Instant::now() < deadline, "the writer never caught up: {:?}", c.held("360p"));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(disk.writes.load(std::sync::atomic::Ordering::SeqCst), (SEGMENTS - 1) as usize);
    }

    /// A disk that hangs until the test lets it go.
    struct StuckDisk(std::sync::RwLock<()>);

    impl SegmentSink for StuckDisk {
        fn write(&self, _: &std::path::Path, _: &[u8]) -> std::io::Result<()> {
            drop(self.0.read());
            Ok(())
        }

        fn remove_all(&self, _: &std::path::Path) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_stuck_disk_costs_dvr_segments_never_the_media_thread_nor_unbounded_memory() {
        let disk = Arc::new(StuckDisk(std::sync::RwLock::new(())));
        let stuck = disk.0.write();
        let dir = tempfile::tempdir().unwrap();
        let dvr = ChannelConfig { dvr: Some((600.0, dir.path().to_path_buf())), ..config() };
        let c = Channel::with_sink(dvr, disk.clone());
        c.add_rendition(0, "360p", video(), TIMING);
        let feeding = {
            let c = c.clone();
            tokio::task::spawn_blocking(move || feed(&c, 0, "360p", 60))
        };
        tokio::time::timeout(Duration::from_secs(10), feeding)
            .await
            .expect("the media thread waited for the disk")
            .unwrap();
        let (in_memory, pending) = c.held("360p");
        let queue = super::super::dvr::WRITE_QUEUE;
        assert!(pending <= queue + 1, "{pending} segments wait for the writer");
        assert!(in_memory <= MEMORY_SEGMENTS + queue + 1, "{in_memory} segments in memory");
        drop(stuck);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while c.held("360p") != (MEMORY_SEGMENTS, 0) {
            assert!(std::time::Instant::now() < deadline, "the writer never caught up: {:?}", c.held("360p"));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
