//! The console's downloads and clip panels (issue 57) in real Chromium: on a complete VOD's
//! page a member turns MP4 downloads on and gets the links (each file `moov` first), is told
//! beside the field when a clip's range is backwards, makes a clip of a range and lands on its
//! page, which plays once complete; axe-core finds nothing on either page.

use std::time::Duration;

use serde_json::json;

use crate::support::browser::{testid, Browser};
use crate::support::{clip, spawn_app, Backend};

#[tokio::test]
async fn the_vod_page_offers_downloads_and_makes_a_clip() {
    let t = spawn_app(Backend::Sqlite).await;
    let ladder = json!([{"name": "216p", "width": 384, "height": 216, "videoBitrate": "600k"}]);
    let (vod, url) = crate::vod::create(&t, json!({"name": "frames", "ladder": ladder})).await;
    let id = vod["_id"].as_str().expect("id").to_string();
    let source = clip("vod-frames-384x216-30fps-20s.mp4");
    assert!(crate::vod::put_file(&t, &url, &source).await.status().is_success());
    assert!(crate::vod::uploaded(&t, &id).await.status().is_success());
    let done = crate::vod::finished(&t, &id, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "complete", "{done}");

    let b = Browser::start(1280).await;
    b.goto(&t.url("/")).await;
    b.sign_in(&t.email, &t.password).await;
    b.goto(&t.url(&format!("/p/{}/vod/{id}", t.slug))).await;

    // Downloads on: the links appear once made.
    b.find_within("#vod-mp4", Duration::from_secs(15)).await;
    b.click("#vod-mp4").await;
    let shown = b
        .wait_shown(&testid("downloads"), Duration::from_secs(60), |s| {
            s.contains("216p (MP4)") && s.contains("Audio (M4A)")
        })
        .await;
    println!("the downloads panel: {shown}");
    let hrefs = b
        .run(
            "return [...document.querySelectorAll('[data-testid=downloads] a')].map(a => a.href);",
            Vec::new(),
        )
        .await;
    for href in hrefs.as_array().expect("links") {
        let href = href.as_str().expect("a link");
        let bytes = t.client.get(href).send().await.expect("download").bytes().await.expect("bytes");
        assert_eq!(&bytes[4..8], b"ftyp", "{href}");
        let moov = bytes.windows(4).position(|w| w == b"moov");
        let mdat = bytes.windows(4).position(|w| w == b"mdat");
        assert!(moov.is_some() && moov < mdat, "{href}: moov first");
    }
    let problems = b.accessibility_problems().await;
    assert!(problems.is_empty(), "the VOD page: {problems:?}");

    // A backwards range is refused beside its field; a good one opens the clip's page.
    b.fill("#clip-start", "10").await;
    b.fill("#clip-end", "5").await;
    b.click(&testid("clip-submit")).await;
    let said = b.wait_shown(".field-error", Duration::from_secs(10), |s| s.contains("clip.endSec")).await;
    println!("a backwards clip: {said}");
    b.fill("#clip-start", "4").await;
    b.fill("#clip-end", "16").await;
    b.click(&testid("clip-submit")).await;
    b.wait_shown(&testid("vod-status"), Duration::from_secs(30), |s| s == "complete").await;
    let path = b.client.current_url().await.expect("url").path().to_string();
    assert!(path.contains("/vod/") && !path.ends_with(&id), "the clip's own page: {path}");
    let clip_id = path.rsplit('/').next().expect("an id");
    let v = crate::vod::get_vod(&t, clip_id).await;
    assert_eq!(v["clipOf"], json!({"vodId": id, "startSec": 4.0, "endSec": 16.0}), "{v}");
    let problems = b.accessibility_problems().await;
    assert!(problems.is_empty(), "the clip's page: {problems:?}");
}

/// A live stream's DVR window clipped from its page: the preview scrubbed back, the start and the
/// end marked on it 5 s of playing apart; the clip's page opens and completes, its record naming
/// the stream and its length the marked one.
#[tokio::test]
async fn the_stream_page_clips_the_dvr_window_between_marks_on_the_preview() {
    let t = spawn_app(Backend::Sqlite).await;
    let body = json!({"name": "match", "dvrEnabled": true, "dvrDuration": 120, "qualities": ["240p"], "protocols": ["llhls"]});
    let created: serde_json::Value =
        t.post_json_with(&t.project_url("/streams"), &t.key, &body).await.json().await.expect("json");
    let id = created["_id"].as_str().expect("id").to_string();
    let _push = crate::support::ffmpeg_push(
        created["ingestUrl"].as_str().expect("ingestUrl"),
        "testsrc=size=320x240:rate=30",
        60,
        &[],
    );
    // 20 s in the DVR window.
    let hls = created["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let first = std::sync::Mutex::new(None::<chrono::DateTime<chrono::Utc>>);
    crate::support::eventually("20 s of DVR", Duration::from_secs(60), || async {
        let master = t.client.get(&hls).send().await.ok()?.text().await.ok()?;
        let uri = master.lines().find(|l| l.contains("/240p/index.m3u8"))?;
        let rung = format!("{}/{uri}", hls.trim_end_matches("/master.m3u8"));
        let text = t.client.get(rung).send().await.ok()?.text().await.ok()?;
        let newest: chrono::DateTime<chrono::Utc> =
            text.lines().rev().find_map(|l| l.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:")?.parse().ok())?;
        let first = *first.lock().expect("lock").get_or_insert(newest);
        ((newest - first).num_milliseconds() >= 20_000).then_some(())
    })
    .await;

    let b = Browser::start(1280).await;
    b.goto(&t.url("/")).await;
    b.sign_in(&t.email, &t.password).await;
    b.goto(&t.url(&format!("/p/{}/streams/{id}", t.slug))).await;
    b.find_within(&testid("stream-clip-mark-start"), Duration::from_secs(30)).await;
    let current = || async {
        b.run("return document.querySelector('[data-testid=preview]').currentTime;", Vec::new())
            .await
            .as_f64()
            .unwrap_or(0.0)
    };
    let playing = || async {
        let playing = b
            .run("const v = document.querySelector('[data-testid=preview]'); return !v.seeking && !v.paused && v.readyState >= 3;", Vec::new())
            .await;
        (playing == json!(true)).then_some(())
    };
    // Playing, and so past its start at the edge (which seeks a paused preview to the edge: a
    // scrub before it would be undone).
    crate::support::eventually("the preview playing", Duration::from_secs(30), playing).await;
    let started = current().await;
    crate::support::eventually("a second played", Duration::from_secs(10), || async {
        (current().await >= started + 1.0).then_some(())
    })
    .await;
    // Scrubbed 12 s back, into closed segments.
    b.run(
        "const v = document.querySelector('[data-testid=preview]'); v.currentTime = v.currentTime - 12;",
        Vec::new(),
    )
    .await;
    crate::support::eventually("the preview playing again", Duration::from_secs(20), playing).await;
    let from = current().await;
    b.click(&testid("stream-clip-mark-start")).await;
    crate::support::eventually("5 s played", Duration::from_secs(20), || async {
        (current().await >= from + 5.0).then_some(())
    })
    .await;
    b.click(&testid("stream-clip-mark-end")).await;
    let marks = b.shown(&testid("stream-clip-marks")).await;
    assert!(!marks.contains("not marked"), "{marks}");
    b.click(&testid("stream-clip-submit")).await;
    // The VOD's page, or the form's refusal said.
    crate::support::eventually("the clip's page or an error", Duration::from_secs(30), || async {
        let alert = b
            .run(
                "const a = document.querySelector('[role=alert]'); return a ? a.textContent : null;",
                Vec::new(),
            )
            .await;
        assert!(alert.is_null(), "the clip was refused: {alert} ({marks})");
        b.exists(&testid("vod-status")).await.then_some(())
    })
    .await;
    b.wait_shown(&testid("vod-status"), Duration::from_secs(30), |s| s == "complete").await;
    let path = b.client.current_url().await.expect("url").path().to_string();
    let v = crate::vod::get_vod(&t, path.rsplit('/').next().expect("an id")).await;
    assert_eq!(v["clipOf"]["streamId"], id.as_str(), "{v}");
    let duration = v["duration"].as_f64().expect("duration");
    println!("a clip between marks 5 s apart on the preview: {duration:.3} s ({marks})");
    // Cut at the rung's parts at either end.
    assert!((4.0..=6.5).contains(&duration), "{v}");
}
