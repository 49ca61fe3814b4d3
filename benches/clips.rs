//! `cargo bench --bench clips`: what a user takes away from a VOD (issue 57), each beside the
//! ffmpeg command a user would script instead, on the same HLS in the same run:
//!
//! - **clip latency**: `POST /vod` with `clip {vodId, startSec, endSec}` to the record being
//!   `complete` (polled every 20 ms), for a 60-s and a 10-min clip; the peer is
//!   `ffmpeg -ss S -i <master.m3u8> -t L -map 0 -c copy` into an MP4 (a copy, no re-encode, as
//!   Sluice's). Printed with the bytes the clip stored (its segments, read back through its
//!   playlists) against the bytes of the source's segments its range covers: the target is at
//!   most the clip's own size.
//! - **thumbnail at a time**: `thumb.jpg?time=T&width=384` cold (a time not asked before) and
//!   cached (asked again); the peer is `ffmpeg -ss T -i <master.m3u8> -frames:v 1 -vf scale=384:-2`
//!   into a JPEG.
//! - **MP4 download**: `PATCH {mp4: true}` to `downloadsStatus` `ready`; the peer is
//!   `ffmpeg -i <master.m3u8> -map 0 -c copy -movflags +faststart` into an MP4.
//!
//! The source is the `vod-testsrc2-640x360-30fps-Ss.mp4` fixture (S = `BENCH_SOURCE_SECONDS`,
//! default 660), transcoded once to one 360p rung (800k) and AAC. Knobs: `BENCH_ROUNDS` (default
//! 3; medians are printed), `BENCH_THUMBS` (cold thumbnails per round, default 10). The process
//! is the one `cargo bench` builds (`--profile dev` for a quick run; the figures are then a
//! debug build's).

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{median, out_dir, Sluice};

async fn api(sluice: &Sluice, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = sluice.client.request(method, format!("{}{path}", sluice.api)).bearer_auth(&sluice.key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Polls VOD `id` every 20 ms until `done` holds of it; returns it.
async fn until(sluice: &Sluice, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let (_, v) = api(sluice, reqwest::Method::GET, &format!("/vod/{id}"), None).await;
        assert_ne!(v["status"], "failed", "{v}");
        assert_ne!(v["downloadsStatus"], "failed", "{v}");
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "VOD {id} never got there: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Seconds `cmd` took; it must succeed.
fn timed(cmd: &mut Command) -> f64 {
    let started = Instant::now();
    let out = cmd.output().expect("ffmpeg runs");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    started.elapsed().as_secs_f64()
}

fn ffmpeg() -> Command {
    let mut c = Command::new("ffmpeg");
    c.args(["-nostdin", "-v", "error", "-y"]);
    c
}

/// `(duration, bytes)` of every media segment of each playlist a master lists.
async fn segments(sluice: &Sluice, master: &str) -> Vec<Vec<(f64, u64)>> {
    let base = master.rsplit_once('/').expect("a path").0;
    let text = sluice.client.get(master).send().await.expect("master").text().await.expect("text");
    let mut uris: Vec<String> =
        text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).map(str::to_string).collect();
    uris.extend(text.lines().filter_map(|l| l.split("URI=\"").nth(1)?.split('"').next().map(str::to_string)));
    let mut out = Vec::new();
    for uri in uris {
        let playlist = format!("{base}/{uri}");
        let dir = playlist.rsplit_once('/').expect("a path").0.to_string();
        let text = sluice.client.get(&playlist).send().await.expect("playlist").text().await.expect("text");
        let (mut length, mut listed) = (0.0, Vec::new());
        for line in text.lines() {
            if let Some(d) = line.strip_prefix("#EXTINF:") {
                length = d.trim_end_matches(',').parse().unwrap_or(0.0);
            } else if line.split('?').next().is_some_and(|f| f.ends_with(".m4s")) {
                let r = sluice.client.get(format!("{dir}/{line}")).send().await.expect("segment");
                listed.push((length, r.bytes().await.expect("segment").len() as u64));
            }
        }
        out.push(listed);
    }
    out
}

/// Bytes of the segments of `playlists` that `(from, to)` touches.
fn touched(playlists: &[Vec<(f64, u64)>], (from, to): (f64, f64)) -> u64 {
    let mut bytes = 0;
    for listed in playlists {
        let mut at = 0.0;
        for (d, b) in listed {
            if at + d > from + 1e-3 && at < to - 1e-3 {
                bytes += b;
            }
            at += d;
        }
    }
    bytes
}

fn main() {
    let env_u32 =
        |name: &str, default: u32| std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    let seconds = env_u32("BENCH_SOURCE_SECONDS", 660).max(660);
    let rounds = env_u32("BENCH_ROUNDS", 3).max(1);
    let thumbs = env_u32("BENCH_THUMBS", 10).max(1);
    let out = out_dir();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let sluice = Sluice::start(&[]).await;
        println!(
            "clips: a {seconds}-s 640x360 VOD (one 360p rung, 800k), {rounds} rounds, {} cores, load1 {:.2} before",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            common::load1()
        );
        let file = common::clip(&format!("vod-testsrc2-640x360-30fps-{seconds}s.mp4"));
        let ladder = json!([{"name": "360p", "width": 640, "height": 360, "videoBitrate": "800k"}]);
        let body = json!({"name": "source", "ladder": ladder});
        let (_, created) = api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await;
        let id = created["vod"]["_id"].as_str().expect("id").to_string();
        let url = created["upload"]["url"].as_str().expect("upload url");
        let put = sluice.client.put(url).body(std::fs::read(&file).expect("read")).send().await.expect("put");
        assert!(put.status().is_success());
        assert_eq!(api(&sluice, reqwest::Method::POST, &format!("/vod/{id}/uploaded"), None).await.0, 200);
        let source = until(&sluice, &id, |v| v["status"] == "complete").await;
        let master = source["playbackUrl"].as_str().expect("playbackUrl").to_string();
        let source_segments = segments(&sluice, &master).await;
        let source_bytes: u64 = source_segments.iter().flatten().map(|s| s.1).sum();

        // Clips.
        for length in [60u32, 600] {
            let (mut ours, mut theirs, mut stored_ratio) = (Vec::new(), Vec::new(), Vec::new());
            for round in 0..rounds {
                let start = 8 + round * 12;
                let body = json!({"name": "clip", "clip": {"vodId": id, "startSec": start, "endSec": start + length}});
                let started = Instant::now();
                let (status, created) = api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await;
                assert_eq!(status, 201, "{created}");
                let clip_id = created["vod"]["_id"].as_str().expect("id").to_string();
                let done = until(&sluice, &clip_id, |v| v["status"] == "complete").await;
                ours.push(started.elapsed().as_secs_f64());
                let mp4 = out.join("clips-ffmpeg.mp4");
                theirs.push(timed(
                    ffmpeg()
                        .args(["-ss", &start.to_string(), "-i", &master, "-t", &length.to_string()])
                        .args(["-map", "0", "-c", "copy"])
                        .arg(&mp4),
                ));
                let clip_master = done["playbackUrl"].as_str().expect("playbackUrl");
                let stored: u64 = segments(&sluice, clip_master).await.iter().flatten().map(|s| s.1).sum();
                // The source's segments the range touches: the clip's own size.
                let own = touched(&source_segments, (f64::from(start), f64::from(start + length)));
                stored_ratio.push(stored as f64 / own as f64);
                println!(
                    "  {length}-s clip, round {}: Sluice {:.3} s to complete, ffmpeg copy {:.3} s; stored {} KiB, the range's source segments {} KiB ({:.2}x), the whole source {} KiB",
                    round + 1,
                    ours[ours.len() - 1],
                    theirs[theirs.len() - 1],
                    stored / 1024,
                    own / 1024,
                    stored as f64 / own as f64,
                    source_bytes / 1024
                );
            }
            let (a, b) = (median(ours), median(theirs));
            println!(
                "{length}-s clip: Sluice {a:.3} s, ffmpeg -c copy {b:.3} s: Sluice/ffmpeg {:.2}x; stored / own size {:.2}x (medians)",
                a / b,
                median(stored_ratio)
            );
        }

        // Thumbnails.
        let base = master.trim_end_matches("/master.m3u8").to_string();
        let (mut cold, mut cached, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            for i in 0..thumbs {
                let at = 5.3 + f64::from(round * thumbs + i) * 17.1 % f64::from(seconds - 10);
                let url = format!("{base}/thumb.jpg?time={at:.1}&width=384");
                for list in [&mut cold, &mut cached] {
                    let started = Instant::now();
                    let r = sluice.client.get(&url).send().await.expect("thumb");
                    assert_eq!(r.status(), 200, "{url}");
                    r.bytes().await.expect("jpeg");
                    list.push(started.elapsed().as_secs_f64());
                }
                let jpg = out.join("clips-ffmpeg.jpg");
                theirs.push(timed(
                    ffmpeg()
                        .args(["-ss", &format!("{at:.1}"), "-i", &master, "-frames:v", "1", "-vf", "scale=384:-2"])
                        .arg(&jpg),
                ));
            }
        }
        let (c, k, t) = (median(cold), median(cached), median(theirs));
        println!(
            "thumbnail at a time (width 384): Sluice cold {:.1} ms, cached {:.1} ms; ffmpeg -ss -frames:v 1 {:.1} ms: Sluice/ffmpeg cold {:.2}x, cached {:.3}x (medians of {})",
            c * 1e3,
            k * 1e3,
            t * 1e3,
            c / t,
            k / t,
            rounds * thumbs
        );

        // MP4 download of the whole VOD.
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let path = format!("/vod/{id}");
            assert_eq!(api(&sluice, reqwest::Method::PATCH, &path, Some(json!({"mp4": false}))).await.0, 200);
            let started = Instant::now();
            assert_eq!(api(&sluice, reqwest::Method::PATCH, &path, Some(json!({"mp4": true}))).await.0, 200);
            until(&sluice, &id, |v| v["downloadsStatus"] == "ready").await;
            ours.push(started.elapsed().as_secs_f64());
            let mp4 = out.join("clips-ffmpeg-download.mp4");
            theirs.push(timed(ffmpeg().args(["-i", &master, "-map", "0", "-c", "copy", "-movflags", "+faststart"]).arg(&mp4)));
        }
        let (a, b) = (median(ours), median(theirs));
        println!(
            "MP4 download of the {seconds}-s VOD (360p + audio, and the M4A): Sluice {a:.2} s, ffmpeg -c copy +faststart {b:.2} s (one file): Sluice/ffmpeg {:.2}x (medians)",
            a / b
        );
    });
}
