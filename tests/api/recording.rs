//! Recording live to VOD (CONTRACT: Recording and credits): a 20-s push to a `vodEnabled`
//! stream becomes a `complete` VOD whose playlist ffprobe reads at the pushed duration, with
//! the live ladder's renditions, `vod.complete` after `stream.ended` on a real receiver, and a
//! second session makes a second VOD; a `drmEnabled` recording is stored encrypted and plays
//! with its key; a `sluice serve` killed mid-session completes the recording at its restart,
//! playable up to the kill.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::receiver::Receiver;
use crate::support::{
    bootstrap_key, both_backends, eventually, ffmpeg_push, sluice_command, spawn_app, wait_ready, Backend,
    Killed, TestApp,
};
use crate::webhooks::create_webhook;

both_backends!(a_recorded_push_becomes_a_complete_vod);

/// A 640×360 30 fps push of `seconds` of media (the pusher ends by itself), with AAC.
pub(crate) fn push_for(url: &str, seconds: u32) -> Killed {
    let video = format!("testsrc2=size=640x360:rate=30:duration={seconds}");
    ffmpeg_push(url, &video, 30, &["-shortest", "-b:v", "600k"])
}

async fn create(t: &TestApp, body: Value) -> Value {
    let resp = t.post_json_with(&t.project_url("/streams"), &t.key, &body).await;
    assert_eq!(resp.status(), 201);
    resp.json().await.expect("json")
}

async fn recordings_of(t: &TestApp, stream_id: &str) -> Vec<Value> {
    let v: Value = t
        .get_with(&t.project_url(&format!("/vod?streamId={stream_id}")), &t.key)
        .await
        .json()
        .await
        .expect("json");
    v["items"].as_array().cloned().unwrap_or_default()
}

/// ffprobe's duration of an HLS URL, in seconds (off the runtime: the server under test may
/// share it).
async fn probed_duration(url: &str) -> f64 {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || probed_duration_blocking(&url)).await.expect("ffprobe thread")
}

fn probed_duration_blocking(url: &str) -> f64 {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", url])
        .output()
        .expect("ffprobe runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("ffprobe of {url}: {text} {}", String::from_utf8_lossy(&out.stderr)))
}

/// Whether ffmpeg decodes every frame of `url` without an error.
async fn decodes(url: &str) -> Result<(), String> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || decodes_blocking(&url)).await.expect("ffmpeg thread")
}

fn decodes_blocking(url: &str) -> Result<(), String> {
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-i", url, "-f", "null", "-"])
        .output()
        .expect("ffmpeg runs");
    let errors = String::from_utf8_lossy(&out.stderr).to_string();
    if out.status.success() && errors.trim().is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The rendition names of a master playlist (`…/<name>/index.m3u8`).
fn rendition_names(master: &str) -> Vec<String> {
    let mut names: Vec<String> = master
        .lines()
        .filter_map(|l| {
            let uri = if l.starts_with('#') { l.split("URI=\"").nth(1)?.split('"').next()? } else { l };
            let mut parts = uri.split('?').next()?.rsplit('/');
            (parts.next()? == "index.m3u8").then(|| parts.next().map(str::to_string))?
        })
        .collect();
    names.sort();
    names
}

async fn a_recorded_push_becomes_a_complete_vod(t: TestApp) {
    let rx = Receiver::start().await;
    create_webhook(&t, &rx.url(), json!(["stream.ended", "vod.complete"])).await;
    let s = create(&t, json!({"name": "show", "vodEnabled": true, "qualities": ["240p"]})).await;
    let id = s["_id"].as_str().expect("id").to_string();
    let hls = s["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let mut pusher = push_for(s["ingestUrl"].as_str().expect("ingestUrl"), 20);
    let live_master = eventually("the live master with audio", Duration::from_secs(30), || async {
        let text = t.client.get(&hls).send().await.ok()?.text().await.ok()?;
        text.contains("TYPE=AUDIO").then_some(text)
    })
    .await;
    pusher.exits(Duration::from_secs(40)).await;
    let ended_at = Instant::now();

    // stream.ended, then (after the reconnect grace) vod.complete.
    let got = rx.wait_for(2, Duration::from_secs(60)).await;
    let names: Vec<String> =
        got.iter().map(|r| r.json()["event"].as_str().unwrap_or_default().to_string()).collect();
    assert_eq!(names, ["stream.ended", "vod.complete"]);
    println!("session end to vod.complete: {:.1} s", ended_at.elapsed().as_secs_f64());
    let vods = recordings_of(&t, &id).await;
    assert_eq!(vods.len(), 1, "{vods:?}");
    let vod = &vods[0];
    assert_eq!(got[1].json()["data"]["id"], vod["_id"]);
    assert_eq!(vod["status"], "complete");
    assert_eq!(vod["streamId"], id.as_str());
    assert!(vod["sessionId"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(vod["name"].as_str().is_some_and(|n| n.starts_with("show 20")), "{vod}");
    assert!(vod["sourceSize"].as_i64().is_some_and(|b| b > 100_000), "{vod}");
    let duration = vod["duration"].as_f64().expect("duration");
    assert!((duration - 20.0).abs() <= 1.0, "recorded {duration} s of 20");

    // The live ladder's renditions, source included; the playlist plays the pushed duration.
    let playback = vod["playbackUrl"].as_str().expect("playbackUrl").to_string();
    let master = t.client.get(&playback).send().await.expect("master").text().await.expect("text");
    assert_eq!(rendition_names(&master), rendition_names(&live_master));
    let mut produced: Vec<&str> =
        vod["renditions"].as_array().expect("renditions").iter().filter_map(|r| r["name"].as_str()).collect();
    produced.sort();
    assert_eq!(produced, ["240p", "source"]);
    let probed = probed_duration(&playback).await;
    assert!((probed - 20.0).abs() <= 1.0, "ffprobe reads {probed} s of 20");
    decodes(&playback.replace("master.m3u8", "240p/index.m3u8")).await.expect("the 240p rendition decodes");
    let thumb =
        t.client.get(vod["thumbnailUrl"].as_str().expect("thumbnailUrl")).send().await.expect("thumb");
    assert_eq!(thumb.status(), 200);
    assert_eq!(&thumb.bytes().await.expect("bytes")[..2], &[0xFF, 0xD8], "a JPEG");

    // A second session makes a second VOD.
    let mut second = push_for(s["ingestUrl"].as_str().expect("ingestUrl"), 4);
    second.exits(Duration::from_secs(30)).await;
    let vods = eventually("a second recording", Duration::from_secs(60), || async {
        let vods = recordings_of(&t, &id).await;
        (vods.len() == 2 && vods.iter().all(|v| v["status"] == "complete")).then_some(vods)
    })
    .await;
    assert_ne!(vods[0]["sessionId"], vods[1]["sessionId"]);
    assert!(vods[0]["duration"].as_f64().is_some_and(|d| (d - 4.0).abs() <= 1.0), "{}", vods[0]);
}

#[tokio::test]
async fn a_drm_recording_is_stored_encrypted_and_plays_with_its_key() {
    let t = spawn_app(Backend::Sqlite).await;
    let s =
        create(&t, json!({"name": "secret", "vodEnabled": true, "drmEnabled": true, "qualities": ["240p"]}))
            .await;
    let id = s["_id"].as_str().expect("id").to_string();
    push_for(s["ingestUrl"].as_str().expect("ingestUrl"), 6).exits(Duration::from_secs(40)).await;
    let vod = eventually("the recording", Duration::from_secs(60), || async {
        recordings_of(&t, &id).await.into_iter().find(|v| v["status"] == "complete")
    })
    .await;
    assert_eq!(vod["drmEnabled"], true);
    let playback = vod["playbackUrl"].as_str().expect("playbackUrl").to_string();
    let media = playback.replace("master.m3u8", "240p/index.m3u8");
    let text = t.client.get(&media).send().await.expect("playlist").text().await.expect("text");
    assert!(text.contains("#EXT-X-KEY:METHOD=AES-128,URI=\"../key\""), "{text}");
    // A segment as stored is no fMP4 box (its first four bytes after the size are no type).
    let segment = t.client.get(playback.replace("master.m3u8", "240p/s0.m4s")).send().await.expect("segment");
    let bytes = segment.bytes().await.expect("bytes");
    assert_eq!(bytes.len() % 16, 0, "AES-128-CBC output is whole blocks");
    assert!(
        ![b"moof", b"styp", b"sidx"].contains(&&bytes[4..8].try_into().unwrap_or([0u8; 4])),
        "stored clear"
    );
    decodes(&media).await.expect("plays with the served key");
    let probed = probed_duration(&playback).await;
    assert!((probed - 6.0).abs() <= 1.0, "ffprobe reads {probed} s of 6");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_completes_its_recording_at_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = crate::support::free_port();
    let key = bootstrap_key(sluice_command(dir.path(), port));
    let serve = || {
        Killed(
            sluice_command(dir.path(), port)
                .arg("serve")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("serve"),
        )
    };
    let mut server = serve();
    wait_ready(port).await;
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}/v1/projects/demo");
    let s: Value = client
        .post(format!("{base}/streams"))
        .bearer_auth(&key)
        .json(&json!({"name": "crash", "vodEnabled": true, "qualities": ["240p"]}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let id = s["_id"].as_str().expect("id").to_string();
    let _pusher = push_for(s["ingestUrl"].as_str().expect("ingestUrl"), 120);
    // Live, and at least 8 s of media in the segments of every rendition: a transcoded one may
    // run behind `source` on a busy machine, and the recording ends where each one was.
    let hls = s["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let started = Instant::now();
    eventually("8 s of live segments in every rendition", Duration::from_secs(60), || async {
        let master = client.get(&hls).send().await.ok()?.text().await.ok()?;
        let uris: Vec<String> = master
            .lines()
            .filter_map(|l| match l.split_once("URI=\"") {
                Some((_, rest)) => rest.split('"').next().map(str::to_string),
                None => (!l.starts_with('#') && !l.trim().is_empty()).then(|| l.trim().to_string()),
            })
            .collect();
        if uris.len() < 3 {
            return None; // 240p, source and audio
        }
        for uri in uris {
            let media = client.get(hls.replace("master.m3u8", &uri)).send().await.ok()?.text().await.ok()?;
            if media.matches("#EXTINF:").count() < 4 {
                return None;
            }
        }
        Some(())
    })
    .await;
    let live_for = started.elapsed().as_secs_f64();
    let _ = server.0.kill();
    let _ = server.0.wait();

    let _server = serve();
    wait_ready(port).await;
    let vods: Vec<Value> =
        eventually("the recording completed after the restart", Duration::from_secs(60), || async {
            let v: Value = client
                .get(format!("{base}/vod?streamId={id}"))
                .bearer_auth(&key)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let items = v["items"].as_array()?.clone();
            (items.len() == 1 && items[0]["status"] == "complete").then_some(items)
        })
        .await;
    let playback = vods[0]["playbackUrl"].as_str().expect("playbackUrl").to_string();
    let probed = probed_duration(&playback).await;
    // Up to the kill: the segments closed before it (the open one, under 2 s, is lost).
    assert!(
        probed >= 7.5 && probed <= live_for + 2.5,
        "recorded {probed} s; live for about {live_for:.1} s before the kill"
    );
    decodes(&playback.replace("master.m3u8", "source/index.m3u8"))
        .await
        .expect("the source rendition decodes");
    let stream: Value = client
        .get(format!("{base}/streams/{id}"))
        .bearer_auth(&key)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(stream["status"], "idle", "the dead run's push ended at the restart");
}
