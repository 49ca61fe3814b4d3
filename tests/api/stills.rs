//! Thumbnails at any time (CONTRACT: Clips, downloads, thumbnails), on the real binary: a VOD's
//! picture at a time is the frame painted then, at the width asked; bad asks are 400 naming the
//! field; 500 asks for distinct times leave the server's memory flat and the origin answering;
//! a live stream's thumbnail is its newest picture, at most 2 s old.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::clips::{live_rendition, painted_push};
use crate::support::{clip_copy, eventually, painted_frame, rss_kib, Sluice};

/// A complete VOD of `clip` (one of media-fixtures' names) with `ladder`; returns its record.
async fn complete_vod(sluice: &Sluice, clip: &str, ladder: Value) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = clip_copy(clip, dir.path(), "frames.mp4");
    let created: Value = sluice
        .client
        .post(format!("{}/vod", sluice.api))
        .bearer_auth(&sluice.key)
        .json(&json!({"name": "frames", "filename": "frames.mp4", "ladder": ladder}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let id = created["vod"]["_id"].as_str().expect("id").to_string();
    let url = created["upload"]["url"].as_str().expect("upload url");
    let put = sluice.client.put(url).body(std::fs::read(&file).expect("read")).send().await.expect("put");
    assert_eq!(put.status(), 200);
    let uploaded = sluice
        .client
        .post(format!("{}/vod/{id}/uploaded", sluice.api))
        .bearer_auth(&sluice.key)
        .send()
        .await
        .expect("uploaded");
    assert_eq!(uploaded.status(), 200);
    eventually("the VOD to complete", Duration::from_secs(180), || async {
        let v: Value = sluice
            .client
            .get(format!("{}/vod/{id}", sluice.api))
            .bearer_auth(&sluice.key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        assert_ne!(v["status"], "failed", "{v}");
        (v["status"] == "complete").then_some(v)
    })
    .await
}

/// `(status, content type, body, Retry-After)` of a GET.
async fn fetch(sluice: &Sluice, url: &str) -> (u16, String, bytes::Bytes, Option<String>) {
    let r = sluice.client.get(url).send().await.expect("GET");
    let header = |n: &str| r.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (status, kind, retry) =
        (r.status().as_u16(), header("content-type").unwrap_or_default(), header("retry-after"));
    (status, kind, r.bytes().await.expect("body"), retry)
}

/// The part `x,y,w,h` of a picture, as PNG.
fn crop(image: &[u8], xywh: &str) -> Vec<u8> {
    let v: Vec<&str> = xywh.split(',').collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p.jpg");
    std::fs::write(&path, image).expect("write");
    let out = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(&path)
        .args([
            "-vf",
            &format!("crop={}:{}:{}:{}", v[2], v[3], v[0], v[1]),
            "-f",
            "image2",
            "-c:v",
            "png",
            "-",
        ])
        .output()
        .expect("ffmpeg");
    out.stdout
}

/// `width,height` of a picture.
fn size_of(image: &[u8]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p.jpg");
    std::fs::write(&path, image).expect("write");
    let out = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "stream=width,height", "-of", "csv=p=0"])
        .arg(&path)
        .output()
        .expect("ffprobe");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vod_still_at_any_time_is_the_frame_painted_then_and_a_flood_costs_no_memory() {
    let sluice = Sluice::start(&[]).await;
    let ladder = json!([
        {"name": "216p", "width": 384, "height": 216, "videoBitrate": "600k"},
        {"name": "108p", "width": 192, "height": 108, "videoBitrate": "200k"},
    ]);
    let vod = complete_vod(&sluice, "vod-frames-384x216-30fps-60s.mp4", ladder).await;
    let thumb = vod["thumbnailUrl"].as_str().expect("thumbnailUrl").to_string();

    // The frame painted at the time asked: on a keyframe, between two, the last one.
    for (time, frame) in [("5", 150), ("7.3", 219), ("33.37", 1001), ("59.9", 1797), ("60", 1799)] {
        let (status, kind, body, _) = fetch(&sluice, &format!("{thumb}?time={time}")).await;
        assert_eq!(
            (status, kind.as_str()),
            (200, "image/jpeg"),
            "time={time}: {}",
            String::from_utf8_lossy(&body)
        );
        let painted = painted_frame(&body);
        assert!(painted.abs_diff(frame) <= 1, "time={time}: frame {painted}, not {frame}");
        assert_eq!(size_of(&body), "384,216", "the top rendition's size when no width is asked");
    }
    // A width: from the smallest rendition at least that wide, scaled, keeping the shape.
    let cold = fetch(&sluice, &format!("{thumb}?time=12.3&width=160")).await;
    assert_eq!(cold.0, 200);
    assert_eq!(size_of(&cold.2), "160,90");
    assert!(painted_frame(&cold.2).abs_diff(369) <= 1, "12.3 s at width 160");
    let started = Instant::now();
    let fresh = fetch(&sluice, &format!("{thumb}?time=44.4&width=320")).await;
    let cold_ms = started.elapsed().as_secs_f64() * 1000.0;
    let started = Instant::now();
    let cached = fetch(&sluice, &format!("{thumb}?time=44.4&width=320")).await;
    let cached_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!((fresh.0, cached.0), (200, 200));
    assert_eq!(fresh.2, cached.2, "the kept still is the one made");
    assert_eq!(size_of(&cached.2), "320,180");
    println!("still at 44.4 s, width 320: cold {cold_ms:.0} ms, cached {cached_ms:.0} ms");

    // Bad asks name their field; the stored thumbnail is still there without a query.
    for (query, field) in [
        ("time=61", "time"),
        ("time=-1", "time"),
        ("time=x", "time"),
        ("width=15", "width"),
        ("time=1&width=1921", "width"),
    ] {
        let (status, _, body, _) = fetch(&sluice, &format!("{thumb}?{query}")).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 400, "{query}: {text}");
        assert!(text.starts_with(field), "{query}: {text}");
    }
    assert_eq!(fetch(&sluice, &thumb).await.0, 200);

    // The storyboard: a cue per 10 s over the whole VOD, each tile the picture painted at its
    // start.
    let base = thumb.trim_end_matches("/thumb.jpg");
    let started = Instant::now();
    let (status, kind, vtt, _) = fetch(&sluice, &format!("{base}/storyboard.vtt")).await;
    let made_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(
        (status, kind.as_str()),
        (200, "text/vtt; charset=utf-8"),
        "{}",
        String::from_utf8_lossy(&vtt)
    );
    let vtt = String::from_utf8_lossy(&vtt).into_owned();
    let lines: Vec<&str> = vtt.lines().collect();
    assert_eq!(lines[0], "WEBVTT");
    let cues: Vec<(&str, &str, &str)> =
        lines.windows(2).filter_map(|w| w[0].split_once(" --> ").map(|(a, b)| (a, b, w[1]))).collect();
    assert_eq!(cues.len(), 6, "{vtt}");
    assert_eq!(cues[0].0, "00:00:00.000");
    assert_eq!(cues[5].1, "00:01:00.000", "the last cue ends with the VOD");
    assert!(cues.windows(2).all(|c| c[0].1 == c[1].0), "cues follow each other: {vtt}");
    let (status, kind, sprite, _) = fetch(&sluice, &format!("{base}/storyboard.jpg")).await;
    assert_eq!((status, kind.as_str()), (200, "image/jpeg"));
    assert_eq!(size_of(&sprite), "960,90", "six 160×90 tiles in a row");
    for (i, (_, _, tile)) in cues.iter().enumerate() {
        let xywh = tile.strip_prefix("storyboard.jpg#xywh=").expect("a tile of the sprite");
        let painted = painted_frame(&crop(&sprite, xywh));
        assert!(painted.abs_diff(300 * i as u32) <= 1, "tile {i}: frame {painted}");
    }
    let started = Instant::now();
    assert_eq!(fetch(&sluice, &format!("{base}/storyboard.vtt")).await.2, vtt.as_bytes());
    println!(
        "storyboard of 60 s: made in {made_ms:.0} ms, kept {:.0} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );

    // 500 asks for distinct times at once: each is a still or a 503 with Retry-After, memory
    // stays flat, and the origin answers meanwhile.
    let pid = sluice.proc.0.id();
    let before = rss_kib(pid);
    let master = vod["playbackUrl"].as_str().expect("playbackUrl").to_string();
    let flood = futures_util::stream::iter(0..500)
        .map(|i| {
            let url = format!("{thumb}?time={}.{}&width=256", i / 10, i % 10);
            let sluice = &sluice;
            async move { fetch(sluice, &url).await }
        })
        .buffer_unordered(500)
        .collect::<Vec<_>>();
    let watch = async {
        let mut worst = Duration::ZERO;
        let mut peak = 0;
        for _ in 0..20 {
            let started = Instant::now();
            let (status, ..) = fetch(&sluice, &master).await;
            assert_eq!(status, 200, "the origin answers during the flood");
            worst = worst.max(started.elapsed());
            peak = peak.max(rss_kib(pid));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (worst, peak)
    };
    let (answers, (worst, peak)) = tokio::join!(flood, watch);
    let made = answers.iter().filter(|a| a.0 == 200).count();
    let busy = answers.iter().filter(|a| a.0 == 503).count();
    for a in &answers {
        assert!(
            a.0 == 200 || (a.0 == 503 && a.3.is_some()),
            "a still or 503 with Retry-After: {} {:?}",
            a.0,
            a.2
        );
    }
    let after = rss_kib(pid);
    println!(
        "500 distinct stills at once: {made} made, {busy} turned away (503); RSS {} → peak {} → {} MiB; \
         slowest master meanwhile {:.0} ms",
        before / 1024,
        peak / 1024,
        after / 1024,
        worst.as_secs_f64() * 1000.0
    );
    assert!(made >= 2, "some stills are made");
    assert!(peak.max(after) < before + 64 * 1024, "memory stays flat: {before} → {peak}/{after} KiB");
    assert!(worst < Duration::from_secs(2), "the master waited {worst:?}");
    // And a still is made again once the flood is over.
    assert_eq!(fetch(&sluice, &format!("{thumb}?time=58.8")).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_still_is_the_newest_picture() {
    let sluice = Sluice::start(&[]).await;
    let created = sluice.create_stream(json!({"name": "stills", "qualities": ["240p"]})).await;
    let master = created["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let thumb = master.replace("/master.m3u8", "/thumb.jpg");
    // Before a push: nothing to show.
    assert_eq!(fetch(&sluice, &thumb).await.0, 404);
    let started = Instant::now();
    let _push = painted_push(&created);
    // The source's pictures come first; then the rung's, whose every part starts with a keyframe.
    eventually("a live still from the 240p rung", Duration::from_secs(30), || async {
        let (status, _, body, _) = fetch(&sluice, &thumb).await;
        (status == 200 && size_of(&body) == "426,240").then_some(())
    })
    .await;
    // The still against the live edge: the last frame of the rung's newest part, asked right
    // after it. (Against the publisher's clock too, for the record: that also counts how far a
    // loaded machine's publisher falls behind real time.)
    let rung = live_rendition(&sluice, &master, "240p").await;
    let dir = rung.split('?').next().expect("url").rsplit_once('/').expect("a path").0.to_string();
    let (mut ages, mut behind_publisher) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        let asked = started.elapsed().as_secs_f64();
        let (status, kind, body, _) = fetch(&sluice, &thumb).await;
        assert_eq!((status, kind.as_str()), (200, "image/jpeg"));
        assert_eq!(size_of(&body), "426,240", "from the rung, not the 640×360 source");
        let still = painted_frame(&body);
        let edge = edge_frame(&sluice, &rung, &dir).await;
        ages.push((f64::from(edge) - f64::from(still)) / 30.0);
        behind_publisher.push(asked - f64::from(still) / 30.0);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    println!("live still ages behind the live edge, s: {ages:.2?}; behind the publisher's start clock: {behind_publisher:.2?}");
    assert!(ages.iter().all(|a| (-0.5..=2.0).contains(a)), "a live still at most 2 s old: {ages:.2?}");
}

/// The frame painted last in the newest part of the live media playlist `rung` (files in `dir`).
async fn edge_frame(sluice: &Sluice, rung: &str, dir: &str) -> u32 {
    let text = sluice.client.get(rung).send().await.expect("playlist").text().await.expect("text");
    let map = text.lines().rev().find_map(|l| l.strip_prefix("#EXT-X-MAP:URI=\"")).expect("a map");
    let part = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("#EXT-X-PART:")?.split("URI=\"").nth(1)?.split('"').next())
        .expect("a part");
    let mut bytes = sluice
        .client
        .get(format!("{dir}/{}", map.trim_end_matches('"')))
        .send()
        .await
        .expect("init")
        .bytes()
        .await
        .expect("bytes")
        .to_vec();
    bytes.extend_from_slice(
        &sluice.client.get(format!("{dir}/{part}")).send().await.expect("part").bytes().await.expect("bytes"),
    );
    let folder = tempfile::tempdir().expect("tempdir");
    let (input, output) = (folder.path().join("part.mp4"), folder.path().join("last.png"));
    std::fs::write(&input, &bytes).expect("write");
    let out = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(&input)
        .args(["-update", "1", "-c:v", "png", "-f", "image2"])
        .arg(&output)
        .output()
        .expect("ffmpeg");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    painted_frame(&std::fs::read(&output).expect("the last frame"))
}
