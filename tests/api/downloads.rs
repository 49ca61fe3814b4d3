//! MP4 downloads (CONTRACT: Clips, downloads, thumbnails), on the real binary: `mp4: true` gives
//! a progressive MP4 of each rendition (with the audio) and an M4A, `moov` before `mdat`, whose
//! length ffprobe reads as the VOD's; served with byte ranges and signed like playback; PATCH
//! turns them on for a complete VOD and off again; a clip asks for its own; bad input is 400
//! naming the field, a VOD that cannot have them 409.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::clips::{api, finished, first_frame, probed_duration, upload_vod};
use crate::support::{eventually, painted_frame, Sluice};

/// 20 s of painted frames at 30 fps with a tone.
const SOURCE: &str = "vod-frames-384x216-30fps-20s.mp4";

/// The top-level boxes of an MP4 file, in order.
fn boxes(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 8 <= bytes.len() {
        let size = u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        out.push(String::from_utf8_lossy(&bytes[at + 4..at + 8]).into_owned());
        if size < 8 {
            break;
        }
        at += size;
    }
    out
}

/// Waits for VOD `id`'s downloads to be ready; returns the record.
async fn ready(sluice: &Sluice, id: &str) -> Value {
    eventually("the downloads", Duration::from_secs(60), || async {
        let (_, v) = api(sluice, Method::GET, &format!("/vod/{id}"), None).await;
        assert_ne!(v["downloadsStatus"], "failed", "{v}");
        (v["downloadsStatus"] == "ready").then_some(v)
    })
    .await
}

/// ffprobe of a file: (duration, the codec types of its streams).
fn probe(path: &std::path::Path) -> (f64, Vec<String>) {
    let out = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "format=duration:stream=codec_type", "-of", "json"])
        .arg(path)
        .output()
        .expect("ffprobe runs");
    let v: Value = serde_json::from_slice(&out.stdout).expect("ffprobe's JSON");
    let duration = v["format"]["duration"].as_str().and_then(|d| d.parse().ok()).expect("a duration");
    let kinds = v["streams"]
        .as_array()
        .expect("streams")
        .iter()
        .filter_map(|s| s["codec_type"].as_str().map(str::to_string))
        .collect();
    (duration, kinds)
}

/// Fetches every download of `vod` into `dir`, checks each against its record (size, `moov` first,
/// the tracks) and returns `(rendition, path, ffprobe's duration)`.
async fn fetch_all(
    sluice: &Sluice,
    vod: &Value,
    dir: &std::path::Path,
) -> Vec<(String, std::path::PathBuf, f64)> {
    let mut out = Vec::new();
    for d in vod["downloads"].as_array().expect("downloads") {
        let (rendition, url) = (d["rendition"].as_str().expect("rendition"), d["url"].as_str().expect("url"));
        let r = sluice.client.get(url).send().await.expect("download");
        assert_eq!(r.status(), 200, "{url}");
        let audio = rendition == "audio";
        let kind = r.headers()["content-type"].to_str().expect("type").to_string();
        assert_eq!(kind, if audio { "audio/mp4" } else { "video/mp4" });
        let bytes = r.bytes().await.expect("bytes");
        assert_eq!(d["size"].as_u64(), Some(bytes.len() as u64), "{d}");
        let order = boxes(&bytes);
        let (moov, mdat) = (order.iter().position(|b| b == "moov"), order.iter().position(|b| b == "mdat"));
        assert!(moov.is_some() && moov < mdat, "{rendition}: moov before mdat: {order:?}");
        assert!(!order.iter().any(|b| b == "moof"), "{rendition}: progressive, not fragmented: {order:?}");
        let path = dir.join(url.rsplit('/').next().expect("a file"));
        std::fs::write(&path, &bytes).expect("write");
        let (duration, kinds) = probe(&path);
        let expected: &[&str] = if audio { &["audio"] } else { &["video", "audio"] };
        assert_eq!(kinds, expected, "{rendition}'s tracks");
        out.push((rendition.to_string(), path, duration));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mp4_downloads_are_progressive_files_of_each_rendition() {
    let sluice = Sluice::start(&[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let source = upload_vod(&sluice, SOURCE, json!({"mp4": true})).await;
    let id = source["_id"].as_str().expect("id").to_string();
    assert_eq!(source["mp4"], true);
    let started = Instant::now();
    let vod = ready(&sluice, &id).await;
    let made_in = started.elapsed().as_secs_f64();
    let renditions: Vec<&str> =
        vod["downloads"].as_array().expect("list").iter().filter_map(|d| d["rendition"].as_str()).collect();
    assert_eq!(renditions, ["216p", "audio"], "{vod}");
    let length = vod["duration"].as_f64().expect("duration");
    let files = fetch_all(&sluice, &vod, dir.path()).await;
    for (rendition, path, duration) in &files {
        println!("download {rendition}: ffprobe {duration:.3} s (the VOD: {length:.3} s)");
        assert!((duration - length).abs() <= 0.1, "{rendition}: {duration} for {length}");
        if rendition != "audio" {
            let frame = first_frame(path.to_str().expect("a path"));
            assert_eq!(painted_frame(&frame), 0, "the MP4 starts at the first frame");
        }
    }
    println!("downloads of a 20-s VOD ready {made_in:.2} s after it completed");

    // Byte ranges.
    let url = vod["downloads"][0]["url"].as_str().expect("url");
    let r = sluice.client.get(url).header("Range", "bytes=100-199").send().await.expect("range");
    assert_eq!(r.status(), 206);
    let total = vod["downloads"][0]["size"].as_u64().expect("size");
    assert_eq!(r.headers()["content-range"], format!("bytes 100-199/{total}").as_str());
    assert_eq!(r.bytes().await.expect("bytes").len(), 100);

    // Signed like playback: the record's URL needs the token a ticket signs it with.
    let on = json!({"enabled": true});
    assert_eq!(api(&sluice, Method::PATCH, &format!("/vod/{id}/signed-playback"), Some(on)).await.0, 200);
    let denied = sluice.client.get(url).send().await.expect("unsigned");
    assert_eq!(denied.status(), 401);
    let (status, ticket) =
        api(&sluice, Method::POST, &format!("/vod/{id}/playback-ticket"), Some(json!({}))).await;
    assert_eq!(status, 200, "{ticket}");
    let signed = ticket["downloads"][0]["url"].as_str().expect("a signed download");
    assert!(signed.contains("token="), "{signed}");
    assert_eq!(sluice.client.get(signed).send().await.expect("signed").status(), 200);
    let off = json!({"enabled": false});
    assert_eq!(api(&sluice, Method::PATCH, &format!("/vod/{id}/signed-playback"), Some(off)).await.0, 200);

    // Off removes them; on again makes them again, for a VOD complete already.
    let (status, v) = api(&sluice, Method::PATCH, &format!("/vod/{id}"), Some(json!({"mp4": false}))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["mp4"].clone(), v["downloadsStatus"].clone(), v["downloads"].clone()),
        (json!(false), Value::Null, json!([]))
    );
    assert_eq!(sluice.client.get(url).send().await.expect("removed").status(), 404, "removed");
    let body = json!({"mp4": true, "name": "renamed"});
    let (status, v) = api(&sluice, Method::PATCH, &format!("/vod/{id}"), Some(body)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["name"], "renamed");
    assert!(["preparing", "ready"].contains(&v["downloadsStatus"].as_str().unwrap_or("")), "{v}");
    let again = ready(&sluice, &id).await;
    assert_eq!(
        sluice
            .client
            .get(again["downloads"][0]["url"].as_str().expect("url"))
            .send()
            .await
            .expect("get")
            .status(),
        200
    );

    // A clip asks for its own: its range, from its first frame.
    let body = json!({"name": "goal", "mp4": true, "clip": {"vodId": id, "startSec": 4, "endSec": 16}});
    let (status, created) = api(&sluice, Method::POST, "/vod", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    let clip_id = created["vod"]["_id"].as_str().expect("id").to_string();
    assert_eq!(created["vod"]["downloadsStatus"], "preparing");
    assert_eq!(finished(&sluice, &clip_id, Duration::from_secs(60)).await["status"], "complete");
    let clip = ready(&sluice, &clip_id).await;
    let files = fetch_all(&sluice, &clip, dir.path()).await;
    let (_, path, duration) = files.iter().find(|(r, ..)| r == "216p").expect("the clip's 216p");
    assert!((duration - 12.0).abs() <= 0.5, "the clip's MP4: {duration}");
    assert_eq!(painted_frame(&first_frame(path.to_str().expect("a path"))), 120);
    let hls = probed_duration(clip["playbackUrl"].as_str().expect("playbackUrl"));
    println!("a 12-s clip's MP4: ffprobe {duration:.3} s, its HLS {hls:.3} s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_refuse_bad_input_and_media_they_cannot_be_made_of() {
    let sluice = Sluice::start(&[]).await;
    // Encrypted media: 409 on create and on a PATCH.
    let body = json!({"name": "secret", "drmEnabled": true, "mp4": true});
    let (status, e) = api(&sluice, Method::POST, "/vod", Some(body)).await;
    assert_eq!(status, 409, "{e}");
    assert!(e.to_string().contains("mp4"), "{e}");
    let (_, drm) =
        api(&sluice, Method::POST, "/vod", Some(json!({"name": "secret", "drmEnabled": true}))).await;
    let drm_id = drm["vod"]["_id"].as_str().expect("id");
    let (status, e) =
        api(&sluice, Method::PATCH, &format!("/vod/{drm_id}"), Some(json!({"mp4": true}))).await;
    assert_eq!(status, 409, "{e}");

    // A pending VOD takes the flag; it is made once complete. Cancelled: 409.
    let (_, pending) = api(&sluice, Method::POST, "/vod", Some(json!({"name": "later"}))).await;
    let pid = pending["vod"]["_id"].as_str().expect("id");
    assert_eq!(pending["vod"]["downloadsStatus"], Value::Null);
    let (status, v) = api(&sluice, Method::PATCH, &format!("/vod/{pid}"), Some(json!({"mp4": true}))).await;
    assert_eq!((status, v["downloadsStatus"].as_str()), (200, Some("preparing")), "{v}");
    assert_eq!(api(&sluice, Method::DELETE, &format!("/vod/{pid}"), None).await.0, 200);
    let (status, e) = api(&sluice, Method::PATCH, &format!("/vod/{pid}"), Some(json!({"mp4": true}))).await;
    assert_eq!(status, 409, "a cancelled VOD: {e}");

    // Bad bodies name the field; an unknown VOD is 404.
    for (body, field) in [
        (json!({"mp4": "yes"}), "mp4"),
        (json!({"name": ""}), "name"),
        (json!({"name": "x", "color": "red"}), "color"),
    ] {
        let (status, e) = api(&sluice, Method::PATCH, &format!("/vod/{pid}"), Some(body.clone())).await;
        assert_eq!(status, 400, "{body}: {e}");
        assert!(e.to_string().contains(field), "{body}: {e}");
    }
    let (status, _) = api(&sluice, Method::PATCH, "/vod/nosuchvod", Some(json!({"mp4": true}))).await;
    assert_eq!(status, 404);
    // Still serving.
    assert_eq!(api(&sluice, Method::GET, &format!("/vod/{pid}"), None).await.0, 200);
}

/// The queue's statements on both stores: the job is queued once (by the completion or by the
/// PATCH, whichever sees the other), and turning downloads off takes it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_downloads_job_is_queued_once_on_both_stores() {
    use crate::support::{spawn_app_with, Backend};
    use sluice::domain::time::now_ms;
    use sluice::store::Db;
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let app = spawn_app_with(backend, |a| a.transcode_workers = Some(0)).await;
        let (vod, _) = crate::vod::create(&app, json!({"name": "later"})).await;
        let id = vod["_id"].as_str().expect("id").to_string();
        let jobs = || async {
            let (n,): (i64,) =
                sqlx::query_as("SELECT COUNT(*) FROM transcode_jobs WHERE vod_id = $1 AND kind = 'mp4'")
                    .bind(&id)
                    .fetch_one(app.db.pool())
                    .await
                    .expect("count");
            n
        };
        let patch = |on: bool| {
            let url = app.project_url(&format!("/vod/{id}"));
            app.with_key(Method::PATCH, &url, &app.key).json(&json!({"mp4": on})).send()
        };
        assert_eq!(patch(true).await.expect("patch").status(), 200);
        assert_eq!(jobs().await, 0, "{backend:?}: not before the VOD completes");
        // Completion, as the worker's transaction makes it.
        let mut tx = app.db.begin_write().await.expect("tx");
        sqlx::query("UPDATE vods SET status = 'complete' WHERE id = $1")
            .bind(&id)
            .execute(&mut *tx)
            .await
            .expect("complete");
        let project = app.db.vod_by_id(&id).await.expect("read").expect("a vod").project_id;
        assert!(Db::queue_downloads(&mut tx, &id, &project, now_ms()).await.expect("queue"), "{backend:?}");
        assert!(
            !Db::queue_downloads(&mut tx, &id, &project, now_ms()).await.expect("again"),
            "{backend:?}: once"
        );
        tx.commit().await.expect("commit");
        assert_eq!(jobs().await, 1);
        assert_eq!(patch(false).await.expect("patch").status(), 200);
        assert_eq!(jobs().await, 0, "{backend:?}: off takes the job out");
        let v: Value = patch(true).await.expect("patch").json().await.expect("json");
        assert_eq!(v["downloadsStatus"], "preparing", "{v}");
        assert_eq!(jobs().await, 1, "{backend:?}: on again queues it for a complete VOD");
    }
}
