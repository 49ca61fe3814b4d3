//! The examples the OpenAPI document shows for the main operations' bodies and answers
//! (`#[oai(example)]` on each type); `tests/openapi.rs` validates each against its schema.

use poem_openapi::types::Example;

use super::streams::{BackupIngest, CreateStream, ObsSettings, PlaybackUrls, Stream, StreamWithCredentials};
use super::vod::{CreateVod, UpdateVod, UploadTarget, Vod, VodWithUpload};
use super::webhooks::{CreateWebhook, CreatedWebhook, Webhook};
use crate::domain::stream::{Protocol, Quality, StreamStatus};
use crate::domain::vod::{default_ladder, AspectRatio, AudioCodec, OutputFormat, VideoCodec, VodStatus};
use crate::events::EventFilter;

impl Example for CreateStream {
    fn example() -> Self {
        CreateStream {
            name: "Main stage".into(),
            qualities: Some(vec![Quality(1080), Quality(720), Quality(480)]),
            protocols: Some(vec![Protocol::Llhls]),
            vod_enabled: None,
            dvr_enabled: Some(true),
            dvr_duration: Some(7200),
            reconnect_window: Some(30),
            drm_enabled: None,
        }
    }
}

impl Example for Stream {
    fn example() -> Self {
        let key = "k7f3q9x2m4";
        Stream {
            id: "st8w2k4n6p1q3r5t7v9x".into(),
            name: "Main stage".into(),
            status: StreamStatus::Idle,
            disabled_reason: None,
            stream_key: key.into(),
            qualities: vec![Quality(1080), Quality(720), Quality(480)],
            protocols: vec![Protocol::Llhls],
            vod_enabled: false,
            dvr_enabled: true,
            dvr_duration: 7200,
            reconnect_window: 30,
            drm_enabled: false,
            signed_playback: false,
            push_username: "u_st8w2k4n".into(),
            rtmp_port: 1935,
            obs: ObsSettings { server: "rtmp://media.example.com:1935/live".into(), stream_key: key.into() },
            whip_url: format!("https://media.example.com/v1/whip/{key}"),
            playback_urls: PlaybackUrls {
                hls: Some("https://media.example.com/play/live/st8w2k4n6p1q3r5t7v9x/master.m3u8".into()),
                webrtc: None,
                rtsp: None,
            },
            created_at: "2026-05-01T12:00:00.000Z".into(),
            updated_at: "2026-05-01T12:00:00.000Z".into(),
            last_push_at: None,
            input: None,
            viewers: 12,
            viewer_counts: crate::api::viewers::ViewerCounts { hls: 10, webrtc: 1, rtsp: 1 },
            peak_viewers: 31,
        }
    }
}

impl Example for StreamWithCredentials {
    fn example() -> Self {
        let password = "Zq4vT8mL2xR7pN1s";
        StreamWithCredentials {
            stream: Stream::example(),
            ingest_url: format!(
                "rtmp://media.example.com:1935/live/k7f3q9x2m4?user=u_st8w2k4n&pass={password}"
            ),
            srt_url: format!(
                "srt://media.example.com:8890?streamid=publish:k7f3q9x2m4&passphrase={password}"
            ),
            push_password: password.into(),
            backup: BackupIngest {
                ingest_url: format!(
                    "rtmp://media.example.com:1935/backup/k7f3q9x2m4?user=u_st8w2k4n&pass={password}"
                ),
                srt_url: format!(
                    "srt://media.example.com:8890?streamid=backup:k7f3q9x2m4&passphrase={password}"
                ),
                obs: ObsSettings {
                    server: "rtmp://media.example.com:1935/backup".into(),
                    stream_key: "k7f3q9x2m4".into(),
                },
            },
        }
    }
}

impl Example for Vod {
    fn example() -> Self {
        Vod {
            id: "vd3k5m7p9r1t3v5x7z9b".into(),
            name: "Keynote".into(),
            filename: "keynote.mp4".into(),
            status: VodStatus::PendingUpload,
            output_format: OutputFormat::Hls,
            video_codec: VideoCodec::H264,
            audio_codec: AudioCodec::Aac,
            aspect_ratio: AspectRatio::Preserve,
            ladder: default_ladder(),
            renditions: Vec::new(),
            progress: 0,
            source_size: None,
            duration: None,
            playback_url: None,
            thumbnail_url: None,
            error: None,
            signed_playback: false,
            drm_enabled: false,
            created_at: "2026-05-01T12:00:00.000Z".into(),
            updated_at: "2026-05-01T12:00:00.000Z".into(),
            completed_at: None,
            archived_at: None,
            stream_id: None,
            session_id: None,
            views: 42,
            watch_seconds: 1530.5,
            peak_viewers: None,
            clip_of: None,
            mp4: false,
            downloads_status: None,
            downloads: Vec::new(),
            downloads_error: None,
        }
    }
}

impl Example for VodWithUpload {
    fn example() -> Self {
        VodWithUpload {
            vod: Vod::example(),
            upload: Some(UploadTarget {
                url: "https://media.example.com/upload/vd3k5m7p9r1t3v5x7z9b?expires=1777640400&sig=3f9a…"
                    .into(),
                method: "PUT".into(),
                expires_at: "2026-05-01T13:00:00.000Z".into(),
            }),
        }
    }
}

impl Example for CreateVod {
    fn example() -> Self {
        CreateVod {
            name: "Keynote".into(),
            filename: Some("keynote.mp4".into()),
            output_format: None,
            video_codec: None,
            audio_codec: None,
            aspect_ratio: Some(AspectRatio::Preserve),
            ladder: None,
            drm_enabled: None,
            clip: None,
            mp4: Some(true),
        }
    }
}

impl Example for UpdateVod {
    fn example() -> Self {
        UpdateVod { name: None, mp4: Some(true) }
    }
}

impl Example for Webhook {
    fn example() -> Self {
        Webhook {
            id: "wh2j4l6n8q0s2u4w6y8a".into(),
            url: "https://app.example.com/hooks/sluice".into(),
            description: "Production app".into(),
            events: ["stream.live", "stream.ended", "vod.complete"]
                .iter()
                .filter_map(|e| EventFilter::parse(e).ok())
                .collect(),
            enabled: true,
            consecutive_failures: 0,
            created_at: "2026-05-01T12:00:00.000Z".into(),
            updated_at: "2026-05-01T12:00:00.000Z".into(),
        }
    }
}

impl Example for CreatedWebhook {
    fn example() -> Self {
        CreatedWebhook { webhook: Webhook::example(), secret: "9c1e5f0a7b3d8e2f4a6c0b9d1e3f5a7c".into() }
    }
}

impl Example for CreateWebhook {
    fn example() -> Self {
        CreateWebhook {
            url: "https://app.example.com/hooks/sluice".into(),
            description: Some("Production app".into()),
            events: Webhook::example().events,
            enabled: None,
        }
    }
}
