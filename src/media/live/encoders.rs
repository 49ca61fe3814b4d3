//! The ladder's encoders of a live session: one decoder and an encoder per rung, in a pipeline
//! of their own that the stream's live session keeps ([`super::session`]), so that a publisher
//! who reconnects within the window feeds the same encoders rather than new ones:
//!
//! ```text
//! push 1 ─ video tee ─ appsink ─┐
//! push 2 ─ video tee ─ appsink ─┴→ appsrc src → decoder → tee raw ─┬→ queue → scale, encode → h264parse → enc_<rung>
//!                                                                   └→ …      enc_<rung> → [cmafmux → appsink] of push 2
//! ```
//!
//! Each push hands its decoded-to-be frames over on its own thread ([`Encoders::feed`]); the
//! `appsrc` is the bounded queue that the ladder's decoder queue was (input past [`INPUT`] is
//! dropped, so a slow ladder never holds a push up). Every push's frames are put on
//! one timeline that only goes forward: its first frame comes [`GAP`] after the last frame of
//! the push before ([`Timeline`]), so the encoders never see time go back.
//!
//! The muxers are the push's: a push (a generation of the channel) gets its own `cmafmux` per
//! rung, attached when its first frame leaves the rung's encoder, so each push's renditions
//! start with their own initialization section, after the channel's discontinuity. At that
//! frame the keyframe forcing starts again ([`force_keyframes`]): the new push's segments keep
//! to a grid from its own first frame, as the `source` and `audio` renditions do. When the push
//! ends ([`Encoders::end_generation`]), its muxers are told the end of their stream and drain
//! into the channel before it closes the push's segments; the frames still inside the decoder
//! then (a frame or two) are dropped.
//!
//! Why an `appsink`/`appsrc` pair: it hands over frames only, with timestamps set here, and the
//! `appsrc` is the bound and the thread the decoder's queue was (the thread count per ladder
//! push is unchanged). `proxysink`/`proxysrc` (plugins-bad) would carry each push's own events
//! (its segments, its EOS) into the encoders, and `intersink`/`intersrc` and `fallbackswitch`
//! (gst-plugins-rs) are not among Debian's 1.22 plugins.
//!
//! A push whose ladder is planned differently (another source size, frame rate or colorimetry,
//! or operators' descriptions changed between pushes) gets encoders of its own in place of the
//! session's.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

use super::cut::cut_at;
use super::ladder::Rung;
use super::mux::{build_bin, feed_channel, mux_and_sink, muxer_input, watch_codec, Declared, Target};
use super::split::{Plan, Splitter};
use crate::media::gst::StopOnDrop;

mod keyframes;
use keyframes::force_keyframes;

/// Input the encoders hold before they drop it (the decoder's queue): a ladder the machine does
/// not keep up with loses its own frames, never the push's other renditions.
const INPUT: Duration = Duration::from_secs(3);

/// Between the end of one push's last frame and the next push's first on the encoders'
/// timeline (ns).
const GAP: u64 = 100_000_000;

/// How long a push's end waits for its muxers to drain (the ingest pipeline's own drain is
/// [`super::pipeline::DRAIN`], as long).
const DRAIN: Duration = Duration::from_secs(2);

/// Where a live session keeps its encoders (none until a push plans a rung), and the count of
/// encoders started that it adds to (`sluice_live_encoders_started_total`): a publisher that
/// reconnects within its session's window starts none.
#[derive(Clone, Default)]
pub struct EncoderSlot {
    held: Arc<Mutex<Option<Arc<Encoders>>>>,
    started: Arc<AtomicU64>,
}

impl EncoderSlot {
    pub fn new(started: Arc<AtomicU64>) -> EncoderSlot {
        EncoderSlot { held: Arc::default(), started }
    }

    /// The encoders the session has now.
    pub fn current(&self) -> Option<Arc<Encoders>> {
        lock(&self.held).clone()
    }

    /// Takes the encoders out (the session ends).
    pub fn take(&self) -> Option<Arc<Encoders>> {
        lock(&self.held).take()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

const DECODER: &str = include_str!("../../../pipelines/live-decoder.txt");
const RUNG: &str = include_str!("../../../pipelines/live-rung.txt");

/// The pipeline descriptions an operator can replace (`SLUICE_PIPELINES_DIR`), read at each push.
#[derive(Debug, Clone, PartialEq)]
pub struct Descriptions {
    pub decoder: String,
    pub rung: String,
}

impl Descriptions {
    /// The built-in descriptions, each replaced by a file of the same name in `dir` if present.
    pub fn load(dir: Option<&Path>) -> Descriptions {
        let read = |name: &str, builtin: &str| crate::media::gst::description(dir, name, builtin);
        Descriptions { decoder: read("live-decoder.txt", DECODER), rung: read("live-rung.txt", RUNG) }
    }

    /// The rung description with its placeholders filled: `{keyint}` is twice the segment in
    /// frames, so the encoder's own keyframes never come between the forced ones;
    /// `{colorimetry}` is the source's ([`crate::media::gst::colorimetry_of`]); `{threads}`
    /// is [`threads`].
    fn rung(&self, r: &Rung, keyint: u32, colorimetry: &str) -> String {
        self.rung
            .replace("{colorimetry}", colorimetry)
            .replace("{threads}", &threads(r.height).to_string())
            .replace("{width}", &r.width.to_string())
            .replace("{height}", &r.height.to_string())
            .replace("{kbps}", &r.video_kbps.to_string())
            .replace("{keyint}", &keyint.to_string())
    }

    /// The decoder description with `{threads}` filled for a source `height` lines high.
    fn decoder(&self, height: u32) -> String {
        self.decoder.replace("{threads}", &threads(height).to_string())
    }
}

/// The threads of a decoder or an x264 rung for a picture `height` lines high: one up to 1080p
/// (no frames handed between threads, no slices that cost bits; one core decodes a 1080p60
/// push, or encodes a 1080p60 rung at the built-in settings, several times over), the codec's
/// own choice above (0: every core; a 2160p rung needs them).
fn threads(height: u32) -> u32 {
    if height <= 1080 {
        1
    } else {
        0
    }
}

/// What encoders are built for: a push whose ladder is planned the same way continues them.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Spec {
    pub rungs: Vec<Rung>,
    pub descriptions: Descriptions,
    /// The source's height, for the decoder's threads.
    pub height: u32,
    pub colorimetry: String,
    pub segment: f64,
    pub plan: Plan,
    /// The frame (seconds) when the source states its rate: decoded frames are put on its grid
    /// ([`keyframes::Regular`]).
    pub regular: Option<f64>,
}

impl Spec {
    /// Twice the segment in frames: the encoder's own keyframes never come between the forced ones.
    fn keyint(&self) -> u32 {
        (2.0 * self.segment / self.plan.frame).round().max(1.0) as u32
    }

    fn splitter(&self) -> Splitter {
        Splitter::at_any_frame(self.segment, self.plan)
    }
}

/// The pushes that fed the encoders and where each lies on their timeline.
#[derive(Default)]
struct Timeline {
    /// The latest few pushes, latest last.
    pushes: Vec<Push>,
    /// The end of the latest frame put on the timeline (ns).
    end: u64,
}

struct Push {
    target: Target,
    /// Where its running time zero lies on the timeline (ns), from its first frame on.
    offset: u64,
    started: bool,
    /// The push ended: frames of it that come late are dropped.
    ended: bool,
}

impl Timeline {
    /// The pushes kept: an older one has long ended.
    const KEPT: usize = 4;

    /// The push a frame at `pts` (ns, on the timeline) belongs to.
    fn of(&self, pts: u64) -> Option<&Push> {
        self.pushes.iter().rev().find(|p| p.started && p.offset <= pts)
    }
}

/// A rung's output: its encoder's last element, and the muxer of the push it feeds now.
struct RungOut {
    pad: gst::Pad,
    attached: Arc<Mutex<Option<Attached>>>,
}

/// A push's muxer of one rung, and whether it has drained.
struct Attached {
    generation: u32,
    bin: gst::Bin,
    input: gst::GhostPad,
    drained: Arc<AtomicBool>,
}

impl Attached {
    /// Takes the muxer off the encoder and ends its stream: it writes its last part and drains.
    fn detach(&self, pad: &gst::Pad) {
        let _ = pad.unlink(&self.input);
        if !self.input.send_event(gst::event::Eos::new()) {
            self.drained.store(true, Ordering::Release);
        }
    }
}

/// One live session's decoder and rung encoders ([`super::encoders`]).
pub struct Encoders {
    spec: Spec,
    pipeline: StopOnDrop,
    src: gst_app::AppSrc,
    rungs: Vec<RungOut>,
    timeline: Arc<Mutex<Timeline>>,
    /// Muxers taken off their encoders, until they have drained and are removed.
    retired: Arc<Mutex<Vec<Attached>>>,
    /// The pipeline of the push that feeds them now: their errors are posted there, and end it.
    push: Arc<Mutex<gst::glib::WeakRef<gst::Pipeline>>>,
    /// An element failed: the next push builds encoders of its own.
    failed: Arc<AtomicBool>,
    caps: Mutex<Option<gst::Caps>>,
    dropped: AtomicU64,
}

impl Encoders {
    /// The session's encoders for push `to` if they were built for `spec`, else new ones in
    /// their place; the push joins their timeline. Blocking (building starts a pipeline).
    pub(super) fn join(
        slot: &EncoderSlot,
        spec: Spec,
        to: Target,
        push: &gst::Pipeline,
    ) -> Result<Arc<Encoders>, String> {
        let mut held = lock(&slot.held);
        let (encoders, replaced) = match held.as_ref() {
            Some(e) if e.spec == spec && !e.failed.load(Ordering::Relaxed) => (e.clone(), None),
            _ => {
                let e = Arc::new(Encoders::build(spec, &format!("encoders-{}", push.name()))?);
                slot.started.fetch_add(1, Ordering::Relaxed);
                (e.clone(), held.replace(e))
            }
        };
        drop(held);
        // Encoders planned for another source: their pushes have ended.
        drop(replaced);
        let mut timeline = lock(&encoders.timeline);
        timeline.pushes.push(Push { target: to, offset: 0, started: false, ended: false });
        let extra = timeline.pushes.len().saturating_sub(Timeline::KEPT);
        timeline.pushes.drain(..extra);
        drop(timeline);
        *lock(&encoders.push) = push.downgrade();
        Ok(encoders)
    }

    fn build(spec: Spec, name: &str) -> Result<Encoders, String> {
        let mut desc = format!(
            "appsrc name=src format=time is-live=false do-timestamp=false block=false max-bytes=0 ! {} ! tee name=raw\n",
            spec.descriptions.decoder(spec.height).trim()
        );
        for r in &spec.rungs {
            desc.push_str(&format!(
                "raw. ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=3000000000 ! {} ! h264parse ! capsfilter name=enc_{} caps=\"video/x-h264,stream-format=avc,alignment=au\"\n",
                spec.descriptions.rung(r, spec.keyint(), &spec.colorimetry).trim(),
                r.name,
            ));
        }
        let pipeline = gst::parse::launch(&desc)
            .map_err(|e| format!("live encoders: {e}: {desc}"))?
            .downcast::<gst::Pipeline>()
            .map_err(|_| "live encoders are not a pipeline".to_string())?;
        pipeline.set_property("name", name);
        let src = pipeline
            .by_name("src")
            .and_then(|e| e.downcast::<gst_app::AppSrc>().ok())
            .ok_or("live encoders have no appsrc")?;
        let (timeline, retired) =
            (Arc::new(Mutex::new(Timeline::default())), Arc::new(Mutex::new(Vec::new())));
        let push = Arc::new(Mutex::new(gst::glib::WeakRef::new()));
        let mut rungs = Vec::new();
        for r in &spec.rungs {
            let pad = pipeline
                .by_name(&format!("enc_{}", r.name))
                .and_then(|e| e.static_pad("src"))
                .ok_or_else(|| format!("live encoders have no output for {}", r.name))?;
            let attached = Arc::new(Mutex::new(None));
            follow_pushes(&pipeline, &pad, &r.name, &spec, &timeline, &attached, &retired, &push);
            rungs.push(RungOut { pad, attached });
        }
        let raw = pipeline.by_name("raw").ok_or("live encoders have no raw tee")?;
        force_keyframes(&raw, spec.clone(), timeline.clone())?;
        let failed = Arc::new(AtomicBool::new(false));
        watch_bus(&pipeline, push.clone(), failed.clone())?;
        let pipeline = StopOnDrop(pipeline);
        pipeline.0.set_state(gst::State::Playing).map_err(|e| format!("live encoders cannot play: {e}"))?;
        tracing::info!(encoders = %name, rungs = %spec.rungs.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(","), "live encoders started");
        Ok(Encoders {
            spec,
            pipeline,
            src,
            rungs,
            timeline,
            retired,
            push,
            failed,
            caps: Mutex::new(None),
            dropped: AtomicU64::new(0),
        })
    }

    /// Hands the encoders a video frame of push `generation` (a sample of its `video` tee), on
    /// the push's thread: never waits. A frame of a push that is not the latest is dropped, and
    /// so is one the encoders have no room for (said now and then).
    pub(super) fn feed(&self, generation: u32, sample: &gst::Sample) {
        let (Some(buffer), Some(segment)) = (sample.buffer_owned(), sample.segment()) else { return };
        let Some(segment) = segment.downcast_ref::<gst::ClockTime>() else { return };
        let running =
            |t: Option<gst::ClockTime>| t.and_then(|t| segment.to_running_time(t)).map(|t| t.nseconds());
        let Some(pts) = running(buffer.pts()) else { return };
        let level: u64 = self.src.property("current-level-time");
        if level >= INPUT.as_nanos() as u64 {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(encoders = %self.pipeline.0.name(), dropped = n, "the live ladder is behind; its decoder drops input");
            }
            return;
        }
        let (offset, first) = {
            let mut timeline = lock(&self.timeline);
            let end = timeline.end;
            let Some(push) =
                timeline.pushes.last_mut().filter(|p| p.target.generation == generation && !p.ended)
            else {
                return;
            };
            let first = !push.started;
            if first {
                push.started = true;
                push.offset = if end == 0 { 0 } else { end + GAP };
            }
            let offset = push.offset;
            let duration = buffer.duration().map_or(1, |d| d.nseconds().max(1));
            timeline.end = timeline.end.max(pts + offset + duration);
            (offset, first)
        };
        if let Some(caps) = sample.caps() {
            let mut last = lock(&self.caps);
            if last.as_ref().is_none_or(|old| old.as_ref() != caps) {
                let caps = caps.to_owned();
                self.src.set_caps(Some(&caps));
                *last = Some(caps);
            }
        }
        let dts = running(buffer.dts());
        let mut buffer = buffer;
        let b = buffer.make_mut();
        b.set_pts(gst::ClockTime::from_nseconds(pts + offset));
        b.set_dts(dts.map(|d| gst::ClockTime::from_nseconds(d + offset)));
        if first {
            b.set_flags(gst::BufferFlags::DISCONT);
        }
        let _ = self.src.push_buffer(buffer);
    }

    /// Push `generation` ended: its frames already handed over go through (within [`DRAIN`]),
    /// then its muxers end their stream and drain into the channel. Blocking; called before the
    /// channel closes the push's segments.
    pub fn end_generation(&self, generation: u32) {
        let deadline = Instant::now() + DRAIN;
        let pending = || self.src.property::<u64>("current-level-buffers") > 0;
        while pending() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(push) = lock(&self.timeline).pushes.iter_mut().find(|p| p.target.generation == generation)
        {
            push.ended = true;
        }
        for rung in &self.rungs {
            let (attached, retired) = (rung.attached.clone(), self.retired.clone());
            // When no frame passes the encoder's output: at once, or after the one passing.
            rung.pad.add_probe(gst::PadProbeType::IDLE, move |pad, _| {
                let mut held = lock(&attached);
                if held.as_ref().is_some_and(|a| a.generation == generation) {
                    if let Some(a) = held.take() {
                        a.detach(pad);
                        lock(&retired).push(a);
                    }
                }
                gst::PadProbeReturn::Remove
            });
        }
        let draining = || {
            let attached = self
                .rungs
                .iter()
                .any(|r| lock(&r.attached).as_ref().is_some_and(|a| a.generation == generation));
            attached
                || lock(&self.retired)
                    .iter()
                    .any(|a| a.generation == generation && !a.drained.load(Ordering::Acquire))
        };
        while draining() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.remove_retired();
    }

    /// Removes the muxers taken off their encoders that have drained.
    fn remove_retired(&self) {
        let done: Vec<Attached> = {
            let mut retired = lock(&self.retired);
            let (done, left) = retired.drain(..).partition(|a| a.drained.load(Ordering::Acquire));
            *retired = left;
            done
        };
        for a in done {
            let _ = a.bin.set_state(gst::State::Null);
            let _ = self.pipeline.0.remove(&a.bin);
        }
    }
}

/// Gives the rung's output to the muxer of the push its frames belong to: a push's first frame
/// attaches that push's muxer (taking off the last push's, if its end did not); frames of a push
/// that ended, or of none, are dropped. A muxer that cannot be attached ends the push (its
/// rendition would never be ready).
#[allow(clippy::too_many_arguments)]
fn follow_pushes(
    pipeline: &gst::Pipeline,
    pad: &gst::Pad,
    name: &str,
    spec: &Spec,
    timeline: &Arc<Mutex<Timeline>>,
    attached: &Arc<Mutex<Option<Attached>>>,
    retired: &Arc<Mutex<Vec<Attached>>>,
    push: &Arc<Mutex<gst::glib::WeakRef<gst::Pipeline>>>,
) {
    let (weak, name, spec) = (pipeline.downgrade(), name.to_string(), spec.clone());
    let (timeline, attached, retired, push) =
        (timeline.clone(), attached.clone(), retired.clone(), push.clone());
    // The push whose muxer could not be attached: its frames are dropped.
    let refused = Mutex::new(None);
    pad.add_probe(gst::PadProbeType::BUFFER, move |pad, info| {
        let Some(gst::PadProbeData::Buffer(buffer)) = &info.data else { return gst::PadProbeReturn::Ok };
        // On the encoders' timeline: the running time (x264enc puts its output 1000 hours on).
        let Some(at) = running_time(pad, buffer) else { return gst::PadProbeReturn::Drop };
        let (generation, target) = match lock(&timeline).of(at) {
            Some(p) => (p.target.generation, (!p.ended).then(|| (p.target.clone(), p.offset))),
            None => return gst::PadProbeReturn::Drop,
        };
        let mut held = lock(&attached);
        if held.as_ref().is_some_and(|a| a.generation == generation) {
            return gst::PadProbeReturn::Ok;
        }
        let (Some(target), Some(pipeline)) = (target, weak.upgrade()) else {
            return gst::PadProbeReturn::Drop;
        };
        if *lock(&refused) == Some(generation) {
            return gst::PadProbeReturn::Drop;
        }
        if let Some(old) = held.take() {
            old.detach(pad);
            lock(&retired).push(old);
        }
        match attach(&pipeline, pad, &name, &spec, target.0, target.1) {
            Ok(a) => {
                *held = Some(a);
                gst::PadProbeReturn::Ok
            }
            Err(e) => {
                *lock(&refused) = Some(generation);
                let e = format!("a rung's muxer could not be attached ({name}): {e}");
                match lock(&push).upgrade() {
                    Some(p) => {
                        drop(p.post_message(gst::message::Error::new(gst::CoreError::Negotiation, &e)))
                    }
                    None => tracing::error!(error = %e, "live encoders"),
                }
                gst::PadProbeReturn::Drop
            }
        }
    });
}

/// Where `buffer`, about to leave `pad`, lies on the encoders' timeline: its running time.
fn running_time(pad: &gst::Pad, buffer: &gst::BufferRef) -> Option<u64> {
    crate::media::gst::running_time(pad, buffer.pts()?).map(|t| t.nseconds())
}

/// Builds push `to`'s muxer of rung `name` and links the rung's output `pad` to it. On a
/// streaming thread, before the push's first frame of the rung passes. The push's `offset` on
/// the encoders' timeline is taken off at the muxer's input, so that its running time is the
/// push's own, as its `source` and `audio` renditions' is: each push's media starts near zero,
/// and the channel lays the pushes end to end on one timeline for every rendition alike
/// ([`super::channel`]), its dates taken from the push's wall-clock base.
fn attach(
    pipeline: &gst::Pipeline,
    pad: &gst::Pad,
    name: &str,
    spec: &Spec,
    to: Target,
    offset: u64,
) -> Result<Attached, String> {
    let bin = build_bin(&mux_and_sink(spec.segment, name, spec.plan.chunk(), Some(spec.plan.frame)))?;
    let generation = to.generation;
    watch_codec(&bin, name, to.clone(), Declared::Video)?;
    feed_channel(&bin, name, to)?;
    let input = muxer_input(&bin, name)?;
    input.set_offset(-i64::try_from(offset).map_err(|_| "a push's offset out of range".to_string())?);
    cut_at(&input, spec.splitter())?;
    let drained = Arc::new(AtomicBool::new(false));
    let sink_pad = bin
        .by_name(&format!("out_{name}"))
        .and_then(|s| s.static_pad("sink"))
        .ok_or_else(|| format!("no appsink for {name}"))?;
    let done = drained.clone();
    sink_pad.add_probe(gst::PadProbeType::EVENT_DOWNSTREAM, move |_, info| {
        if let Some(gst::PadProbeData::Event(ev)) = &info.data {
            if ev.type_() == gst::EventType::Eos {
                done.store(true, Ordering::Release);
            }
        }
        gst::PadProbeReturn::Ok
    });
    pipeline.add(&bin).map_err(|e| format!("adding a rung's muxer: {e}"))?;
    bin.sync_state_with_parent().map_err(|e| format!("starting a rung's muxer: {e}"))?;
    pad.link(&input).map_err(|e| format!("linking a rung's muxer: {e}"))?;
    Ok(Attached { generation, bin, input, drained })
}

/// Errors of the encoders end the push that feeds them (posted on its pipeline's bus, as an
/// element of its own would) and keep the next push from using them; the muxers' threads are
/// scheduled as a push's are ([`super::threads::schedule_muxer_thread`]).
fn watch_bus(
    pipeline: &gst::Pipeline,
    push: Arc<Mutex<gst::glib::WeakRef<gst::Pipeline>>>,
    failed: Arc<AtomicBool>,
) -> Result<(), String> {
    let bus = pipeline.bus().ok_or("live encoders have no bus")?;
    bus.set_sync_handler(move |_, msg| {
        match msg.view() {
            gst::MessageView::Error(err) => {
                failed.store(true, Ordering::Relaxed);
                let element = err.src().map(|s| s.path_string().to_string()).unwrap_or_default();
                let text = format!("{element}: {}", err.error());
                match lock(&push).upgrade() {
                    Some(p) => drop(p.post_message(gst::message::Error::new(gst::CoreError::Failed, &text))),
                    None => tracing::warn!(error = %text, "live encoders failed"),
                }
            }
            gst::MessageView::StreamStatus(status) => super::threads::schedule_muxer_thread(status),
            _ => {}
        }
        gst::BusSyncReply::Drop
    });
    Ok(())
}

#[cfg(test)]
mod tests;
