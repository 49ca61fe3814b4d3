//! The VOD's thumbnail: one frame of the top rung's picture, a quarter in, as JPEG.

use std::path::Path;
use std::sync::{Arc, Mutex};

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

/// The thumbnail's frame: a quarter in, at most 5 s (past fades from black), or the first.
fn thumbnail_at(duration: Option<f64>) -> gst::ClockTime {
    let at = duration.map_or(0.0, |d| (d / 4.0).min(5.0));
    gst::ClockTime::from_nseconds((at * 1e9) as u64)
}

/// Lets one frame at [`thumbnail_at`] through to the JPEG encoder, and writes it to `thumb.jpg`.
pub(super) fn thumbnail(
    bin: &gst::Bin,
    work: &Path,
    duration: Option<f64>,
    written: Arc<Mutex<bool>>,
) -> Result<(), String> {
    let (Some(queue), Some(sink)) =
        (bin.by_name("thumbq"), bin.by_name("thumb").and_then(|e| e.downcast::<gst_app::AppSink>().ok()))
    else {
        return Err("no thumbnail branch".into());
    };
    let at = thumbnail_at(duration);
    let passed = std::sync::atomic::AtomicBool::new(false);
    if let Some(pad) = queue.static_pad("src") {
        pad.add_probe(gst::PadProbeType::BUFFER, move |pad, info| {
            let Some(gst::PadProbeData::Buffer(b)) = &info.data else { return gst::PadProbeReturn::Ok };
            // Stream time: sources whose timestamps do not start at zero (MPEG-TS) count from
            // their start too.
            let time = b.pts().map(|pts| {
                pad.sticky_event::<gst::event::Segment>(0)
                    .and_then(|s| {
                        s.segment().downcast_ref::<gst::ClockTime>().and_then(|s| s.to_stream_time(pts))
                    })
                    .unwrap_or(pts)
            });
            let late_enough = time.is_none_or(|t| t >= at);
            if late_enough && !passed.swap(true, std::sync::atomic::Ordering::SeqCst) {
                gst::PadProbeReturn::Ok
            } else {
                gst::PadProbeReturn::Drop
            }
        });
    }
    let path = work.join("thumb.jpg");
    sink.set_callbacks(
        gst_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                let mut done = written.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(map) = sample.buffer().and_then(|b| b.map_readable().ok()) {
                    if !*done && std::fs::write(&path, &map[..]).is_ok() {
                        *done = true;
                    }
                }
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_is_a_quarter_in_at_most_five_seconds() {
        assert_eq!(thumbnail_at(Some(8.0)).nseconds(), 2_000_000_000);
        assert_eq!(thumbnail_at(Some(600.0)).nseconds(), 5_000_000_000);
        assert_eq!(thumbnail_at(None).nseconds(), 0);
    }
}
