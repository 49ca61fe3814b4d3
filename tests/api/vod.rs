//! VOD end to end: create, PUT a real file made by ffmpeg, `uploaded`, the events, the ladder read
//! back with ffprobe, the thumbnail, hls.js playing the master playlist to its end; and every bad
//! input the contract names.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::player::Player;
use crate::support::receiver::Receiver;
use crate::support::{
    both_backends, clip_copy, error_message, eventually, spawn_app, spawn_app_with, vod_clip_name, Backend,
    TestApp,
};

/// A test file from `media-fixtures` copied to `dir/name`: `video` a lavfi source such as
/// `testsrc2=size=1280x720:rate=30` (or `None` for audio only), `seconds` long, H.264 + AAC in MP4.
pub fn make_file(dir: &Path, name: &str, video: Option<&str>, seconds: u32) -> PathBuf {
    let video = video.map(|v| {
        let (source, params) = v.split_once("=size=").expect("a lavfi source with a size");
        let (size, rate) = params.split_once(":rate=").expect("a lavfi source with a rate");
        (source, size, rate.parse().expect("a whole frame rate"))
    });
    clip_copy(&vod_clip_name(video, seconds), dir, name)
}

/// `ffprobe` of the first video stream of `url`: `codec,width,height`.
pub fn probe_video(url: &str) -> String {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "stream=codec_name,width,height"])
        .args(["-of", "csv=p=0", url])
        .output()
        .expect("ffprobe runs");
    // An HLS playlist is listed once per program: the first line is the stream.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Creates a VOD; returns `(vod, upload url)`.
pub async fn create(t: &TestApp, body: Value) -> (Value, String) {
    let resp = t.post_json_with(&t.project_url("/vod"), &t.key, &body).await;
    assert_eq!(resp.status(), 201);
    let v: Value = resp.json().await.expect("json");
    assert_eq!(v["upload"]["method"], "PUT");
    assert!(v["upload"]["expiresAt"].as_str().is_some_and(|s| s.ends_with('Z')));
    (v["vod"].clone(), v["upload"]["url"].as_str().expect("upload url").to_string())
}

pub async fn put_file(t: &TestApp, url: &str, file: &Path) -> reqwest::Response {
    let bytes = std::fs::read(file).expect("read file");
    t.client.put(url).body(bytes).send().await.expect("upload")
}

pub async fn uploaded(t: &TestApp, id: &str) -> reqwest::Response {
    t.with_key(Method::POST, &t.project_url(&format!("/vod/{id}/uploaded")), &t.key)
        .send()
        .await
        .expect("uploaded")
}

/// `DELETE /vod/<id>` with the project's `*` key.
pub async fn delete_vod(t: &TestApp, id: &str) -> reqwest::Response {
    t.with_key(Method::DELETE, &t.project_url(&format!("/vod/{id}")), &t.key).send().await.expect("delete")
}

pub async fn get_vod(t: &TestApp, id: &str) -> Value {
    t.get_with(&t.project_url(&format!("/vod/{id}")), &t.key).await.json().await.expect("json")
}

/// Waits for the VOD to leave `queued`/`processing`; returns the record.
pub async fn finished(t: &TestApp, id: &str, within: Duration) -> Value {
    eventually("the transcode to end", within, || async {
        let v = get_vod(t, id).await;
        (!["queued", "processing", "uploaded"].contains(&v["status"].as_str().unwrap_or_default()))
            .then_some(v)
    })
    .await
}

/// A webhook for every event on `receiver`.
pub async fn subscribe(t: &TestApp, receiver: &Receiver) {
    let resp = t
        .post_json_with(&t.project_url("/webhooks"), &t.key, &json!({"url": receiver.url(), "events": ["*"]}))
        .await;
    assert_eq!(resp.status(), 201);
}

/// Events received for `vod_id`, in arrival order: `(event, data)`.
pub fn events_for(receiver: &Receiver, vod_id: &str) -> Vec<(String, Value)> {
    receiver
        .received()
        .iter()
        .map(|r| r.json())
        .filter(|e| e["data"]["id"] == vod_id)
        .map(|e| (e["event"].as_str().unwrap_or_default().to_string(), e["data"].clone()))
        .collect()
}

/// Bits per second of a rendition: its segments' bytes over its playlist's duration.
async fn measured_bitrate(t: &TestApp, playlist_url: &str) -> f64 {
    let text = t.client.get(playlist_url).send().await.expect("playlist").text().await.expect("text");
    let base = playlist_url.rsplit_once('/').expect("url has a path").0;
    let mut seconds = 0.0;
    let mut bytes = 0usize;
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("#EXTINF:") {
            seconds += d.trim_end_matches(',').parse::<f64>().expect("EXTINF");
        } else if line.ends_with(".m4s") {
            bytes += t
                .client
                .get(format!("{base}/{line}"))
                .send()
                .await
                .expect("segment")
                .bytes()
                .await
                .expect("bytes")
                .len();
        }
    }
    assert!(seconds > 0.0, "{playlist_url} lists segments");
    bytes as f64 * 8.0 / seconds
}

async fn end_to_end(t: TestApp) {
    let receiver = Receiver::start().await;
    subscribe(&t, &receiver).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = make_file(dir.path(), "talk.mp4", Some("testsrc2=size=1280x720:rate=30"), 8);
    let size = std::fs::metadata(&file).expect("file").len();
    let ladder = json!([
        {"name": "1080p", "width": 1920, "height": 1080, "videoBitrate": "4M"},
        {"name": "720p", "width": 1280, "height": 720, "videoBitrate": "2M"},
        {"name": "480p", "width": 854, "height": 480, "videoBitrate": "1000k"},
        {"name": "360p", "width": 640, "height": 360, "videoBitrate": "600k"},
    ]);
    let (vod, url) = create(&t, json!({"name": "Talk", "filename": "talk.mp4", "ladder": ladder})).await;
    let id = vod["_id"].as_str().expect("id").to_string();
    assert_eq!(vod["status"], "pending_upload");
    assert_eq!(vod["aspectRatio"], "preserve");
    assert_eq!(vod["outputFormat"], "hls");
    assert_eq!(vod["ladder"].as_array().map(Vec::len), Some(4));

    let resp = put_file(&t, &url, &file).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let resp = uploaded(&t, &id).await;
    assert_eq!(resp.status(), 200);
    let after: Value = resp.json().await.expect("json");
    assert_eq!(after["status"], "queued");
    assert_eq!(after["sourceSize"], size);

    let done = finished(&t, &id, Duration::from_secs(180)).await;
    assert_eq!(done["status"], "complete", "{done}");
    assert_eq!(done["progress"], 100);
    assert!(done["completedAt"].is_string());
    let duration = done["duration"].as_f64().expect("duration");
    assert!((duration - 8.0).abs() < 0.5, "duration {duration}");
    let master_url = done["playbackUrl"].as_str().expect("playbackUrl").to_string();
    assert_eq!(master_url, format!("{}/play/vod/{id}/master.m3u8", t.base));
    let names: Vec<&str> = done["renditions"]
        .as_array()
        .expect("renditions")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["720p", "480p", "360p"], "1080p is above the source");

    // Events: uploaded, processing, complete, in that order, with the record's fields.
    let events = eventually("the three events", Duration::from_secs(20), || async {
        let e = events_for(&receiver, &id);
        (e.len() >= 3).then_some(e)
    })
    .await;
    let kinds: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(kinds, ["vod.uploaded", "vod.processing", "vod.complete"]);
    for ((_, data), status) in events.iter().zip(["uploaded", "processing", "complete"]) {
        assert_eq!(data["status"], status);
        assert_eq!(data["name"], "Talk");
        assert_eq!(data["projectId"], t.project_id);
        assert_eq!(data["outputFormat"], "hls");
        assert_eq!(data["sourceSize"], size);
        assert_eq!(data["playbackUrl"], master_url);
        assert_eq!(data["thumbnailUrl"], format!("{}/play/vod/{id}/thumb.jpg", t.base));
        assert!(data.get("error").is_none());
    }
    assert!(events[2].1["completedAt"].is_string());

    // The master lists the three renditions; ffprobe reads each at its size and bitrate.
    let master = t.client.get(&master_url).send().await.expect("master");
    assert_eq!(master.headers()["content-type"], "application/vnd.apple.mpegurl");
    let master = master.text().await.expect("text");
    assert_eq!(master.matches("#EXT-X-STREAM-INF").count(), 3, "{master}");
    assert!(master.contains("TYPE=AUDIO"), "{master}");
    for (name, size, kbps) in
        [("720p", "1280,720", 2000.0), ("480p", "854,480", 1000.0), ("360p", "640,360", 600.0)]
    {
        let url = format!("{}/play/vod/{id}/{name}/index.m3u8", t.base);
        assert_eq!(probe_video(&url), format!("h264,{size}"), "{name}");
        let bps = measured_bitrate(&t, &url).await;
        assert!(
            bps > 0.6 * kbps * 1000.0 && bps < 1.25 * kbps * 1000.0,
            "{name}: {bps:.0} bit/s for {kbps} kbit/s"
        );
        assert!(master.contains(&format!(
            "RESOLUTION={}x{}",
            &size[..size.find(',').unwrap_or(0)],
            &size[size.find(',').unwrap_or(0) + 1..]
        )));
    }
    // Keyframes line up: every rendition has the same segment durations.
    let durations = |text: String| -> Vec<String> {
        text.lines().filter(|l| l.starts_with("#EXTINF")).map(str::to_string).collect()
    };
    let mut all = Vec::new();
    for name in ["720p", "480p", "360p"] {
        let url = format!("{}/play/vod/{id}/{name}/index.m3u8", t.base);
        all.push(durations(t.client.get(&url).send().await.expect("playlist").text().await.expect("text")));
    }
    assert!(all.windows(2).all(|w| w[0] == w[1]), "{all:?}");
    assert!(all[0].len() >= 2, "more than one segment: {all:?}");

    // The thumbnail is a JPEG of the top rendition's size.
    let thumb = t.client.get(format!("{}/play/vod/{id}/thumb.jpg", t.base)).send().await.expect("thumb");
    assert_eq!(thumb.headers()["content-type"], "image/jpeg");
    let jpeg = thumb.bytes().await.expect("bytes");
    assert_eq!(&jpeg[..3], &[0xff, 0xd8, 0xff]);
    let thumb_file = dir.path().join("thumb.jpg");
    std::fs::write(&thumb_file, &jpeg).expect("write");
    assert_eq!(probe_video(thumb_file.to_str().expect("path")), "mjpeg,1280,720");

    // Byte ranges and caching of media.
    let seg = t
        .client
        .get(format!("{}/play/vod/{id}/480p/s0.m4s", t.base))
        .header("Range", "bytes=4-7")
        .send()
        .await
        .expect("range");
    assert_eq!(seg.status(), 206);
    assert!(seg.headers()["cache-control"].to_str().unwrap_or_default().contains("immutable"));
    assert_eq!(seg.bytes().await.expect("bytes").as_ref(), b"styp", "a CMAF segment");
    let missing = t.client.get(format!("{}/play/vod/{id}/480p/s999.m4s", t.base)).send().await.expect("404");
    assert_eq!(missing.status(), 404);
    let source = t.client.get(format!("{}/play/vod/{id}/x/source", t.base)).send().await.expect("404");
    assert_eq!(source.status(), 404, "the source is never served");
}

both_backends!(end_to_end);

/// hls.js in headless Chromium plays the master playlist to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hls_js_plays_to_the_end() {
    let t = spawn_app(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = make_file(dir.path(), "clip.mp4", Some("testsrc2=size=640x360:rate=30"), 6);
    let ladder = json!([
        {"name": "360p", "width": 640, "height": 360, "videoBitrate": "800k"},
        {"name": "240p", "width": 426, "height": 240, "videoBitrate": "400k"},
    ]);
    let (vod, url) = create(&t, json!({"name": "Clip", "filename": "clip.mp4", "ladder": ladder})).await;
    let id = vod["_id"].as_str().expect("id").to_string();
    assert_eq!(put_file(&t, &url, &file).await.status(), 200);
    assert_eq!(uploaded(&t, &id).await.status(), 200);
    let done = finished(&t, &id, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "complete", "{done}");
    let last = Player::play_to_the_end(done["playbackUrl"].as_str().expect("url"), 5.5).await;
    assert_eq!(last.levels.len(), 2, "hls.js sees both renditions");
}

async fn bad_inputs(t: TestApp) {
    let receiver = Receiver::start().await;
    subscribe(&t, &receiver).await;
    let dir = tempfile::tempdir().expect("tempdir");

    // Validation names each field.
    let resp = t
        .post_json_with(
            &t.project_url("/vod"),
            &t.key,
            &json!({"filename": "a.mp4", "aspectRatio": "zoom", "ladder": [
                {"name": "a", "width": 641, "height": 360, "videoBitrate": "3G"},
                {"name": "a", "width": 640, "height": 360, "videoBitrate": "800k", "fps": 30}
            ]}),
        )
        .await;
    let message = error_message(resp, 400).await;
    let text = message.to_string();
    for part in [
        "name is required",
        "aspectRatio must be one of",
        "ladder.0.width",
        "ladder.0.videoBitrate",
        "ladder.1.property fps",
    ] {
        assert!(text.contains(part), "{part} in {text}");
    }
    let rung = json!({"name": "a", "width": 640, "height": 360, "videoBitrate": "800k"});
    let body = json!({"name": "n", "filename": "a.mp4", "ladder": [rung, rung]});
    let message = error_message(t.post_json_with(&t.project_url("/vod"), &t.key, &body).await, 400).await;
    assert!(message.to_string().contains("ladder must have unique rung names"), "{message}");
    let body = json!({"name": "n", "filename": "a.mp4", "ladder": []});
    error_message(t.post_json_with(&t.project_url("/vod"), &t.key, &body).await, 400).await;

    // `uploaded` before any upload: 409, nothing changes.
    let (vod, nothing_url) = create(&t, json!({"name": "Nothing", "filename": "x.mp4"})).await;
    let id = vod["_id"].as_str().expect("id").to_string();
    error_message(uploaded(&t, &id).await, 409).await;
    assert_eq!(get_vod(&t, &id).await["status"], "pending_upload");

    // A tampered signature and an expired URL: 403.
    let tampered = nothing_url.replace("sig=", "sig=0");
    let resp = t.client.put(&tampered).body("x").send().await.expect("put");
    assert_eq!(resp.status(), 403);
    let expired = t.app.uploads.url(&id, chrono::Utc::now().timestamp() - 1).await;
    let resp = t.client.put(&expired).body("x").send().await.expect("put");
    let message = error_message(resp, 403).await;
    assert!(message.to_string().contains("expired"), "{message}");
    let other = t.app.uploads.url("someothervod", chrono::Utc::now().timestamp() + 60).await;
    let resp = t.client.put(other.replace("someothervod", &id)).body("x").send().await.expect("put");
    assert_eq!(resp.status(), 403, "a URL signed for another VOD");
    // Heartbeat gives a fresh URL that works.
    let hb = t
        .with_key(Method::POST, &t.project_url(&format!("/vod/{id}/heartbeat")), &t.key)
        .send()
        .await
        .expect("hb");
    assert_eq!(hb.status(), 200);
    let hb: Value = hb.json().await.expect("json");
    assert!(hb["upload"]["url"].as_str().is_some_and(|u| u.contains(&id)));

    // Random bytes: failed with an error, vod.failed.
    let junk = dir.path().join("junk.mp4");
    std::fs::write(
        &junk,
        (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect::<Vec<u8>>(),
    )
    .expect("write");
    let (vod, url) = create(&t, json!({"name": "Junk", "filename": "junk.mp4"})).await;
    let junk_id = vod["_id"].as_str().expect("id").to_string();
    assert_eq!(put_file(&t, &url, &junk).await.status(), 200);
    let v: Value = uploaded(&t, &junk_id).await.json().await.expect("json");
    assert_eq!(v["status"], "failed");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("not a media file")), "{v}");
    assert_eq!(v["sourceSize"], 200_000);
    error_message(uploaded(&t, &junk_id).await, 409).await;

    // Audio only.
    let audio = make_file(dir.path(), "audio.mp4", None, 3);
    let (vod, url) = create(&t, json!({"name": "Audio", "filename": "audio.mp4"})).await;
    let audio_id = vod["_id"].as_str().expect("id").to_string();
    assert_eq!(put_file(&t, &url, &audio).await.status(), 200);
    let v: Value = uploaded(&t, &audio_id).await.json().await.expect("json");
    assert_eq!(v["status"], "failed");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("no video")), "{v}");

    // A truncated MP4 (ffmpeg writes the index at the end, so half a file has none).
    let whole = make_file(dir.path(), "whole.mp4", Some("testsrc2=size=320x240:rate=30"), 4);
    let bytes = std::fs::read(&whole).expect("read");
    let truncated = dir.path().join("truncated.mp4");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    let (vod, url) = create(&t, json!({"name": "Truncated", "filename": "truncated.mp4"})).await;
    let truncated_id = vod["_id"].as_str().expect("id").to_string();
    assert_eq!(put_file(&t, &url, &truncated).await.status(), 200);
    let resp = uploaded(&t, &truncated_id).await;
    let status = resp.status();
    let v: Value = resp.json().await.expect("json");
    assert_eq!(status, 200, "uploaded: {v}");
    let v =
        if v["status"] == "failed" { v } else { finished(&t, &truncated_id, Duration::from_secs(60)).await };
    assert_eq!(v["status"], "failed", "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("truncated")), "{v}");

    let failed = eventually("three vod.failed", Duration::from_secs(20), || async {
        let ids = [&junk_id, &audio_id, &truncated_id];
        let got: Vec<Value> = ids
            .iter()
            .filter_map(|i| {
                events_for(&receiver, i).into_iter().find(|(e, _)| e == "vod.failed").map(|(_, d)| d)
            })
            .collect();
        (got.len() == 3).then_some(got)
    })
    .await;
    assert!(failed
        .iter()
        .all(|d| d["status"] == "failed" && d["error"].as_str().is_some_and(|e| !e.is_empty())));

    // Cancel a pending VOD: cancelled, vod.cancelled; a second DELETE is refused.
    let resp = delete_vod(&t, &id).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.expect("json")["status"], "cancelled");
    let resp = delete_vod(&t, &id).await;
    error_message(resp, 409).await;
    eventually("vod.cancelled", Duration::from_secs(20), || async {
        events_for(&receiver, &id)
            .iter()
            .any(|(e, d)| e == "vod.cancelled" && d["status"] == "cancelled")
            .then_some(())
    })
    .await;
    let resp = t.client.put(&nothing_url).body("late").send().await.expect("put");
    error_message(resp, 409).await;

    // Scopes: vod:read lists and reads but cannot create or cancel; another project sees nothing.
    let reader = t.create_key(&["vod:read"]).await;
    let body = json!({"name": "n", "filename": "a.mp4"});
    assert_eq!(t.post_json_with(&t.project_url("/vod"), &reader, &body).await.status(), 403);
    assert_eq!(t.get_with(&t.project_url(&format!("/vod/{junk_id}")), &reader).await.status(), 200);
    let resp = t.with_key(Method::DELETE, &t.project_url(&format!("/vod/{audio_id}")), &reader).send().await;
    assert_eq!(resp.expect("delete").status(), 403);
    let outsider = t.other_project("elsewhere").await;
    assert_eq!(t.get_with(&t.project_url(&format!("/vod/{junk_id}")), &outsider).await.status(), 404);

    // Lists filter by status.
    let list: Value =
        t.get_with(&t.project_url("/vod?status=failed"), &t.key).await.json().await.expect("json");
    assert_eq!(list["total"], 3);
    let resp = t.get_with(&t.project_url("/vod?limit=101"), &t.key).await;
    error_message(resp, 400).await;
}

both_backends!(bad_inputs);

/// Resumable chunks, oversize files (413), a chunk past what arrived (416).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_and_oversize_uploads() {
    let t = spawn_app_with(Backend::Sqlite, |a| a.max_upload_bytes = Some(300_000)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = make_file(dir.path(), "small.mp4", Some("testsrc2=size=320x240:rate=15"), 2);
    let bytes = std::fs::read(&file).expect("read");
    assert!(bytes.len() < 300_000, "{} bytes", bytes.len());
    let (vod, url) = create(&t, json!({"name": "Chunks", "filename": "small.mp4"})).await;
    let id = vod["_id"].as_str().expect("id").to_string();
    let total = bytes.len();
    let half = total / 2;

    let put = |range: String, body: Vec<u8>| {
        let (client, url) = (t.client.clone(), url.clone());
        async move { client.put(&url).header("Content-Range", range).body(body).send().await.expect("put") }
    };
    let resp = put(format!("bytes 0-{}/{total}", half - 1), bytes[..half].to_vec()).await;
    assert_eq!(resp.status(), 202);
    assert_eq!(resp.headers()["range"], format!("bytes=0-{}", half - 1));
    error_message(uploaded(&t, &id).await, 409).await;
    // Asking how much arrived.
    let resp = put(format!("bytes */{total}"), Vec::new()).await;
    assert_eq!(resp.status(), 202);
    assert_eq!(resp.json::<Value>().await.expect("json")["received"], half);
    // A chunk past what arrived.
    let resp = put(format!("bytes {}-{}/{total}", half + 10, total - 1), bytes[half + 10..].to_vec()).await;
    assert_eq!(resp.status(), 416);
    // The rest, overlapping a little.
    let resp = put(format!("bytes {}-{}/{total}", half - 100, total - 1), bytes[half - 100..].to_vec()).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let v: Value = uploaded(&t, &id).await.json().await.expect("json");
    assert_eq!(v["status"], "queued", "{v}");
    assert_eq!(v["sourceSize"], total);
    let stored =
        std::fs::read(t.app.storage.local_path(&format!("vod/{id}/source")).expect("local")).expect("stored");
    assert!(stored == bytes, "the file arrived whole");

    // Oversize: by Content-Length, by the declared total, and by what streams in.
    let (vod, url) = create(&t, json!({"name": "Big", "filename": "big.bin"})).await;
    let big_id = vod["_id"].as_str().expect("id").to_string();
    let resp = t.client.put(&url).body(vec![0u8; 400_000]).send().await.expect("put");
    let message = error_message(resp, 413).await;
    assert!(message.to_string().contains("300000"), "{message}");
    let resp = t
        .client
        .put(&url)
        .header("Content-Range", "bytes 0-9/400000")
        .body(vec![0u8; 10])
        .send()
        .await
        .expect("put");
    assert_eq!(resp.status(), 413);
    let stream = futures_util::stream::iter((0..40).map(|_| Ok::<_, std::io::Error>(vec![0u8; 10_000])));
    let resp = t.client.put(&url).body(reqwest::Body::wrap_stream(stream)).send().await.expect("put");
    assert_eq!(resp.status(), 413);
    assert!(
        !t.app.storage.local_path(&format!("vod/{big_id}/source.part")).expect("local").exists(),
        "nothing of an oversize upload is kept"
    );
    error_message(uploaded(&t, &big_id).await, 409).await;
}

/// A refused upload is answered, never reset under a client still sending: refused by its
/// Content-Length before a byte is read, refused once too much streamed in, and a chunk past
/// what arrived — each many times over, on fresh connections and reused ones. A client
/// that asks `Expect: 100-continue` (curl, for a large file) gets the 413 without sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_uploads_are_answered_not_reset() {
    let t = spawn_app_with(Backend::Sqlite, |a| a.max_upload_bytes = Some(300_000)).await;
    let (_, url) = create(&t, json!({"name": "Refused", "filename": "big.bin"})).await;
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("client");
    for round in 0..20 {
        for client in [&t.client, &fresh] {
            let resp = client.put(&url).body(vec![0u8; 1_000_000]).send().await;
            let resp = resp.unwrap_or_else(|e| panic!("round {round}: by length: {e}"));
            assert_eq!(resp.status(), 413, "round {round}: by length");
            let chunks = (0..100).map(|_| Ok::<_, std::io::Error>(vec![0u8; 10_000]));
            let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
            let resp = client.put(&url).body(body).send().await;
            let resp = resp.unwrap_or_else(|e| panic!("round {round}: streamed: {e}"));
            assert_eq!(resp.status(), 413, "round {round}: streamed");
            let resp = client
                .put(&url)
                .header("Content-Range", "bytes 100000-199999/200000")
                .body(vec![0u8; 100_000])
                .send()
                .await;
            let resp = resp.unwrap_or_else(|e| panic!("round {round}: past the end: {e}"));
            assert_eq!(resp.status(), 416, "round {round}: past the end");
        }
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("big.bin");
    std::fs::write(&file, vec![0u8; 50_000_000]).expect("write");
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code} %{size_upload}", "-H", "Expect: 100-continue"])
        .args(["--expect100-timeout", "30", "-T"])
        .arg(&file)
        .arg(&url)
        .output()
        .await
        .expect("curl");
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    let (code, sent) = printed.split_once(' ').expect("code and size");
    assert_eq!(code, "413", "{printed} {}", String::from_utf8_lossy(&out.stderr));
    let sent: f64 = sent.parse().expect("size_upload");
    assert!(sent < 10_000_000.0, "curl sent {sent} bytes of a refused 50-MB file");
}

/// A vertical video keeps its shape with `preserve` and gets black bars with `pad`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vertical_video_preserve_and_pad() {
    let t = spawn_app(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = make_file(dir.path(), "vertical.mp4", Some("testsrc2=size=720x1280:rate=30"), 3);
    let ladder = json!([{"name": "720p", "width": 1280, "height": 720, "videoBitrate": "1500k"}]);
    let mut ids = Vec::new();
    for mode in ["preserve", "pad"] {
        let (vod, url) =
            create(&t, json!({"name": mode, "filename": "v.mp4", "aspectRatio": mode, "ladder": ladder}))
                .await;
        let id = vod["_id"].as_str().expect("id").to_string();
        assert_eq!(put_file(&t, &url, &file).await.status(), 200);
        assert_eq!(uploaded(&t, &id).await.status(), 200);
        ids.push((mode, id));
    }
    for (mode, id) in ids {
        let done = finished(&t, &id, Duration::from_secs(120)).await;
        assert_eq!(done["status"], "complete", "{done}");
        let url = format!("{}/play/vod/{id}/720p/index.m3u8", t.base);
        let expected = if mode == "preserve" { "h264,406,720" } else { "h264,1280,720" };
        assert_eq!(probe_video(&url), expected, "{mode}");
        assert_eq!(done["renditions"][0]["width"], if mode == "preserve" { 406 } else { 1280 });
        if mode == "pad" {
            // The bars are black: the thumbnail's left edge is dark, its middle is not.
            let jpeg = t
                .client
                .get(format!("{}/play/vod/{id}/thumb.jpg", t.base))
                .send()
                .await
                .expect("thumb")
                .bytes()
                .await
                .expect("bytes");
            let path = dir.path().join("pad.jpg");
            std::fs::write(&path, &jpeg).expect("write");
            let luma = |x: u32| -> f64 {
                let out = Command::new("ffmpeg")
                    .args(["-v", "error", "-i", path.to_str().expect("p")])
                    .args(["-vf", &format!("crop=20:720:{x}:0,format=gray,scale=1:1"), "-f", "rawvideo", "-"])
                    .output()
                    .expect("ffmpeg");
                f64::from(*out.stdout.first().expect("a pixel"))
            };
            assert!(luma(10) < 30.0 && luma(630) > 40.0, "bars {} / picture {}", luma(10), luma(630));
        }
    }
    // Archive: playback 404, left out of lists unless asked for.
    let id = ids_first(&t).await;
    let resp = delete_vod(&t, &id).await;
    let v: Value = resp.json().await.expect("json");
    assert_eq!(v["status"], "complete");
    assert!(v["archivedAt"].is_string() && v["playbackUrl"].is_null());
    assert_eq!(
        t.client.get(format!("{}/play/vod/{id}/master.m3u8", t.base)).send().await.expect("get").status(),
        404
    );
    let list: Value = t.get_with(&t.project_url("/vod"), &t.key).await.json().await.expect("json");
    assert_eq!(list["total"], 1);
    let list: Value =
        t.get_with(&t.project_url("/vod?archived=true"), &t.key).await.json().await.expect("json");
    assert_eq!(list["total"], 2);
    let resp = delete_vod(&t, &id).await;
    error_message(resp, 409).await;
}

async fn ids_first(t: &TestApp) -> String {
    let list: Value = t.get_with(&t.project_url("/vod"), &t.key).await.json().await.expect("json");
    list["items"][0]["_id"].as_str().expect("id").to_string()
}

/// DELETE while processing: `cancelled`, the pipeline stops, and its partial output goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_running_transcode() {
    let t = spawn_app(Backend::Sqlite).await;
    let receiver = Receiver::start().await;
    subscribe(&t, &receiver).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = make_file(dir.path(), "long.mp4", Some("testsrc2=size=1280x720:rate=30"), 40);
    let (vod, url) = create(&t, json!({"name": "Long", "filename": "long.mp4"})).await;
    let id = vod["_id"].as_str().expect("id").to_string();
    assert_eq!(put_file(&t, &url, &file).await.status(), 200);
    assert_eq!(uploaded(&t, &id).await.status(), 200);
    let work = t.app.settings.data_dir.join("work").join(&id);
    eventually("the transcode to be under way", Duration::from_secs(60), || async {
        let v = get_vod(&t, &id).await;
        (v["status"] == "processing" && v["progress"].as_i64().unwrap_or(0) >= 5 && work.exists())
            .then_some(())
    })
    .await;
    let resp = delete_vod(&t, &id).await;
    assert_eq!(resp.json::<Value>().await.expect("json")["status"], "cancelled");
    let stored = t.app.storage.local_path(&format!("vod/{id}")).expect("local");
    eventually("the partial output to go", Duration::from_secs(20), || async {
        (!work.exists() && !stored.exists()).then_some(())
    })
    .await;
    let (jobs,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM transcode_jobs").fetch_one(t.db.pool()).await.expect("count");
    assert_eq!(jobs, 0);
    let events = eventually("vod.cancelled", Duration::from_secs(20), || async {
        let e = events_for(&receiver, &id);
        e.iter().any(|(name, _)| name == "vod.cancelled").then_some(e)
    })
    .await;
    assert!(events.iter().all(|(name, _)| name != "vod.complete" && name != "vod.failed"), "{events:?}");
    assert_eq!(get_vod(&t, &id).await["status"], "cancelled");
}
