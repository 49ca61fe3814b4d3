//! `cargo bench --bench vod_ladder`: how long Sluice takes to turn a file into the default 4-rung
//! HLS ladder (1080p 5M, 720p 3M, 480p 1500k, 360p 800k, AAC 128k, 4-s fMP4 segments, thumbnail),
//! beside one ffmpeg command doing the same work in the same run: one decode, `split` into one
//! x264 encoder per rung at x264's `veryfast` preset (Sluice's rungs: `veryfast` with `subme=1`,
//! `pipelines/vod-rung.txt`), the same bitrates (ABR with maxrate = bitrate and a 2-s VBV
//! buffer, as x264enc's `pass=cbr vbv-buf-capacity=2000`) and GOP (one keyframe per segment, no
//! scene cuts), AAC encoded once, HLS fMP4 output. The quality each produced is printed beside
//! the time (bitrate and SSIM per rung), so a faster setting shows what it costs.
//!
//! Sluice's time runs from `POST /vod/<id>/uploaded` (the file already uploaded) to the VOD being
//! `complete`: probe, queue, transcode, thumbnail and storing every output. ffmpeg's is the
//! command's wall time. Printed: both, their ratio, Sluice's realtime factor (source seconds per
//! wall second), the bitrate each produced per rung and its SSIM.
//! Quality: ffmpeg's `ssim` of each rung (Sluice's through its playback URL, ffmpeg's from its
//! folder) against the source scaled to the rung's size, in the first `BENCH_SSIM_ROUNDS` rounds.
//! Knobs: `BENCH_SECONDS` (source lengths, default "20,60"), `BENCH_ROUNDS` (default 3; the
//! summary is the median ratio), `BENCH_SSIM_ROUNDS` (default 1).

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{clip, median, out_dir, Sluice};

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

/// SSIM (ffmpeg's `ssim` filter, "All") of the video of `rendition` (an HLS media playlist, a
/// file or a URL) against `src` scaled to `width`x`height` with ffmpeg's default scaler, both
/// timelines counted from their first frame.
fn ssim(rendition: &str, src: &Path, width: u32, height: u32) -> Option<f64> {
    let filter = format!(
        "[0:v]setpts=PTS-STARTPTS[dist];[1:v]scale={width}:{height},setpts=PTS-STARTPTS[ref];[dist][ref]ssim"
    );
    let out = Command::new("ffmpeg")
        .args(["-nostats", "-hide_banner", "-i", rendition, "-i"])
        .arg(src)
        .args(["-lavfi", &filter, "-f", "null", "-"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    text.lines()
        .filter(|l| l.contains("SSIM Y:"))
        .find_map(|l| l.split(" All:").nth(1)?.split_whitespace().next()?.parse().ok())
}

/// The media playlist of each rung Sluice published, by rung name.
async fn sluice_playlists(sluice: &Sluice, record: &Value) -> Vec<(String, String)> {
    let Some(master) = record["playbackUrl"].as_str() else { return Vec::new() };
    let Ok(resp) = sluice.client.get(master).send().await else { return Vec::new() };
    let text = resp.text().await.unwrap_or_default();
    let base = &master[..master.rfind('/').map_or(0, |i| i + 1)];
    common::parse_master(&text).into_iter().map(|(name, uri)| (name, format!("{base}{uri}"))).collect()
}

fn main() {
    let lengths: Vec<u32> = std::env::var("BENCH_SECONDS")
        .unwrap_or_else(|_| "20,60".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let env_u32 =
        |name: &str, default: u32| std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    let rounds = env_u32("BENCH_ROUNDS", 3).max(1);
    let ssim_rounds = env_u32("BENCH_SSIM_ROUNDS", 1);
    let out = out_dir();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let sluice = Sluice::start(&[]).await;
        println!(
            "vod_ladder: 1080p30 sources of {lengths:?} s, ladder 1080p 5M / 720p 3M / 480p 1500k / 360p 800k, ffmpeg x264 veryfast, Sluice as pipelines/vod-rung.txt, {SEGMENT}-s segments, {rounds} rounds, {} cores, load1 {:.2} before",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            common::load1()
        );
        let mut summary = Vec::new();
        for &seconds in &lengths {
            let src = source(seconds);
            let mut ratios = Vec::new();
            for round in 1..=rounds {
                let ff = ffmpeg_ladder(&src, &out.join("vod-ffmpeg"));
                let ff_kbps = ffmpeg_bitrates(&out.join("vod-ffmpeg"), f64::from(seconds));
                let (sl, record) = sluice_ladder(&sluice, &src).await;
                let ratio = sl.as_secs_f64() / ff.as_secs_f64();
                ratios.push(ratio);
                println!(
                    "{seconds}-s round {round}: Sluice {:.1} s, ffmpeg {:.1} s, Sluice/ffmpeg wall time {ratio:.2}x; \
                     Sluice realtime factor {:.2}x (ffmpeg {:.2}x); load1 {:.2}",
                    sl.as_secs_f64(),
                    ff.as_secs_f64(),
                    f64::from(seconds) / sl.as_secs_f64(),
                    f64::from(seconds) / ff.as_secs_f64(),
                    common::load1()
                );
                let playlists = if round <= ssim_rounds { sluice_playlists(&sluice, &record).await } else { Vec::new() };
                for (i, (name, w, h, kbps)) in LADDER.iter().enumerate() {
                    let produced = record["renditions"]
                        .as_array()
                        .and_then(|r| r.iter().find(|x| x["name"] == *name))
                        .and_then(|x| x["averageBandwidth"].as_f64())
                        .map_or(0.0, |b| b / 1000.0);
                    let theirs = ff_kbps.get(i).copied().unwrap_or(0.0);
                    let mut line = format!(
                        "  {name}: asked {kbps} kbit/s; Sluice {produced:.0}, ffmpeg {theirs:.0} ({:+.1} %)",
                        (produced / theirs - 1.0) * 100.0
                    );
                    if round <= ssim_rounds {
                        let ours = playlists
                            .iter()
                            .find(|(n, _)| n == name)
                            .and_then(|(_, url)| ssim(url, &src, *w, *h));
                        let ff_playlist = out.join("vod-ffmpeg").join(i.to_string()).join("index.m3u8");
                        let theirs = ssim(&ff_playlist.to_string_lossy(), &src, *w, *h);
                        match (ours, theirs) {
                            (Some(a), Some(b)) => line.push_str(&format!(
                                "; SSIM Sluice {a:.4}, ffmpeg {b:.4} ({:+.4})",
                                a - b
                            )),
                            _ => line.push_str(&format!("; SSIM Sluice {ours:?}, ffmpeg {theirs:?}")),
                        }
                    }
                    println!("{line}");
                }
            }
            summary.push((seconds, median(ratios)));
        }
        for (seconds, ratio) in summary {
            println!("{seconds}-s source: Sluice/ffmpeg wall time, median of {rounds} rounds: {ratio:.2}x");
        }
    });
}
