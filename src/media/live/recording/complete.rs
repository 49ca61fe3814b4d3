//! Completing a recording: from its noted segments, the media playlists (a segment the store
//! did not take as a gap), the master, the thumbnail, then the VOD row with `vod.complete`.

use std::collections::BTreeMap;

use super::playlist::{self, init_uri, segment_uri, Recorded};
use super::{RecordingError, Recordings, RenditionInfo};
use crate::domain::content_key::ContentKey;
use crate::domain::time::now_ms;
use crate::domain::vod::{Bitrate, ProducedRendition, VodStatus};
use crate::media::hls::master::{render_master, AudioRendition, Variant};
use crate::media::live::channel::Kind;
use crate::media::still::{picture, Ask};
use crate::services::policy::Resource;
use crate::storage::vod_prefix;
use crate::store::vods::VodRow;

impl Recordings {
    /// Writes the playlists and thumbnail of recording `id` from its noted segments and turns it
    /// into its VOD. `None` when there is nothing to complete: another process did, or no video
    /// was ever recorded (then the recording is forgotten).
    pub async fn complete(&self, id: &str) -> Result<Option<VodRow>, RecordingError> {
        let prefix = vod_prefix(id);
        let waiting = self.spool.waiting_under(&prefix);
        if waiting > 0 {
            return Err(RecordingError::Spooled(waiting));
        }
        // Spooled and then lost before the store took them.
        let spool_lost = self.spool.lost_under(&prefix);
        let Some(rec) = self.db.recording(id).await? else { return Ok(None) };
        let infos: Vec<RenditionInfo> =
            rec.renditions.as_deref().and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default();
        let mut by_rendition: BTreeMap<String, Vec<Recorded>> = BTreeMap::new();
        for s in self.db.recorded_segments(id).await? {
            let r = Recorded {
                idx: s.idx as u64,
                generation: u32::try_from(s.generation).unwrap_or(0),
                duration: s.duration,
                bytes: u64::try_from(s.bytes).unwrap_or(0),
                lost: s.lost != 0
                    || spool_lost.contains(&format!(
                        "{prefix}/{}/{}",
                        s.rendition,
                        segment_uri(s.idx as u64)
                    )),
                date: s.pdt,
            };
            by_rendition.entry(s.rendition).or_default().push(r);
        }
        // Only renditions recorded from their first segment on, without a gap, are playable.
        for segments in by_rendition.values_mut() {
            let whole = segments.iter().enumerate().take_while(|(i, s)| s.idx == *i as u64).count();
            segments.truncate(whole);
        }
        // A rendition of which nothing reached storage is not there.
        let recorded =
            |info: &&RenditionInfo| by_rendition.get(&info.name).is_some_and(|s| s.iter().any(|s| !s.lost));
        let videos: Vec<&RenditionInfo> =
            infos.iter().filter(recorded).filter(|i| matches!(i.kind, Kind::Video { .. })).collect();
        if videos.is_empty() {
            tracing::info!(recording = %id, "recording: no video was recorded; nothing to keep");
            self.db.drop_recording(id).await?;
            let _ = self.storage.delete_prefix(&prefix, &[]).await;
            return Ok(None);
        }
        let key = match rec.drm_enabled == 1 {
            true => self.policies.content_key(&Resource::Vod(id), true).await?,
            false => None,
        };
        let key_uri = key.map(|_| crate::media::hls::vod::KEY_URI);
        for (name, segments) in &by_rendition {
            if segments.iter().all(|s| s.lost) {
                continue;
            }
            let text = playlist::media_playlist(segments, key_uri);
            self.put(&format!("{prefix}/{name}/index.m3u8"), text.into()).await?;
        }
        let audio = infos.iter().filter(recorded).find_map(|i| match i.kind {
            Kind::Audio { channels } => Some((i, channels)),
            Kind::Video { .. } => None,
        });
        let audio_peak = audio.map_or(0, |(i, _)| playlist::bitrates(&by_rendition[&i.name]).0);
        let mut variants = Vec::new();
        let mut produced = Vec::new();
        for info in &videos {
            let Kind::Video { width, height, kbps, frame_rate } = info.kind else { continue };
            let (peak, average) = playlist::bitrates(&by_rendition[&info.name]);
            let uri = format!("{}/index.m3u8", info.name);
            variants.push(Variant {
                uri: uri.clone(),
                bandwidth: peak + audio_peak,
                width,
                height,
                codec: info.codec.clone().unwrap_or_else(|| "avc1.640028".into()),
                frame_rate,
            });
            let bitrate = kbps.unwrap_or((average / 1000) as u32);
            produced.push(ProducedRendition {
                name: info.name.clone(),
                width,
                height,
                video_bitrate: Bitrate(bitrate).name(),
                average_bandwidth: average,
                peak_bandwidth: peak,
                uri,
            });
        }
        produced.sort_by(|a, b| b.height.cmp(&a.height).then(b.peak_bandwidth.cmp(&a.peak_bandwidth)));
        let audio_rendition = audio.map(|(i, channels)| AudioRendition {
            uri: format!("{}/index.m3u8", i.name),
            codec: i.codec.clone().unwrap_or_else(|| "mp4a.40.2".into()),
            channels,
        });
        if self.storage.get(&format!("{prefix}/thumb.jpg"), Some(0..1)).await?.is_none() {
            let first = by_rendition[&produced[0].name].iter().find(|s| !s.lost);
            if let Some(first) = first {
                self.thumbnail(&prefix, &produced[0].name, first, key).await?;
            }
        }
        let master = render_master(&variants, audio_rendition.as_ref());
        self.put(&format!("{prefix}/master.m3u8"), master.into()).await?;
        let duration =
            by_rendition.values().map(|s| s.iter().map(|s| s.duration).sum::<f64>()).fold(0.0, f64::max);
        let size: u64 = by_rendition.values().flatten().map(|s| s.bytes).sum();
        // What the store did not take, of the rendition that lost the most (CONTRACT: Faults).
        let lost = by_rendition
            .values()
            .map(|s| s.iter().filter(|s| s.lost).map(|s| s.duration).sum::<f64>())
            .fold(0.0, f64::max);
        let error = (lost > 0.0).then(|| {
            format!(
                "{lost:.1} s of {duration:.1} s were lost: the storage did not take them (they play as gaps)"
            )
        });
        let now = now_ms();
        let names = (rec.name.clone(), format!("live-{}", rec.session_id));
        let row = VodRow {
            source_size: Some(size as i64),
            duration: Some((duration * 1000.0).round() / 1000.0),
            renditions: Some(
                serde_json::to_string(&produced).map_err(|e| RecordingError::Other(e.to_string()))?,
            ),
            progress: 100,
            error,
            signed_playback: rec.signed_playback,
            drm_enabled: rec.drm_enabled,
            upload_expires_at: rec.started_at,
            created_at: rec.started_at,
            completed_at: Some(now),
            stream_id: Some(rec.stream_id.clone()),
            session_id: Some(rec.session_id.clone()),
            ..VodRow::new(id.to_string(), rec.project_id.clone(), names, VodStatus::Complete, now)
        };
        let done = self.vods.recorded(&row).await?;
        self.spool.forget_lost(&prefix);
        Ok(done.then_some(row))
    }

    /// `thumb.jpg` from the first segment of rendition `name` (decrypted when encrypted).
    async fn thumbnail(
        &self,
        prefix: &str,
        name: &str,
        first: &Recorded,
        key: Option<ContentKey>,
    ) -> Result<(), RecordingError> {
        let missing = || RecordingError::Other(format!("{name}: its first segment is not in storage"));
        let init = self.storage.get(&format!("{prefix}/{name}/{}", init_uri(first.generation)), None).await?;
        let segment = self.storage.get(&format!("{prefix}/{name}/{}", segment_uri(first.idx)), None).await?;
        let (init, segment) = (init.ok_or_else(missing)?, segment.ok_or_else(missing)?);
        let segment = match key {
            Some(key) => key
                .decrypt(first.idx, &segment)
                .ok_or_else(|| RecordingError::Other("a segment does not decrypt".into()))?,
            None => segment.to_vec(),
        };
        let jpeg = tokio::task::spawn_blocking(move || picture(&init, &segment, Ask::FIRST))
            .await
            .map_err(|e| RecordingError::Other(e.to_string()))?
            .map_err(RecordingError::Other)?;
        self.put(&format!("{prefix}/thumb.jpg"), jpeg.into()).await?;
        Ok(())
    }
}
