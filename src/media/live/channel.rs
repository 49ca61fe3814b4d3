//! The live edge of one stream, in memory: the renditions' playlists, initialization sections,
//! parts and segments, fed by the packaging pipeline and read by the origin. Plain data behind
//! one short-held lock; every change bumps a `watch` version so blocked requests wake the moment
//! a part exists (RFC 8216bis 6.2.5.2) without polling. A push within the stream's reconnect
//! window (or the slate that covers its absence) continues the same playlists after an
//! `EXT-X-DISCONTINUITY`; when the live session ends the playlists end (`EXT-X-ENDLIST`).
//!
//! The rule: no IO while holding `state` or the map of [`Channels`]. Requests (and the media
//! threads that feed) take those locks, so a disk that stalls must stall neither: DVR segments
//! go to disk on the channel's writer thread ([`super::dvr`]) and stay in memory until they are
//! there; a channel's folder is removed by that writer once the channel has left the map, never
//! in a `Drop`; and the map lock is released before a channel that left it is retired.
//!
//! Here: the channel's state and write side; `serve` answers the origin; `registry` holds them.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::dvr::{DiskSink, NotQueued, SegmentSink, Write, Writer};
use crate::media::hls::live::{MediaPlaylist, Part};
pub use crate::media::live::segments::Kind;
use crate::media::live::segments::{recorder_for, Record, RenditionInfo, SegmentOutput};

mod config;
mod handover;
mod registry;
mod serve;
#[cfg(test)]
mod tests;
mod timeline;

pub use config::{ChannelConfig, Timing, KEY_URI, SOURCE_TARGET_DURATION};
pub use handover::MediaEnds;
pub use registry::Channels;
pub use serve::Rendered;
use serve::Stored;

/// Segments a playlist keeps without DVR: long enough that delta updates (CAN-SKIP-UNTIL = six
/// target durations) have something to skip.
pub const LIVE_WINDOW_SEGMENTS: usize = 8;
/// How long ended playlists stay playable (longer with DVR: its window).
pub const ENDED_KEEP: Duration = Duration::from_secs(600);
/// Segments kept in memory when DVR keeps the older ones on disk.
const MEMORY_SEGMENTS: usize = 10;

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

struct Rendition {
    kind: Kind,
    codec: Option<String>,
    playlist: MediaPlaylist,
    inits: HashMap<u32, Bytes>,
    /// The timescale of the current push's initialization section (0: not known yet).
    scale: u32,
    /// The push whose initialization section the playlist names for new parts (`init<n>.mp4`):
    /// a reconnect whose section is the same but for its times keeps the one players have.
    init_generation: u32,
    /// A new push continues the playlist: a discontinuity goes before its first part.
    reconnected: bool,
    /// Recent parts by number (`p<n>.m4s`); the oldest are dropped once no playlist lists them.
    parts: VecDeque<(u64, Bytes)>,
    hand_over: handover::HandOver,
    next_part: u64,
    /// Chunks of the open segment.
    open: Vec<Bytes>,
    segments: BTreeMap<u64, Stored>,
    /// Segments queued for the DVR writer and not yet on disk: they stay in `segments` meanwhile.
    pending: BTreeSet<u64>,
    /// Segments the DVR does not have (the disk failed, was full or behind): listed as gaps once
    /// they leave memory, where they are served from until then.
    unstored: BTreeSet<u64>,
    /// Highest bits per second of a complete segment.
    peak_bps: f64,
    /// The rendition's media lags the wall clock by more than two segments (said once).
    behind: bool,
    /// The media playlist as last rendered (without and with `_HLS_skip`): every request for
    /// the same version of the channel shares it.
    rendered: [Option<Rendered>; 2],
}

impl Rendition {
    /// The next part follows a discontinuity and needs the section of push `init_generation`;
    /// one the players already have is not hinted as new.
    fn continue_after_discontinuity(&mut self) {
        let init = format!("init{}.mp4", self.init_generation);
        if self.playlist.init_uri() == init {
            self.playlist.set_map_hint(None);
        }
        self.playlist.discontinuity(init, |msn| format!("s{msn}.m4s"));
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
    /// The recording of a `vodEnabled` stream: every init section and closed segment, clear;
    /// dropped (which completes the recording) when the playlists end or the channel retires.
    recorder: Option<Box<dyn SegmentOutput>>,
    /// The media's decode times, continued across reconnects.
    timeline: timeline::Timeline,
    /// Generations the recording leaves out (the slate's).
    unrecorded: BTreeSet<u32>,
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
    /// Set once the DVR writer removed the folder and ended (see [`Channel::dvr_finished`]).
    #[cfg(test)]
    dvr_finished: Option<Arc<std::sync::atomic::AtomicBool>>,
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
                Writer::start(dir.clone(), sink, move |rendition, msn, stored| {
                    if let Some(c) = me.upgrade() {
                        c.written(rendition, msn, stored);
                    }
                })
            });
            Channel {
                #[cfg(test)]
                dvr_finished: writer.as_ref().map(Writer::finished),
                session: crate::domain::random_token(8),
                config,
                state: Mutex::new(State {
                    renditions: BTreeMap::new(),
                    generation: 0,
                    live: true,
                    ended: false,
                    ended_at: None,
                    writer,
                    recorder: None,
                    timeline: Default::default(),
                    unrecorded: BTreeSet::new(),
                }),
                version: watch::channel(0).0,
            }
        })
    }

    pub fn config(&self) -> &ChannelConfig {
        &self.config
    }

    /// Records this channel's media from now on (a new channel of a `vodEnabled` stream).
    pub fn record(&self, recorder: Box<dyn SegmentOutput>) {
        let mut s = self.lock();
        if !s.ended {
            s.recorder = Some(recorder);
        }
    }

    /// Whether the channel records.
    pub fn is_recording(&self) -> bool {
        self.lock().recorder.is_some()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bumps the version, with `state` still held: a request that reads the version under the
    /// lock never pairs a changed state with the old version's rendering.
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
        s.timeline.next_push();
        let generation = s.generation;
        let State { renditions, writer, recorder, unrecorded, .. } = &mut *s;
        let recorder = recorder_for(recorder, unrecorded, generation - 1);
        for (name, r) in renditions.iter_mut() {
            if !r.playlist.open_parts().is_empty() {
                self.close_segment(name, r, writer.as_ref(), recorder, generation - 1, false);
            }
            // The part the last push hinted will not come (see `push_ended`, which may not have
            // run yet: a ladder drains after its publisher is gone) unless it handed over.
            if !r.playlist.has_map_hint() {
                r.next_part += 1;
            }
            r.hand_over = Default::default();
            // The discontinuity goes before the new push's first part, with the section it
            // needs: known when its initialization section comes (`feed`).
            r.reconnected = true;
            r.playlist.set_preload_hint(Some(format!("p{}.m4s", r.next_part)));
            r.playlist.set_map_hint(Some(format!("init{generation}.mp4")));
        }
        self.changed();
        drop(s);
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
            scale: 0,
            init_generation: generation,
            reconnected: false,
            parts: VecDeque::new(),
            hand_over: Default::default(),
            next_part: 0,
            open: Vec::new(),
            segments: BTreeMap::new(),
            pending: BTreeSet::new(),
            unstored: BTreeSet::new(),
            peak_bps: 0.0,
            behind: false,
            rendered: [None, None],
        });
        r.kind = kind;
        if r.playlist.last_part().is_none() {
            r.playlist.set_preload_hint(Some(format!("p{}.m4s", r.next_part)));
        }
        self.changed();
        drop(s);
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
        self.changed();
        drop(s);
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
        self.changed();
        drop(s);
    }

    /// Takes a muxer's output. Chunks of an older generation are ignored.
    pub fn feed(&self, generation: u32, name: &str, chunk: Chunk) {
        let mut s = self.lock();
        if s.generation != generation || s.ended {
            return;
        }
        let State { renditions, writer, recorder, timeline, unrecorded, .. } = &mut *s;
        let recorder = recorder_for(recorder, unrecorded, generation);
        let Some(r) = renditions.get_mut(name) else { return };
        match chunk {
            Chunk::Init(data) => {
                if let Some(recorder) = recorder {
                    recorder.record(Record::Init {
                        rendition: name.to_string(),
                        generation,
                        data: data.clone(),
                    });
                }
                r.scale = crate::media::cmaf::timescale(&data).unwrap_or(0);
                if std::mem::take(&mut r.reconnected) {
                    let same = r
                        .inits
                        .get(&r.init_generation)
                        .is_some_and(|old| crate::media::cmaf::same_init(old, &data));
                    if !same {
                        r.init_generation = generation;
                    }
                    r.continue_after_discontinuity();
                }
                r.inits.insert(generation, data);
            }
            Chunk::Part { .. } if r.hand_over == handover::HandOver::Done => return,
            Chunk::Part { starts_segment, independent, duration, pdt, data } => {
                if starts_segment && !r.playlist.open_parts().is_empty() {
                    self.close_segment(name, r, writer.as_ref(), recorder, generation, true);
                }
                if std::mem::take(&mut r.reconnected) {
                    // No initialization section came first: the playlist names this push's.
                    r.init_generation = generation;
                    r.continue_after_discontinuity();
                }
                let (data, pdt) = timeline.place(name, r.scale, pdt, duration, data);
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
                self.part_added(renditions, timeline, writer.as_ref(), recorder, name, generation);
            }
        }
        self.changed();
        drop(s);
    }

    /// Closes the open segment of rendition `name` (of push `generation`) and queues it for the
    /// DVR writer and the recording. `pacing`: the segment closed because the next one began, so
    /// its lag behind the wall clock says whether the rendition keeps up (a segment closed
    /// because the push ended closes when the end is noticed, seconds late for a caller that
    /// vanished, which says nothing about the encoder).
    fn close_segment(
        &self,
        name: &str,
        r: &mut Rendition,
        writer: Option<&Writer>,
        recorder: Option<&dyn SegmentOutput>,
        generation: u32,
        pacing: bool,
    ) {
        let parts = std::mem::take(&mut r.open);
        let size: usize = parts.iter().map(Bytes::len).sum();
        let duration: f64 = r.playlist.open_parts().iter().map(|p| p.duration).sum();
        if duration > 0.0 {
            r.peak_bps = r.peak_bps.max(size as f64 * 8.0 / duration);
        }
        let Some(msn) = r.playlist.close_segment(format!("s{}.m4s", r.playlist.next_msn())) else { return };
        // Joined now only for what takes the segment whole.
        let whole = recorder.is_some() || writer.is_some() || self.config.key.is_some();
        let bytes = whole.then(|| Stored::join(&parts));
        if let (Some(recorder), Some(bytes)) = (recorder, &bytes) {
            let info = RenditionInfo { name: name.to_string(), kind: r.kind.clone(), codec: r.codec.clone() };
            let date = r
                .playlist
                .segments()
                .next_back()
                .filter(|s| s.msn == msn)
                .and_then(|s| s.program_date_time)
                .map(|d| d.timestamp_millis());
            recorder.record(Record::Segment { info, generation, duration, date, data: bytes.clone() });
        }
        let bytes = match (&self.config.key, bytes) {
            (Some(key), Some(bytes)) => Some(Bytes::from(key.encrypt(msn, &bytes))),
            (_, bytes) => bytes,
        };
        // A rendition whose encoder cannot keep up falls behind the clock: say so once.
        if let Some(seg) = r.playlist.segments().next_back().filter(|s| pacing && s.msn == msn) {
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
        if let (Some(writer), Some(bytes)) = (writer, &bytes) {
            // Never waits: a full queue means the disk is behind (see `super::dvr`).
            match writer.try_queue(Write { rendition: name.to_string(), msn, data: bytes.clone() }) {
                Ok(()) => {
                    r.pending.insert(msn);
                }
                Err(NotQueued::Full) => {
                    tracing::warn!(rendition = %name, msn, "DVR: the disk is behind; a segment is not kept");
                    r.unstored.insert(msn);
                }
                Err(NotQueued::Closed) => {
                    tracing::warn!(rendition = %name, msn, "DVR: the writer is gone");
                    r.unstored.insert(msn);
                }
            }
        }
        r.segments.insert(msn, bytes.map_or(Stored::Parts(parts), Stored::Whole));
        // The caller says the channel changed.
        self.evict(r);
    }

    /// Drops the segments memory need not keep: those the playlist no longer lists, or with DVR
    /// those older than [`MEMORY_SEGMENTS`] that are on disk (or never will be).
    /// A segment the DVR does not have becomes a gap of the playlist as it leaves memory.
    /// Returns whether the playlist changed.
    fn evict(&self, r: &mut Rendition) -> bool {
        let keep_from = match self.config.dvr {
            Some(_) => r.playlist.next_msn().saturating_sub(MEMORY_SEGMENTS as u64),
            None => r.playlist.media_sequence(),
        };
        let pending = &r.pending;
        r.segments.retain(|msn, _| *msn >= keep_from || pending.contains(msn));
        let mut changed = false;
        while let Some(msn) = r.unstored.first().copied().filter(|msn| *msn < keep_from) {
            r.unstored.remove(&msn);
            changed |= r.playlist.mark_gap(msn);
        }
        if changed {
            r.rendered = Default::default();
        }
        changed
    }

    /// The writer is done with segment `msn` of `rendition`: it is on disk (`stored`), or could
    /// not be written (the writer said why) and leaves memory with the window all the same, as a
    /// gap of the playlist.
    fn written(&self, rendition: &str, msn: u64, stored: bool) {
        let mut s = self.lock();
        let Some(r) = s.renditions.get_mut(rendition) else { return };
        r.pending.remove(&msn);
        if !stored {
            r.unstored.insert(msn);
        }
        if self.evict(r) {
            self.changed();
        }
        drop(s);
    }

    /// The channel left its map: it writes no more, and its writer removes the DVR folder once
    /// the queued segments are done. Called with no lock held.
    fn retire(&self) {
        let mut s = self.lock();
        let (writer, recorder) = (s.writer.take(), s.recorder.take());
        drop(s);
        if let Some(writer) = writer {
            writer.retire();
        }
        drop(recorder);
    }

    /// Whether the DVR writer is done: the channel left its map (or was dropped), the segment
    /// being written then is on disk, and the folder is gone. `true` without DVR.
    #[cfg(test)]
    pub(crate) fn dvr_finished(&self) -> bool {
        self.dvr_finished.as_ref().is_none_or(|f| f.load(std::sync::atomic::Ordering::Acquire))
    }

    /// The push ended: the open segments close with the parts they have. The playlists end
    /// unless [`Channel::reconnect`] comes before the live session ends (see [`Channel::finish`]).
    pub fn push_ended(&self, generation: u32) {
        let mut s = self.lock();
        if s.generation != generation {
            return;
        }
        s.live = false;
        let State { renditions, writer, recorder, unrecorded, .. } = &mut *s;
        let recorder = recorder_for(recorder, unrecorded, generation);
        for (name, r) in renditions.iter_mut() {
            if !r.playlist.open_parts().is_empty() {
                self.close_segment(name, r, writer.as_ref(), recorder, generation, false);
            }
            // The hinted part will not come from this push, and a next push's first part needs
            // its own initialization section: the hint moves past it (a request held for it
            // gets 404, RFC 8216bis 6.2.6), and the next push's section is hinted too (B.1), so
            // no player that preloads hints parses the new push's media with the old section.
            // A hand-over hinted both already.
            if !r.playlist.has_map_hint() {
                r.next_part += 1;
            }
            r.playlist.set_preload_hint(Some(format!("p{}.m4s", r.next_part)));
            r.playlist.set_map_hint(Some(format!("init{}.mp4", generation + 1)));
        }
        self.changed();
        drop(s);
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
        // The session is over: its recording completes (after the segments queued before).
        let recorder = s.recorder.take();
        self.changed();
        drop(s);
        drop(recorder);
        true
    }

    pub fn is_live(&self) -> bool {
        self.lock().live
    }
}
