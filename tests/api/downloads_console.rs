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
    b.fill(&testid("login-email"), &t.email).await;
    b.fill(&testid("login-password"), &t.password).await;
    b.click(&testid("login-submit")).await;
    b.find_within(&testid("nav-streams"), Duration::from_secs(15)).await;
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
