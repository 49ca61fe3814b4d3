//! The object store failing under thumbnails at a time and the storyboard (CONTRACT: Faults), on
//! S3 (moto's server) behind a TCP proxy the test cuts and then hangs: each answers a 502 (within
//! 15 s when the store refuses: a read or two, each with the store client's retries, 2.9–7.4 s
//! here; within the origin's 30-s
//! read deadline when it hangs) while the API goes on answering, and both serve the right
//! picture once the store is back.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::proxy::Mode;
use crate::support::{clip, painted_frame, spawn_app_with, Backend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stills_answer_502_in_time_while_the_store_fails_and_serve_once_it_is_back() {
    let (_moto, proxy, storage) = crate::vod_s3::moto_behind_proxy().await;
    let t = spawn_app_with(Backend::Sqlite, |a| a.storage_url = Some(storage)).await;
    let ladder = json!([{"name": "216p", "width": 384, "height": 216, "videoBitrate": "600k"}]);
    let (vod, url) = crate::vod::create(&t, json!({"name": "frames", "ladder": ladder})).await;
    let id = vod["_id"].as_str().expect("id").to_string();
    assert!(crate::vod::put_file(&t, &url, &clip("vod-frames-384x216-30fps-20s.mp4"))
        .await
        .status()
        .is_success());
    assert!(crate::vod::uploaded(&t, &id).await.status().is_success());
    let done = crate::vod::finished(&t, &id, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "complete", "{done}");
    let thumb = done["thumbnailUrl"].as_str().expect("thumbnailUrl").to_string();
    let base = thumb.trim_end_matches("/thumb.jpg").to_string();
    // Longer than the origin's 30-s read deadline (the test's client gives up at 30 s).
    let client = &reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("client");
    let get = |url: String| async move {
        let started = Instant::now();
        let r = client.get(url).send().await.expect("an answer");
        (r.status().as_u16(), started.elapsed(), r.bytes().await.expect("body"))
    };

    for (mode, within) in [(Mode::Refuse, Duration::from_secs(15)), (Mode::Hang, Duration::from_secs(35))] {
        proxy.set(mode);
        let label = format!("{mode:?}");
        // Asked at once: a still never made, and the storyboard.
        let (still, board) =
            tokio::join!(get(format!("{thumb}?time=7.5&width=200")), get(format!("{base}/storyboard.vtt")),);
        for (what, (status, took, _)) in [("still", still), ("storyboard", board)] {
            println!("{label}: {what} {status} in {:.2} s", took.as_secs_f64());
            assert_eq!(status, 502, "{label}: {what}");
            assert!(took <= within, "{label}: {what} took {took:?}");
        }
        // The API does not wait on the store.
        let started = Instant::now();
        assert_eq!(crate::vod::get_vod(&t, &id).await["status"], "complete");
        assert!(started.elapsed() < Duration::from_secs(2), "{label}: the API took {:?}", started.elapsed());
    }

    // Back: the picture painted at 7.5 s, and a storyboard.
    proxy.set(Mode::Open);
    let (status, _, jpeg) = get(format!("{thumb}?time=7.5&width=200")).await;
    assert_eq!(status, 200);
    assert_eq!(painted_frame(&jpeg), 225, "the frame at 7.5 s");
    let (status, _, vtt) = get(format!("{base}/storyboard.vtt")).await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&vtt).starts_with("WEBVTT"), "a storyboard");
}
