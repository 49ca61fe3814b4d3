//! What every rendition's muxing shares, on a push's pipeline and on the session's encoders
//! ([`super::encoders`]): the `cmafmux` and appsink of a rendition, and the callbacks that move
//! its output into the channel ([`Target`]). Appsink callbacks only copy bytes into the
//! [`Channel`] under its short lock; they never block on the network (anchor: gst-plugins-rs
//! `mux/isobmff/examples/hls_live.rs`: the init section is the `DISCONT|HEADER` buffer, a
//! fragment's first chunk is a `HEADER` buffer without `DELTA_UNIT`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

use super::channel::{Channel, Chunk, Kind, Timing};
use super::ladder;
use super::split::Plan;

/// Where a muxer's output goes: one push's generation of a channel, and the wall-clock time of
/// its running time zero (a rung's muxer sees the push's running time too: the encoders' own
/// timeline is taken off at its input, [`super::encoders`]).
#[derive(Clone)]
pub(super) struct Target {
    pub channel: Arc<Channel>,
    pub generation: u32,
    pub wall: WallBase,
}

/// The wall-clock time of the push's media timestamp zero, set when its first media arrives;
/// `EXT-X-PROGRAM-DATE-TIME` of a part is this plus the part's timestamp.
pub type WallBase = Arc<OnceLock<DateTime<Utc>>>;

/// `cmafmux` and the appsink of a rendition. The muxer cuts only where it is told ([`super::cut`]) and
/// asks for no keyframes itself: the encoders force them ([`super::encoders`]), once for all rungs (the source's
/// keyframes are the publisher's). Its durations are still set: `cmafmux` reports its latency
/// from them.
pub(super) fn mux_and_sink(segment: f64, name: &str, chunk: f64, frame: Option<f64>) -> String {
    format!("{} ! {}", mux(segment, name, chunk, frame), sink(name))
}

/// How much input a muxer's pad holds before the thread pushing into it waits (the aggregator's
/// `latency`; without it the pad holds one buffer). The thread that pushes (the encoder's)
/// hands a frame over and moves on instead of waiting for the muxer's task to take the one
/// before. A muxer more than this behind holds its pushing thread up. With one pad, aggregation
/// never waits for it: it only bounds the queue.
const MUX_QUEUE: Duration = Duration::from_secs(1);

fn mux(segment: f64, name: &str, chunk: f64, frame: Option<f64>) -> String {
    let fragment = segment - frame.unwrap_or(0.0);
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

pub(super) fn build_bin(description: &str) -> Result<gst::Bin, String> {
    gst::parse::bin_from_description(description, false)
        .map_err(|e| format!("live pipeline: {e}: {description}"))
}

/// The input of a rung's branch: a ghost of its muxer's sink pad, which the encoder's output
/// pushes into with no queue thread and no element between (each thread a buffer crosses costs
/// a wake-up a frame; docs/live-ingest.md). Muxing waits for nothing but its own input, so this
/// never holds the encoder up for long ([`MUX_QUEUE`]).
pub(super) fn muxer_input(bin: &gst::Bin, name: &str) -> Result<gst::GhostPad, String> {
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

/// How a rendition is declared to the channel.
pub(super) enum Declared {
    /// Already, when the ladder was planned: only its codec comes from the caps.
    Video,
    /// From the caps: the audio's part target depends on its sample rate.
    Audio { target_duration: u32, segment: f64, part: f64 },
}

/// Records a rendition's codec (and declares the audio) when its muxer's input caps arrive.
pub(super) fn watch_codec(bin: &gst::Bin, name: &str, to: Target, declared: Declared) -> Result<(), String> {
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
        if let gst::EventView::Caps(c) = ev.view() {
            note_caps(&to, &name, &declared, c.caps());
        }
        gst::PadProbeReturn::Ok
    });
    Ok(())
}

/// Records a rendition's codec from its caps (and declares the audio, whose part target depends
/// on its sample rate): what its muxer, or the packager ([`super::pack`]), is given.
pub(super) fn note_caps(to: &Target, name: &str, declared: &Declared, caps: &gst::CapsRef) {
    let Some(s) = caps.structure(0) else { return };
    let codec_data = s.get::<gst::Buffer>("codec_data").ok();
    let bytes = codec_data.as_ref().and_then(|b| b.map_readable().ok());
    let bytes: &[u8] = bytes.as_deref().unwrap_or(&[]);
    let codec = match declared {
        Declared::Video => crate::media::cmaf::avc1_codec(bytes),
        Declared::Audio { target_duration, segment, part } => {
            let channels = s.get::<i32>("channels").unwrap_or(2).max(1) as u32;
            let rate = s.get::<i32>("rate").unwrap_or(48_000);
            let part_target = Plan::aac(*segment, *part, rate).part_target();
            let timing = Timing { target_duration: *target_duration, part_target };
            to.channel.add_rendition(to.generation, name, Kind::Audio { channels }, timing);
            crate::media::cmaf::mp4a_codec(bytes)
        }
    };
    match codec {
        Some(codec) => to.channel.set_codec(to.generation, name, codec),
        None => {
            tracing::warn!(rendition = %name, "no codec data in the caps; left out of the master playlist")
        }
    }
}

/// Moves each muxer output into the channel: the init section, then one part per chunk.
pub(super) fn feed_channel(bin: &gst::Bin, name: &str, to: Target) -> Result<(), String> {
    let sink = bin
        .by_name(&format!("out_{name}"))
        .and_then(|e| e.downcast::<gst_app::AppSink>().ok())
        .ok_or_else(|| format!("no appsink for {name}"))?;
    let name = name.to_string();
    // Parts are cut in decode order ([`super::cut`]): their length is what their samples add up to, in
    // the timescale of the last init section.
    let timescale = AtomicU32::new(0);
    sink.set_callbacks(
        gst_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                if let Some(list) = sample.buffer_list() {
                    take_output(&to, &name, list, sample.segment(), &timescale);
                } else if let Some(buffer) = sample.buffer() {
                    let mut list = gst::BufferList::new();
                    if let Some(l) = list.get_mut() {
                        l.add(buffer.copy());
                    }
                    take_output(&to, &name, &list, sample.segment(), &timescale);
                }
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    Ok(())
}

fn take_output(
    to: &Target,
    name: &str,
    list: &gst::BufferListRef,
    segment: Option<&gst::Segment>,
    timescale: &AtomicU32,
) {
    let mut buffers = list.iter().peekable();
    if let Some(first) = buffers.peek() {
        if first.flags().contains(gst::BufferFlags::DISCONT | gst::BufferFlags::HEADER) {
            if let Ok(map) = first.map_readable() {
                timescale.store(crate::media::cmaf::timescale(&map).unwrap_or(0), Ordering::Relaxed);
                to.channel.feed(to.generation, name, Chunk::Init(Bytes::copy_from_slice(&map)));
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
        to.wall.get().map(|base| *base + chrono::Duration::nanoseconds(running.nseconds() as i64))
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
    to.channel.feed(
        to.generation,
        name,
        // Every AAC frame decodes on its own: each audio part is independent (RFC 8216bis
        // 4.4.4.9), so a player joining or switching mid-segment need not go back for audio.
        // A video part is independent when it starts with a keyframe: every part of a transcoded
        // rung (the encoders force them: [`super::encoders`]), the source's where the publisher
        // put one.
        Chunk::Part { starts_segment, independent, duration, pdt, data: Bytes::from(data) },
    );
}
