//! Attaches LL-HLS packaging to a push's ingest pipeline (`pipelines/ingest.txt`):
//!
//! - `audio` tee → the `audio` rendition (AAC passes through: encoded once, by the publisher,
//!   and shared by every variant);
//! - `video` tee → the `source` variant (H.264 passes through untranscoded);
//! - `video` tee → the live session's encoders ([`super::encoders`]: decode once, then per
//!   quality at or below the source height scale and encode) → `cmafmux` → a rendition.
//!
//! The two renditions that pass through are packaged on the thread that brings their frames
//! ([`super::pack`]); the rungs, on the encoders' threads, by `cmafmux`. The video branches are
//! built when the first video caps arrive, since the ladder depends on the source size. Every
//! rendition is cut into segments and parts where a [`Splitter`] says (the rungs' `cmafmux`
//! through [`super::cut`], in `manual-split` mode): in decode order, for publishers' B-frames,
//! with each segment's parts laid out so that its last is not one a player skips
//! ([`super::split`]). The keyframes of the transcoded renditions are forced by the encoders,
//! where an identical splitter starts a segment or a part, so segments align across renditions.
//! The rung muxers' output goes to the channel through [`super::mux`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

use super::channel::{Channel, Kind, Timing, SOURCE_TARGET_DURATION};
pub use super::encoders::Descriptions;
use super::encoders::{EncoderSlot, Encoders, Spec};
use super::ladder;
pub use super::mux::WallBase;
use super::mux::{Declared, Target};
use super::pack::{self, Packager};
use super::split::{Plan, Splitter};
use crate::domain::stream::Quality;

/// What a push's packaging needs.
pub struct LiveOutput {
    pub channel: Arc<Channel>,
    pub generation: u32,
    pub qualities: Vec<Quality>,
    pub descriptions: Descriptions,
    /// Set when the ladder is planned with a rung to encode (at the first video caps).
    pub transcodes: Arc<AtomicBool>,
    /// The live session's encoders, which a push that plans the same ladder continues.
    pub encoders: EncoderSlot,
}

/// Attaches the audio branch now and the video branches at the first video caps.
/// Blocking (it builds bins and starts them): [`crate::media::ingest::pipeline::IngestPipeline::start`] calls
/// it on a blocking thread; the video branches are attached on a streaming thread.
pub fn attach(pipeline: &gst::Pipeline, out: LiveOutput, wall: WallBase) -> Result<(), String> {
    crate::media::gst::register_builtin()?;
    let out = Arc::new(out);
    let audio_tee = pipeline.by_name("audio").ok_or("ingest pipeline has no audio tee")?;
    let video_tee = pipeline.by_name("video").ok_or("ingest pipeline has no video tee")?;
    let segment = out.channel.config().segment;
    let target = segment.ceil() as u32;
    let part = out.channel.config().part;

    // The audio's segments keep to the video's grid, from the video's first frame, which the
    // `source` splitter publishes here when it comes.
    let video_origin = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
    let to = Target { channel: out.channel.clone(), generation: out.generation, wall };
    let declared = Declared::Audio { target_duration: target, segment, part };
    let cutting = pack::Cutting::Audio { segment, part, video: video_origin.clone() };
    link_sink(pipeline, &audio_tee, pack::sink(Packager::new(ladder::AUDIO, to.clone(), declared, cutting)))?;

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
        if let Err(e) = attach_video(&pipeline, &video_tee, &out, &to, &source, &video_origin) {
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
    to: &Target,
    source: &SourceFormat,
    video_origin: &Arc<std::sync::atomic::AtomicU64>,
) -> Result<(), String> {
    let rungs = ladder::plan(&out.qualities, source.width, source.height);
    out.transcodes.store(!rungs.is_empty(), Ordering::Relaxed);
    let segment = out.channel.config().segment;
    let segment_target = segment.ceil() as u32;
    // Parts of whole frames, at least seven, about the configured part ([`Plan::video`]).
    let plan = Plan::video(segment, out.channel.config().part, source.frame_rate);
    let (frame, part_target) = (plan.frame, plan.part_target());
    // The publisher's keyframes start the source's segments.
    let source_splitter = Splitter::at_keyframes(segment, plan).publishing_origin(video_origin.clone());
    let timing = |target_duration| Timing { target_duration, part_target };
    let mut keep = vec![ladder::SOURCE.to_string(), ladder::AUDIO.to_string()];

    let cutting = pack::Cutting::Source(source_splitter);
    let passthrough = pack::sink(Packager::new(ladder::SOURCE, to.clone(), Declared::Video, cutting));
    let source_kind =
        Kind::Video { width: source.width, height: source.height, kbps: None, frame_rate: source.frame_rate };
    // Every video rendition is declared now, before its encoder outputs anything, so the master
    // playlist waits for all of them rather than listing the first ones ready.
    out.channel.add_rendition(out.generation, ladder::SOURCE, source_kind, timing(SOURCE_TARGET_DURATION));
    link_sink(pipeline, tee, passthrough)?;

    if !rungs.is_empty() {
        for r in &rungs {
            let kind = Kind::Video {
                width: r.width,
                height: r.height,
                kbps: Some(r.video_kbps),
                frame_rate: source.frame_rate,
            };
            out.channel.add_rendition(out.generation, &r.name, kind, timing(segment_target));
            keep.push(r.name.clone());
        }
        let spec = Spec {
            rungs: rungs.clone(),
            descriptions: out.descriptions.clone(),
            height: source.height,
            colorimetry: source.colorimetry.clone(),
            segment,
            plan,
            regular: source.frame_rate.map(|_| frame),
        };
        let encoders = Encoders::join(&out.encoders, spec, to.clone(), pipeline)?;
        feed_encoders(pipeline, tee, encoders, out.generation)?;
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

/// Hands every frame of the `video` tee to the session's encoders, on the ingest thread (an
/// appsink that only passes the frame on: [`Encoders::feed`] never waits).
fn feed_encoders(
    pipeline: &gst::Pipeline,
    tee: &gst::Element,
    encoders: Arc<Encoders>,
    generation: u32,
) -> Result<(), String> {
    let sink = gst_app::AppSink::builder()
        .name("encoders")
        .sync(false)
        .async_(false)
        .max_buffers(1)
        .drop(false)
        .build();
    sink.set_callbacks(
        gst_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                encoders.feed(generation, &sample);
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    link_sink(pipeline, tee, sink.upcast())
}

/// Adds `sink` to the running pipeline and links a new pad of `tee` to it (no bin: a ghost pad
/// would be one more hop a frame).
fn link_sink(pipeline: &gst::Pipeline, tee: &gst::Element, sink: gst::Element) -> Result<(), String> {
    pipeline.add(&sink).map_err(|e| format!("adding a live branch: {e}"))?;
    let src = tee.request_pad_simple("src_%u").ok_or("tee gave no pad")?;
    let input = sink.static_pad("sink").ok_or("a live branch has no sink pad")?;
    src.link(&input).map_err(|e| format!("linking a live branch: {e}"))?;
    sink.sync_state_with_parent().map_err(|e| format!("starting a live branch: {e}"))?;
    Ok(())
}

/// How long to let the muxers drain at the end of a push before the pipeline stops.
pub const DRAIN: Duration = Duration::from_secs(2);
