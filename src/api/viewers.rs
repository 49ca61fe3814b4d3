//! The viewer fields of stream and VOD records (CONTRACT: Viewers): the nodes' reports summed,
//! each live session's peak, and VOD views and watch time. Read in one query per kind for a whole
//! page of records.

use poem_openapi::Object;

use super::error::ApiResult;
use super::state::ApiState;
use super::streams::{Stream, StreamListItem};
use super::vod::Vod;
use crate::domain::time::now_ms;
use crate::services::viewers::REPORT_STALE;
use crate::store::streams::StreamRow;
use crate::store::vods::VodRow;

/// Viewers now, by protocol.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Object)]
pub struct ViewerCounts {
    /// HLS playback sessions that fetched a playlist in the last 10 s.
    pub hls: i64,
    /// WHEP viewers connected.
    pub webrtc: i64,
    /// RTSP clients connected.
    pub rtsp: i64,
}

/// A record that shows a stream's viewers: its id, and its `viewers`, `viewerCounts` and
/// `peakViewers` to fill.
pub(super) trait Watched {
    fn stream_id(&self) -> &str;
    fn viewer_fields(&mut self) -> (&mut i64, &mut ViewerCounts, &mut i64);
}

impl Watched for Stream {
    fn stream_id(&self) -> &str {
        &self.id
    }
    fn viewer_fields(&mut self) -> (&mut i64, &mut ViewerCounts, &mut i64) {
        (&mut self.viewers, &mut self.viewer_counts, &mut self.peak_viewers)
    }
}

impl Watched for StreamListItem {
    fn stream_id(&self) -> &str {
        &self.id
    }
    fn viewer_fields(&mut self) -> (&mut i64, &mut ViewerCounts, &mut i64) {
        (&mut self.viewers, &mut self.viewer_counts, &mut self.peak_viewers)
    }
}

/// Fills the viewer fields of `records`.
pub(super) async fn fill_streams<T: Watched>(app: &ApiState, records: &mut [T]) -> ApiResult<()> {
    let ids: Vec<&str> = records.iter().map(Watched::stream_id).collect();
    let after = now_ms() - REPORT_STALE.as_millis() as i64;
    let counts = app.db.viewer_counts(&ids, after).await?;
    let peaks = app.db.viewer_peaks(&ids).await?;
    for r in records.iter_mut() {
        let c = counts.get(r.stream_id()).copied().unwrap_or_default();
        let peak = peaks.get(r.stream_id()).copied().unwrap_or(0);
        let (viewers, by, most) = r.viewer_fields();
        (*viewers, *by, *most) =
            (c.total(), ViewerCounts { hls: c.hls, webrtc: c.webrtc, rtsp: c.rtsp }, peak.max(c.total()));
    }
    Ok(())
}

/// Fills the views, watch time and (for a recording) peak viewers of `vods`.
pub(super) async fn fill_vods(app: &ApiState, vods: &mut [Vod]) -> ApiResult<()> {
    let ids: Vec<&str> = vods.iter().map(|v| v.id.as_str()).collect();
    let views = app.db.vod_views(&ids).await?;
    let sessions: Vec<(&str, &str)> =
        vods.iter().filter_map(|v| Some((v.stream_id.as_deref()?, v.session_id.as_deref()?))).collect();
    let peaks = app.db.session_viewer_peaks(&sessions).await?;
    for v in vods.iter_mut() {
        let (n, seconds) = views.get(&v.id).copied().unwrap_or_default();
        (v.views, v.watch_seconds) = (n, (seconds * 10.0).round() / 10.0);
        if let (Some(stream), Some(session)) = (&v.stream_id, &v.session_id) {
            v.peak_viewers = Some(peaks.get(&(stream.clone(), session.clone())).copied().unwrap_or(0));
        }
    }
    Ok(())
}

/// The stream record of `row`, with its viewers.
pub(super) async fn stream_record(app: &ApiState, row: &StreamRow) -> ApiResult<Stream> {
    let mut stream = Stream::from_row(row, app);
    fill_streams(app, std::slice::from_mut(&mut stream)).await?;
    Ok(stream)
}

/// The VOD record of `row`, with its views.
pub(super) async fn vod_record(app: &ApiState, row: &VodRow) -> ApiResult<Vod> {
    let mut vod = Vod::from_row(row, app);
    fill_vods(app, std::slice::from_mut(&mut vod)).await?;
    Ok(vod)
}
