//! `cargo bench --bench continuity`: backup ingest (CONTRACT: Continuity) on a release `sluice
//! serve`, measured as a viewer and as the machine sees it.
//!
//! - **Switch**: one stream (the 240p ladder), a red primary and a blue backup (ffmpeg, 640x360,
//!   a keyframe a second), hls.js in headless Chromium playing it in low-latency mode and
//!   reporting the screen's mean colour every 50 ms. `BENCH_KILLS` times (default 20) the
//!   primary is killed while the backup stands by: the switch is the page time from the last
//!   report showing red to the first showing blue (target ≤ 1.0 s, median and p95); a stall is
//!   a time of over 0.5 s in which the picture did not move on while the page's clock did
//!   (target 0); then the primary is started again and the time back to red is the failback.
//!   The time from the kill to `input.active: backup` is printed beside it.
//! - **Standby CPU**: `BENCH_STREAMS` streams (default 4) with a looping file pushed to each
//!   without re-encoding (`ffmpeg -re -c copy`, a keyframe every 2 s, `qualities: ["1080p"]`
//!   above the source: passthrough, `vodEnabled: false`); the server's CPU with those pushes,
//!   then with the same file pushed to each stream's backup URL standing by. The standby's cost
//!   per stream against a passthrough push's (target ≤ 1.2×), each over `BENCH_WINDOW` s
//!   (default 20), beside the idle server. `BENCH_BACKUP=srt` stands the backups by over SRT;
//!   the pushes go over the backups' protocol unless `BENCH_PRIMARY` (`rtmp` or `srt`) says.
//!
//! Knobs: `BENCH_KILLS`, `BENCH_STREAMS`, `BENCH_WINDOW`, `BENCH_BACKUP` (`rtmp` or `srt`), `BENCH_PRIMARY`,
//! `BENCH_SKIP` (`switch` or `cpu`: leave that half out).

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{cpu_seconds, push, sample_file, settle, Sluice};
use support::player::{blue, longest_hold, red, Player, Report};
use support::{ffmpeg_push, ffmpeg_push_ts, Killed};

const RED: &str = "color=c=0xC02020:size=640x360:rate=30";
const BLUE: &str = "color=c=0x2020C0:size=640x360:rate=30";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The player's reports from a second before page time `at` to two after, a line each, with the
/// events new in each: what the page saw around a hold.
fn timeline_around(reports: &[Report], at: f64) -> String {
    let mut seen = reports.iter().rfind(|r| r.t < at - 1000.0).map_or(0, |r| r.events.len());
    let mut out = String::new();
    for r in reports.iter().filter(|r| r.t >= at - 1000.0 && r.t <= at + 2000.0) {
        let colour = r.colour.map_or("-".to_string(), |[r, g, b]| format!("{r:.0},{g:.0},{b:.0}"));
        let new = r.events.get(seen.min(r.events.len())..).unwrap_or_default().join("; ");
        seen = r.events.len();
        out += &format!(
            "    {:+6.0} ms  t={:.3} buf_end={:.3} ready={} rate={} level={} rgb={colour} {new}\n",
            r.t - at,
            r.current_time,
            r.buffered_end.unwrap_or(f64::NAN),
            r.ready_state,
            r.playback_rate,
            r.level
        );
    }
    out
}

async fn get(sluice: &Sluice, path: &str) -> Option<Value> {
    let url = format!("{}{path}", sluice.api);
    sluice.client.get(url).bearer_auth(&sluice.key).send().await.ok()?.json().await.ok()
}

async fn active_input(sluice: &Sluice, id: &str) -> String {
    let v = get(sluice, &format!("/streams/{id}")).await.unwrap_or_default();
    v["input"]["active"].as_str().unwrap_or_default().to_string()
}

async fn standing_by(sluice: &Sluice, id: &str) -> Value {
    get(sluice, &format!("/streams/{id}")).await.unwrap_or_default()["input"]["standingBy"].clone()
}

fn backup_push(via: &str, created: &Value, colour: &str) -> Killed {
    let extra = ["-b:v", "600k", "-b:a", "96k"];
    match via {
        "srt" => ffmpeg_push_ts(created["backup"]["srtUrl"].as_str().expect("srtUrl"), colour, 30, &extra),
        _ => ffmpeg_push(created["backup"]["ingestUrl"].as_str().expect("backup"), colour, 30, &extra),
    }
}

async fn switches(sluice: &Sluice, via: &str, kills: usize) {
    let created = sluice
        .create_stream(json!({"name": "continuity", "qualities": ["240p"], "reconnectWindow": 10}))
        .await;
    let id = created["_id"].as_str().expect("id").to_string();
    let primary_url = created["ingestUrl"].as_str().expect("ingestUrl").to_string();
    let master = created["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let primary_push = || ffmpeg_push(&primary_url, RED, 30, &["-b:v", "600k", "-b:a", "96k"]);
    let mut primary = Some(primary_push());
    let ready = settle(Duration::from_secs(30), async || {
        sluice.client.get(&master).send().await.is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(ready, "the master playlist");
    // The test publisher ends after 300 s (media-fixtures/make.sh): started again before then,
    // while it stands by.
    let mut backup = (backup_push(via, &created, BLUE), Instant::now());
    let player = Player::start_opts(&master, "lowLatency=1&reportEvery=50").await;
    // Four seconds of the primary first: what is measured is the switch, not the player's start.
    player.wait_played("hls.js playing the primary for 4 s", 4.0, red).await;
    let (mut on_screen, mut failbacks, mut active, mut holds) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for kill in 0..kills {
        if backup.1.elapsed() > Duration::from_secs(240) || backup.0 .0.try_wait().ok().flatten().is_some() {
            // The old one gone first: a new backup may not take the place of one ready.
            backup.0 .0.kill().ok();
            backup = (backup_push(via, &created, BLUE), Instant::now());
        }
        let ready =
            settle(Duration::from_secs(20), async || standing_by(sluice, &id).await == json!(["backup"]))
                .await;
        assert!(ready, "kill {kill}: the backup standing by");
        let from = player.last().map(|r| r.t).unwrap_or_default();
        drop(primary.take());
        let killed = Instant::now();
        let took =
            settle(Duration::from_secs(10), async || active_input(sluice, &id).await == "backup").await;
        assert!(took, "kill {kill}: the backup active");
        active.push(killed.elapsed().as_secs_f64());
        on_screen.push(player.switch("the backup's picture", from, red, blue).await);
        // Two seconds of the backup, then the primary back.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let back_from = player.last().map(|r| r.t).unwrap_or_default();
        primary = Some(primary_push());
        failbacks.push(player.switch("the primary's picture again", back_from, blue, red).await);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let reports = player.reports();
        let end = reports.last().map_or(back_from, |r| r.t);
        let (switch_hold, switch_at) = longest_hold(&reports, from, back_from);
        let (back_hold, back_at) = longest_hold(&reports, back_from, end);
        holds.push(switch_hold.max(back_hold));
        let last = on_screen.last().copied().unwrap_or_default();
        eprintln!(
            "kill {kill}: backup active {:.3} s after, on screen {last:.2} s, longest hold {switch_hold:.2} s; \
             failback {:.2} s, longest hold {back_hold:.2} s",
            active[kill], failbacks[kill]
        );
        for (hold, at, what) in [(switch_hold, switch_at, "switch"), (back_hold, back_at, "failback")] {
            if hold > 0.5 {
                eprintln!("  the {what}'s hold, page time around it:\n{}", timeline_around(&reports, at));
            }
        }
    }
    let last = player.last().expect("a report");
    let stalls = holds.iter().filter(|h| **h > 0.5).count();
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let (on_screen, failbacks, active) = (sorted(on_screen), sorted(failbacks), sorted(active));
    println!(
        "\n{kills} kills of an RTMP primary with an {} backup standing by (hls.js, low latency):",
        via.to_uppercase()
    );
    println!(
        "  primary's last picture → backup's first: median {:.2} s, p95 {:.2} s (target ≤ 1.0 s)",
        percentile(&on_screen, 50.0),
        percentile(&on_screen, 95.0)
    );
    println!(
        "  primary back → its picture again:       median {:.2} s, p95 {:.2} s",
        percentile(&failbacks, 50.0),
        percentile(&failbacks, 95.0)
    );
    println!(
        "  kill → input.active backup:             median {:.3} s, p95 {:.3} s",
        percentile(&active, 50.0),
        percentile(&active, 95.0)
    );
    println!(
        "  stalls over 0.5 s: {stalls} (target 0); longest hold {:.2} s; fatal errors {}",
        holds.iter().copied().fold(0.0, f64::max),
        last.fatal_errors().len()
    );
}

/// The server's CPU (% of a core) over `window`.
async fn cpu_over(pid: u32, window: Duration) -> f64 {
    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    tokio::time::sleep(window).await;
    (cpu_seconds(pid) - cpu0) / t0.elapsed().as_secs_f64() * 100.0
}

async fn standby_cpu(sluice: &Sluice, via: &str, streams: usize, window: Duration) {
    let pid = sluice.proc.0.id();
    let file = sample_file();
    let mut created = Vec::new();
    for i in 0..streams {
        let body = json!({"name": format!("cpu-{i}"), "qualities": ["1080p"], "vodEnabled": false});
        created.push(sluice.create_stream(body).await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = cpu_over(pid, window).await;
    // The pushes over the backups' protocol (`BENCH_PRIMARY` to choose another): what standing
    // by costs beside what feeding costs on the same wire.
    let primary_via = std::env::var("BENCH_PRIMARY").unwrap_or_else(|_| via.to_string());
    let primaries: Vec<_> = created
        .iter()
        .map(|c| match primary_via.as_str() {
            "srt" => push(&file, c["srtUrl"].as_str().expect("srtUrl")),
            _ => push(&file, c["ingestUrl"].as_str().expect("ingestUrl")),
        })
        .collect();
    let live = settle(Duration::from_secs(60), async || {
        let mut all = true;
        for c in &created {
            all &= active_input(sluice, c["_id"].as_str().unwrap_or_default()).await == "primary";
        }
        all
    })
    .await;
    assert!(live, "every primary live");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pushing = cpu_over(pid, window).await;
    let backups: Vec<_> = created
        .iter()
        .map(|c| match via {
            "srt" => push(&file, c["backup"]["srtUrl"].as_str().expect("srtUrl")),
            _ => push(&file, c["backup"]["ingestUrl"].as_str().expect("backup")),
        })
        .collect();
    let standing = settle(Duration::from_secs(60), async || {
        let mut all = true;
        for c in &created {
            all &= standing_by(sluice, c["_id"].as_str().unwrap_or_default()).await == json!(["backup"]);
        }
        all
    })
    .await;
    assert!(standing, "every backup standing by");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let with_backups = cpu_over(pid, window).await;
    drop(backups);
    drop(primaries);
    let push_each = (pushing - idle) / streams as f64;
    let standby_each = (with_backups - pushing) / streams as f64;
    println!("\nStandby CPU, {streams} streams, {} s each (% of a core, server):", window.as_secs());
    println!(
        "  idle {idle:.1}; {streams} {} passthrough pushes {pushing:.1}; and {streams} {} backups standing by {with_backups:.1}",
        primary_via.to_uppercase(),
        via.to_uppercase()
    );
    println!(
        "  per stream: passthrough push {push_each:.2}, standby backup {standby_each:.2}: {:.2}× (target ≤ 1.2×)",
        standby_each / push_each
    );
}

fn main() {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let via = std::env::var("BENCH_BACKUP").unwrap_or_else(|_| "rtmp".into());
    let skip = std::env::var("BENCH_SKIP").unwrap_or_default();
    let (kills, streams) = (env_or("BENCH_KILLS", 20usize), env_or("BENCH_STREAMS", 4usize));
    let window = Duration::from_secs(env_or("BENCH_WINDOW", 20u64));
    rt.block_on(async {
        if skip != "cpu" {
            let sluice = Sluice::start(&[]).await;
            standby_cpu(&sluice, &via, streams, window).await;
        }
        if skip != "switch" {
            // The server's log, for what it did at a switch that stalled.
            let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("continuity-switch.log");
            eprintln!("sluice's log: {}", log.display());
            let sluice = Sluice::start_logged(&[("RUST_LOG", "warn,sluice=info".into())], log).await;
            switches(&sluice, &via, kills).await;
        }
    });
}
