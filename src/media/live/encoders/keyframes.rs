//! The keyframes of the rungs, forced once on the decoded frames for every rung
//! ([`force_keyframes`]), and the grid those frames are put on ([`Regular`]).

use std::sync::{Arc, Mutex};

use gstreamer as gst;
use gstreamer::prelude::*;

use super::{lock, Spec, Timeline};
use crate::media::live::split::Splitter;

/// Sends a force-keyframe event down to every rung's encoder before each decoded frame where
/// the push's splitter (identical to each rung muxer's, [`crate::media::live::cut`]) starts a
/// segment or a part, and before its first frame. Each muxer
/// then starts a fragment at the segment's keyframe, and every part of a transcoded rung starts
/// with a keyframe: it is `INDEPENDENT`, so a player switching to this rung starts at the part
/// at its buffer's end instead of going back to the segment's start, behind what it already
/// plays (docs/live-hls.md, "Switching renditions").
///
/// With a frame rate stated ([`Spec::regular`]), the decoded frames are first put on its grid
/// ([`Regular`]), so the rungs' parts last exactly their frames.
pub(super) fn force_keyframes(
    raw: &gst::Element,
    spec: Spec,
    timeline: Arc<Mutex<Timeline>>,
) -> Result<(), String> {
    let pad = raw.static_pad("sink").ok_or("the ladder has no raw tee")?;
    // The push whose frames pass now, its splitter and its grid of frames.
    let state: Mutex<Option<(u32, Splitter, Option<Regular>)>> = Mutex::new(None);
    pad.add_probe(gst::PadProbeType::BUFFER, move |pad, info| {
        let Some(gst::PadProbeData::Buffer(buffer)) = &mut info.data else { return gst::PadProbeReturn::Ok };
        let Some(at) = super::running_time(pad, buffer) else { return gst::PadProbeReturn::Ok };
        let Some(generation) = lock(&timeline).of(at).map(|p| p.target.generation) else {
            return gst::PadProbeReturn::Ok;
        };
        let mut state = lock(&state);
        // A push's first frame starts its first segment: a keyframe (the encoders' first frame
        // is one anyway; a later push's follows another push's frames).
        let first = state.as_ref().is_none_or(|(g, ..)| *g != generation);
        if first {
            *state = Some((generation, spec.splitter(), spec.regular.map(Regular::new)));
        }
        let Some((_, splitter, regular)) = state.as_mut() else { return gst::PadProbeReturn::Ok };
        if let Some(r) = regular.as_mut() {
            r.apply(buffer.make_mut());
        }
        let Some(pts) = buffer.pts() else { return gst::PadProbeReturn::Ok };
        // Decoded frames: in presentation order, every one a possible keyframe.
        if splitter.next(pts.nseconds(), pts.nseconds(), true).is_some() || first {
            // For the next frame, which is this one: a running time would be compared with the
            // encoder's own, which x264enc puts 1000 hours on from the frame it is first forced
            // to key on (then every later request is older than that one, and refused).
            let event = gstreamer_video::DownstreamForceKeyUnitEvent::builder()
                .timestamp(pts)
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
pub(super) struct Regular {
    frame: f64,
    origin: Option<gst::ClockTime>,
}

impl Regular {
    /// How far a frame may sit from the grid and still be moved onto it (ns).
    const SNAP: f64 = 2e6;

    pub(super) fn new(frame: f64) -> Regular {
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
