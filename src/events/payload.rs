//! Event payloads, built from the rows the store hands out: one builder per aggregate, used by
//! every emitter (API handlers, ingest, the transcode workers), so a `data` object cannot differ
//! by who sent it.

use super::catalog::{
    SimulcastTargetData, StreamEventData, StreamInputSwitchedData, StreamSimulcastData, VodEventData,
};
use crate::domain::stream::InputRole;
use crate::domain::time::iso;
use crate::domain::vod::{OutputFormat, VodStatus};
use crate::store::streams::StreamRow;
use crate::store::vods::VodRow;

/// `data` of the stream events.
pub fn stream(row: &StreamRow) -> StreamEventData {
    let state = row.state();
    StreamEventData {
        id: row.id.clone(),
        name: row.name.clone(),
        stream_key: row.stream_key.clone(),
        status: state.status,
        project_id: row.project_id.clone(),
        vod_enabled: row.vod_enabled == 1,
        created_at: iso(row.created_at),
        reason: state.reason,
    }
}

/// `data` of `stream.input_switched`.
pub fn input_switched(row: &StreamRow, from: InputRole, to: InputRole) -> StreamInputSwitchedData {
    let StreamEventData { id, name, stream_key, status, project_id, vod_enabled, created_at, .. } =
        stream(row);
    StreamInputSwitchedData { id, name, stream_key, status, project_id, vod_enabled, created_at, from, to }
}

/// `data` of the simulcast events.
pub fn simulcast(row: &StreamRow, target: SimulcastTargetData) -> StreamSimulcastData {
    let StreamEventData { id, name, stream_key, status, project_id, vod_enabled, created_at, .. } =
        stream(row);
    StreamSimulcastData { id, name, stream_key, status, project_id, vod_enabled, created_at, target }
}

/// `data` of the VOD events; `playback_base` is `{playback_base}` as served.
pub fn vod(row: &VodRow, playback_base: &str) -> VodEventData {
    let base = format!("{playback_base}/vod/{}", row.id);
    VodEventData {
        id: row.id.clone(),
        name: row.name.clone(),
        status: row.status(),
        project_id: row.project_id.clone(),
        output_format: OutputFormat::Hls,
        playback_url: format!("{base}/master.m3u8"),
        thumbnail_url: format!("{base}/thumb.jpg"),
        source_size: row.source_size,
        completed_at: row.completed_at.map(iso),
        error: (row.status() == VodStatus::Failed).then(|| row.error.clone().unwrap_or_default()),
    }
}
