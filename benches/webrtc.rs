//! `cargo bench --bench webrtc`: WebRTC playback (WHEP) of a live push, beside LL-HLS of the same
//! push in the same run, on a release `sluice serve`.
//!
//! **Glass to glass.** A 640×360 30 fps push over RTMP (GStreamer's `rtmp2sink`, which is
//! librtmp like OBS; x264 `tune=zerolatency`, a keyframe a second) whose every frame carries the
//! wall clock at the moment it was drawn, painted as a row of blocks (`support::webrtc::stamp`).
//! A WHEP viewer (`webrtcbin`, decoding) reads the stamp off each decoded frame: its latency is
//! the decode time minus the drawing time — capture, encode, RTMP, Sluice's WebRTC rung (decode,
//! scale, encode), RTP, jitter buffer, decode. Median and p95 over the window. In the same run,
//! hls.js in headless Chromium plays the stream's LL-HLS: `Date.now() - hls.playingDate` (the
//! frame's arrival at ingest to its display) and `hls.latency`, medians; and the ratio of the two
//! medians.
//!
//! **Viewers.** A 720p30 push (`ffmpeg -re -c copy` of a file, no encode on the client side) to a
//! stream that lists only `webrtc`, so the server's work is the one 480p WebRTC rung (decode,
//! scale to 854×480, encode) and the viewers. Viewers that depayload without decoding join in steps; a step is sustained
//! when every viewer got at least 95 % of the source's frame rate over the window. Server CPU per
//! viewer is the CPU above the zero-viewer baseline, divided by the viewers. The viewers run on
//! the same two cores as the server, so the count is a lower bound for a machine that only serves.
//!
//! Knobs: `BENCH_WINDOW` (seconds, default 15), `BENCH_VIEWERS` (steps, default
//! "1,10,25,50,75,100,150,200").

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use serde_json::json;

use common::{cpu_seconds, out_dir, push, Sluice};
use support::player::Player;
use support::webrtc::{stamp, WhepViewer};

const W: usize = 640;
const H: usize = 360;
const FPS: u64 = 30;

fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    values[((values.len() - 1) as f64 * p).round() as usize]
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The stamped publisher: a thread draws frames at 30 fps into an `appsrc`; GStreamer encodes
/// and publishes them.
struct Publisher {
    pipeline: gst::Pipeline,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

fn publish(location: &str, user: &str, password: &str) -> Publisher {
    sluice::media::gst::init().expect("GStreamer");
    let pipeline = gst::parse::launch(&format!(
        "appsrc name=src is-live=true format=time do-timestamp=true \
         caps=video/x-raw,format=I420,width={W},height={H},framerate={FPS}/1 \
         ! x264enc tune=zerolatency speed-preset=ultrafast key-int-max={FPS} bitrate=1500 \
         ! h264parse ! flvmux streamable=true \
         ! rtmp2sink location={location} username={user} password={password}"
    ))
    .expect("publisher")
    .downcast::<gst::Pipeline>()
    .expect("pipeline");
    let src = pipeline.by_name("src").and_then(|e| e.downcast::<gst_app::AppSrc>().ok()).expect("appsrc");
    pipeline.set_state(gst::State::Playing).expect("play");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut n = 0u64;
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            let mut frame = vec![128u8; W * H * 3 / 2];
            frame[..W * H].fill(90);
            // A moving bar so the encoder has motion to code, below the stamp.
            let x = (n as usize * 8) % W;
            for row in H / 2..H / 2 + 40 {
                frame[row * W + x..row * W + (x + 16).min(W)].fill(200);
            }
            stamp::paint(&mut frame[..W * H], W, H, now_ms());
            if src.push_buffer(gst::Buffer::from_mut_slice(frame)).is_err() {
                break;
            }
            n += 1;
            let next = start + Duration::from_nanos(n * 1_000_000_000 / FPS);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    });
    Publisher { pipeline, stop }
}

async fn glass_to_glass(window: Duration) {
    let sluice = Sluice::start(&[]).await;
    let stream = sluice
        .create_stream(json!({"name": "g2g", "protocols": ["llhls", "webrtc"], "qualities": ["240p"]}))
        .await;
    let key = stream["obs"]["streamKey"].as_str().expect("key");
    let location = format!("rtmp://127.0.0.1:{}/live/{key}", sluice.rtmp);
    let _publisher = publish(
        &location,
        stream["pushUsername"].as_str().expect("user"),
        stream["pushPassword"].as_str().expect("password"),
    );
    let whep = stream["playbackUrls"]["webrtc"].as_str().expect("webrtc").to_string();
    let master = stream["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let viewer = loop {
        match WhepViewer::try_play(&whep).await {
            Ok(v) => break v,
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(r) => panic!("WHEP: {r:?}"),
        }
    };
    let player = Player::start_catching_up(&master).await;
    // Settle: the viewer's jitter buffer and hls.js's catch-up.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (from, reports_from) = (SystemTime::now(), player.reports().len());
    tokio::time::sleep(window).await;
    let received = viewer.received();
    let mut whep: Vec<f64> = received
        .stamps
        .iter()
        .filter(|(at, _)| *at >= from)
        .filter_map(|(at, ms)| {
            let decoded = at.duration_since(UNIX_EPOCH).ok()?.as_millis() as f64;
            let latency = decoded - *ms as f64;
            (0.0..10_000.0).contains(&latency).then_some(latency)
        })
        .collect();
    let reports = player.reports();
    let window_reports = &reports[reports_from.min(reports.len())..];
    let mut hls: Vec<f64> = window_reports.iter().filter_map(|r| r.playing_date.map(|d| r.t - d)).collect();
    let mut hls_latency: Vec<f64> =
        window_reports.iter().filter_map(|r| r.latency.map(|l| l * 1000.0)).collect();
    let frames = whep.len();
    let (w50, w95) = (percentile(&mut whep, 0.5), percentile(&mut whep, 0.95));
    let (h50, h95) = (percentile(&mut hls, 0.5), percentile(&mut hls, 0.95));
    let hl = percentile(&mut hls_latency, 0.5);
    println!("glass to glass, {W}x{H}@{FPS} RTMP push, {} s window (release build):", window.as_secs());
    println!("  WHEP (frame drawn -> decoded, {frames} stamped frames): median {w50:.0} ms, p95 {w95:.0} ms");
    println!("  LL-HLS by hls.js (ingest -> screen): median {h50:.0} ms, p95 {h95:.0} ms; hls.latency median {hl:.0} ms");
    println!("  LL-HLS / WHEP (medians): {:.1}x", h50 / w50);
}

async fn capacity(window: Duration, steps: &[usize]) {
    // One address holds every bench viewer.
    let sluice = Sluice::start(&[("SLUICE_WEBRTC_MAX_PER_IP", "1000".into())]).await;
    let pid = sluice.proc.0.id();
    let stream = sluice.create_stream(json!({"name": "viewers", "protocols": ["webrtc"]})).await;
    let whep = stream["playbackUrls"]["webrtc"].as_str().expect("webrtc").to_string();
    let file = common::sample_file();
    let _pusher = push(&file, stream["ingestUrl"].as_str().expect("ingestUrl"));
    let mut viewers: Vec<WhepViewer> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while WhepViewer::play_counting(&whep).await.is_err() {
        assert!(Instant::now() < deadline, "the stream did not go live");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu0 = cpu_seconds(pid);
    tokio::time::sleep(window).await;
    let baseline = (cpu_seconds(pid) - cpu0) / window.as_secs_f64();
    println!(
        "480p WHEP viewers (720p30 push, webrtc only, 854x480 rung; viewers depayload without decoding):"
    );
    println!("  baseline (0 viewers: the WebRTC rung): server CPU {:.0} %", baseline * 100.0);
    println!("  viewers | slowest fps | median fps | server CPU | CPU per viewer");
    let mut sustained = 0;
    for &n in steps {
        while viewers.len() < n {
            match WhepViewer::play_counting(&whep).await {
                Ok(v) => viewers.push(v),
                Err(r) => {
                    println!("  viewer {} refused: {r:?}", viewers.len() + 1);
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let before: Vec<u64> = viewers.iter().map(|v| v.received().video_frames).collect();
        let cpu = cpu_seconds(pid);
        tokio::time::sleep(window).await;
        let secs = window.as_secs_f64();
        let server = (cpu_seconds(pid) - cpu) / secs;
        let mut fps: Vec<f64> =
            viewers.iter().zip(&before).map(|(v, b)| (v.received().video_frames - b) as f64 / secs).collect();
        let slowest = fps.iter().cloned().fold(f64::INFINITY, f64::min);
        let median = percentile(&mut fps, 0.5);
        let per_viewer = (server - baseline) / viewers.len() as f64;
        println!(
            "  {:>7} | {slowest:>11.1} | {median:>10.1} | {:>9.0} % | {:>12.2} %",
            viewers.len(),
            server * 100.0,
            per_viewer * 100.0
        );
        if slowest >= 0.95 * FPS as f64 {
            sustained = viewers.len();
        } else {
            break;
        }
    }
    println!("  sustained at full frame rate: {sustained} viewers on this 2-core machine (viewers included)");
}

fn main() {
    let window =
        Duration::from_secs(std::env::var("BENCH_WINDOW").ok().and_then(|s| s.parse().ok()).unwrap_or(15));
    let steps: Vec<usize> = std::env::var("BENCH_VIEWERS")
        .unwrap_or_else(|_| "1,10,25,50,75,100,150,200".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let _ = out_dir();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(glass_to_glass(window));
    rt.block_on(capacity(window, &steps));
}
