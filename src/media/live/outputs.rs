//! The live outputs of pushes: the LL-HLS packaging of each push that offers it, continued
//! after a reconnect within the grace period, and the tap of WHEP viewers and RTSP sessions. The push session itself (the stream's status and
//! events) is the stream lifecycle's, in [`crate::services::streams`].

use std::path::PathBuf;
use std::sync::Arc;

use crate::domain::stream::Protocol;
use crate::media::live::channel::{ChannelConfig, Channels};
use crate::media::live::pipeline::{Descriptions, LiveOutput};
use crate::media::live::recording::Recordings;
use crate::media::live::taps::{TapGuard, Taps};
use crate::metrics::{PerStream, StreamCounters};
use crate::services::policy::{KeyError, Policies, Resource};
use crate::store::streams::StreamRow;

/// What a push feeds: LL-HLS packaging (streams that list `llhls`) and the tap that WHEP
/// viewers and RTSP sessions take from (streams that list `webrtc` or `rtsp`).
#[derive(Default)]
pub struct Outputs {
    pub live: Option<LiveOutput>,
    pub tap: Option<TapGuard>,
    /// The stream's byte counters (`/metrics`): the ingest pipeline adds what reaches it.
    pub counters: Option<Arc<StreamCounters>>,
}

/// What the live outputs are made with.
pub struct LiveOutputs {
    pub channels: Arc<Channels>,
    pub taps: Arc<Taps>,
    pub policies: Arc<Policies>,
    /// Where DVR segments are kept: `<data dir>/live`.
    pub live_dir: PathBuf,
    pub part_ms: u32,
    pub segment_ms: u32,
    /// Operators' pipeline descriptions (`SLUICE_PIPELINES_DIR`).
    pub pipelines_dir: Option<PathBuf>,
    /// Where `vodEnabled` streams' sessions are recorded.
    pub recordings: Arc<Recordings>,
    /// Per-stream byte counters (`/metrics`).
    pub per_stream: Arc<PerStream>,
}

impl LiveOutputs {
    /// The LL-HLS packaging of a push of `stream` whose session is open: the stream's channel,
    /// continued after a reconnect within the grace period, or a new one. `None` when the stream
    /// does not offer LL-HLS. With `drmEnabled` the media is encrypted with the stream's content
    /// key (created on its first encrypted push); a key that cannot be had fails the push rather
    /// than sending the media clear.
    pub async fn start(&self, stream: &StreamRow) -> Result<Outputs, KeyError> {
        let protocols = stream.protocols();
        let (webrtc, rtsp) = (protocols.contains(&Protocol::Webrtc), protocols.contains(&Protocol::Rtsp));
        let tap = (webrtc || rtsp)
            .then(|| TapGuard { taps: self.taps.clone(), tap: self.taps.open(&stream.id, webrtc, rtsp) });
        let live = if protocols.contains(&Protocol::Llhls) { self.hls(stream).await? } else { None };
        Ok(Outputs { live, tap, counters: Some(self.per_stream.get(&stream.id)) })
    }

    async fn hls(&self, stream: &StreamRow) -> Result<Option<LiveOutput>, KeyError> {
        let key = if stream.drm_enabled == 1 {
            self.policies.content_key(&Resource::Stream(&stream.id), true).await?
        } else {
            None
        };
        let dvr = (stream.dvr_enabled == 1).then(|| {
            let dir = self.live_dir.join(&stream.id).join(crate::domain::new_id());
            (stream.dvr_duration as f64, dir)
        });
        let config = ChannelConfig {
            part: f64::from(self.part_ms) / 1000.0,
            segment: f64::from(self.segment_ms) / 1000.0,
            dvr,
            key,
        };
        let (channel, generation) = self.channels.start_push(&stream.id, config);
        // A new session of a `vodEnabled` stream is recorded; a reconnect within the grace
        // period continues the channel, and with it the recording it has.
        if stream.vod_enabled == 1 && generation == 0 && !channel.is_recording() {
            match self.recordings.start(stream, &channel.session).await {
                Ok(recorder) => channel.record(Box::new(recorder)),
                Err(e) => {
                    tracing::error!(stream = %stream.id, error = %e, "recording could not start; the push goes on unrecorded")
                }
            }
        }
        Ok(Some(LiveOutput {
            channel,
            generation,
            qualities: stream.qualities(),
            descriptions: Descriptions::load(self.pipelines_dir.as_deref()),
            transcodes: Default::default(),
        }))
    }
}
