//! A ladder the machine cannot keep up with: the push's reading thread chains every tag into the
//! pipeline itself (docs/live-ingest.md, "Not there yet"), so the ladder's decoder queue is the
//! bound that must give. It drops the ladder's oldest input, says so in the log, and the
//! `source` and `audio` renditions go on in real time.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::live_hls::{attr, audio_uri};
use crate::support::{eventually, ffmpeg_push, Sluice};

/// New parts of a media playlist since the last look, in seconds of media.
async fn new_media(s: &Sluice, url: &str, seen: &mut HashSet<String>) -> f64 {
    let Ok(r) = s.client.get(url).send().await else { return 0.0 };
    let text = r.text().await.unwrap_or_default();
    let mut added = 0.0;
    for attrs in text.lines().filter_map(|l| l.strip_prefix("#EXT-X-PART:")) {
        let (Some(uri), Some(duration)) = (attr(attrs, "URI"), attr(attrs, "DURATION")) else { continue };
        if seen.insert(uri.to_string()) {
            added += duration.parse::<f64>().unwrap_or(0.0);
        }
    }
    added
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ladder_that_falls_behind_drops_its_own_input_and_nothing_else() {
    // A decoder that takes 70 ms a frame: at most 14 of the push's 30 frames a second.
    let pipelines = tempfile::tempdir().expect("tempdir");
    let decoder =
        format!("{} ! identity sleep-time=70000\n", include_str!("../../pipelines/live-decoder.txt").trim());
    std::fs::write(pipelines.path().join("live-decoder.txt"), decoder).expect("write the slow decoder");
    let log = pipelines.path().join("sluice.log");
    let s = Sluice::start_logged(
        &[("SLUICE_PIPELINES_DIR", pipelines.path().display().to_string())],
        log.clone(),
    )
    .await;
    let stream = s.create_stream(json!({"name": "slow-ladder", "qualities": ["240p"]})).await;
    let master_url = stream["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let _pusher = ffmpeg_push(
        stream["ingestUrl"].as_str().expect("ingestUrl"),
        "testsrc2=size=854x480:rate=30",
        60,
        &["-b:v", "1200k"],
    );
    let master = eventually("the master playlist", Duration::from_secs(60), || async {
        let r = s.client.get(&master_url).send().await.ok()?;
        let ok = r.status() == 200;
        let text = r.text().await.ok()?;
        ok.then_some(text)
    })
    .await;
    let base = master_url.trim_end_matches("master.m3u8").to_string();
    let url_of =
        |uri: Option<&str>| format!("{base}{}", uri.unwrap_or_else(|| panic!("in the master: {master}")));
    let variant =
        |suffix: &str| master.lines().find(|l| l.split('?').next().is_some_and(|p| p.ends_with(suffix)));
    let (source, audio, rung) = (
        url_of(variant("/source/index.m3u8")),
        url_of(audio_uri(&master)),
        url_of(variant("/240p/index.m3u8")),
    );

    // The decoder's queue (3 s) fills within a few seconds; from then on it leaks.
    let warned = eventually("the ladder's overrun warning", Duration::from_secs(60), || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("the live ladder is behind").then_some(())
    });
    warned.await;

    // Over 12 s after that, the source and the audio publish media in real time (the rung
    // publishes whatever its decoder keeps up with, skipping what its queue dropped).
    let mut seen = [HashSet::new(), HashSet::new(), HashSet::new()];
    for (url, seen) in [&source, &audio, &rung].into_iter().zip(seen.iter_mut()) {
        new_media(&s, url, seen).await;
    }
    let (start, mut media) = (Instant::now(), [0.0; 3]);
    while start.elapsed() < Duration::from_secs(12) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for ((url, seen), media) in
            [&source, &audio, &rung].into_iter().zip(seen.iter_mut()).zip(media.iter_mut())
        {
            *media += new_media(&s, url, seen).await;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let [source_media, audio_media, rung_media] = media.map(|m| m / wall);
    assert!(source_media >= 0.9, "source published {source_media:.2} s of media a second");
    assert!(audio_media >= 0.9, "audio published {audio_media:.2} s of media a second");
    eprintln!("media a second over {wall:.1} s: source {source_media:.2}, audio {audio_media:.2}, 240p {rung_media:.2}");

    // And the server answers the API as ever.
    let r = s.client.get(format!("{}/streams", s.api)).bearer_auth(&s.key).send().await.expect("API answers");
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["items"][0]["status"], "live", "{body}");
}
