//! Attaches LL-HLS packaging to a push's ingest pipeline (`pipelines/ingest.txt`):
//!
//! - `audio` tee → `cmafmux` → the `audio` rendition (AAC passes through: encoded once, by the
//!   publisher, and shared by every variant);
//! - `video` tee → `cmafmux` → the `source` variant (H.264 passes through untranscoded);
//! - `video` tee → decode once (`pipelines/live-decoder.txt`) → a tee → per quality at or below
//!   the source height: scale and encode (`pipelines/live-rung.txt`) → `cmafmux` → a rendition.
//!
//! The video branches are built when the first video caps arrive, since the ladder depends on
//! the source size. Every `cmafmux` cuts fragments (segments) and chunks (parts) where a
//! [`Splitter`] tells it to ([`cut`]; `manual-split`): in decode order, for publishers'
//! B-frames, with each segment's parts laid out so that its last is not one a player skips
//! ([`super::split`]). The keyframes of the transcoded renditions are forced once, on the
//! decoded video before it is split into rungs, at the frames where an identical splitter
//! starts a segment or a part ([`force_keyframes`]): every rung gets the same request on the
//! same frame, so segments align across renditions and each one starts where its muxer is
//! told to cut.
//! Appsink callbacks only copy bytes into the [`Channel`] under its short lock; they never block
//! on the network (anchor: gst-plugins-rs `mux/isobmff/examples/hls_live.rs`: the init section
//! is the `DISCONT|HEADER` buffer, a fragment's first chunk is a `HEADER` buffer without
//! `DELTA_UNIT`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

use super::channel::{Channel, Chunk, Kind, Timing};
use super::cut::{cut, cut_at, Cutting};
use super::ladder::{self, Rung};
use super::split::{Plan, Splitter};
use crate::domain::stream::Quality;

const DECODER: &str = include_str!("../../../pipelines/live-decoder.txt");
const RUNG: &str = include_str!("../../../pipelines/live-rung.txt");

/// The source variant's TARGETDURATION: it is cut at the publisher's keyframes, which Sluice
/// does not choose. Publishers should send a keyframe at least every 2 s (docs/live-ingest.md).
const SOURCE_TARGET_DURATION: u32 = 6;

/// The pipeline descriptions an operator can replace (`SLUICE_PIPELINES_DIR`), read at each push.
#[derive(Debug, Clone)]
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
    /// `{colorimetry}` is the source's ([`crate::media::gst::colorimetry_of`]).
    fn rung(&self, r: &Rung, keyint: u32, colorimetry: &str) -> String {
        self.rung
            .replace("{colorimetry}", colorimetry)
            .replace("{width}", &r.width.to_string())
            .replace("{height}", &r.height.to_string())
            .replace("{kbps}", &r.video_kbps.to_string())
            .replace("{keyint}", &keyint.to_string())
    }
}

/// What a push's packaging needs.
pub struct LiveOutput {
    pub channel: Arc<Channel>,
    pub generation: u32,
    pub qualities: Vec<Quality>,
    pub descriptions: Descriptions,
    /// Set when the ladder is planned with a rung to encode (at the first video caps).
    pub transcodes: Arc<AtomicBool>,
}

/// The wall-clock time of the push's media timestamp zero, set when its first media arrives;
/// `EXT-X-PROGRAM-DATE-TIME` of a part is this plus the part's timestamp.
pub type WallBase = Arc<OnceLock<DateTime<Utc>>>;

/// Attaches the audio branch now and the video branches at the first video caps.
/// Blocking (it builds bins and starts them): [`crate::media::ingest::pipeline::IngestPipeline::start`] calls
/// it on a blocking thread; the video branches are attached on a streaming thread.
pub fn attach(pipeline: &gst::Pipeline, out: LiveOutput, wall: WallBase) -> Result<(), String> {
    crate::media::gst::register_fmp4()?;
    let out = Arc::new(out);
    let audio_tee = pipeline.by_name("audio").ok_or("ingest pipeline has no audio tee")?;
    let video_tee = pipeline.by_name("video").ok_or("ingest pipeline has no video tee")?;
    let segment = out.channel.config().segment;
    let target = segment.ceil() as u32;
    let part = out.channel.config().part;

    // Straight into the muxer, on the ingest thread ([`muxer_input`]).
    let audio = build_bin(&mux_and_sink(&out, ladder::AUDIO, part, None))?;
    let audio_in = muxer_input(&audio, ladder::AUDIO)?;
    // The audio's segments keep to the video's grid, from the video's first frame, which the
    // `source` splitter publishes here when it comes.
    let video_origin = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
    cut_at(&audio_in, Cutting::Audio { segment, part, video: video_origin.clone() })?;
    link_branch(pipeline, &audio_tee, &audio, &audio_in)?;
    watch_codec(
        &audio,
        ladder::AUDIO,
        out.clone(),
        Declared::Audio { target_duration: target, segment, part },
    )?;
    feed_channel(&audio, ladder::AUDIO, &out, wall.clone())?;

    let built = AtomicBool::new(false);
    let weak = pipeline.downgrade();
    let pad = video_tee.static_pad("sink").ok_or("video tee has no sink pad")?;
    pad.add_probe(gst::PadProbeType::EVENT_DOWNSTREAM, move |_, info| {
        let Some(gst::PadProbeData::Event(ev)) = &info.data else { return gst::PadProbeReturn::Ok };
        let gst::EventView::Caps(c) = ev.view() else { return gst::PadProbeReturn::Ok };
        // The ladder is planned once, on the push's first video caps.
        if built.swap(true, Ordering::SeqCst) {
            return gst::PadProbeReturn::Ok;
        }
        let (Some(pipeline), Some(s)) = (weak.upgrade(), c.caps().structure(0)) else {
            return gst::PadProbeReturn::Ok;
        };
        let source = SourceFormat {
            width: s.get::<i32>("width").unwrap_or(0).max(0) as u32,
            height: s.get::<i32>("height").unwrap_or(0).max(0) as u32,
            frame_rate: crate::media::gst::frame_rate_of(s),
            colorimetry: crate::media::gst::colorimetry_of(c.caps()).unwrap_or_else(|| "bt709".into()),
        };
        if let Err(e) = attach_video(&pipeline, &video_tee, &out, &wall, &source, &video_origin) {
            tracing::error!(pipeline = %pipeline.name(), error = %e, "building the live ladder");
            pipeline.post_message(gst::message::Error::new(gst::CoreError::Negotiation, &e)).ok();
        }
        gst::PadProbeReturn::Ok
    });
    Ok(())
}

struct SourceFormat {
    width: u32,
    height: u32,
    frame_rate: Option<f64>,
    colorimetry: String,
}

fn attach_video(
    pipeline: &gst::Pipeline,
    tee: &gst::Element,
    out: &Arc<LiveOutput>,
    wall: &WallBase,
    source: &SourceFormat,
    video_origin: &Arc<std::sync::atomic::AtomicU64>,
) -> Result<(), String> {
    let rungs = ladder::plan(&out.qualities, source.width, source.height);
    out.transcodes.store(!rungs.is_empty(), Ordering::Relaxed);
    let segment = out.channel.config().segment;
    let segment_target = segment.ceil() as u32;
    // Parts of whole frames, at least seven, about the configured part ([`Plan::video`]).
    let plan = Plan::video(segment, out.channel.config().part, source.frame_rate);
    let Plan { frame, part_frames, .. } = plan;
    let part_target = plan.part_target();
    let chunk = f64::from(part_frames) * frame;
    let keyint = (2.0 * segment / frame).round().max(1.0) as u32;
    // The publisher's keyframes start the source's segments; the rungs' keyframes are forced
    // where their splitters start one.
    let source_splitter = Splitter::at_keyframes(segment, plan).publishing_origin(video_origin.clone());
    let rung_splitter = || Splitter::at_any_frame(segment, plan);
    let timing = |target_duration| Timing { target_duration, part_target };
    let mut keep = vec![ladder::SOURCE.to_string(), ladder::AUDIO.to_string()];

    let passthrough = build_bin(&mux_and_sink(out, ladder::SOURCE, chunk, Some(frame)))?;
    let passthrough_in = muxer_input(&passthrough, ladder::SOURCE)?;
    cut_at(&passthrough_in, Cutting::Source(source_splitter))?;
    let source_kind =
        Kind::Video { width: source.width, height: source.height, kbps: None, frame_rate: source.frame_rate };
    // Every video rendition is declared now, before its encoder outputs anything, so the master
    // playlist waits for all of them rather than listing the first ones ready.
    out.channel.add_rendition(out.generation, ladder::SOURCE, source_kind, timing(SOURCE_TARGET_DURATION));
    watch_codec(&passthrough, ladder::SOURCE, out.clone(), Declared::Video)?;
    feed_channel(&passthrough, ladder::SOURCE, out, wall.clone())?;
    link_branch(pipeline, tee, &passthrough, &passthrough_in)?;

    if !rungs.is_empty() {
        // The decoder's queue drops its oldest frames when full: the ingest thread pushes
        // into it and must not wait on a slow ladder ([`warn_overrun`]).
        let mut desc = format!(
            "queue max-size-buffers=0 max-size-bytes=0 max-size-time=3000000000 leaky=downstream name=q ! {} ! tee name=raw\n",
            out.descriptions.decoder.trim()
        );
        for r in &rungs {
            desc.push_str(&format!(
                "raw. ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=3000000000 ! {} ! h264parse ! capsfilter name=cut_{} caps=\"video/x-h264,stream-format=avc,alignment=au\" ! {}\n",
                out.descriptions.rung(r, keyint, &source.colorimetry).trim(),
                r.name,
                mux_and_sink(out, &r.name, chunk, Some(frame))
            ));
        }
        let ladder_bin = build_bin(&desc)?;
        for r in &rungs {
            let kind = Kind::Video {
                width: r.width,
                height: r.height,
                kbps: Some(r.video_kbps),
                frame_rate: source.frame_rate,
            };
            out.channel.add_rendition(out.generation, &r.name, kind, timing(segment_target));
            watch_codec(&ladder_bin, &r.name, out.clone(), Declared::Video)?;
            feed_channel(&ladder_bin, &r.name, out, wall.clone())?;
            cut(&ladder_bin, &format!("cut_{}", r.name), Cutting::Rung(rung_splitter()))?;
            keep.push(r.name.clone());
        }
        force_keyframes(&ladder_bin, rung_splitter(), source.frame_rate.map(|_| frame))?;
        warn_overrun(&ladder_bin, pipeline.name().as_str())?;
        let ladder_in = ghost(&ladder_bin, "q")?;
        link_branch(pipeline, tee, &ladder_bin, &ladder_in)?;
    }
    out.channel.retire_others(out.generation, &keep);
    tracing::info!(
        pipeline = %pipeline.name(),
        source = %format!("{}x{}", source.width, source.height),
        rungs = %rungs.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(","),
        "live ladder attached"
    );
    Ok(())
}

/// Says now and then that the ladder's decoder queue is full and drops frames: the machine
/// does not keep up with the ladder (the `source` and `audio` renditions lose nothing).
fn warn_overrun(bin: &gst::Bin, pipeline: &str) -> Result<(), String> {
    let queue = bin.by_name("q").ok_or("the ladder has no queue q")?;
    let (pipeline, overruns) = (pipeline.to_string(), AtomicU64::new(0));
    queue.connect("overrun", false, move |_| {
        let n = overruns.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(pipeline = %pipeline, overruns = n, "the live ladder is behind; its decoder drops input");
        }
        None
    });
    Ok(())
}

/// `cmafmux` and the appsink of a rendition. The muxer cuts only where it is told ([`cut`]) and
/// asks for no keyframes itself: [`force_keyframes`] does, once for all rungs (the source's
/// keyframes are the publisher's). Its durations are still set: `cmafmux` reports its latency
/// from them.
fn mux_and_sink(out: &LiveOutput, name: &str, chunk: f64, frame: Option<f64>) -> String {
    format!("{} ! {}", mux(out, name, chunk, frame), sink(name))
}

/// How much input a muxer's pad holds before the thread pushing into it waits (the aggregator's
/// `latency`; without it the pad holds one buffer). The ingest thread hands a frame over and
/// moves on instead of waiting for the muxer's task to take the one before: passthrough CPU
/// per push against nginx-rtmp's in the same run went from 3.4–3.7x to 3.0–3.4x (16 and 32
/// pushes, two runs each; docs/live-ingest.md). A muxer more than this behind holds its pushing
/// thread up. With one pad, aggregation never waits for it: it only bounds the queue.
const MUX_QUEUE: Duration = Duration::from_secs(1);

fn mux(out: &LiveOutput, name: &str, chunk: f64, frame: Option<f64>) -> String {
    let fragment = out.channel.config().segment - frame.unwrap_or(0.0);
    format!(
        "cmafmux name=mux_{name} fragment-duration={} chunk-duration={} send-force-keyunit=false manual-split=true latency={}",
        (fragment * 1e9).round() as u64,
        (chunk * 1e9).round() as u64,
        MUX_QUEUE.as_nanos(),
    )
}

fn sink(name: &str) -> String {
    format!("appsink name=out_{name} buffer-list=true sync=false async=false max-buffers=64 drop=false")
}

/// Sends a force-keyframe event down to every rung's encoder before each decoded frame where
/// `splitter` (identical to each rung muxer's, [`cut`]) starts a segment or a part. Each muxer
/// then starts a fragment at the segment's keyframe, and every part of a transcoded rung starts
/// with a keyframe: it is `INDEPENDENT`, so a player switching to this rung starts at the part
/// at its buffer's end instead of going back to the segment's start, behind what it already
/// plays (docs/live-hls.md, "Switching renditions").
///
/// With a frame rate stated (`frame`, seconds), the decoded frames are first put on its grid
/// ([`Regular`]), so the rungs' parts last exactly their frames.
fn force_keyframes(bin: &gst::Bin, splitter: Splitter, frame: Option<f64>) -> Result<(), String> {
    let pad = bin.by_name("raw").and_then(|t| t.static_pad("sink")).ok_or("the ladder has no raw tee")?;
    let splitter = std::sync::Mutex::new(splitter);
    let regular = std::sync::Mutex::new(frame.map(Regular::new));
    pad.add_probe(gst::PadProbeType::BUFFER, move |pad, info| {
        if let (Some(gst::PadProbeData::Buffer(buffer)), Ok(mut regular)) = (&mut info.data, regular.lock()) {
            if let Some(r) = regular.as_mut() {
                r.apply(buffer.make_mut());
            }
        }
        let Some(gst::PadProbeData::Buffer(buffer)) = &info.data else { return gst::PadProbeReturn::Ok };
        let Some(pts) = buffer.pts() else { return gst::PadProbeReturn::Ok };
        // Decoded frames: in presentation order, every one a possible keyframe.
        let force = match splitter.lock() {
            Ok(mut s) => s.next(pts.nseconds(), pts.nseconds(), true).is_some(),
            Err(_) => false,
        };
        if force {
            let running = pad.sticky_event::<gst::event::Segment>(0).and_then(|s| {
                s.segment().downcast_ref::<gst::ClockTime>().and_then(|s| s.to_running_time(pts))
            });
            let event = gstreamer_video::DownstreamForceKeyUnitEvent::builder()
                .timestamp(pts)
                .running_time(running.unwrap_or(pts))
                .all_headers(true)
                .build();
            if !pad.send_event(event) {
                tracing::debug!("a keyframe request was not taken");
            }
        }
        gst::PadProbeReturn::Ok
    });
    Ok(())
}

/// Decoded frames put on the grid of their stated frame rate: a publisher's timestamps are
/// rounded to the millisecond (FLV: 33, 33, 34 ms at 30 fps), and each rung's encoder keeps them
/// and the nominal duration (33.3 ms), so a part's last sample overlapped the next part by a
/// tick and a segment of 60 frames was listed as 2.002 s for 2.000. A frame within 2 ms of the
/// grid is moved onto it, with the nominal duration; one further off (a dropped frame's gap, a
/// rate the caps misstate) starts the grid again from itself.
struct Regular {
    frame: f64,
    origin: Option<gst::ClockTime>,
}

impl Regular {
    /// How far a frame may sit from the grid and still be moved onto it (ns).
    const SNAP: f64 = 2e6;

    fn new(frame: f64) -> Regular {
        Regular { frame: frame * 1e9, origin: None }
    }

    fn apply(&mut self, buffer: &mut gst::BufferRef) {
        let Some(pts) = buffer.pts() else { return };
        let (origin, n) = match self.origin {
            Some(origin) if pts >= origin => {
                let n = ((pts - origin).nseconds() as f64 / self.frame).round();
                let on = origin.nseconds() as f64 + n * self.frame;
                if (on - pts.nseconds() as f64).abs() > Self::SNAP {
                    (pts, 0)
                } else {
                    (origin, n as u64)
                }
            }
            _ => (pts, 0),
        };
        self.origin = Some(origin);
        let at = origin.nseconds().saturating_add((n as f64 * self.frame).round() as u64);
        buffer.set_pts(gst::ClockTime::from_nseconds(at));
        buffer.set_duration(gst::ClockTime::from_nseconds(self.frame.round() as u64));
    }
}

fn build_bin(description: &str) -> Result<gst::Bin, String> {
    gst::parse::bin_from_description(description, false)
        .map_err(|e| format!("live pipeline: {e}: {description}"))
}

/// The input of a `source` or `audio` branch: a ghost of its muxer's sink pad. The ingest
/// thread (for RTMP the thread that read the tag: flvdemux → parse → tee) pushes straight into
/// the muxer, with no queue thread and no element between. Each thread a buffer crosses costs a
/// wake-up per FLV tag, which was most of what a passthrough push cost (`benches/live_capacity`:
/// 128 → 64 threads and 18.3k → 10.7k futex calls per second at 16 passthrough pushes, together
/// with the ingest description losing its demuxer queues; docs/live-ingest.md), and each element
/// its chain function per frame (an `identity` stood here until 2026-11-28). Only the ladder's
/// decoder, which is slow, and the taps keep a queue of their own, both leaky. Muxing waits for
/// nothing but its own input, so this never holds the ingest thread up for long
/// ([`MUX_QUEUE`]).
fn muxer_input(bin: &gst::Bin, name: &str) -> Result<gst::GhostPad, String> {
    ghost(bin, &format!("mux_{name}"))
}

/// A ghost of the sink pad of `bin`'s element `first`: the branch's input.
fn ghost(bin: &gst::Bin, first: &str) -> Result<gst::GhostPad, String> {
    let sink = bin
        .by_name(first)
        .and_then(|e| e.static_pad("sink"))
        .ok_or_else(|| format!("live branch has no {first} sink pad"))?;
    let ghost = gst::GhostPad::with_target(&sink).map_err(|e| format!("ghost pad: {e}"))?;
    bin.add_pad(&ghost).map_err(|e| format!("ghost pad: {e}"))?;
    Ok(ghost)
}

/// Adds `bin` to the running pipeline and links a new pad of `tee` to its input.
fn link_branch(
    pipeline: &gst::Pipeline,
    tee: &gst::Element,
    bin: &gst::Bin,
    input: &gst::GhostPad,
) -> Result<(), String> {
    pipeline.add(bin).map_err(|e| format!("adding a live branch: {e}"))?;
    let src = tee.request_pad_simple("src_%u").ok_or("tee gave no pad")?;
    src.link(input).map_err(|e| format!("linking a live branch: {e}"))?;
    bin.sync_state_with_parent().map_err(|e| format!("starting a live branch: {e}"))?;
    Ok(())
}

/// How a rendition is declared to the channel.
enum Declared {
    /// Already, when the ladder was planned: only its codec comes from the caps.
    Video,
    /// From the caps: the audio's part target depends on its sample rate.
    Audio { target_duration: u32, segment: f64, part: f64 },
}

/// Records a rendition's codec (and declares the audio) when its muxer's input caps arrive.
fn watch_codec(bin: &gst::Bin, name: &str, out: Arc<LiveOutput>, declared: Declared) -> Result<(), String> {
    let mux = bin.by_name(&format!("mux_{name}")).ok_or_else(|| format!("no muxer for {name}"))?;
    let pad = mux.static_pad("sink").or_else(|| mux.sink_pads().into_iter().next());
    let pad = match pad {
        Some(p) => p,
        None => {
            mux.request_pad_simple("sink_%u").ok_or_else(|| format!("muxer of {name} has no sink pad"))?
        }
    };
    let name = name.to_string();
    pad.add_probe(gst::PadProbeType::EVENT_DOWNSTREAM, move |_, info| {
        let Some(gst::PadProbeData::Event(ev)) = &info.data else { return gst::PadProbeReturn::Ok };
        let gst::EventView::Caps(c) = ev.view() else { return gst::PadProbeReturn::Ok };
        let Some(s) = c.caps().structure(0) else { return gst::PadProbeReturn::Ok };
        let codec_data = s.get::<gst::Buffer>("codec_data").ok();
        let bytes = codec_data.as_ref().and_then(|b| b.map_readable().ok());
        let bytes: &[u8] = bytes.as_deref().unwrap_or(&[]);
        let codec = match &declared {
            Declared::Video => crate::media::cmaf::avc1_codec(bytes),
            Declared::Audio { target_duration, segment, part } => {
                let channels = s.get::<i32>("channels").unwrap_or(2).max(1) as u32;
                let rate = s.get::<i32>("rate").unwrap_or(48_000);
                let part_target = Plan::aac(*segment, *part, rate).part_target();
                let timing = Timing { target_duration: *target_duration, part_target };
                out.channel.add_rendition(out.generation, &name, Kind::Audio { channels }, timing);
                crate::media::cmaf::mp4a_codec(bytes)
            }
        };
        match codec {
            Some(codec) => out.channel.set_codec(out.generation, &name, codec),
            None => tracing::warn!(rendition = %name, "no codec data in the caps; left out of the master playlist"),
        }
        gst::PadProbeReturn::Ok
    });
    Ok(())
}

/// Moves each muxer output into the channel: the init section, then one part per chunk.
fn feed_channel(bin: &gst::Bin, name: &str, out: &Arc<LiveOutput>, wall: WallBase) -> Result<(), String> {
    let sink = bin
        .by_name(&format!("out_{name}"))
        .and_then(|e| e.downcast::<gst_app::AppSink>().ok())
        .ok_or_else(|| format!("no appsink for {name}"))?;
    let (out, name) = (out.clone(), name.to_string());
    // Parts are cut in decode order ([`cut`]): their length is what their samples add up to, in
    // the timescale of the last init section.
    let timescale = AtomicU32::new(0);
    sink.set_callbacks(
        gst_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                if let Some(list) = sample.buffer_list() {
                    take_output(&out, &name, list, sample.segment(), &wall, &timescale);
                } else if let Some(buffer) = sample.buffer() {
                    let mut list = gst::BufferList::new();
                    if let Some(l) = list.get_mut() {
                        l.add(buffer.copy());
                    }
                    take_output(&out, &name, &list, sample.segment(), &wall, &timescale);
                }
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    Ok(())
}

fn take_output(
    out: &LiveOutput,
    name: &str,
    list: &gst::BufferListRef,
    segment: Option<&gst::Segment>,
    wall: &WallBase,
    timescale: &AtomicU32,
) {
    let mut buffers = list.iter().peekable();
    if let Some(first) = buffers.peek() {
        if first.flags().contains(gst::BufferFlags::DISCONT | gst::BufferFlags::HEADER) {
            if let Ok(map) = first.map_readable() {
                timescale.store(crate::media::cmaf::timescale(&map).unwrap_or(0), Ordering::Relaxed);
                out.channel.feed(out.generation, name, Chunk::Init(Bytes::copy_from_slice(&map)));
            }
            buffers.next();
        }
    }
    let Some(header) = buffers.peek() else { return };
    let starts_segment = !header.flags().contains(gst::BufferFlags::DELTA_UNIT);
    let mut duration = header.duration().map_or(0.0, |d| d.nseconds() as f64 / 1e9);
    let pts = header.pts();
    let pdt = pts.and_then(|pts| {
        let running = segment
            .and_then(|s| s.downcast_ref::<gst::ClockTime>())
            .and_then(|s| s.to_running_time(pts))
            .unwrap_or(pts);
        wall.get().map(|base| *base + chrono::Duration::nanoseconds(running.nseconds() as i64))
    });
    let mut data = Vec::with_capacity(list.calculate_size());
    for b in buffers {
        if let Ok(map) = b.map_readable() {
            data.extend_from_slice(&map);
        }
    }
    let scale = timescale.load(Ordering::Relaxed);
    if let Some(ticks) = crate::media::cmaf::duration_ticks(&data).filter(|_| scale > 0) {
        duration = ticks as f64 / f64::from(scale);
    }
    let independent = starts_segment
        || name == ladder::AUDIO
        || crate::media::cmaf::starts_with_sync_sample(&data) == Some(true);
    out.channel.feed(
        out.generation,
        name,
        // Every AAC frame decodes on its own: each audio part is independent (RFC 8216bis
        // 4.4.4.9), so a player joining or switching mid-segment need not go back for audio.
        // A video part is independent when it starts with a keyframe: every part of a transcoded
        // rung (see [`force_keyframes`]), the source's where the publisher put one.
        Chunk::Part { starts_segment, independent, duration, pdt, data: Bytes::from(data) },
    );
}

/// How long to let the muxers drain at the end of a push before the pipeline stops.
pub const DRAIN: Duration = Duration::from_secs(2);
