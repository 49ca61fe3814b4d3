//! Backup ingest (CONTRACT: Continuity): a backup publisher stands by while the primary is live;
//! when the primary is killed, hls.js in Chromium plays the backup's picture within 1.5 s
//! without a hold over 0.5 s, and when the primary is back it takes over again; one session,
//! one recording, one `stream.live`, one `stream.ended` and a `stream.input_switched` each
//! way. Each input is painted a colour of its own, which the player reads off the screen. RTMP
//! and SRT each play both roles: an RTMP primary with an SRT backup, and the other way round.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::continuity::{active_input, plays_on};
use crate::live_hls::get_text;
use crate::support::player::{blue, one_watcher_at_a_time, red, Player};
use crate::support::receiver::Receiver;
use crate::support::{eventually, ffmpeg_push, ffmpeg_push_ts, spawn_app, Backend, Killed, TestApp};
use crate::webhooks::create_webhook;

const RED: &str = "color=c=0xC02020:size=640x360:rate=30";
const BLUE: &str = "color=c=0x2020C0:size=640x360:rate=30";

/// The protocol an input publishes with.
#[derive(Debug, Clone, Copy)]
enum Via {
    Rtmp,
    Srt,
}

/// An input's publisher: RTMP to `created`'s URL for `role`, or SRT to its `srtUrl`.
struct Input {
    via: Via,
    url: String,
}

impl Input {
    fn of(created: &Value, role: &str, via: Via) -> Input {
        let urls = if role == "backup" { &created["backup"] } else { created };
        let field = match via {
            Via::Rtmp => "ingestUrl",
            Via::Srt => "srtUrl",
        };
        Input { via, url: urls[field].as_str().expect("an ingest URL").to_string() }
    }

    fn push(&self, colour: &str) -> Killed {
        self.push_with(colour, &[])
    }

    /// [`Input::push`] with more of ffmpeg's output options.
    fn push_with(&self, colour: &str, more: &[&str]) -> Killed {
        let extra = [&["-b:v", "600k", "-b:a", "96k"], more].concat();
        match self.via {
            Via::Rtmp => ffmpeg_push(&self.url, colour, 30, &extra),
            Via::Srt => ffmpeg_push_ts(&self.url, colour, 30, &extra),
        }
    }
}

async fn stream(t: &TestApp, id: &str) -> Value {
    t.get_with(&t.project_url(&format!("/streams/{id}")), &t.key).await.json().await.expect("json")
}

/// Waits until the stream's `input.standingBy` is `want`.
async fn standing_by(t: &TestApp, id: &str, what: &str, want: Value) {
    eventually(what, Duration::from_secs(15), || async {
        (stream(t, id).await["input"]["standingBy"] == want).then_some(())
    })
    .await;
}

/// Waits until the player shows `colour` after showing `before`; returns the page time between
/// the last report of `before` and the first of `colour` (how long the switch took on screen).
/// SLUICE_TEST_LOG=1: the server's log (sluice=info) in the test's output.
fn test_log() {
    if std::env::var_os("SLUICE_TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt().with_env_filter("sluice=info").with_test_writer().try_init();
    }
}

/// A backup without the audio the primary sends is refused at its first media, over RTMP and
/// over SRT (the two inputs need the same tracks), and the primary goes on alone; the same
/// backup with audio stands by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_without_the_primarys_audio_is_refused_and_the_primary_goes_on() {
    test_log();
    let t = spawn_app(Backend::Sqlite).await;
    let body = json!({"name": "mismatched", "qualities": ["240p"], "vodEnabled": false});
    let created: Value =
        t.post_json_with(&t.project_url("/streams"), &t.key, &body).await.json().await.expect("json");
    let id = created["_id"].as_str().expect("id").to_string();
    let _primary = Input::of(&created, "primary", Via::Rtmp).push(RED);
    eventually("the primary live with its audio known", Duration::from_secs(30), || async {
        let v = stream(&t, &id).await;
        (v["status"] == "live" && v["input"]["audioCodec"].is_string()).then_some(())
    })
    .await;
    for via in [Via::Rtmp, Via::Srt] {
        let mut silent = Input::of(&created, "backup", via).push_with(BLUE, &["-an"]);
        silent.exits(Duration::from_secs(30)).await;
        let v = stream(&t, &id).await;
        assert_eq!(v["input"]["standingBy"], json!([]), "{via:?}: the silent backup does not stand by: {v}");
        assert_eq!(
            (&v["status"], &v["input"]["active"]),
            (&json!("live"), &json!("primary")),
            "{via:?}: {v}"
        );
    }
    // The same backup with the primary's audio stands by.
    let _backup = Input::of(&created, "backup", Via::Rtmp).push(BLUE);
    standing_by(&t, &id, "the backup with audio standing by", json!(["backup"])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_srt_backup_takes_over_a_killed_rtmp_primary_and_hands_back_when_it_returns() {
    backs_up(Via::Rtmp, Via::Srt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rtmp_backup_takes_over_a_killed_srt_primary_and_hands_back_when_it_returns() {
    backs_up(Via::Srt, Via::Rtmp).await;
}

async fn backs_up(primary_via: Via, backup_via: Via) {
    let _turn = one_watcher_at_a_time().await;
    test_log();
    let t = spawn_app(Backend::Sqlite).await;
    let rx = Receiver::start().await;
    create_webhook(&t, &rx.url(), json!(["*"])).await;
    let body = json!({"name": "backed-up", "qualities": ["240p"], "vodEnabled": true, "reconnectWindow": 4});
    let created: Value =
        t.post_json_with(&t.project_url("/streams"), &t.key, &body).await.json().await.expect("json");
    let id = created["_id"].as_str().expect("id").to_string();
    let (primary_input, backup_input) =
        (Input::of(&created, "primary", primary_via), Input::of(&created, "backup", backup_via));
    let backup_url = created["backup"]["ingestUrl"].as_str().expect("backup.ingestUrl").to_string();
    assert!(backup_url.contains("/backup/"), "{backup_url}");
    assert!(created["backup"]["obs"]["server"].as_str().expect("obs").ends_with("/backup"));
    assert!(created["backup"]["srtUrl"].as_str().expect("srtUrl").contains("streamid=backup:"));
    let master = created["playbackUrls"]["hls"].as_str().expect("hls").to_string();

    // A backup without a live primary is refused: nothing stands by, nothing goes live.
    let mut early = backup_input.push(BLUE);
    early.exits(Duration::from_secs(15)).await;
    assert_eq!(stream(&t, &id).await["status"], "idle", "a backup alone does not go live");

    let primary = primary_input.push(RED);
    eventually("the master playlist", Duration::from_secs(30), || async {
        (get_text(&t, &master).await.0 == 200).then_some(())
    })
    .await;
    let player = Player::start_opts(&master, "lowLatency=1&stampFor=60000").await;
    player.wait_played("hls.js playing the primary for 4 s", 4.0, red).await;
    let backup = backup_input.push(BLUE);
    standing_by(&t, &id, "the backup standing by", json!(["backup"])).await;
    assert_eq!(active_input(&t, &id).await, "primary", "the backup only stands by");
    assert!(player.last().is_some_and(|r| red(&r)), "the primary's picture plays");

    // The primary is killed: the backup's picture within 1.5 s, and no hold over 0.5 s.
    let page_now = player.last().map(|r| r.t).unwrap_or_default();
    drop(primary);
    let killed = Instant::now();
    eventually("the backup active", Duration::from_secs(5), || async {
        (active_input(&t, &id).await == "backup").then_some(())
    })
    .await;
    let active_after = killed.elapsed();
    let switch = player.switch("the backup's picture", page_now, red, blue).await;
    let on_screen = killed.elapsed();
    let held = plays_on(&player, "after the backup took over", page_now).await;
    let latency = player.last().and_then(|r| r.latency).unwrap_or_default();
    eprintln!(
        "{primary_via:?} primary, {backup_via:?} backup: backup active {active_after:?} after the kill, on screen {switch:.2} s after the primary's last \
         picture ({on_screen:?} after the kill, at a latency of {latency:.2} s); held at most {held:.2} s"
    );
    assert!(switch <= 1.5, "the backup's picture {switch:.2} s after the primary's last");

    // The primary is back: it takes over again at its first keyframe.
    let page_back = player.last().map(|r| r.t).unwrap_or_default();
    let second = primary_input.push(RED);
    let back = Instant::now();
    eventually("the primary active again", Duration::from_secs(15), || async {
        (active_input(&t, &id).await == "primary").then_some(())
    })
    .await;
    let active_after = back.elapsed();
    let switch = player.switch("the primary's picture again", page_back, blue, red).await;
    let held = plays_on(&player, "after the primary came back", page_back).await;
    eprintln!(
        "{primary_via:?} primary, {backup_via:?} backup: the primary active again {active_after:?} after it reconnected, on screen {switch:.2} s after the \
         backup's last picture; held at most {held:.2} s"
    );
    assert!(switch <= 1.5, "the primary's picture {switch:.2} s after the backup's last");
    standing_by(&t, &id, "the backup standing by again", json!(["backup"])).await;

    // Both go, the backup first (an SRT caller killed is only silent until its connection
    // times out; once it is no longer ready it does not take over): the slate, then after the
    // window the session ends, as one recording.
    drop(backup);
    standing_by(&t, &id, "the backup no longer standing by", json!([])).await;
    drop(second);
    eventually("the stream to end", Duration::from_secs(30), || async {
        (stream(&t, &id).await["status"] == "idle").then_some(())
    })
    .await;
    let last = player.last().expect("a report");
    assert!(last.fatal_errors().is_empty(), "{:?}", last.errors);
    let events = eventually("stream.ended", Duration::from_secs(10), || async {
        let events = rx.events_for(&id);
        events.contains(&"stream.ended".to_string()).then_some(events)
    })
    .await;
    assert_eq!(
        events,
        ["stream.created", "stream.live", "stream.input_switched", "stream.input_switched", "stream.ended"],
        "one session"
    );
    let switches: Vec<(String, String)> = rx
        .received()
        .iter()
        .map(|r| r.json())
        .filter(|b| b["event"] == "stream.input_switched" && b["data"]["id"] == id.as_str())
        .map(|b| {
            (b["data"]["from"].as_str().unwrap_or("").into(), b["data"]["to"].as_str().unwrap_or("").into())
        })
        .collect();
    assert_eq!(switches, [("primary".into(), "backup".into()), ("backup".into(), "primary".into())]);
    let vods = eventually("the recording", Duration::from_secs(60), || async {
        let v: Value =
            t.get_with(&t.project_url(&format!("/vod?streamId={id}")), &t.key).await.json().await.ok()?;
        let items = v["items"].as_array().cloned().unwrap_or_default();
        items.iter().all(|i| i["status"] == "complete").then_some(items).filter(|i| !i.is_empty())
    })
    .await;
    assert_eq!(vods.len(), 1, "one recording holds both inputs: {vods:?}");
}
