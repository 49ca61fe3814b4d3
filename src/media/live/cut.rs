//! Where a rung's `cmafmux` cuts ([`cut_at`]): an `FMP4MuxSplitNow` event before the frame
//! that begins each segment and part, as a [`Splitter`] identical to the one that forced the
//! encoder's keyframes decides (by presentation time, as there: x264 here makes no B-frames; a
//! requested keyframe that did not come gives a part rather than a segment that starts
//! mid-GOP), and the frames between two cuts handed to the muxer together.
//!
//! Why together: a muxer is an aggregator, whose own thread takes each buffer its input pad is
//! given, so every frame handed over on its own wakes that thread (docs/live-ingest.md). A muxer in
//! `manual-split` mode writes a part only once it is told to cut and has the frame after the
//! cut (with B-frames, at a segment's start, a few more). So after each cut frames go on one by
//! one until the muxer has written the part before it; the rest of the part's frames are held
//! here, and pushed as one buffer list just ahead of the next cut. Each part is written at the
//! moment it was before, and its muxer's thread wakes a few times a part instead of once a
//! frame.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use gstreamer as gst;
use gstreamer::prelude::*;

use super::split::{lasts_until_next, Split, Splitter};

/// The most frames held for one muxer: a part has far fewer (20 at 60 fps and 333-ms parts,
/// 16 AAC frames at 48 kHz); past this (a publisher that sends no keyframe, say) they go on
/// at once, as they would without holding.
const MAX_HELD: usize = 64;

/// What the probe of [`cut_at`] keeps between two frames.
struct State {
    splitter: Option<Splitter>,
    /// The frames of the part being fed, not yet pushed.
    held: gst::BufferList,
}

impl State {
    /// The frames held so far, leaving none.
    fn take(&mut self) -> Option<gst::BufferList> {
        (!self.held.is_empty()).then(|| std::mem::replace(&mut self.held, gst::BufferList::new()))
    }
}

/// Tells the muxer whose sink pad `ghost` (the branch's input) targets (`manual-split`) where
/// each segment and part begins ([`Splitter`]), with an `FMP4MuxSplitNow` event before the
/// frame, and hands it each part's frames at once (see the module's doc). Frames and events are
/// seen as they reach `ghost`, and what is held goes on from its internal pad, ahead of the
/// events. An element in between (an `identity`) cost its chain function on every frame.
pub(super) fn cut_at(ghost: &gst::GhostPad, splitter: Splitter) -> Result<(), String> {
    let internal = ghost.internal().ok_or("the branch's input has no internal pad")?;
    cut_between(ghost.upcast_ref(), ghost.upcast_ref(), internal.upcast_ref(), splitter)
}

/// Events are seen on `input` and frames on `frames`; held frames, cuts and the frame after a
/// cut leave by `output`, whose peer is the muxer. Nothing is pushed while the lock is held: a
/// push may wait for the muxer, and a flush must still get through then.
fn cut_between(
    input: &gst::Pad,
    frames: &gst::Pad,
    output: &gst::Pad,
    splitter: Splitter,
) -> Result<(), String> {
    let state = Arc::new(Mutex::new(State { splitter: Some(splitter), held: gst::BufferList::new() }));
    let events = state.clone();
    let out = output.clone();
    let kinds = gst::PadProbeType::EVENT_DOWNSTREAM | gst::PadProbeType::EVENT_FLUSH;
    input.add_probe(kinds, move |_, info| {
        let Some(gst::PadProbeData::Event(ev)) = &info.data else { return gst::PadProbeReturn::Ok };
        let mut state = events.lock().unwrap_or_else(|p| p.into_inner());
        // What a flush discards.
        if let gst::EventView::FlushStop(_) = ev.view() {
            state.take();
            return gst::PadProbeReturn::Ok;
        }
        // The frames held go before any event that keeps its place among them (EOS, caps):
        // none is lost or reordered.
        if ev.is_serialized() {
            if let Some(held) = state.take() {
                drop(state);
                if let Err(e) = out.push_list(held) {
                    tracing::debug!(error = ?e, "a muxer refused held frames before an event");
                }
            }
        }
        gst::PadProbeReturn::Ok
    });
    // Set at each cut, cleared when the muxer writes: until it has written the part before the
    // cut, frames go on one by one, since it may need more than the first frame after the cut
    // (at a segment's start with B-frames, the frames after the keyframe in decode order).
    let closing = Arc::new(AtomicBool::new(true));
    match output.peer().and_then(|p| p.parent_element()).and_then(|mux| mux.static_pad("src")) {
        Some(written) => {
            let closing = closing.clone();
            written.add_probe(gst::PadProbeType::BUFFER | gst::PadProbeType::BUFFER_LIST, move |_, _| {
                closing.store(false, Ordering::Release);
                gst::PadProbeReturn::Ok
            });
        }
        // No muxer to watch: every frame goes on at once (`closing` stays set).
        None => tracing::debug!(pad = %output.name(), "no muxer to cut: frames are not held"),
    }
    let output = output.clone();
    frames.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        let lock = || state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(gst::PadProbeData::Buffer(buffer)) = &info.data else { return gst::PadProbeReturn::Ok };
        let mut state = lock();
        let split = match (state.splitter.as_mut(), buffer.pts()) {
            (Some(s), Some(pts)) => {
                let flagged = !buffer.flags().contains(gst::BufferFlags::DELTA_UNIT);
                // By presentation time, every frame a candidate: see the module's doc.
                s.next(pts.nseconds(), pts.nseconds(), true).map(|split| {
                    if split == Split::Segment && !flagged {
                        tracing::debug!("a requested keyframe did not come; a part instead of a segment");
                        return Split::Part;
                    }
                    split
                })
            }
            // Nothing to cut by: held with the rest, in its place.
            _ => None,
        };
        if let Some(split) = split {
            // The frames held, the cut, then this frame as it is: the muxer closes a part when
            // the first frame after its cut arrives (it times the part's last frame by it), or
            // a few after it, so that frame goes on at once, as before there was any holding.
            closing.store(true, Ordering::Release);
            let held = state.take().map(|held| last_lasts_until(held, buffer.dts().or(buffer.pts())));
            drop(state);
            let pushed = held.map_or(Ok(gst::FlowSuccess::Ok), |held| output.push_list(held));
            let event = gst::event::CustomDownstream::builder(
                gst::Structure::builder("FMP4MuxSplitNow").field("chunk", split == Split::Part).build(),
            )
            .build();
            if !output.push_event(event) {
                tracing::debug!("a muxer did not take a split");
            }
            return match pushed {
                Ok(_) => gst::PadProbeReturn::Ok,
                // A muxer's refusal (a codec switch mid-push: NotNegotiated) reaches the ingest
                // thread as before, which ends the push.
                Err(e) => {
                    info.data = None;
                    info.flow_res = Err(e);
                    gst::PadProbeReturn::Handled
                }
            };
        }
        if closing.load(Ordering::Acquire) {
            return gst::PadProbeReturn::Ok;
        }
        let Some(gst::PadProbeData::Buffer(buffer)) = info.data.take() else {
            return gst::PadProbeReturn::Ok;
        };
        state.held.make_mut().add(buffer);
        let mut pushed = Ok(gst::FlowSuccess::Ok);
        if state.held.len() >= MAX_HELD {
            if let Some(held) = state.take() {
                drop(state);
                pushed = output.push_list(held);
            }
        }
        info.flow_res = pushed;
        gst::PadProbeReturn::Handled
    });
    Ok(())
}

/// `held` with its last frame lasting until `next` (the decode time of the frame after it), so
/// the muxer's `trun` gives the part its true length: `cmafmux` times a chunk's last sample by
/// the next frame when it has it and by the buffer's own duration when it writes first, and a
/// publisher's millisecond-rounded timestamps (33, 33, 34 ms at 30 fps) differ from the nominal
/// 33.3 ms, so parts came out a tick long (rung segments listed 2.002 s for 2.000 s). A gap
/// longer than a few frames (a stall, a new clock) is left as it was.
fn last_lasts_until(mut held: gst::BufferList, next: Option<gst::ClockTime>) -> gst::BufferList {
    let list = held.make_mut();
    let n = list.len();
    let Some(last) = n.checked_sub(1).and_then(|i| list.get_mut(i)) else { return held };
    let (Some(next), Some(at)) = (next, last.dts().or(last.pts())) else { return held };
    let Some(gap) = next.checked_sub(at).filter(|g| !g.is_zero()) else { return held };
    if lasts_until_next(gap.nseconds(), last.duration().map(gst::ClockTime::nseconds)) {
        last.set_duration(gap);
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::live::pack::tests::encoded;
    use crate::media::live::split::Plan;
    use gstreamer_app as gst_app;
    use std::time::{Duration, Instant};

    /// The sizes of the `mdat` payloads in `bytes` (top-level ISO BMFF boxes).
    fn mdat_bytes(bytes: &[u8]) -> usize {
        let (mut at, mut total) = (0, 0);
        while at + 8 <= bytes.len() {
            let size = u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
            assert!(size >= 8, "a box of {size} bytes");
            if &bytes[at + 4..at + 8] == b"mdat" {
                total += size - 8;
            }
            at += size;
        }
        total
    }

    /// Every byte of `sample`'s buffers.
    fn bytes_of(sample: &gst::Sample) -> Vec<u8> {
        let mut bytes = Vec::new();
        for buffer in sample.buffer_list().into_iter().flat_map(|l| l.iter()).chain(sample.buffer()) {
            bytes.extend_from_slice(&buffer.map_readable().expect("readable"));
        }
        bytes
    }

    /// Checks that each part comes out within a few frames of its cut, as before frames were
    /// held (not a part later, as it would if the frames after the cut were held too), and that
    /// at the end every frame is in the output. `cuts` are the frames that begin a part, as the
    /// probe's splitter sees them.
    fn parts_come_out_in_time(
        caps: &gst::Caps,
        frames: &[gst::Buffer],
        cuts: &[usize],
        splitter: Splitter,
        mux: &str,
    ) {
        gst::init().expect("GStreamer");
        crate::media::gst::register_builtin().expect("the built-in elements");
        assert!(cuts.len() >= 5, "cuts at {cuts:?}");
        let desc = format!("{mux} name=m manual-split=true ! appsink name=out sync=false buffer-list=true");
        let bin = gst::parse::bin_from_description(&desc, false).expect("the test bin builds");
        let pad = bin.by_name("m").and_then(|m| m.static_pad("sink")).expect("muxer pad");
        let input = gst::GhostPad::with_target(&pad).expect("ghost");
        bin.add_pad(&input).expect("ghost added");
        cut_at(&input, splitter).expect("cut");
        let pipeline = gst::Pipeline::new();
        let src = gst_app::AppSrc::builder().format(gst::Format::Time).build();
        pipeline.add_many([src.upcast_ref(), bin.upcast_ref::<gst::Element>()]).expect("added");
        src.static_pad("src").expect("appsrc pad").link(&input).expect("linked");
        let sink = bin.by_name("out").and_downcast::<gst_app::AppSink>().expect("appsink");
        src.set_caps(Some(caps));
        pipeline.set_state(gst::State::Playing).expect("plays");
        let mut out = Vec::new();
        // Waits for the next output that holds media (not the init section alone).
        let next_part = |out: &mut Vec<u8>| -> bool {
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                let Some(sample) = sink.try_pull_sample(gst::ClockTime::from_mseconds(100)) else { continue };
                let bytes = bytes_of(&sample);
                out.extend_from_slice(&bytes);
                if mdat_bytes(&bytes) > 0 {
                    return true;
                }
            }
            false
        };
        // The frames after a cut by which the muxer has written the part before it: with
        // B-frames (two here), it wrote a segment's last part at the fourth frame after the cut
        // when every frame went on at once; the next cut is further on.
        const AFTER: usize = 4;
        for (i, frame) in frames.iter().enumerate() {
            src.push_buffer(frame.clone()).expect("pushed");
            if let Some(cut) = i.checked_sub(AFTER).filter(|c| cuts.contains(c)) {
                assert!(cuts.iter().all(|&c| c <= cut || c > i), "cuts {cuts:?} are further apart");
                assert!(next_part(&mut out), "the part before frame {cut} was written by frame {i}");
            }
        }
        src.end_of_stream().expect("eos");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !sink.is_eos() && Instant::now() < deadline {
            if let Some(sample) = sink.try_pull_sample(gst::ClockTime::from_mseconds(100)) {
                out.extend_from_slice(&bytes_of(&sample));
            }
        }
        pipeline.set_state(gst::State::Null).expect("stops");
        let pushed: usize = frames.iter().map(|f| f.size()).sum();
        assert_eq!(mdat_bytes(&out), pushed, "every frame's bytes are in the parts, the last ones' too");
    }

    /// A rung: x264 without B-frames, cut by presentation time.
    #[test]
    fn rung_parts_are_written_at_their_cut_and_no_frame_is_lost() {
        let (caps, frames) = encoded(
            "videotestsrc num-buffers=150 ! video/x-raw,width=320,height=240,framerate=30/1 ! x264enc bframes=0 key-int-max=8 speed-preset=ultrafast ! h264parse ! video/x-h264,stream-format=avc,alignment=au ! appsink name=out sync=false",
        );
        let (segment, plan) = (2.0, Plan::video(2.0, 0.333, Some(30.0)));
        let mut splitter = Splitter::at_any_frame(segment, plan);
        let cuts: Vec<usize> = (0..frames.len())
            .filter(|&i| {
                let pts = frames[i].pts().expect("pts").nseconds();
                splitter.next(pts, pts, true).is_some()
            })
            .collect();
        let mux = format!(
            "cmafmux fragment-duration={} chunk-duration={}",
            ((segment - plan.frame) * 1e9).round() as u64,
            (plan.chunk() * 1e9).round() as u64
        );
        parts_come_out_in_time(&caps, &frames, &cuts, Splitter::at_any_frame(segment, plan), &mux);
    }
}
