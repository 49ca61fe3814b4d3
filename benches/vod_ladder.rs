//! `cargo bench --bench vod_ladder`: how long Sluice takes to turn a file into the default 4-rung
//! HLS ladder (1080p 5M, 720p 3M, 480p 1500k, 360p 800k, AAC 128k, 4-s fMP4 segments, thumbnail),
//! beside one ffmpeg command doing the same work in the same run: one decode, `split` into one
//! x264 encoder per rung with the same preset (`veryfast`), bitrates (ABR with maxrate = bitrate
//! and a 2-s VBV buffer, as x264enc's `pass=cbr vbv-buf-capacity=2000`) and GOP (one keyframe
//! per segment, no scene cuts), AAC encoded once, HLS fMP4 output.
//!
//! Sluice's time runs from `POST /vod/<id>/uploaded` (the file already uploaded) to the VOD being
//! `complete`: probe, queue, transcode, thumbnail and storing every output. ffmpeg's is the
//! command's wall time. Printed: both, their ratio, Sluice's realtime factor (source seconds per
//! wall second), and the bitrate each produced per rung.
//! Knobs: `BENCH_SECONDS` (source length, default 60), `BENCH_ROUNDS` (default 1).

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{clip, out_dir, Sluice};

/// (name, width, height, kbit/s)
const LADDER: [(&str, u32, u32, u32); 4] = [
    ("1080p", 1920, 1080, 5000),
    ("720p", 1280, 720, 3000),
    ("480p", 854, 480, 1500),
    ("360p", 640, 360, 800),
];
const SEGMENT: u32 = 4;
const FPS: u32 = 30;

/// A 1080p30 H.264 (8 Mbit/s) + AAC MP4 of `seconds`, from `media-fixtures`.
fn source(seconds: u32) -> PathBuf {
    clip(&format!("ladder-1080p30-8000k-{seconds}s.mp4"))
}

/// The ffmpeg peer: returns its wall time.
fn ffmpeg_ladder(src: &Path, out: &Path) -> Duration {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).expect("out dir");
    let n = LADDER.len();
    let mut filter = format!("[0:v]split={n}");
    for i in 0..n {
        filter.push_str(&format!("[s{i}]"));
    }
    for (i, (_, w, h, _)) in LADDER.iter().enumerate() {
        filter.push_str(&format!(";[s{i}]scale={w}:{h}[v{i}]"));
    }
    let gop = (SEGMENT * FPS).to_string();
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-loglevel", "error", "-y", "-i"]).arg(src).args(["-filter_complex", &filter]);
    for i in 0..n {
        cmd.args(["-map", &format!("[v{i}]")]);
    }
    cmd.args(["-map", "0:a", "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p"]);
    cmd.args(["-g", &gop, "-keyint_min", &gop, "-sc_threshold", "0"]);
    for (i, (_, _, _, kbps)) in LADDER.iter().enumerate() {
        cmd.args([&format!("-b:v:{i}"), &format!("{kbps}k")]);
        cmd.args([&format!("-maxrate:v:{i}"), &format!("{kbps}k")]);
        cmd.args([&format!("-bufsize:v:{i}"), &format!("{}k", 2 * kbps)]);
    }
    let streams: Vec<String> =
        (0..n).map(|i| format!("v:{i},agroup:aud")).chain(["a:0,agroup:aud".into()]).collect();
    cmd.args(["-c:a", "aac", "-b:a", "128k"]);
    cmd.args(["-f", "hls", "-hls_time", &SEGMENT.to_string(), "-hls_playlist_type", "vod"]);
    cmd.args(["-hls_segment_type", "fmp4", "-master_pl_name", "master.m3u8"]);
    cmd.args(["-var_stream_map", &streams.join(" ")]);
    cmd.arg("-hls_segment_filename").arg(out.join("%v/s%d.m4s")).arg(out.join("%v/index.m3u8"));
    let started = Instant::now();
    let status = cmd.status().expect("ffmpeg runs");
    assert!(status.success(), "the ffmpeg ladder failed");
    started.elapsed()
}

/// kbit/s of each ffmpeg rendition folder (video only): bytes of its segments over the source length.
fn ffmpeg_bitrates(out: &Path, seconds: f64) -> Vec<f64> {
    (0..LADDER.len())
        .map(|i| {
            let dir = out.join(i.to_string());
            let bytes: u64 = std::fs::read_dir(&dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .filter(|e| e.file_name().to_string_lossy().ends_with(".m4s"))
                        .filter_map(|e| e.metadata().ok())
                        .map(|m| m.len())
                        .sum()
                })
                .unwrap_or(0);
            bytes as f64 * 8.0 / seconds / 1000.0
        })
        .collect()
}

/// Sluice: uploads, then times `uploaded` → `complete`. Returns the time and the record.
async fn sluice_ladder(sluice: &Sluice, src: &Path) -> (Duration, Value) {
    let ladder: Vec<Value> = LADDER
        .iter()
        .map(|(name, w, h, kbps)| json!({"name": name, "width": w, "height": h, "videoBitrate": format!("{kbps}k")}))
        .collect();
    let created: Value = sluice
        .client
        .post(format!("{}/vod", sluice.api))
        .bearer_auth(&sluice.key)
        .json(&json!({"name": "bench", "filename": "bench.mp4", "ladder": ladder}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let id = created["vod"]["_id"].as_str().expect("id").to_string();
    let url = created["upload"]["url"].as_str().expect("upload url");
    let upload = reqwest::Client::builder().no_proxy().build().expect("client");
    let put = upload.put(url).body(std::fs::read(src).expect("source")).send().await.expect("upload");
    assert_eq!(put.status(), 200, "upload");
    let started = Instant::now();
    let resp =
        sluice.client.post(format!("{}/vod/{id}/uploaded", sluice.api)).bearer_auth(&sluice.key).send().await;
    assert_eq!(resp.expect("uploaded").status(), 200);
    let deadline = started + Duration::from_secs(3600);
    loop {
        let v: Value = sluice
            .client
            .get(format!("{}/vod/{id}", sluice.api))
            .bearer_auth(&sluice.key)
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        match v["status"].as_str() {
            Some("complete") => return (started.elapsed(), v),
            Some("failed") => panic!("the Sluice transcode failed: {v}"),
            _ => {}
        }
        assert!(Instant::now() < deadline, "the Sluice transcode took over an hour");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn main() {
    let seconds: u32 = std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let rounds: u32 = std::env::var("BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let out = out_dir();
    let src = source(seconds);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let sluice = Sluice::start(&[]).await;
        println!("vod_ladder: {seconds}-s 1080p30 source, ladder 1080p 5M / 720p 3M / 480p 1500k / 360p 800k, x264 veryfast, {SEGMENT}-s segments, {} cores", std::thread::available_parallelism().map_or(0, |n| n.get()));
        for round in 1..=rounds {
            let ff = ffmpeg_ladder(&src, &out.join("vod-ffmpeg"));
            let ff_kbps = ffmpeg_bitrates(&out.join("vod-ffmpeg"), f64::from(seconds));
            let (sl, record) = sluice_ladder(&sluice, &src).await;
            let ratio = sl.as_secs_f64() / ff.as_secs_f64();
            println!(
                "round {round}: Sluice {:.1} s, ffmpeg {:.1} s, Sluice/ffmpeg wall time {ratio:.2}x; \
                 Sluice realtime factor {:.2}x (ffmpeg {:.2}x)",
                sl.as_secs_f64(),
                ff.as_secs_f64(),
                f64::from(seconds) / sl.as_secs_f64(),
                f64::from(seconds) / ff.as_secs_f64()
            );
            for (i, (name, _, _, kbps)) in LADDER.iter().enumerate() {
                let produced = record["renditions"]
                    .as_array()
                    .and_then(|r| r.iter().find(|x| x["name"] == *name))
                    .and_then(|x| x["averageBandwidth"].as_f64())
                    .map_or(0.0, |b| b / 1000.0);
                println!(
                    "  {name}: asked {kbps} kbit/s; Sluice {produced:.0}, ffmpeg {:.0}",
                    ff_kbps.get(i).copied().unwrap_or(0.0)
                );
            }
        }
    });
}
