//! GStreamer set-up and what every pipeline of media shares: one `gst::init`, the built-in
//! elements registered once (`cmafmux`, `sluicescale`), a pipeline that stops when dropped,
//! operators' pipeline descriptions, and what caps say of colorimetry and frame rate.

use std::sync::OnceLock;

mod scale;

/// Initialises GStreamer once.
pub fn init() -> Result<(), String> {
    static INIT: OnceLock<Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| gstreamer::init().map_err(|e| format!("GStreamer: {e}"))).clone()
}

/// Registers the built-in elements once: the CMAF/fMP4 muxers of gst-plugins-rs (`cmafmux`) and
/// the ladder's scaler ([`scale`], `sluicescale`).
pub(crate) fn register_builtin() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        gstfmp4::plugin_register_static().map_err(|e| format!("fmp4 plugin: {e}"))?;
        scale::register().map_err(|e| format!("sluicescale: {e}"))
    })
    .clone()
}

/// A started pipeline that is set to NULL when this goes: GStreamer must never dispose of a
/// PLAYING pipeline (its streaming threads would run on freed elements). Owners stop pipelines
/// on a blocking thread by dropping this there; wherever else it is dropped instead (a task
/// cancelled, a blocking job the runtime did not run because it was shutting down) the change
/// happens where it stands, the last resort that keeps the process alive.
pub struct StopOnDrop(pub gstreamer::Pipeline);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        use gstreamer::prelude::ElementExt;
        let _ = self.0.set_state(gstreamer::State::Null);
    }
}

/// A pipeline description: the file `name` in the operator's folder (`SLUICE_PIPELINES_DIR`) if
/// it is there and readable, else the built-in text of `pipelines/<name>`.
pub fn description(dir: Option<&std::path::Path>, name: &str, builtin: &str) -> String {
    dir.map(|d| d.join(name))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_else(|| builtin.to_string())
}

/// The colorimetry of video with `caps` (raw or H.264) as a caps string: the one they state, else
/// GStreamer's default for their size (BT.709 above 576 lines, BT.601 at or below). A scaler
/// whose output caps leave colorimetry open fixes the default of the *output* size, so an HD
/// source scaled to an SD rung would go through a matrix conversion on every frame (a fifth
/// more time in a one-rung decode-scale-encode pipeline) and come out with every pixel moved off the
/// source's values (SSIM 0.955 against 0.997 at 360p of 1080p); the ladders pin this instead.
pub fn colorimetry_of(caps: &gstreamer::CapsRef) -> Option<String> {
    let s = caps.structure(0)?;
    if let Ok(stated) = s.get::<String>("colorimetry") {
        return Some(stated);
    }
    let (width, height) = (s.get::<i32>("width").ok()?, s.get::<i32>("height").ok()?);
    let (width, height) = (u32::try_from(width).ok()?, u32::try_from(height).ok()?);
    gstreamer_video::VideoInfo::builder(gstreamer_video::VideoFormat::I420, width, height)
        .build()
        .ok()
        .map(|info| info.colorimetry().to_string())
}

/// The highest frame rate Sluice takes a video's caps at their word for (frames a second).
pub const MAX_FRAME_RATE: f64 = 240.0;

/// The frame rate `s` (video caps) states, when it is one a camera or encoder can have: at least
/// one frame a second and at most [`MAX_FRAME_RATE`]. A publisher's SPS can state any rate
/// (a million frames a second, or 0/1 for "variable"); such a claim is treated as unknown, so it
/// is neither planned for nor shown (the master playlist's `FRAME-RATE`, the stream's `input`).
pub fn frame_rate_of(s: &gstreamer::StructureRef) -> Option<f64> {
    let f = s.get::<gstreamer::Fraction>("framerate").ok()?;
    if f.numer() <= 0 || f.denom() <= 0 {
        return None;
    }
    Some(f64::from(f.numer()) / f64::from(f.denom())).filter(|r| (1.0..=MAX_FRAME_RATE).contains(r))
}

/// The running time of a frame at `pts` leaving (or reaching) `pad`, by the pad's segment.
pub fn running_time(pad: &gstreamer::Pad, pts: gstreamer::ClockTime) -> Option<gstreamer::ClockTime> {
    use gstreamer::prelude::PadExtManual;
    let segment = pad.sticky_event::<gstreamer::event::Segment>(0)?;
    segment.segment().downcast_ref::<gstreamer::ClockTime>()?.to_running_time(pts)
}

#[cfg(test)]
mod tests {
    use super::{colorimetry_of, frame_rate_of};
    use std::str::FromStr;

    #[test]
    fn colorimetry_is_the_stated_one_or_the_default_for_the_size() {
        gstreamer::init().expect("GStreamer");
        let of = |s: &str| colorimetry_of(&gstreamer::Caps::from_str(s).expect("caps"));
        assert_eq!(of("video/x-h264,width=1920,height=1080").as_deref(), Some("bt709"));
        assert_eq!(of("video/x-raw,format=I420,width=640,height=360").as_deref(), Some("bt601"));
        assert_eq!(of("video/x-raw,width=640,height=360,colorimetry=bt709").as_deref(), Some("bt709"));
        assert_eq!(of("video/x-h264,width=1280,height=720,colorimetry=bt601").as_deref(), Some("bt601"));
        assert_eq!(of("video/x-h264"), None);
        assert_eq!(of("video/x-h264,width=-4,height=720"), None);
    }

    #[test]
    fn a_frame_rate_is_taken_only_when_a_camera_could_have_it() {
        gstreamer::init().expect("GStreamer");
        let of = |s: &str| {
            let caps = gstreamer::Caps::from_str(s).expect("caps");
            caps.structure(0).and_then(frame_rate_of)
        };
        assert_eq!(of("video/x-h264,framerate=30/1"), Some(30.0));
        assert_eq!(of("video/x-h264,framerate=30000/1001"), Some(30_000.0 / 1001.0));
        assert_eq!(of("video/x-h264,framerate=240/1"), Some(240.0));
        assert_eq!(of("video/x-h264,framerate=1/1"), Some(1.0));
        // What an SPS or a WebRTC caps may claim, and what is not a rate at all.
        assert_eq!(of("video/x-h264,framerate=1000000/1"), None);
        assert_eq!(of("video/x-h264,framerate=241/1"), None);
        assert_eq!(of("video/x-h264,framerate=1/2"), None);
        assert_eq!(of("video/x-h264,framerate=0/1"), None);
        assert_eq!(of("video/x-h264"), None);
    }
}
