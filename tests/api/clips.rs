//! Clips (CONTRACT: Clips, downloads, thumbnails), on the real binary: a clip of an uploaded VOD
//! completes within 10 s, ffprobe reads its length, its first frame is the one painted at its
//! start; a `drmEnabled` source's clip plays through its own key; bad ranges are 400 naming the
//! field, a source that is not complete or archived 409, an unknown one 404.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{clip_copy, eventually, ffmpeg_push, painted_frame, Sluice};

/// The painted source: 90 s at 30 fps, one 384×216 rung (4-s segments).
const SOURCE: &str = "vod-frames-384x216-30fps-90s.mp4";

pub(crate) async fn api(
    sluice: &Sluice,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = sluice.client.request(method, format!("{}{path}", sluice.api)).bearer_auth(&sluice.key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Waits for VOD `id` to leave `queued` and `processing`; returns it.
pub(crate) async fn finished(sluice: &Sluice, id: &str, within: Duration) -> Value {
    eventually("the VOD to finish", within, || async {
        let (_, v) = api(sluice, reqwest::Method::GET, &format!("/vod/{id}"), None).await;
        (!["queued", "processing", "uploaded"].contains(&v["status"].as_str().unwrap_or("queued")))
            .then_some(v)
    })
    .await
}

/// A complete VOD of [`SOURCE`]; `drm` encrypts it.
async fn source_vod(sluice: &Sluice, drm: bool) -> Value {
    upload_vod(sluice, SOURCE, json!({"drmEnabled": drm})).await
}

/// A complete VOD of media fixture `fixture` (one 384×216 rung), created with the members of
/// `extra` besides.
pub(crate) async fn upload_vod(sluice: &Sluice, fixture: &str, extra: Value) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = clip_copy(fixture, dir.path(), "frames.mp4");
    let ladder = json!([{"name": "216p", "width": 384, "height": 216, "videoBitrate": "600k"}]);
    let mut body = json!({"name": "frames", "filename": "frames.mp4", "ladder": ladder});
    for (k, v) in extra.as_object().expect("an object") {
        body[k] = v.clone();
    }
    let (status, created) = api(sluice, reqwest::Method::POST, "/vod", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["vod"]["_id"].as_str().expect("id").to_string();
    let url = created["upload"]["url"].as_str().expect("upload url");
    let put = sluice.client.put(url).body(std::fs::read(&file).expect("read")).send().await.expect("put");
    assert_eq!(put.status(), 200);
    assert_eq!(api(sluice, reqwest::Method::POST, &format!("/vod/{id}/uploaded"), None).await.0, 200);
    let done = finished(sluice, &id, Duration::from_secs(180)).await;
    assert_eq!(done["status"], "complete", "{done}");
    done
}

/// Creates a clip of `source` from `start` to `end` s; returns `(record, seconds to complete)`.
async fn clip(sluice: &Sluice, source: &Value, (start, end): (f64, f64)) -> (Value, f64) {
    let body = json!({"name": "goal", "clip": {"vodId": source["_id"], "startSec": start, "endSec": end}});
    let started = Instant::now();
    let (status, created) = api(sluice, reqwest::Method::POST, "/vod", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    assert!(created["upload"].is_null(), "a clip has nothing to upload: {created}");
    let vod = &created["vod"];
    assert_eq!(vod["status"], "queued");
    assert_eq!(vod["clipOf"], json!({"vodId": source["_id"], "startSec": start, "endSec": end}));
    assert_eq!(vod["filename"], "goal", "the filename defaults to the name");
    let id = vod["_id"].as_str().expect("id");
    let done = finished(sluice, id, Duration::from_secs(60)).await;
    let took = started.elapsed().as_secs_f64();
    assert_eq!(done["status"], "complete", "{done}");
    (done, took)
}

/// ffprobe's duration of an HLS URL, in seconds.
pub(crate) fn probed_duration(url: &str) -> f64 {
    let out = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", url])
        .output()
        .expect("ffprobe runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("ffprobe of {url}: {text} {}", String::from_utf8_lossy(&out.stderr)))
}

/// The first frame ffmpeg decodes from `url`, as PNG.
pub(crate) fn first_frame(url: &str) -> Vec<u8> {
    let out = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-i", url, "-frames:v", "1", "-f", "image2", "-c:v", "png", "-"])
        .output()
        .expect("ffmpeg runs");
    assert!(!out.stdout.is_empty(), "a frame of {url}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Bytes of the media segments a clip's renditions list.
async fn stored_bytes(sluice: &Sluice, master: &str) -> u64 {
    let base = master.rsplit_once('/').expect("a path").0;
    let text = sluice.client.get(master).send().await.expect("master").text().await.expect("text");
    let mut uris: Vec<String> =
        text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).map(str::to_string).collect();
    uris.extend(text.lines().filter_map(|l| l.split("URI=\"").nth(1)?.split('"').next().map(str::to_string)));
    let mut total = 0;
    for uri in uris {
        let playlist = format!("{base}/{uri}");
        let dir = playlist.rsplit_once('/').expect("a path").0.to_string();
        let text = sluice.client.get(&playlist).send().await.expect("playlist").text().await.expect("text");
        let segments = text
            .lines()
            .filter(|l| !l.starts_with('#') && l.split('?').next().is_some_and(|f| f.ends_with(".m4s")));
        for segment in segments {
            let r = sluice.client.get(format!("{dir}/{segment}")).send().await.expect("segment");
            total += r.bytes().await.expect("bytes").len() as u64;
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clip_of_a_vod_is_its_range_without_a_re_encode() {
    let sluice = Sluice::start(&[]).await;
    let source = source_vod(&sluice, false).await;

    // 60 s from 12 s: on a keyframe (segments are 4 s), so exactly the range.
    let (done, took) = clip(&sluice, &source, (12.0, 72.0)).await;
    let master = done["playbackUrl"].as_str().expect("playbackUrl").to_string();
    let duration = probed_duration(&master);
    let bytes = stored_bytes(&sluice, &master).await;
    println!(
        "60-s clip of a VOD: complete in {took:.2} s, ffprobe {duration:.3} s, {} KiB of segments ({} KiB noted)",
        bytes / 1024,
        done["sourceSize"].as_u64().unwrap_or(0) / 1024
    );
    assert_eq!(done["sourceSize"].as_u64(), Some(bytes), "sourceSize: the clip's bytes");
    assert!(took < 10.0, "complete within 10 s: {took:.2}");
    assert!((duration - 60.0).abs() <= 0.5, "ffprobe reads {duration}");
    assert!((done["duration"].as_f64().expect("duration") - 60.0).abs() <= 0.5, "{done}");
    assert_eq!(painted_frame(&first_frame(&master)), 360, "the first frame is the one at 12 s");
    let thumb = sluice.client.get(done["thumbnailUrl"].as_str().expect("thumb")).send().await.expect("thumb");
    assert_eq!(painted_frame(&thumb.bytes().await.expect("jpeg")), 360, "the thumbnail is the first picture");
    assert_eq!(done["renditions"][0]["name"], "216p");

    // A start between keyframes: from the keyframe before it (8 s), through the segment holding
    // the end.
    let (done, _) = clip(&sluice, &source, (10.0, 20.0)).await;
    let master = done["playbackUrl"].as_str().expect("playbackUrl");
    assert_eq!(painted_frame(&first_frame(master)), 240);
    let duration = probed_duration(master);
    assert!((duration - 12.0).abs() <= 0.5, "8 s to 20 s: {duration}");

    // Bad ranges name their field; sources that cannot be cut are 404 and 409.
    let id = source["_id"].as_str().expect("id");
    for (range, field) in
        [((20.0, 10.0), "clip.endSec"), ((0.0, 95.0), "clip.endSec"), ((91.0, 92.0), "clip.startSec")]
    {
        let body = json!({"name": "bad", "clip": {"vodId": id, "startSec": range.0, "endSec": range.1}});
        let (status, e) = api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await;
        assert_eq!(status, 400, "{range:?}: {e}");
        assert!(e.to_string().contains(field), "{range:?}: {e}");
    }
    let body = json!({"name": "bad", "clip": {"vodId": id, "startSec": -1, "endSec": "x", "extra": 1}});
    let (status, e) = api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await;
    assert_eq!(status, 400);
    for field in ["clip.startSec", "clip.endSec", "clip.property extra"] {
        assert!(e.to_string().contains(field), "{field}: {e}");
    }
    let body = json!({"name": "bad", "clip": {"vodId": "nosuchvod", "startSec": 0, "endSec": 1}});
    assert_eq!(api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await.0, 404);
    let (_, pending) =
        api(&sluice, reqwest::Method::POST, "/vod", Some(json!({"name": "p", "filename": "p.mp4"}))).await;
    let body = json!({"name": "bad", "clip": {"vodId": pending["vod"]["_id"], "startSec": 0, "endSec": 1}});
    assert_eq!(api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await.0, 409, "a VOD not complete");
    let clip_id = done["_id"].as_str().expect("clip id");
    assert_eq!(api(&sluice, reqwest::Method::DELETE, &format!("/vod/{clip_id}"), None).await.0, 200);
    let body = json!({"name": "bad", "clip": {"vodId": clip_id, "startSec": 0, "endSec": 1}});
    assert_eq!(api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await.0, 409, "an archived VOD");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clip_of_encrypted_media_plays_through_its_own_key() {
    let sluice = Sluice::start(&[]).await;
    let source = source_vod(&sluice, true).await;
    let (done, _) = clip(&sluice, &source, (20.0, 40.0)).await;
    assert_eq!(done["drmEnabled"], true);
    let master = done["playbackUrl"].as_str().expect("playbackUrl");
    let base = master.trim_end_matches("/master.m3u8");
    let playlist = sluice
        .client
        .get(format!("{base}/216p/index.m3u8"))
        .send()
        .await
        .expect("get")
        .text()
        .await
        .expect("text");
    assert!(playlist.contains("#EXT-X-KEY:METHOD=AES-128,URI=\"../key\""), "{playlist}");
    let client = &sluice.client;
    let key =
        |url: String| async move { client.get(url).send().await.expect("key").bytes().await.expect("bytes") };
    let source_base =
        source["playbackUrl"].as_str().expect("url").trim_end_matches("/master.m3u8").to_string();
    let (mine, theirs) = (key(format!("{base}/key")).await, key(format!("{source_base}/key")).await);
    assert_eq!(mine.len(), 16);
    assert_ne!(mine, theirs, "the clip has its own key");
    assert!((probed_duration(master) - 20.0).abs() <= 0.5);
    assert_eq!(painted_frame(&first_frame(master)), 600, "decrypted and decoded: the frame at 20 s");
}

/// A real-time publisher of painted frames (640×360, 30 fps, a keyframe every 2 s) to the
/// stream `created`.
pub(crate) fn painted_push(created: &Value) -> crate::support::Killed {
    ffmpeg_push(
        created["ingestUrl"].as_str().expect("ingestUrl"),
        "painted=640x360:30",
        60,
        &["-b:v", "800k"],
    )
}

/// The URL of rendition `name`'s media playlist, once the live master at `master` lists it.
pub(crate) async fn live_rendition(sluice: &Sluice, master: &str, name: &str) -> String {
    eventually(&format!("the live {name} rendition"), Duration::from_secs(30), || async {
        let text = sluice.client.get(master).send().await.ok()?.text().await.ok()?;
        let uri = text.lines().find(|l| l.contains(&format!("/{name}/index.m3u8")))?.to_string();
        Some(format!("{}/{uri}", master.trim_end_matches("/master.m3u8")))
    })
    .await
}

/// The `EXT-X-PROGRAM-DATE-TIME` of the newest segment of a live media playlist.
fn newest_pdt(playlist: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    playlist.lines().rev().find_map(|l| l.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:")?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clip_of_a_recording_is_cut_at_its_parts() {
    let sluice = Sluice::start(&[]).await;
    let body = json!({"name": "show", "vodEnabled": true, "qualities": ["240p"], "reconnectWindow": 0});
    let created = sluice.create_stream(body).await;
    let stream = created["_id"].as_str().expect("id").to_string();
    let hls = created["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let push = painted_push(&created);
    // 45 s of media recorded, by the live playlist's dates.
    let rung = live_rendition(&sluice, &hls, "240p").await;
    let first = std::sync::Mutex::new(None);
    eventually("45 s of media", Duration::from_secs(90), || async {
        let text = sluice.client.get(&rung).send().await.ok()?.text().await.ok()?;
        let newest = newest_pdt(&text)?;
        let first = *first.lock().expect("lock").get_or_insert(newest);
        ((newest - first).num_milliseconds() >= 45_000).then_some(())
    })
    .await;
    drop(push);
    let recording = eventually("the recording", Duration::from_secs(60), || async {
        let (_, list) = api(&sluice, reqwest::Method::GET, &format!("/vod?streamId={stream}"), None).await;
        list["items"].as_array()?.first().filter(|v| v["status"] == "complete").cloned()
    })
    .await;
    let recording_base =
        recording["playbackUrl"].as_str().expect("playbackUrl").trim_end_matches("/master.m3u8").to_string();
    let start_frame = painted_frame(&first_frame(&format!("{recording_base}/240p/index.m3u8")));

    // From 11 s: a rung part starts there, but the source's keyframe before is at 10 s.
    let (done, took) = clip(&sluice, &recording, (11.0, 41.0)).await;
    let base =
        done["playbackUrl"].as_str().expect("playbackUrl").trim_end_matches("/master.m3u8").to_string();
    let rung_first = painted_frame(&first_frame(&format!("{base}/240p/index.m3u8")));
    let source_first = painted_frame(&first_frame(&format!("{base}/source/index.m3u8")));
    let rung_duration = probed_duration(&format!("{base}/240p/index.m3u8"));
    let master_duration = probed_duration(&format!("{base}/master.m3u8"));
    println!(
        "30-s clip of a recording: complete in {took:.2} s; 240p from frame {rung_first} (asked {}), \
         source from {source_first}; ffprobe 240p {rung_duration:.3} s, master {master_duration:.3} s, \
         record {}",
        start_frame + 330,
        done["duration"]
    );
    // The rung is cut at its parts (7 frames at 30 fps); the source at the publisher's
    // keyframes (every 2 s) at or before the start.
    assert!(rung_first.abs_diff(start_frame + 330) <= 7, "the 240p rendition starts at 11 s");
    assert_eq!(source_first, start_frame + 300, "source: from the publisher's keyframe before, at 10 s");
    assert!((rung_duration - 30.0).abs() <= 0.5, "240p: {rung_duration}");
    // The record's length is the rung's; ffprobe of the master reads the longest rendition.
    assert!((done["duration"].as_f64().expect("duration") - 30.0).abs() <= 0.5, "{done}");
    assert!((30.0..=32.5).contains(&master_duration), "master: {master_duration}");
    assert!(took < 10.0, "complete within 10 s: {took:.2}");

    // By instants, once the push has ended: the recording's playlists date its segments, and the
    // clip is that recording's range in seconds.
    let recorded =
        sluice.client.get(format!("{}/240p/index.m3u8", recording_base)).send().await.expect("get");
    let recorded = recorded.text().await.expect("text");
    let began: chrono::DateTime<chrono::Utc> = recorded
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:")?.parse().ok())
        .unwrap_or_else(|| panic!("the recording's playlist is dated:\n{recorded}"));
    let at =
        |s: i64| (began + chrono::Duration::seconds(s)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let body = json!({"name": "by instants", "clip": {"streamId": stream, "start": at(11), "end": at(41)}});
    let (status, created) = api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    let of = &created["vod"]["clipOf"];
    assert_eq!(of["vodId"], recording["_id"], "{created}");
    assert!((of["startSec"].as_f64().expect("startSec") - 11.0).abs() < 0.01, "{created}");
    let by_instants =
        finished(&sluice, created["vod"]["_id"].as_str().expect("id"), Duration::from_secs(60)).await;
    let url =
        by_instants["playbackUrl"].as_str().expect("playbackUrl").replace("/master.m3u8", "/240p/index.m3u8");
    let first = painted_frame(&first_frame(&url));
    println!(
        "a clip by instants of the ended push: clipOf {of}, 240p from frame {first} (asked {})",
        start_frame + 330
    );
    assert!(first.abs_diff(start_frame + 330) <= 7, "the 240p rendition starts at 11 s");
    let late = json!({"name": "late", "clip": {"streamId": stream, "start": at(100), "end": at(110)}});
    let (status, e) = api(&sluice, reqwest::Method::POST, "/vod", Some(late)).await;
    assert_eq!(status, 409, "neither the live window nor a recording holds it: {e}");

    // hls.js plays the clip to its end, `source` starting before the rung notwithstanding.
    let last = crate::support::player::Player::play_to_the_end(&format!("{base}/master.m3u8"), 29.0).await;
    let events = &last.events;
    let playing = events.iter().position(|e| e == "video playing").expect("playing");
    let stalls: Vec<&String> = events[playing..].iter().filter(|e| e.starts_with("video waiting")).collect();
    println!("hls.js played the clip to {:.3} s; events {events:?}", last.current_time);
    assert!(stalls.is_empty(), "stalled after it started playing: {events:?}");
}

/// The segments of a live media playlist: `(date, seconds, uri, map)`.
fn live_segments(playlist: &str) -> Vec<(chrono::DateTime<chrono::Utc>, f64, String, String)> {
    let (mut date, mut length, mut map) = (None, None, String::new());
    let mut out = Vec::new();
    for line in playlist.lines() {
        if let Some(d) = line.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:") {
            date = d.parse().ok();
        } else if let Some(m) = line.strip_prefix("#EXT-X-MAP:URI=\"") {
            map = m.trim_end_matches('"').to_string();
        } else if let Some(d) = line.strip_prefix("#EXTINF:") {
            length = d.trim_end_matches(',').parse().ok();
        } else if !line.starts_with('#') && !line.is_empty() {
            if let (Some(d), Some(l)) = (date.take(), length.take()) {
                out.push((d, l, line.to_string(), map.clone()));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clip_of_a_live_dvr_window_is_its_instants() {
    let sluice = Sluice::start(&[]).await;
    let body = json!({"name": "match", "dvrEnabled": true, "dvrDuration": 600, "qualities": ["240p"]});
    let created = sluice.create_stream(body).await;
    let stream = created["_id"].as_str().expect("id").to_string();
    let hls = created["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let _push = painted_push(&created);
    let rung = live_rendition(&sluice, &hls, "240p").await;
    let dir = rung.split('?').next().expect("url").rsplit_once('/').expect("a path").0.to_string();
    // 70 s in the DVR window.
    let segments = eventually("70 s of DVR", Duration::from_secs(120), || async {
        let text = sluice.client.get(&rung).send().await.ok()?.text().await.ok()?;
        let segments = live_segments(&text);
        let (first, last) = (segments.first()?, segments.last()?);
        ((last.0 - first.0).num_milliseconds() >= 70_000).then_some(segments)
    })
    .await;
    // The frame painted at a segment's start, read off the live rendition; the clip starts 1 s
    // after it.
    let (date, _, uri, map) = &segments[2];
    let client = &sluice.client;
    let get =
        |url: String| async move { client.get(url).send().await.expect("get").bytes().await.expect("bytes") };
    let mut bytes = get(format!("{dir}/{map}")).await.to_vec();
    bytes.extend_from_slice(&get(format!("{dir}/{uri}")).await);
    let at_segment = painted_frame(&bytes);
    let start = *date + chrono::Duration::seconds(1);
    let iso = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let clip_of = |start, end| json!({"streamId": stream, "start": iso(start), "end": iso(end)});

    let started = Instant::now();
    let body = json!({"name": "the goal", "clip": clip_of(start, start + chrono::Duration::seconds(60))});
    let (status, created) = api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["vod"]["clipOf"]["streamId"], stream.as_str());
    let id = created["vod"]["_id"].as_str().expect("id");
    let done = finished(&sluice, id, Duration::from_secs(60)).await;
    let took = started.elapsed().as_secs_f64();
    assert_eq!(done["status"], "complete", "{done}");
    let base =
        done["playbackUrl"].as_str().expect("playbackUrl").trim_end_matches("/master.m3u8").to_string();
    let rung_first = painted_frame(&first_frame(&format!("{base}/240p/index.m3u8")));
    let source_first = painted_frame(&first_frame(&format!("{base}/source/index.m3u8")));
    let duration = probed_duration(&format!("{base}/240p/index.m3u8"));
    let bytes = stored_bytes(&sluice, &format!("{base}/master.m3u8")).await;
    println!(
        "60-s clip of a DVR window: complete in {took:.2} s; 240p from frame {rung_first} (asked {}), source from \
         {source_first}; ffprobe 240p {duration:.3} s; {} KiB stored",
        at_segment + 30,
        bytes / 1024
    );
    assert!(took < 10.0, "complete within 10 s: {took:.2}");
    assert!(
        rung_first.abs_diff(at_segment + 30) <= 7,
        "the first frame is the one painted at the start, ± a part"
    );
    assert!(
        source_first <= at_segment + 30 && source_first + 60 >= at_segment + 30,
        "source: the keyframe before"
    );
    assert!((duration - 60.0).abs() <= 0.5, "ffprobe reads {duration}");
    assert!((done["duration"].as_f64().expect("duration") - 60.0).abs() <= 0.5, "{done}");

    // Outside the window, backwards, unknown, and a stream with no window here.
    let (first, last) = (segments[0].0, segments.last().expect("a segment").0);
    let second = chrono::Duration::seconds(1);
    for (range, field) in [
        ((start + second, start), "clip.end"),
        ((first - second * 30, first + second), "clip.start"),
        ((last - second, last + second * 600), "clip.end"),
    ] {
        let (status, e) = api(
            &sluice,
            reqwest::Method::POST,
            "/vod",
            Some(json!({"name": "x", "clip": clip_of(range.0, range.1)})),
        )
        .await;
        assert_eq!(status, 400, "{e}");
        assert!(e.to_string().contains(field), "{field}: {e}");
    }
    let body = json!({"name": "x", "clip": {"streamId": stream, "start": "yesterday", "end": iso(start)}});
    let (status, e) = api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await;
    assert!(status == 400 && e.to_string().contains("clip.start must be an ISO 8601 instant"), "{e}");
    let body = json!({"name": "x", "clip": {"streamId": "nosuchstream", "start": iso(start), "end": iso(start + second)}});
    assert_eq!(api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await.0, 404);
    let idle = sluice.create_stream(json!({"name": "idle"})).await;
    let body = json!({"name": "x", "clip": {"streamId": idle["_id"], "start": iso(start), "end": iso(start + second)}});
    assert_eq!(api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await.0, 409, "no DVR window here");
    let body = json!({"name": "x", "clip": {"start": iso(start)}});
    let (status, e) = api(&sluice, reqwest::Method::POST, "/vod", Some(body)).await;
    assert!(status == 400 && e.to_string().contains("clip must have one of vodId, streamId"), "{e}");
}
