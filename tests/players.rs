//! Players on a live push with a ladder (docs/live-hls.md, "Players").
//!
//! In the default run: the push's playlists, captured version after version by blocking
//! reloads, with delta updates and rendition reports, put through the strict LL-HLS check
//! (`support/llhls_check.rs`, written from RFC 8216bis) before and after its publisher
//! reconnects; and ffmpeg, GStreamer's `hlsdemux2` and VLC playing its master for 20 s.
//!
//! Then the web players people use, each pinned by `tests/player/package-lock.json` and run in
//! headless Chromium (`tests/player/matrix.html`), one at a time, three runs each, about 30 s
//! across a rendition switch (the player grows from 320x180 to 1280x720, as a viewer going full
//! screen, and its ABR moves up) and a publisher reconnect (away 1 s: the slate fills it); none
//! may report an error or stall, and the low-latency ones must play within 2 s of the publisher.
//!
//! A binary of its own, so that its players have the machine to themselves: the API tests run
//! many pushes at once, and a starved player stalls whatever the stream.

#[path = "support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use serde_json::{json, Value};
use support::llhls_check;
use support::player::Player;
use support::*;

/// Runs of every web player.
const RUNS: usize = 3;
/// Seconds each web player plays.
const PLAY: f64 = 30.0;
/// Seconds into play when the player grows (the rendition switch) and when the publisher
/// reconnects.
const SWITCH_AT: f64 = 6.0;
const RECONNECT_AT: f64 = 14.0;
/// How long the publisher is away at the reconnect, and how long after it a player may still
/// wait for the new push's media: a live player starves while nothing is published.
const AWAY: Duration = Duration::from_secs(1);
const RECOVERY: Duration = Duration::from_secs(6);
/// The least a low-latency player may lag the publisher (ingest to screen).
const LOW_LATENCY: f64 = 2.0;

/// A web player of the matrix: its page options, whether it plays low-latency, and whether its
/// ABR is expected to move up when the player grows.
struct Web {
    name: &'static str,
    options: &'static str,
    low_latency: bool,
    switches: bool,
    /// Played by `hls_js_and_shaka_…` (else by `video_js_…`).
    default: bool,
}

const WEB: [Web; 5] = [
    // Started at the live edge as Sluice's own pages start it (docs/live-hls.md, "Starting at
    // the edge").
    Web {
        name: "hls.js, lowLatencyMode",
        options: "player=hlsjs&ll=1&edge=1",
        low_latency: true,
        switches: true,
        default: true,
    },
    Web {
        name: "shaka, lowLatencyMode",
        options: "player=shaka&ll=1",
        low_latency: true,
        switches: true,
        default: true,
    },
    Web { name: "shaka", options: "player=shaka&ll=0", low_latency: false, switches: true, default: true },
    // VHS's ABR did not move up when the player grew, in either mode (in LL-HLS mode it picks the
    // lowest variant as the one its bandwidth estimate allows), so it is not asked to switch;
    // docs/live-hls.md, "Players".
    Web {
        name: "video.js (VHS), llhls",
        options: "player=videojs&ll=1",
        low_latency: true,
        switches: false,
        default: false,
    },
    Web {
        name: "video.js (VHS)",
        options: "player=videojs&ll=0",
        low_latency: false,
        switches: false,
        default: false,
    },
];

fn now_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64() * 1e3).unwrap_or(0.0)
}

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// One 640x360 30-fps publisher without B-frames and a keyframe every 2 s, as OBS's defaults
/// with x264's zerolatency tune, at less than the 360p rung's bitrate: a player that grows
/// switches from the 240p rung to the 360p one, not to `source` (a switch into the publisher's
/// own GOPs is hls.js's case in docs/live-hls.md, "Switching renditions").
fn publisher(ingest: &str) -> Killed {
    ffmpeg_push(
        ingest,
        "testsrc2=size=640x360:rate=30",
        60,
        &["-b:v", "500k", "-maxrate", "500k", "-bufsize", "500k", "-b:a", "96k", "-ar", "48000"],
    )
}

/// The stream of a test: a 360p+240p ladder over a 640x360 push; its ingest URL, its master
/// playlist's URL and its renditions, once the master lists them.
async fn live_ladder(t: &TestApp) -> (String, String, Vec<(String, String)>, Killed) {
    let body = json!({"name": "matrix", "qualities": ["360p", "240p"]});
    let resp = t.post_json_with(&t.project_url("/streams"), &t.key, &body).await;
    assert_eq!(resp.status(), 201);
    let stream: Value = resp.json().await.expect("json");
    let ingest = stream["ingestUrl"].as_str().expect("ingestUrl").to_string();
    let master_url = stream["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let pusher = publisher(&ingest);
    let master = eventually("the master playlist", Duration::from_secs(30), || async {
        let r = t.client.get(&master_url).send().await.ok()?;
        if r.status() != 200 {
            return None;
        }
        r.text().await.ok()
    })
    .await;
    let renditions = rendition_urls(&master_url, &master);
    assert_eq!(renditions.len(), 4, "source, 360p, 240p and audio: {master}");
    (ingest, master_url, renditions, pusher)
}

/// The strict LL-HLS check on the playlists of a live push, before and after its publisher
/// reconnects, and the plain HLS players (ffmpeg, GStreamer's hlsdemux2, VLC) on its master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_playlists_pass_the_strict_check_and_plain_players_play() {
    let _turn = support::player::one_watcher_at_a_time().await;
    let t = spawn_app(Backend::Sqlite).await;
    let (ingest, master_url, renditions, pusher) = live_ladder(&t).await;
    let findings = capture_and_check(&t, &renditions, Duration::from_secs(8)).await;
    assert!(findings.is_empty(), "the live playlists break RFC 8216bis:\n{}", findings.join("\n"));

    // Plain HLS players on the same URL, at once: each must play 20 s of media without an error.
    let native = [
        ("ffmpeg", native_ffmpeg(&master_url)),
        ("gst playbin3 (hlsdemux2)", native_gst(&master_url)),
        ("vlc", native_vlc(&master_url)),
    ];
    let (started, mut failed) = (Instant::now(), Vec::new());
    for (name, child) in native {
        match wait_native(child, started, Duration::from_secs(60)).await {
            Ok(out) => eprintln!("  {name}: {out}"),
            Err(e) => failed.push(format!("{name}: {e}")),
        }
    }
    assert!(failed.is_empty(), "plain HLS players:\n{}", failed.join("\n"));

    // A reconnect: the playlists go on after a discontinuity, checked again while it is listed
    // (and once the window has moved on past the old push's segments).
    drop(pusher);
    tokio::time::sleep(AWAY).await;
    let pusher = publisher(&ingest);
    let source = source_url(&renditions);
    eventually("a discontinuity", Duration::from_secs(30), || async {
        let text = t.client.get(&source).send().await.ok()?.text().await.ok()?;
        text.contains("#EXT-X-DISCONTINUITY\n").then_some(())
    })
    .await;
    let findings = capture_and_check(&t, &renditions, Duration::from_secs(14)).await;
    assert!(findings.is_empty(), "after a reconnect:\n{}", findings.join("\n"));
    drop(pusher);
}

/// hls.js and shaka (low latency on and off), three runs each, one player at a time, each
/// through a publisher's reconnect (`SLUICE_TEST_PLAYER_RECONNECT=0` leaves it out). One at a
/// time because five Chromiums beside the ladder's encoders starve this 2-core machine: every
/// low-latency player, hls.js included, stalled with a quarter of a second buffered when they
/// ran together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hls_js_and_shaka_play_the_live_ladder_without_a_stall() {
    matrix(true).await;
}

/// video.js (VHS), LL-HLS on and off, as the test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn video_js_plays_the_live_ladder_without_a_stall() {
    matrix(false).await;
}

/// The web players of one test (`default`: hls.js and shaka), three runs each; fails on any
/// stall or error (all runs are played first).
async fn matrix(default: bool) {
    // Not beside the other tests' pushes and players.
    let _turn = support::player::one_watcher_at_a_time().await;
    let t = spawn_app(Backend::Sqlite).await;
    let (ingest, master_url, renditions, mut pusher) = live_ladder(&t).await;
    let (mut table, mut failed) = (Vec::new(), Vec::new());
    for run in 0..RUNS {
        // A push lasts 300 s (media-fixtures/make.sh) and a run about 170 s: each run has a
        // push of its own, and its players join once it has run a while, as viewers of a live
        // stream do (a join in the stream's first seconds: docs/live-hls.md, "Players").
        let before = discontinuities(&t, &renditions).await;
        if run > 0 {
            drop(pusher);
            pusher = publisher(&ingest);
        }
        established(&t, &renditions, before + usize::from(run > 0)).await;
        for web in web_players().into_iter().filter(|w| w.default == default) {
            let player = start_player(web, &master_url).await;
            let playing =
                player.wait_matrix("the player playing", Duration::from_secs(40), |r| r["playing"] == true);
            if let Err(e) = std::panic::AssertUnwindSafe(playing).catch_unwind().await {
                write_log(web, &player.matrix_reports().last().cloned().unwrap_or(Value::Null), run);
                let e = e.downcast_ref::<String>().cloned().unwrap_or_else(|| format!("{e:?}"));
                failed.push(format!(
                    "{} (run {run}) did not start: {}",
                    web.name,
                    e.chars().take(4000).collect::<String>()
                ));
                continue;
            }
            let started = Instant::now();
            // The publisher reconnects RECONNECT_AT seconds in; the player plays PLAY seconds.
            let mut window = None;
            if std::env::var("SLUICE_TEST_PLAYER_RECONNECT").as_deref() != Ok("0") {
                tokio::time::sleep(Duration::from_secs_f64(RECONNECT_AT)).await;
                let away = now_ms();
                drop(pusher);
                tokio::time::sleep(AWAY).await;
                pusher = publisher(&ingest);
                window = Some((away, now_ms() + RECOVERY.as_secs_f64() * 1e3));
            }
            tokio::time::sleep(Duration::from_secs_f64(PLAY).saturating_sub(started.elapsed())).await;
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| judge(web, &player, run, window)))
            {
                Ok(row) => table.push(row),
                Err(e) => {
                    let e = e.downcast_ref::<String>().cloned().unwrap_or_else(|| format!("{e:?}"));
                    eprintln!("  {e}");
                    failed.push(e);
                }
            }
        }
        eprintln!("run {run}: {} of {} without a stall or an error", table.len(), table.len() + failed.len());
    }
    eprintln!("player matrix ({RUNS} runs, {PLAY} s each; latency: ingest to screen, median after 4 s):");
    for row in &table {
        eprintln!("  {row}");
    }
    assert!(failed.is_empty(), "{} player runs stalled or failed (above)", failed.len());
    drop(pusher);
}

/// The `source` rendition's playlist URL.
fn source_url(renditions: &[(String, String)]) -> String {
    renditions.iter().find(|(name, _)| name == "source").map(|(_, url)| url.clone()).expect("source")
}

/// The discontinuities the `source` playlist has had: its discontinuity sequence and those it
/// lists.
fn discontinuity_count(text: &str) -> usize {
    let sequence = text.lines().find_map(|l| l.strip_prefix("#EXT-X-DISCONTINUITY-SEQUENCE:"));
    sequence.and_then(|n| n.trim().parse().ok()).unwrap_or(0) + text.matches("#EXT-X-DISCONTINUITY\n").count()
}

async fn discontinuities(t: &TestApp, renditions: &[(String, String)]) -> usize {
    let source = source_url(renditions);
    eventually("the source playlist", Duration::from_secs(10), || async {
        Some(discontinuity_count(&t.client.get(&source).send().await.ok()?.text().await.ok()?))
    })
    .await
}

/// Waits until the push's `source` playlist has had `discontinuities` (a new push adds one or
/// two, with the slate between) and lists four complete segments after the last (8 s of the
/// current push): a player that joined before the kill was seen joined at the reconnect.
async fn established(t: &TestApp, renditions: &[(String, String)], discontinuities: usize) {
    let source = source_url(renditions);
    eventually("a push of four segments", Duration::from_secs(40), || async {
        let text = t.client.get(&source).send().await.ok()?.text().await.ok()?;
        let since = text.rsplit("#EXT-X-DISCONTINUITY\n").next().unwrap_or(&text);
        (discontinuity_count(&text) >= discontinuities && since.matches("#EXTINF").count() >= 4).then_some(())
    })
    .await;
}

/// The web players of the matrix; `SLUICE_TEST_PLAYERS=shaka,...` keeps those whose options
/// contain one of the words (to look at one player alone).
fn web_players() -> Vec<&'static Web> {
    let only = std::env::var("SLUICE_TEST_PLAYERS").unwrap_or_default();
    let words: Vec<&str> = only.split(',').filter(|w| !w.is_empty()).collect();
    WEB.iter().filter(|w| words.is_empty() || words.iter().any(|word| w.options.contains(word))).collect()
}

/// One web player in its own Chromium on the matrix page.
async fn start_player(web: &Web, master_url: &str) -> Player {
    let log = if std::env::var_os("SLUICE_TEST_PLAYER_LOGS").is_some() { "&log=1" } else { "" };
    Player::start_matrix(master_url, &format!("{}&switchAt={SWITCH_AT}{log}", web.options)).await
}

/// Checks one player's run and returns its line of the table. `window`: the publisher's
/// reconnect (page clock, ms), when there was one.
fn judge(web: &Web, player: &Player, run: usize, window: Option<(f64, f64)>) -> String {
    let within = |t: Option<f64>| window.zip(t).is_some_and(|((away, back), t)| t >= away && t <= back);
    let (away, back) = window.unwrap_or((f64::MAX, f64::MAX));
    let reports = player.matrix_reports();
    let last = reports.last().cloned().unwrap_or(Value::Null);
    write_log(web, &last, run);
    let context = || {
        let mut brief = last.clone();
        brief["log"] = Value::Null;
        format!("{} (run {run}): last report {brief}", web.name)
    };
    // Errors: none that a player calls fatal, and none at all outside the reconnect.
    let errors: Vec<&str> =
        last["errors"].as_array().map(|e| e.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let outside = |e: &&&str| {
        let t: Option<f64> = e.split(' ').next().and_then(|t| t.parse().ok());
        let fatal =
            ["fatal=true", "severity=2", " videojs ", " video: ", " page: "].iter().any(|f| e.contains(f));
        fatal || !within(t)
    };
    let bad: Vec<&&str> = errors.iter().filter(outside).collect();
    assert!(bad.is_empty(), "{}: errors {bad:?}", context());
    // Stalls outside the reconnect (the publisher gone, then its first segment to wait for).
    let stalls: Vec<&Value> = last["stalls"]
        .as_array()
        .map(|s| s.iter().filter(|s| !within(num(s, "t"))).collect())
        .unwrap_or_default();
    assert!(stalls.is_empty(), "{}: stalls {stalls:?}", context());
    // Playing after the reconnect: the position moved on well past it.
    if window.is_some() {
        let after: Vec<f64> = reports
            .iter()
            .filter(|r| num(r, "t").is_some_and(|t| t > back))
            .filter_map(|r| num(r, "currentTime"))
            .collect();
        let moved = after.last().zip(after.first()).map_or(0.0, |(l, f)| l - f);
        assert!(moved > 3.0, "{}: {moved:.1} s played after the reconnect", context());
    }
    let heights: Vec<u64> =
        reports.iter().filter_map(|r| r["videoHeight"].as_u64()).filter(|h| *h > 0).collect();
    let switched = heights.iter().any(|h| Some(h) != heights.first());
    if web.switches {
        assert!(switched, "{}: no rendition switch when the player grew ({heights:?})", context());
    }
    // Latency: ingest to screen, from the frame's EXT-X-PROGRAM-DATE-TIME, before the reconnect.
    let playing_at = num(&last, "playingAt").unwrap_or(f64::MAX);
    let mut latencies: Vec<f64> = reports
        .iter()
        .filter(|r| num(r, "t").is_some_and(|t| t > playing_at + 4000.0 && t < away))
        .filter_map(|r| num(r, "ingestLatency"))
        .collect();
    latencies.sort_by(f64::total_cmp);
    let median = latencies.get(latencies.len() / 2).copied();
    if web.low_latency {
        let m = median.unwrap_or_else(|| panic!("{}: no latency measured", context()));
        assert!(m < LOW_LATENCY, "{}: {m:.2} s behind the publisher", context());
    }
    let own = num(&last, "latency").map_or("-".to_string(), |l| format!("{l:.2} s"));
    format!(
        "{:<24} {} run {run}: latency {}, its own {own}, heights {:?} -> {:?}{}, stalls 0, errors 0 ({} in the reconnect)",
        web.name,
        last["version"].as_str().unwrap_or("?"),
        median.map_or("-".to_string(), |m| format!("{m:.2} s")),
        heights.first(),
        heights.iter().max(),
        if switched { " (switched)" } else { "" },
        errors.len() + last["stalls"].as_array().map_or(0, Vec::len),
    )
}

/// Writes the player's own log of its run (in its `last` report) to
/// `$SLUICE_TEST_PLAYER_LOGS/<options>-<run>.log`, when that is set.
fn write_log(web: &Web, last: &Value, run: usize) {
    let Ok(dir) = std::env::var("SLUICE_TEST_PLAYER_LOGS") else { return };
    let name: String = web.options.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let lines: Vec<&str> =
        last["log"].as_array().map(|l| l.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let _ = std::fs::write(format!("{dir}/{name}-{run}.log"), lines.join("\n"));
}

/// The media playlists of the master at `master_url`, by name (`source`, `240p`, `audio`).
fn rendition_urls(master_url: &str, master: &str) -> Vec<(String, String)> {
    let base = master_url.trim_end_matches("master.m3u8");
    let mut uris: Vec<&str> = master.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
    uris.extend(master.lines().filter_map(|l| l.split("URI=\"").nth(1)).filter_map(|r| r.split('"').next()));
    uris.iter()
        .map(|u| {
            // Without the master's playback session (`vs=`): the capture adds its own query.
            let path = u.split('?').next().unwrap_or(u);
            let name = path.trim_end_matches("/index.m3u8").rsplit('/').next().unwrap_or(path).to_string();
            (name, format!("{base}{path}"))
        })
        .collect()
}

/// Captures every rendition's playlist for `window`, each version by a blocking reload for its
/// next part, with a delta update (`_HLS_skip=YES`) beside a full one now and then, and checks
/// them: each version on its own, each against the one before, each delta against its full
/// playlist, and the rendition reports against the siblings fetched at the same time. Returns
/// the findings, each naming the rendition.
async fn capture_and_check(t: &TestApp, renditions: &[(String, String)], window: Duration) -> Vec<String> {
    let get = |url: String| async move {
        let r = t.client.get(&url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
        assert_eq!(r.status(), 200, "GET {url}");
        r.text().await.expect("playlist text")
    };
    let mut findings = Vec::new();
    let mut versions: Vec<Vec<String>> = vec![Vec::new(); renditions.len()];
    let until = Instant::now() + window;
    let mut round = 0;
    while Instant::now() < until {
        round += 1;
        for (i, (name, url)) in renditions.iter().enumerate() {
            let next = versions[i].last().and_then(|v| next_part(v));
            let text = match next {
                Some((msn, part)) => get(format!("{url}?_HLS_msn={msn}&_HLS_part={part}")).await,
                None => get(url.clone()).await,
            };
            findings.extend(llhls_check::check_media(&text).into_iter().map(|f| format!("{name}: {f}")));
            if let Some(before) = versions[i].last() {
                findings.extend(
                    llhls_check::check_update(before, &text).into_iter().map(|f| format!("{name}: {f}")),
                );
            }
            if round % 4 == 0 {
                // A delta and the full playlist of the same version: fetched between two fulls
                // that are the same (a part a quarter of a second apart changes them).
                for _ in 0..10 {
                    let full = get(url.clone()).await;
                    let delta = get(format!("{url}?_HLS_skip=YES")).await;
                    if get(url.clone()).await == full {
                        let found = llhls_check::check_delta(&full, &delta);
                        findings.extend(found.into_iter().map(|f| format!("{name} delta: {f}")));
                        break;
                    }
                }
            }
            versions[i].push(text);
        }
        // Rendition reports against the siblings' latest versions (a part or two apart in time).
        for (i, (name, _)) in renditions.iter().enumerate() {
            let others: Vec<(String, &str)> = renditions
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .filter_map(|(j, (other, _))| {
                    Some((format!("../{other}/index.m3u8"), versions[j].last()?.as_str()))
                })
                .collect();
            let others: Vec<(&str, &str)> = others.iter().map(|(u, text)| (u.as_str(), *text)).collect();
            if let Some(text) = versions[i].last() {
                let found = llhls_check::check_rendition_reports(text, &others, 4);
                findings.extend(found.into_iter().map(|f| format!("{name} reports: {f}")));
            }
        }
    }
    assert!(
        versions.iter().all(|v| v.len() >= 8),
        "too few versions captured: {:?}",
        versions.iter().map(Vec::len).collect::<Vec<_>>()
    );
    findings.sort();
    findings.dedup();
    findings
}

/// A plain player, its output going to a file (a pipe nobody reads would fill and stop it).
fn spawn(cmd: &mut Command) -> (std::process::Child, tempfile::NamedTempFile) {
    let log = tempfile::NamedTempFile::new().expect("a log file");
    let err = log.reopen().expect("the log file");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("a plain HLS player starts");
    (child, log)
}

/// ffmpeg reading 20 s of the master's first video and audio to nowhere, in real time.
fn native_ffmpeg(url: &str) -> (std::process::Child, tempfile::NamedTempFile) {
    spawn(Command::new("ffmpeg").args([
        "-nostdin",
        "-loglevel",
        "error",
        "-i",
        url,
        "-t",
        "20",
        "-map",
        "0:v:0",
        "-map",
        "0:a:0",
        "-f",
        "null",
        "-",
    ]))
}

/// GStreamer's playbin3 with `hlsdemux2` (ranked first), synchronised sinks, stopped by
/// `timeout` after 20 s (its exit status 124 then: it played all along).
fn native_gst(url: &str) -> (std::process::Child, tempfile::NamedTempFile) {
    let sinks = ["video-sink=\"fakesink sync=true\"", "audio-sink=\"fakesink sync=true\""];
    spawn(
        Command::new("timeout")
            .args(["20", "gst-launch-1.0", "-q", "playbin3", &format!("uri={url}")])
            .args(sinks)
            .env("GST_PLUGIN_FEATURE_RANK", "hlsdemux2:MAX"),
    )
}

/// VLC without an interface or outputs, 20 s; VLC refuses to run as root, so as `nobody` then
/// (CI runs as root), with a home of its own for its settings.
fn native_vlc(url: &str) -> (std::process::Child, tempfile::NamedTempFile) {
    let home = std::env::temp_dir().join("sluice-test-vlc-home");
    let _ = std::fs::create_dir_all(&home);
    let _ = std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o777));
    // `--adaptive-logic highest`: with the dummy video output VLC's decoder cannot get a
    // picture buffer across a switch of rendition ("get_buffer() failed", then
    // "decode_slice_header error" until the next keyframe; 3 runs of 10), so it plays one.
    let vlc = [
        "cvlc",
        "--intf",
        "dummy",
        "--no-dbus",
        "--vout",
        "dummy",
        "--aout",
        "dummy",
        "--run-time",
        "20",
        "--adaptive-logic",
        "highest",
    ];
    let vlc: Vec<&str> = vlc.into_iter().chain(["--play-and-exit", url]).collect();
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"));
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]).args(&vlc);
        c
    } else {
        let mut c = Command::new("cvlc");
        c.args(&vlc[1..]);
        c
    };
    spawn(cmd.env("HOME", &home))
}

/// Waits for a plain player started at `started`: it must end on its own within `deadline`,
/// having played in real time (10 s at least), with nothing in its log that says error.
async fn wait_native(
    (mut child, log): (std::process::Child, tempfile::NamedTempFile),
    started: Instant,
    deadline: Duration,
) -> Result<String, String> {
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {deadline:?}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let took = started.elapsed().as_secs_f64();
    let stderr = std::fs::read_to_string(log.path()).unwrap_or_default();
    // VLC says it has no interface to show and no session bus: those are not playback errors.
    let errors: Vec<&str> =
        stderr.lines().filter(|l| l.to_lowercase().contains("error") && !l.contains("interface")).collect();
    let head = || stderr.lines().take(20).collect::<Vec<_>>().join(" | ");
    let stopped = status.code() == Some(124);
    if !(status.success() || stopped) || !errors.is_empty() {
        return Err(format!("{status} after {took:.1} s: errors {errors:?}; {}", head()));
    }
    // ffmpeg starts three segments back and reads those at once; the others play from the start.
    if took < 10.0 {
        return Err(format!("ended after {took:.1} s, before playing 20 s: {}", head()));
    }
    Ok(format!("{status}, {took:.1} s"))
}
