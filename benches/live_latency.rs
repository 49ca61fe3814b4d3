//! `cargo bench --bench live_latency`: how soon live media can be played, beside nginx's rtmp
//! module producing HLS from the same push in the same run.
//!
//! One 720p30 2.5 Mbit/s H.264+AAC push (`ffmpeg -re -c copy` of a file with a keyframe every
//! 2 s) goes to a release `sluice serve` (stream with the default 720p+480p ladder) and, at the
//! same time, to nginx (`hls_fragment 1s`, its shortest useful setting). For each part duration
//! in `BENCH_PART_MS` (default "200,333"; segments stay 2 s):
//!
//! - **ingest → part available**: a client issues blocking reloads (`_HLS_msn`/`_HLS_part`) for
//!   each next part of the 720p rendition; the latency of a part is the moment its playlist
//!   answer arrives minus the wall-clock time its last frame reached ingest (its segment's
//!   `EXT-X-PROGRAM-DATE-TIME`, which Sluice sets to the arrival time of the segment's first
//!   frame, plus the parts before it and its own duration). Median and p95 over the window.
//! - **glass to glass, by hls.js**: hls.js in headless Chromium (low-latency mode) plays the
//!   master playlist, `BENCH_RUNS` times (default 10), each a fresh page joining the running
//!   stream; `Date.now() - hls.playingDate` is the time from a frame's arrival at ingest to its
//!   display, and `hls.latency` is hls.js's own live-edge distance. Printed: the median of the
//!   runs' medians (and their range), and the `waiting` events after the first `playing` of
//!   every run (stalls). hls.js may play at up to 1.5x to return to its target latency
//!   (`maxLiveSyncPlaybackRate`), so a stall while joining does not decide the figure; its
//!   `targetLatency` (three PART-TARGETs for LL-HLS) is printed beside it. The page starts
//!   playing once hls.js has buffered to the live edge, at hls.js's live sync position as it
//!   stands then (the test player's `startLive=1`, as Sluice's demo page does: docs/live-hls.md,
//!   "Starting at the edge"); `BENCH_START=hlsjs` plays from where hls.js placed its start
//!   instead, when the first playlist arrived.
//!
//! nginx: a fragment is available when its `.m3u8` lists it; its latency is that moment minus
//! when its last frame was pushed (the push's start plus the fragment's end in media time). The
//! same hls.js plays nginx's playlist for its `hls.latency` (nginx writes no PROGRAM-DATE-TIME).
//! Knobs: `BENCH_PART_MS`, `BENCH_WINDOW` (seconds of each measurement, default 15), `BENCH_RUNS`,
//! `BENCH_TIMELINE` (set: print each join's stamped start-up, what hls.js loaded and when),
//! `BENCH_CLIP` (an FLV file to push instead of the sample, such as one without B-frames),
//! `BENCH_PLAYER` (more of the test player's query options, such as `switchTo=source&log=1`).

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::json;

use common::{push, sample_file, settle, Nginx, Sluice};
use support::player::{Player, Report};

/// A part as a playlist lists it: (msn, index in its segment) → wall-clock end of its media.
fn part_ends(playlist: &str) -> BTreeMap<(u64, u64), DateTime<Utc>> {
    let mut msn: u64 = playlist
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let (mut index, mut clock) = (0u64, None::<DateTime<Utc>>);
    let mut out = BTreeMap::new();
    for line in playlist.lines() {
        if let Some(pdt) = line.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:") {
            clock = DateTime::parse_from_rfc3339(pdt).ok().map(|d| d.with_timezone(&Utc));
        } else if let Some(attrs) = line.strip_prefix("#EXT-X-PART:DURATION=") {
            let d: f64 = attrs.split(',').next().and_then(|d| d.parse().ok()).unwrap_or(0.0);
            if let Some(c) = clock.as_mut() {
                *c += chrono::Duration::microseconds((d * 1e6) as i64);
                out.insert((msn, index), *c);
            }
            index += 1;
        } else if line.starts_with("#EXTINF:") {
            msn += 1;
            index = 0;
            clock = None;
        }
    }
    out
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// Blocking reloads for each next part of `url` until `until`; latencies in seconds.
async fn part_latencies(url: &str, until: Instant) -> Vec<f64> {
    let client = reqwest::Client::new();
    let text = client.get(url).send().await.expect("playlist").text().await.expect("text");
    let mut next = part_ends(&text).keys().next_back().map(|(m, i)| (*m, i + 1)).expect("parts listed");
    let mut out = Vec::new();
    while Instant::now() < until {
        let resp = client.get(format!("{url}?_HLS_msn={}&_HLS_part={}", next.0, next.1)).send().await;
        let arrived = Utc::now();
        let Ok(resp) = resp else { continue };
        let text = resp.text().await.unwrap_or_default();
        let ends = part_ends(&text);
        // The part asked for, or the first of the next segment when the asked one never came.
        let Some((&key, &end)) = ends.range(next..).next() else { continue };
        out.push((arrived - end).num_microseconds().unwrap_or(0) as f64 / 1e6);
        next = (key.0, key.1 + 1);
    }
    out
}

/// hls.js plays `url` for `window`; the reports of the window.
async fn play(url: &str, window: Duration) -> Vec<Report> {
    let start = if start_at_edge() { "startLive=1&" } else { "" };
    let more = format!("{start}{}", std::env::var("BENCH_PLAYER").unwrap_or_default());
    let player = Player::start_catching_up_with(url, &more).await;
    player
        .wait_until("hls.js playing", Duration::from_secs(60), |r| {
            r.last().is_some_and(|x| x.current_time > 2.0 && x.latency.is_some() && !x.paused)
        })
        .await;
    let from = player.reports().len();
    tokio::time::sleep(window).await;
    player.reports()[from..].to_vec()
}

/// Whether the page starts at the edge (`startLive=1`, unless `BENCH_START=hlsjs`).
fn start_at_edge() -> bool {
    std::env::var("BENCH_START").map_or(true, |v| v != "hlsjs")
}

/// `waiting` events after the video first played: stalls.
fn stalls(reports: &[Report]) -> usize {
    reports.last().map_or(0, |last| {
        last.events
            .iter()
            .skip_while(|e| !e.starts_with("video playing"))
            .filter(|e| e.starts_with("video waiting"))
            .count()
    })
}

/// nginx: (seconds from push start to each new fragment's listing, minus its media end).
async fn nginx_latencies(playlist: &std::path::Path, pushed_at: Instant, until: Instant) -> Vec<f64> {
    let mut durations: BTreeMap<u64, f64> = BTreeMap::new();
    let mut out = Vec::new();
    while Instant::now() < until {
        if let Ok(text) = std::fs::read_to_string(playlist) {
            let mut seq: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:"))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            for line in text.lines() {
                if let Some(d) = line.strip_prefix("#EXTINF:") {
                    let d: f64 = d.trim_end_matches(',').parse().unwrap_or(0.0);
                    if let std::collections::btree_map::Entry::Vacant(e) = durations.entry(seq) {
                        e.insert(d);
                        // Media end of this fragment: everything before it plus itself (the
                        // playlist starts at sequence 0 and nginx never skips numbers).
                        let end: f64 = durations.range(..=seq).map(|(_, d)| d).sum();
                        if seq > 0 && durations.len() as u64 == seq + 1 {
                            out.push(pushed_at.elapsed().as_secs_f64() - end);
                        }
                    }
                    seq += 1;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    out
}

fn median_of(reports: &[Report], f: impl Fn(&Report) -> Option<f64>) -> f64 {
    let v = sorted(reports.iter().filter_map(f).collect());
    percentile(&v, 0.5)
}

fn main() {
    let parts: Vec<u32> = std::env::var("BENCH_PART_MS")
        .unwrap_or_else(|_| "200,333".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let window =
        Duration::from_secs(std::env::var("BENCH_WINDOW").ok().and_then(|s| s.parse().ok()).unwrap_or(15));
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(10).max(1);
    let file = std::env::var_os("BENCH_CLIP").map_or_else(sample_file, std::path::PathBuf::from);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    println!(
        "live latency: one 720p30 2.5 Mbit/s push (ffmpeg -re -c copy), 720p+480p ladder, 2-s segments, {runs} hls.js runs of {} s each ({}), release build, load1 {:.2}",
        window.as_secs(),
        if start_at_edge() { "starting at the edge" } else { "starting where hls.js placed its start" },
        common::load1()
    );
    println!(
        "  part   | ingest->part available  median     p95 | hls.js ingest->screen: median of run medians (min-max)  p95 | stalls | hls.latency (target) | load1"
    );
    let mut sluice_rows = Vec::new();
    for &part_ms in &parts {
        let row = rt.block_on(async {
            let sluice = Sluice::start(&[("SLUICE_LLHLS_PART_MS", part_ms.to_string())]).await;
            let stream = sluice.create_stream(json!({"name": "latency", "qualities": ["720p", "480p"]})).await;
            let master = stream["playbackUrls"]["hls"].as_str().expect("hls url").to_string();
            let _pusher = push(&file, stream["ingestUrl"].as_str().expect("ingestUrl"));
            let client = reqwest::Client::new();
            let deadline = Instant::now() + Duration::from_secs(30);
            let text = loop {
                let r = client.get(&master).send().await;
                if let Ok(r) = r {
                    if r.status() == 200 {
                        break r.text().await.expect("master");
                    }
                }
                assert!(Instant::now() < deadline, "no master playlist");
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            let rendition = text.lines().find(|l| l.split('?').next().is_some_and(|p| p.ends_with("/720p/index.m3u8"))).expect("720p variant");
            // Without its playback session (`vs=`): blocking reloads add their own query.
            let rendition = rendition.split('?').next().unwrap_or(rendition);
            let media = format!("{}{rendition}", master.trim_end_matches("master.m3u8"));
            // Let the pipeline settle, then measure parts, then hls.js joins `runs` times.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let lat = sorted(part_latencies(&media, Instant::now() + window).await);
            let (mut run_medians, mut all, mut latencies, mut targets, mut stalled) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), 0);
            for run in 1..=runs {
                let reports = play(&master, window).await;
                let screen: Vec<f64> =
                    reports.iter().filter_map(|r| r.playing_date.map(|d| (r.t - d) / 1000.0)).collect();
                let median = percentile(&sorted(screen.clone()), 0.5);
                let n = stalls(&reports);
                stalled += n;
                eprintln!(
                    "    {part_ms} ms run {run}: ingest->screen {median:.3} s, hls.latency {:.3} s (target {:.3} s), {n} stalls",
                    median_of(&reports, |r| r.latency),
                    median_of(&reports, |r| r.target_latency)
                );
                if std::env::var_os("BENCH_TIMELINE").is_some() {
                    for line in reports.last().map(|r| r.timeline.as_slice()).unwrap_or_default() {
                        eprintln!("      {line}");
                    }
                }
                run_medians.push(median);
                all.extend(screen);
                latencies.push(median_of(&reports, |r| r.latency));
                targets.push(median_of(&reports, |r| r.target_latency));
            }
            let run_medians = sorted(run_medians);
            let all = sorted(all);
            let g2g = percentile(&run_medians, 0.5);
            let hls_latency = percentile(&sorted(latencies), 0.5);
            println!(
                "  {part_ms:>4} ms | {:>3} parts        {:>6.3} s {:>6.3} s | {:>6.3} s ({:.3}-{:.3})                    {:>6.3} s | {stalled:>6} | {:>6.3} s ({:.3} s)     | {:.2}",
                lat.len(),
                percentile(&lat, 0.5),
                percentile(&lat, 0.95),
                g2g,
                run_medians.first().copied().unwrap_or(f64::NAN),
                run_medians.last().copied().unwrap_or(f64::NAN),
                percentile(&all, 0.95),
                hls_latency,
                percentile(&sorted(targets), 0.5),
                common::load1()
            );
            drop(sluice);
            (part_ms, percentile(&lat, 0.5), g2g, hls_latency)
        });
        sluice_rows.push(row);
    }

    // nginx-rtmp HLS from the same push, 1-s fragments.
    let dir = tempfile::tempdir().expect("tempdir");
    let (frag, g2g) = rt.block_on(async {
        let nginx = Nginx::start(dir.path(), Some(1));
        let pushed_at = Instant::now();
        let _pusher = push(&file, &format!("rtmp://127.0.0.1:{}/live/latency", nginx.rtmp));
        let until = Instant::now() + window + Duration::from_secs(10);
        let url = format!("http://127.0.0.1:{}/hls/latency.m3u8", nginx.http);
        let playlist = nginx.hls_dir.join("latency.m3u8");
        // hls.js starts a live playlist three fragments from its end: start it once nginx lists
        // that many.
        let player = async {
            let listed = settle(Duration::from_secs(30), async || {
                let text = std::fs::read_to_string(&playlist).unwrap_or_default();
                text.lines().filter(|l| l.starts_with("#EXTINF")).count() >= 3
            })
            .await;
            assert!(listed, "nginx listed no three fragments in 30 s");
            play(&url, window).await
        };
        let (frag, reports) = tokio::join!(nginx_latencies(&playlist, pushed_at, until), player);
        let frag = sorted(frag);
        println!(
            "  nginx-rtmp HLS (1-s fragments): ingest->fragment listed median {:.3} s, p95 {:.3} s ({} fragments); hls.latency {:.3} s",
            percentile(&frag, 0.5),
            percentile(&frag, 0.95),
            frag.len(),
            median_of(&reports, |r| r.latency)
        );
        (percentile(&frag, 0.5), median_of(&reports, |r| r.latency))
    });
    for (part_ms, avail, screen, hls_latency) in sluice_rows {
        println!(
            "  ratio at {part_ms} ms parts: availability {:.2}x nginx's fragment, hls.js latency {:.2}x nginx's (ingest->screen {:.3} s)",
            avail / frag,
            hls_latency / g2g,
            screen
        );
    }
}
