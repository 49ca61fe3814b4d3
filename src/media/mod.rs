//! Media: ingest and (later) packaging and playback. GStreamer pipelines live here; the
//! protocol state machines beside them do no IO.

pub mod hls;
pub mod ingest;
pub mod live;
pub mod live_hls;
pub mod rtmp;
pub mod vod;

/// A pipeline description: the file `name` in the operator's folder (`SLUICE_PIPELINES_DIR`) if
/// it is there and readable, else the built-in text of `pipelines/<name>`.
pub fn description(dir: Option<&std::path::Path>, name: &str, builtin: &str) -> String {
    dir.map(|d| d.join(name))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_else(|| builtin.to_string())
}
