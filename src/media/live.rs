//! The live outputs of pushes: the LL-HLS packaging of each push that offers it, continued
//! after a reconnect within the grace period. The push session itself (the stream's status and
//! events) is the stream lifecycle's, in [`crate::services::streams`].

use std::path::PathBuf;
use std::sync::Arc;

use crate::domain::stream::Protocol;
use crate::media::live_hls::channel::{ChannelConfig, Channels};
use crate::media::live_hls::pipeline::{Descriptions, LiveOutput};
use crate::services::policy::{KeyError, Policies, Resource};
use crate::store::streams::StreamRow;

/// What the live outputs are made with.
pub struct LiveOutputs {
    pub channels: Arc<Channels>,
    pub policies: Arc<Policies>,
    /// Where DVR segments are kept: `<data dir>/live`.
    pub live_dir: PathBuf,
    pub part_ms: u32,
    pub segment_ms: u32,
    /// Operators' pipeline descriptions (`SLUICE_PIPELINES_DIR`).
    pub pipelines_dir: Option<PathBuf>,
}

impl LiveOutputs {
    /// The LL-HLS packaging of a push of `stream` whose session is open: the stream's channel,
    /// continued after a reconnect within the grace period, or a new one. `None` when the stream
    /// does not offer LL-HLS. With `drmEnabled` the media is encrypted with the stream's content
    /// key (created on its first encrypted push); a key that cannot be had fails the push rather
    /// than sending the media clear.
    pub async fn start(&self, stream: &StreamRow) -> Result<Option<LiveOutput>, KeyError> {
        if !stream.protocols().contains(&Protocol::Llhls) {
            return Ok(None);
        }
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
        Ok(Some(LiveOutput {
            channel,
            generation,
            qualities: stream.qualities(),
            descriptions: Descriptions::load(self.pipelines_dir.as_deref()),
        }))
    }
}
