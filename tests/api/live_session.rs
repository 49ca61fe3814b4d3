//! A stream's live session outlives a push by the reconnect window (CONTRACT: Continuity): a
//! publisher that drops and comes back (over RTMP, or over SRT after RTMP) keeps the same
//! session, and the stream stays `live` meanwhile, with the slate on every output. A WHEP viewer
//! and an RTSP client connected before the drop receive the slate's frames and then the new
//! push's, the LL-HLS playlists keep advancing through the gap (a discontinuity before the slate
//! and one after it), the ladder's encoders go on (no encoders are started for the slate or the
//! second push), the session is recorded as one VOD without the slate, with one `stream.live`
//! and one `stream.ended`; when the window lapses the playlists end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use serde_json::{json, Value};

use crate::live_hls::get_text;
use crate::support::receiver::Receiver;
use crate::support::webrtc::WhepViewer;
use crate::support::{eventually, ffmpeg_push, ffmpeg_push_ts, spawn_app, Backend, Killed, TestApp};
use crate::webhooks::create_webhook;

const VIDEO: &str = "testsrc2=size=640x360:rate=30";

/// An RTSP client over TCP that counts the H.264 access units it receives.
struct RtspViewer {
    pipeline: gst::Pipeline,
    frames: Arc<AtomicU64>,
}

impl RtspViewer {
    fn play(url: &str) -> RtspViewer {
        gst::init().expect("GStreamer");
        let description = format!(
            "rtspsrc name=src location={url} protocols=tcp latency=100 src. ! rtph264depay \
             ! video/x-h264,alignment=au ! appsink name=out sync=false"
        );
        let pipeline = gst::parse::launch(&description)
            .expect("an RTSP client pipeline")
            .downcast::<gst::Pipeline>()
            .expect("a pipeline");
        let frames = Arc::new(AtomicU64::new(0));
        let counted = frames.clone();
        let sink =
            pipeline.by_name("out").and_then(|e| e.downcast::<gst_app::AppSink>().ok()).expect("appsink");
        sink.set_callbacks(
            gst_app::AppSinkCallbacks::builder()
                .new_sample(move |sink| {
                    sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                    counted.fetch_add(1, Ordering::Relaxed);
                    Ok(gst::FlowSuccess::Ok)
                })
                .build(),
        );
        pipeline.set_state(gst::State::Playing).expect("the RTSP client plays");
        RtspViewer { pipeline, frames }
    }

    fn frames(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }
}

impl Drop for RtspViewer {
    fn drop(&mut self) {
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

async fn create(t: &TestApp, body: Value) -> Value {
    let resp = t.post_json_with(&t.project_url("/streams"), &t.key, &body).await;
    assert_eq!(resp.status(), 201);
    resp.json().await.expect("json")
}

async fn record_of(t: &TestApp, id: &str) -> Value {
    t.get_with(&t.project_url(&format!("/streams/{id}")), &t.key).await.json().await.expect("json")
}

/// The stream's status and the input it shows active.
async fn status_of(t: &TestApp, id: &str) -> (String, String) {
    let v = record_of(t, id).await;
    let status = v["status"].as_str().unwrap_or_default().to_string();
    (status, v["input"]["active"].as_str().unwrap_or_default().to_string())
}

/// The number of the last part a media playlist lists (`p<n>.m4s`).
fn last_part(playlist: &str) -> Option<u64> {
    playlist
        .lines()
        .rev()
        .filter(|l| l.starts_with("#EXT-X-PART:"))
        .find_map(|l| l.split("URI=\"p").nth(1)?.split('.').next()?.parse().ok())
}

/// A figure of `/metrics` without labels.
async fn metric(t: &TestApp, name: &str) -> Option<u64> {
    let text = t.client.get(t.url("/metrics")).send().await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).and_then(|v| v.trim().parse().ok())
}

async fn whep_viewers(t: &TestApp) -> Option<u64> {
    metric(t, "sluice_whep_viewers").await
}

/// The media playlists of the variants the master at `master` lists (the `source` and a 240p
/// rung), as absolute URLs.
async fn variants(t: &TestApp, master: &str) -> Vec<String> {
    let text = eventually("the master playlist with both variants", Duration::from_secs(30), || async {
        let (status, text) = get_text(t, master).await;
        (status == 200 && text.matches("#EXT-X-STREAM-INF").count() == 2).then_some(text)
    })
    .await;
    let base = &master[..master.rfind('/').expect("a path") + 1];
    text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).map(|uri| format!("{base}{uri}")).collect()
}

/// How the second push of the session is made.
#[derive(Clone, Copy)]
enum Second {
    Rtmp,
    Srt,
}

async fn a_dropped_publisher_comes_back_to_the_same_session(second: Second) {
    let t = spawn_app(Backend::Sqlite).await;
    let rx = Receiver::start().await;
    create_webhook(&t, &rx.url(), json!(["stream.live", "stream.ended"])).await;
    let stream = create(
        &t,
        json!({
            "name": "reconnect",
            "protocols": ["llhls", "webrtc", "rtsp"],
            "qualities": ["240p"],
            "vodEnabled": true,
            "reconnectWindow": 20
        }),
    )
    .await;
    assert_eq!(stream["reconnectWindow"], 20);
    let id = stream["_id"].as_str().expect("id").to_string();
    let rtmp = stream["ingestUrl"].as_str().expect("ingestUrl").to_string();
    let first = ffmpeg_push(&rtmp, VIDEO, 30, &["-b:v", "800k"]);

    let whep = stream["playbackUrls"]["webrtc"].as_str().expect("a WHEP URL").to_string();
    let viewer = eventually("a WHEP viewer", Duration::from_secs(30), || async {
        WhepViewer::try_play(&whep).await.ok()
    })
    .await;
    viewer.wait_for("WHEP frames", Duration::from_secs(30), |r| r.video_frames >= 30).await;
    let rtsp = RtspViewer::play(stream["playbackUrls"]["rtsp"].as_str().expect("an RTSP URL"));
    eventually("RTSP frames", Duration::from_secs(30), || async { (rtsp.frames() >= 30).then_some(()) })
        .await;
    let playlists = variants(&t, stream["playbackUrls"]["hls"].as_str().expect("hls")).await;
    assert!(playlists.iter().any(|p| p.contains("/240p/")), "a 240p rung: {playlists:?}");
    let encoders = metric(&t, "sluice_live_encoders_started_total").await;
    assert_eq!(encoders, Some(1), "the first push started the session's encoders");
    assert_eq!(status_of(&t, &id).await, ("live".to_string(), "primary".to_string()));

    // The publisher drops: the stream stays live and the slate goes out.
    drop::<Killed>(first);
    let gone = std::time::Instant::now();
    eventually("the slate to be the active input", Duration::from_secs(10), || async {
        (status_of(&t, &id).await == ("live".to_string(), "slate".to_string())).then_some(())
    })
    .await;
    eprintln!("the slate was the active input {:?} after the publisher dropped", gone.elapsed());
    let (whep_before, rtsp_before) = (viewer.received().video_frames, rtsp.frames());
    // Every playlist keeps advancing, a part at least a second after the drop.
    for playlist in &playlists {
        let (_, at_drop) = get_text(&t, playlist).await;
        let before = last_part(&at_drop).unwrap_or_default();
        eventually("the playlist to advance with the slate", Duration::from_secs(10), || async {
            let (status, text) = get_text(&t, playlist).await;
            (status == 200 && text.contains("#EXT-X-DISCONTINUITY") && last_part(&text)? >= before + 8)
                .then_some(())
        })
        .await;
    }
    viewer
        .wait_for("the WHEP viewer to receive the slate", Duration::from_secs(15), |r| {
            r.video_frames >= whep_before + 30
        })
        .await;
    eventually("the RTSP client to receive the slate", Duration::from_secs(15), || async {
        (rtsp.frames() >= rtsp_before + 30).then_some(())
    })
    .await;
    let (whep_before, rtsp_before) = (viewer.received().video_frames, rtsp.frames());

    // It comes back within the window.
    let second = match second {
        Second::Rtmp => ffmpeg_push(&rtmp, VIDEO, 30, &["-b:v", "800k"]),
        Second::Srt => {
            ffmpeg_push_ts(stream["srtUrl"].as_str().expect("srtUrl"), VIDEO, 30, &["-b:v", "800k"])
        }
    };
    eventually("the publisher to be the active input again", Duration::from_secs(15), || async {
        (status_of(&t, &id).await == ("live".to_string(), "primary".to_string())).then_some(())
    })
    .await;
    let r = viewer
        .wait_for("the WHEP viewer to receive the new push", Duration::from_secs(30), |r| {
            r.video_frames >= whep_before + 60
        })
        .await;
    eprintln!("WHEP frames: {whep_before} before the publisher came back, {} after", r.video_frames);
    eventually("the RTSP client to receive the new push", Duration::from_secs(30), || async {
        (rtsp.frames() >= rtsp_before + 60).then_some(())
    })
    .await;
    assert_eq!(whep_viewers(&t).await, Some(1), "the same WHEP session, not a new one");

    for playlist in &playlists {
        let continued = eventually("the playlist to continue", Duration::from_secs(30), || async {
            let (status, text) = get_text(&t, playlist).await;
            let after = text.split("#EXT-X-DISCONTINUITY\n").nth(2)?;
            (status == 200 && after.matches("#EXTINF:").count() >= 1).then_some(text)
        })
        .await;
        assert_eq!(
            continued.matches("#EXT-X-DISCONTINUITY\n").count(),
            2,
            "one discontinuity before the slate and one after:\n{continued}"
        );
        assert!(!continued.contains("#EXT-X-ENDLIST"), "{continued}");
        if playlist.contains("/240p/") {
            // The encoders' keyframes are forced for the new push as for the first: its first
            // segment lasts the configured 2 s, and each of its parts starts with a keyframe.
            let after = continued.split("#EXT-X-DISCONTINUITY\n").nth(2).unwrap_or_default();
            let first: f64 = after
                .lines()
                .find_map(|l| l.strip_prefix("#EXTINF:"))
                .and_then(|d| d.trim_end_matches(',').parse().ok())
                .unwrap_or_default();
            assert!((first - 2.0).abs() < 0.05, "the rung's first segment after the reconnect:\n{continued}");
            let parts: Vec<_> = after.lines().filter(|l| l.starts_with("#EXT-X-PART:")).collect();
            assert!(
                !parts.is_empty() && parts.iter().all(|p| p.contains("INDEPENDENT=YES")),
                "every part of the rung starts with a keyframe:\n{continued}"
            );
        }
    }
    assert_eq!(
        metric(&t, "sluice_live_encoders_started_total").await,
        encoders,
        "the slate and the second push feed the session's encoders"
    );
    assert_eq!(rx.events_for(&id), ["stream.live"], "one stream.live, no stream.ended yet");

    // The publisher goes for good: the slate, then after the window the session ends, as one
    // recording, with one stream.ended.
    drop(second);
    eventually("the slate again", Duration::from_secs(10), || async {
        (status_of(&t, &id).await.1 == "slate").then_some(())
    })
    .await;
    let gone = std::time::Instant::now();
    let ended = eventually("the playlists to end", Duration::from_secs(40), || async {
        let (status, text) = get_text(&t, &playlists[0]).await;
        (status == 200 && text.contains("#EXT-X-ENDLIST")).then_some(text)
    })
    .await;
    let after = gone.elapsed();
    assert!(after > Duration::from_secs(15), "the window is 20 s: ended {after:?} after the drop");
    // The slate's segments fill the window up to the end.
    let slate = ended.rsplit("#EXT-X-DISCONTINUITY\n").next().unwrap_or_default();
    assert!(slate.matches("#EXTINF:").count() >= 3, "{ended}");
    eventually("stream.ended", Duration::from_secs(10), || async {
        (rx.events_for(&id) == ["stream.live", "stream.ended"]).then_some(())
    })
    .await;
    assert_eq!(status_of(&t, &id).await.0, "idle");
    let vods = eventually("the recording", Duration::from_secs(60), || async {
        let v: Value =
            t.get_with(&t.project_url(&format!("/vod?streamId={id}")), &t.key).await.json().await.ok()?;
        let items = v["items"].as_array().cloned().unwrap_or_default();
        items.iter().all(|i| i["status"] == "complete").then_some(items).filter(|i| !i.is_empty())
    })
    .await;
    assert_eq!(vods.len(), 1, "one recording of the session: {vods:?}");
    // Without the slate: the two pushes' media, a discontinuity between them.
    let vod_master = vods[0]["playbackUrl"].as_str().expect("playbackUrl").to_string();
    let (_, master) = get_text(&t, &vod_master).await;
    let base = &vod_master[..vod_master.rfind('/').expect("a path") + 1];
    let first = master.lines().find(|l| !l.is_empty() && !l.starts_with('#')).expect("a variant");
    let (_, media) = get_text(&t, &format!("{base}{first}")).await;
    assert_eq!(media.matches("#EXT-X-DISCONTINUITY").count(), 1, "the recording has no slate:\n{media}");
    assert_eq!(rx.events_for(&id), ["stream.live", "stream.ended"]);
    drop(rtsp);
    drop(viewer);
}

#[tokio::test]
async fn an_rtmp_publisher_that_reconnects_keeps_its_viewers_playlist_and_recording() {
    a_dropped_publisher_comes_back_to_the_same_session(Second::Rtmp).await;
}

#[tokio::test]
async fn a_publisher_that_drops_rtmp_and_comes_back_over_srt_keeps_the_session() {
    a_dropped_publisher_comes_back_to_the_same_session(Second::Srt).await;
}
