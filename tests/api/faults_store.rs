//! The object store failing under a recording (CONTRACT: Faults), on the real binary with S3
//! (moto's server) behind a TCP proxy the test freezes: the store hangs for three minutes
//! mid-recording; the recording's segments wait in the spool (on disk, not in memory) and are
//! stored once it answers; the recording completes once, with at least 95 % of the live time.
//! One segment's spool file is deleted meanwhile (a disk that lost it): it plays as a gap, and
//! the VOD says so, where it was. A transcode that runs into the outage waits for the store
//! (its source, or its outputs in its work folder) and completes once it answers.

use std::time::{Duration, Instant};

use reqwest::Client;
use serde_json::{json, Value};

use crate::support::proxy::Mode;
use crate::support::{
    bootstrap_key, eventually, ffmpeg_push, free_port, json_of, rss_kib, serve_logged, sluice_on,
};

/// How long the store hangs.
const HANG: Duration = Duration::from_secs(180);

/// A metric's value, as `/metrics` says it.
async fn metric(client: &Client, http: u16, name: &str) -> Option<u64> {
    let text = client.get(format!("http://127.0.0.1:{http}/metrics")).send().await.ok()?.text().await.ok()?;
    let prefix = format!("{name} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
}

/// The spool's files, oldest first: (file, the object's key).
fn spooled(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut files: Vec<(std::path::PathBuf, String)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let (_, key) = name.split_once('-')?;
                    let key = String::from_utf8(hex::decode(key).ok()?).ok()?;
                    Some((e.path(), key))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_store_hung_for_three_minutes_costs_the_recording_nothing() {
    let (_moto, proxy, storage) = crate::vod_s3::moto_behind_proxy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let database = format!("sqlite://{}", dir.path().join("sluice.db").display());
    let (http, rtmp) = (free_port(), free_port());
    let configure = || {
        let mut cmd = sluice_on(dir.path(), &database, http);
        cmd.env("SLUICE_STORAGE_URL", &storage).env("SLUICE_RTMP_ADDR", format!("127.0.0.1:{rtmp}"));
        cmd
    };
    let key = bootstrap_key(configure());
    let (server, log) = serve_logged(configure(), http, "faults-store").await;
    let pid = server.0.id();
    let client = Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
    let base = format!("http://127.0.0.1:{http}/v1/projects/demo");

    let body = json!({"name": "rec", "protocols": ["llhls"], "qualities": ["240p"], "vodEnabled": true});
    let stream =
        json_of(client.post(format!("{base}/streams")).bearer_auth(&key).json(&body), "create").await;
    let id = stream["_id"].as_str().expect("id").to_string();
    let pusher = ffmpeg_push(
        stream["ingestUrl"].as_str().expect("ingestUrl"),
        "testsrc=size=320x240:rate=15",
        30,
        &[],
    );
    let get_stream = || async {
        let resp = client.get(format!("{base}/streams/{id}")).bearer_auth(&key).send().await.ok()?;
        resp.json::<Value>().await.ok()
    };
    eventually("live", Duration::from_secs(30), || async {
        (get_stream().await?["status"] == "live").then_some(())
    })
    .await;
    let live = Instant::now();

    // A VOD whose transcode runs into the outage: uploaded now, marked uploaded (and queued)
    // just before the store hangs.
    let source = crate::vod::make_file(dir.path(), "source.mp4", Some("testsrc2=size=640x360:rate=30"), 20);
    let body = json!({"name": "across the outage", "filename": "source.mp4"});
    let created =
        json_of(client.post(format!("{base}/vod")).bearer_auth(&key).json(&body), "create a VOD").await;
    let vod_id = created["vod"]["_id"].as_str().expect("VOD id").to_string();
    let upload = created["upload"]["url"].as_str().expect("upload URL");
    let put = client.put(upload).body(std::fs::read(&source).expect("source")).send().await.expect("upload");
    assert_eq!(put.status(), 200);
    tokio::time::sleep(Duration::from_secs(10)).await; // some of the recording stored as usual
    let queued =
        json_of(client.post(format!("{base}/vod/{vod_id}/uploaded")).bearer_auth(&key), "uploaded").await;
    assert_eq!(queued["status"], "queued", "{queued}");
    let rss_before = rss_kib(pid);

    // The store hangs: nothing fails, nothing answers.
    proxy.set(Mode::Hang);
    let hung = Instant::now();
    let spool = dir.path().join("spool");
    let (mut rss_max, mut spool_max, mut deleted) = (rss_before, 0, None);
    while hung.elapsed() < HANG {
        rss_max = rss_max.max(rss_kib(pid));
        spool_max = spool_max.max(metric(&client, http, "sluice_spool_bytes").await.unwrap_or(0));
        // A disk that loses one spooled segment (not a rendition's first, nor an init section).
        if deleted.is_none() && hung.elapsed() > Duration::from_secs(60) {
            let victim = spooled(&spool)
                .into_iter()
                .find(|(_, key)| key.contains("/240p/s") && !key.ends_with("/s0.m4s"));
            if let Some((file, key)) = victim {
                std::fs::remove_file(&file).expect("delete a spooled segment");
                deleted = Some(key);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    proxy.set(Mode::Open);
    let back = Instant::now();
    let deleted = deleted.expect("a spooled segment to delete");
    assert!(spool_max > 0, "segments waited in the spool");
    eventually("the spool drained", Duration::from_secs(120), || async {
        (metric(&client, http, "sluice_spool_bytes").await? == 0).then_some(())
    })
    .await;
    let drained = back.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await; // a little of the recording after the outage
    drop(pusher);
    let pushed = live.elapsed();

    let vod = eventually("the recording complete", Duration::from_secs(120), || async {
        let resp = client.get(format!("{base}/vod?streamId={id}")).bearer_auth(&key).send().await.ok()?;
        let page: Value = resp.json().await.ok()?;
        let items = page["items"].as_array()?.clone();
        assert!(items.len() <= 1, "one recording: {items:?}");
        items.into_iter().find(|v| v["status"] == "complete")
    })
    .await;
    // The transcode caught in the outage completes, whole.
    let transcoded = eventually("the transcode complete", Duration::from_secs(180), || async {
        let resp = client.get(format!("{base}/vod/{vod_id}")).bearer_auth(&key).send().await.ok()?;
        let v: Value = resp.json().await.ok()?;
        assert_ne!(v["status"], "failed", "the outage failed the transcode: {v}");
        (v["status"] == "complete").then_some(v)
    })
    .await;
    let transcoded_after = back.elapsed();
    let vod_master = transcoded["playbackUrl"].as_str().expect("the transcode's playbackUrl");
    let text = client.get(vod_master).send().await.expect("master").text().await.expect("text");
    let variant = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.split('?').next().filter(|p| p.ends_with("/index.m3u8")))
        .expect("a variant");
    let variant = url::Url::parse(vod_master).expect("url").join(variant).expect("join").to_string();
    let playlist = client.get(&variant).send().await.expect("variant").text().await.expect("text");
    let segments = playlist.lines().filter(|l| l.ends_with(".m4s")).count();
    assert!(playlist.contains("#EXT-X-ENDLIST") && segments >= 3, "the transcode's rendition:\n{playlist}");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let (waited, retried) = (
        logged.matches("did not serve the source").count(),
        logged.matches("did not take an output").count(),
    );
    assert!(waited + retried > 0, "the outage caught the transcode (its log says it waited)");

    let duration = vod["duration"].as_f64().expect("duration");
    let error = vod["error"].as_str().unwrap_or_default().to_string();
    let master_url = vod["playbackUrl"].as_str().expect("playbackUrl").to_string();
    let master = client.get(&master_url).send().await.expect("master").text().await.expect("text");
    let uri = master.lines().find(|l| l.starts_with("240p/")).expect("the 240p variant");
    // Without the playback session (`vs=`): its playlist as stored.
    let uri = uri.split('?').next().unwrap_or(uri);
    let variant = url::Url::parse(&master_url).expect("url").join(uri).expect("join").to_string();
    let media = client.get(&variant).send().await.expect("variant").text().await.expect("text");
    let lost_uri = deleted.rsplit('/').next().expect("file name").to_string();
    println!(
        "S3 hung {HANG:?} mid-recording: RSS {} MiB before, {} MiB at most during; spool up to {} KiB; \
         drained {drained:?} after the store came back; the recording: {duration:.1} s of a {pushed:.1?} push, \
         error {error:?}, lost {lost_uri} from the spool; the transcode complete {transcoded_after:.1?} after \
         the store came back ({segments} segments; {waited} waits for its source, {retried} outputs tried again)",
        rss_before / 1024,
        rss_max / 1024,
        spool_max / 1024
    );
    assert!(duration >= 0.95 * pushed.as_secs_f64(), "{duration} s recorded of a {pushed:?} push");
    assert!(
        media.matches("#EXT-X-GAP").count() == 1,
        "the one segment lost from the spool is the one gap:\n{media}"
    );
    let gap_at = media.find("#EXT-X-GAP").expect("a gap");
    // `#EXT-X-GAP`, its `#EXTINF`, then its URI.
    assert!(media[gap_at..].lines().nth(2).is_some_and(|l| l == lost_uri), "the gap is {lost_uri}:\n{media}");
    assert!(error.contains("were lost"), "the VOD says what was lost: {error:?}");
    // Nothing waited in memory: the spool is on disk.
    assert!(rss_max < rss_before + 64 * 1024, "RSS grew from {rss_before} KiB to {rss_max} KiB");
}
