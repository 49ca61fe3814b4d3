//! Media: ingest and (later) packaging and playback. GStreamer pipelines live here; the
//! protocol state machines beside them do no IO.

pub mod hls;
pub mod ingest;
pub mod limits;
pub mod live;
pub mod live_hls;
pub mod recording;
pub mod rtmp;
pub mod rtsp;
pub mod srt;
pub mod taps;
pub mod vod;
pub mod webrtc;

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
