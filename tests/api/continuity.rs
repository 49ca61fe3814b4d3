//! What a viewer sees when the publisher goes away within the stream's reconnect window
//! (CONTRACT: Continuity): hls.js in Chromium plays on through the slate, never errors and
//! never stalls, and plays the publisher again when it is back; with the window lapsed the
//! playlists end. A database that hangs while the publisher is away changes none of that: the
//! slate shows the stream's picture its session read when it went live.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::live_hls::get_text;
use crate::support::player::{longest_hold, one_watcher_at_a_time, Player, Report};
use crate::support::proxy::{Mode, Proxy};
use crate::support::{
    eventually, ffmpeg_push, fresh_postgres_url, spawn_app, spawn_app_with, Backend, Killed, TestApp,
};

/// A publisher as docs/live-hls.md asks for one: a keyframe every 2 s. (With one every 4 s the
/// `source` variant's segments are 4 s beside the rung's 2 s, and hls.js, switching up to
/// `source` after the publisher came back, once reloaded one of its parts without end.)
fn push(url: &str) -> Killed {
    ffmpeg_push(url, "testsrc2=size=640x360:rate=30", 60, &["-b:v", "800k", "-b:a", "96k"])
}

pub async fn active_input(t: &TestApp, id: &str) -> String {
    let v: Value =
        t.get_with(&t.project_url(&format!("/streams/{id}")), &t.key).await.json().await.expect("json");
    v["input"]["active"].as_str().unwrap_or_default().to_string()
}

/// Waits for 8 s more of play and asserts it had no fatal error and no hold over 0.5 s since
/// `since` (page ms); returns the longest hold.
pub async fn plays_on(player: &Player, what: &str, since: f64) -> f64 {
    let at = player.last().map(|r| r.current_time).unwrap_or_default();
    // Polled here rather than with `wait_until`, so that a player that never gets there is
    // judged (and its timeline shown) as one that stalls.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut reports = player.reports();
    while Instant::now() < deadline && !reports.last().is_some_and(|r| r.current_time >= at + 8.0) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        reports = player.reports();
    }
    let last = reports.last().expect("a report");
    assert!(last.fatal_errors().is_empty(), "errors {what}: {:?}", last.errors);
    let mut held = longest_hold(&reports, since, f64::INFINITY).0;
    if last.current_time < at + 8.0 {
        held = held.max(30.0);
    }
    if held > 0.5 {
        // What hls.js loaded and appended, with each source buffer's ranges (player.html's
        // timeline), for the reason.
        // SLUICE_TEST_TIMELINE=<file>: the whole timeline, into that file.
        if let Some(path) = std::env::var_os("SLUICE_TEST_TIMELINE") {
            let _ = std::fs::write(path, last.timeline.join("\n"));
        }
        let from = last.timeline.len().saturating_sub(300);
        eprintln!("the player's timeline, last lines:\n{}", last.timeline[from..].join("\n"));
    }
    assert!(held <= 0.5, "the player stalled {held:.2} s {what}: {:?} {:?}", last.events, last.errors);
    held
}

fn green(r: &Report) -> bool {
    r.colour.is_some_and(|[r, g, b]| g > r + 80.0 && g > b + 80.0)
}

/// A stream live with a green slate picture and a reconnect window of `window` s, and hls.js
/// (low latency) in Chromium playing it for 4 s.
struct Live {
    id: String,
    rtmp: String,
    master: String,
    push: Killed,
    player: Player,
}

async fn live_with_picture(t: &TestApp, window: u64) -> Live {
    let body = json!({"name": "continuity", "qualities": ["240p"], "reconnectWindow": window});
    let stream: Value =
        t.post_json_with(&t.project_url("/streams"), &t.key, &body).await.json().await.expect("json");
    let (id, rtmp) = (stream["_id"].as_str().expect("id"), stream["ingestUrl"].as_str().expect("ingestUrl"));
    let master = stream["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    // The stream's own slate: a green picture.
    let picture = crate::slate::picture("png", "0x00c000", "640x360");
    assert_eq!(crate::slate::put_slate(t, id, "image/png", picture).await.status(), 200);
    let first = push(rtmp);
    eventually("the master playlist", Duration::from_secs(30), || async {
        (get_text(t, &master).await.0 == 200).then_some(())
    })
    .await;
    let player = Player::start_opts(&master, "lowLatency=1&stampFor=40000").await;
    player.wait_played("hls.js playing for 4 s", 4.0, |_| true).await;
    Live { id: id.to_string(), rtmp: rtmp.to_string(), master, push: first, player }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hls_js_plays_through_the_slate_and_back_to_the_publisher() {
    let _turn = one_watcher_at_a_time().await;
    let t = spawn_app(Backend::Sqlite).await;
    let Live { id, rtmp, master, push: first, player } = live_with_picture(&t, 12).await;
    let (id, rtmp) = (id.as_str(), rtmp.as_str());

    // The publisher is killed: the slate, and the player plays on.
    let page_now = player.last().map(|r| r.t).unwrap_or_default();
    drop(first);
    let gone = Instant::now();
    eventually("the slate", Duration::from_secs(5), || async {
        (active_input(&t, id).await == "slate").then_some(())
    })
    .await;
    let slate_after = gone.elapsed();
    assert!(slate_after <= Duration::from_millis(1500), "the slate came {slate_after:?} after the kill");
    let held = plays_on(&player, "through the slate", page_now).await;
    eprintln!("the slate was on {slate_after:?} after the kill; the picture held at most {held:.2} s");
    // What the slate showed: the stream's green picture.
    let reports = player.reports();
    assert!(
        reports.iter().any(|r| r.t > page_now && green(r)),
        "the stream's green picture on screen during the slate: {:?}",
        reports.iter().filter(|r| r.t > page_now).map(|r| r.colour).collect::<Vec<_>>()
    );

    // The publisher is back: the player plays its push on.
    let page_back = player.last().map(|r| r.t).unwrap_or_default();
    let second = push(rtmp);
    eventually("the publisher again", Duration::from_secs(15), || async {
        (active_input(&t, id).await == "primary").then_some(())
    })
    .await;
    let held = plays_on(&player, "after the publisher came back", page_back).await;
    eprintln!("after the publisher came back the picture held at most {held:.2} s");

    // Gone for good: after the window the stream ends and so do the playlists.
    let (_, text) = get_text(&t, &master).await;
    let variant = text.lines().find(|l| !l.is_empty() && !l.starts_with('#')).expect("a variant");
    let playlist = format!("{}{variant}", &master[..master.rfind('/').expect("a path") + 1]);
    drop(second);
    let gone = Instant::now();
    eventually("the stream to end", Duration::from_secs(30), || async {
        let v: Value =
            t.get_with(&t.project_url(&format!("/streams/{id}")), &t.key).await.json().await.ok()?;
        (v["status"] == "idle").then_some(())
    })
    .await;
    assert!(
        gone.elapsed() >= Duration::from_secs(10),
        "the window is 12 s: ended after {:?}",
        gone.elapsed()
    );
    eventually("EXT-X-ENDLIST", Duration::from_secs(10), || async {
        get_text(&t, &playlist).await.1.contains("#EXT-X-ENDLIST").then_some(())
    })
    .await;
    let last = player.last().expect("a report");
    assert!(last.fatal_errors().is_empty(), "{:?}", last.errors);
}

/// Postgres through a proxy the test freezes: the publisher goes away while the database hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_database_while_the_publisher_is_away_changes_nothing_a_viewer_sees() {
    let _turn = one_watcher_at_a_time().await;
    let mut url = url::Url::parse(&fresh_postgres_url().await).expect("database URL");
    let upstream = format!("{}:{}", url.host_str().expect("host"), url.port().unwrap_or(5432));
    let upstream = tokio::net::lookup_host(&upstream).await.expect("resolve").next().expect("an address");
    let proxy = Proxy::start(upstream).await;
    url.set_port(Some(proxy.addr.port())).expect("port");
    // The SQLite default replaced by that Postgres, through the proxy.
    let t = spawn_app_with(Backend::Sqlite, |args| args.database_url = Some(url.to_string())).await;
    let Live { id, rtmp, push: first, player, .. } = live_with_picture(&t, 30).await;
    let (id, rtmp) = (id.as_str(), rtmp.as_str());
    assert!(!player.reports().iter().any(green), "the publisher's picture is not the slate's green");

    // The database hangs, then the publisher goes away: the slate shows the stream's picture,
    // and the player plays on.
    proxy.set(Mode::Hang);
    let page_now = player.last().map(|r| r.t).unwrap_or_default();
    drop(first);
    let held = plays_on(&player, "through the slate with the database hung", page_now).await;
    let reports = player.reports();
    let shown = reports.iter().find(|r| r.t > page_now && green(r)).map(|r| (r.t - page_now) / 1000.0);
    let shown = shown.expect("the stream's picture on screen while the database hangs");
    // The player's latency is how long after the server made it a frame shows.
    let latency = player.last().and_then(|r| r.latency).unwrap_or_default();
    eprintln!(
        "the database hung: the stream's picture on screen {shown:.2} s after the kill at a latency of \
         {latency:.2} s; the picture held at most {held:.2} s"
    );
    assert!(shown - latency <= 1.5, "the slate {shown:.2} s after the kill at a latency of {latency:.2} s");

    // The database back, and the publisher within the window: the same session plays on.
    proxy.set(Mode::Open);
    let page_back = player.last().map(|r| r.t).unwrap_or_default();
    let _second = push(rtmp);
    eventually("the publisher again", Duration::from_secs(20), || async {
        (active_input(&t, id).await == "primary").then_some(())
    })
    .await;
    plays_on(&player, "after the publisher and the database came back", page_back).await;
    let events: Value = t
        .get_with(&t.project_url("/events?type=stream.live&limit=100"), &t.key)
        .await
        .json()
        .await
        .expect("json");
    let live = events["items"].as_array().expect("items").iter().filter(|e| e["data"]["id"] == id).count();
    assert_eq!(live, 1, "one session: one stream.live");
}
