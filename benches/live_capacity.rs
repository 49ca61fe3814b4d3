//! `cargo bench --bench live_capacity`: how many concurrent live pushes one machine turns into
//! LL-HLS **without dropping a part**, for two kinds of stream, beside nginx's rtmp module
//! (Debian's libnginx-mod-rtmp) producing HLS from the same pushes and ffmpeg encoding the same
//! ladder for the same pushes, in the same run.
//!
//! Every push is one pre-encoded 720p30 2.5 Mbit/s H.264+AAC FLV (keyframe every 2 s), sent in
//! real time by `ffmpeg -re -stream_loop -1 -c copy`, so the pushers cost little CPU. Kinds:
//!
//! - **ladder**: streams with `"qualities": ["720p","480p"]`: Sluice decodes each push once and
//!   encodes 720p and 480p with x264, and passes the source video and the AAC audio through
//!   (renditions `720p`, `480p`, `source`, `audio`);
//! - **passthrough**: streams with `"qualities": ["1080p"]`, above the source height, so left
//!   out: only `source` and `audio` (remux into CMAF parts, no transcode);
//! - **nginx-rtmp HLS**: `application live { live on; record off; hls on; hls_fragment 2s;
//!   hls_playlist_length 10s; }`, two workers. It only remuxes, so it compares with passthrough.
//! - **ffmpeg ladder**: the peer of the ladder: each push goes to its own ffmpeg listening for
//!   RTMP, which encodes what a ladder stream encodes (720p 2.8 Mbit/s and 480p 1.4 Mbit/s,
//!   x264 `veryfast` `zerolatency`, 1-s VBV, a keyframe every 8 frames as Sluice puts one at
//!   every 200-ms part, of 7 or 8 frames at 30 fps) and copies the source
//!   video and the audio into HLS. A step passes like an nginx step, on the 720p and 480p
//!   playlists of every push. Ladder and ffmpeg steps alternate.
//!
//! Each step of a ramp pushes N streams at once (fresh streams each step). The warm-up lasts
//! until 6 s after the pushes started and every master playlist has answered; the master is read
//! again then, and a measurement window of W seconds runs. (A master whose first answer lacked
//! renditions it lists by then is noted under the step, not failed.) A Sluice step **passes**
//! when every push passes, and a push passes when its ffmpeg is still running at the end and, for
//! every rendition the ladder promises (exactly those must be in the master):
//!
//! 1. **no media missing**: its media playlist is polled about every second; the parts it lists
//!    (`#EXT-X-PART`, numbered `p<n>.m4s`, +1 per part) with a number above the newest part at
//!    the window's first poll are published during the window. The sum of their `DURATION`s
//!    must be at least 0.95 × the wall time between the first and the last poll. A number never
//!    seen (it scrolled out between two polls) still counts, at the mean part duration, and is
//!    reported as `unseen`;
//! 2. **fresh live edge**: at the last poll, the newest `EXT-X-PROGRAM-DATE-TIME` plus the media
//!    listed after it (its segment's `EXTINF`, or the parts of the open segment) is at most 4 s
//!    behind the wall clock. Sluice stamps PROGRAM-DATE-TIME from the wall-clock time of the
//!    push's first frame plus the media timestamp, so a pipeline that falls behind real time
//!    (a growing queue, even one that later leaks frames) shows here;
//! 3. **no frames missing** (video renditions): the `moof` of every new part is read (an HTTP
//!    range of its first 8 KiB, so reading costs the server little) and its `trun` sample
//!    counts summed; they must be at least 0.95 × 30 fps × those parts' durations. This catches
//!    frames dropped by a leaky queue, which keep the media time of (1) whole. (The sample file
//!    itself loses about 2 frames of timestamps at each 20-s loop of `-stream_loop`: 0.4 %.)
//! 4. its playlist has no `#EXT-X-ENDLIST` and answers the last poll.
//!
//! An nginx step passes when, for every push, its ffmpeg is running at the end, and its
//! `<name>.m3u8` gained fragments (`#EXT-X-MEDIA-SEQUENCE` + position, `#EXTINF` durations)
//! whose total is at least 0.95 × the time between the file modification times of the newest
//! fragment at the first and at the last poll, and the newest fragment was written at most 4 s
//! before the last poll. (nginx writes no PROGRAM-DATE-TIME; its fragments are 2 s, so the edge
//! test is coarser than Sluice's.)
//!
//! Each ramp stops at its first failing step. Reported per step: pushes that passed, the worst
//! media ratio, the worst edge lag (nginx: age of the newest fragment), the most the lag grew
//! from the window's first poll to its last (`drift`, Sluice only, not a criterion: a pipeline
//! that keeps up stays within a part of +0 s; one that falls behind real time grows by
//! (1 − media ratio) × W, so a step can pass near saturation yet not hold for long: read it
//! together with the CPU columns), the worst frame ratio,
//! unseen parts, warnings the server logged during the step, the server's CPU over the window
//! (from /proc: `sluice serve` with its GStreamer threads; nginx master + workers), the client
//! (the ffmpeg pushers plus this bench's poller), the whole machine (all cores, from
//! /proc/stat) and the 1-min load average at the end. CPU figures are % of one core, so a
//! 2-core machine is 200 %. Other work on the machine counts against the servers: look at
//! `machine` and `load1`, and run it on an idle machine.
//!
//! Before the ramps, **quality** (`live_capacity/quality.rs`): the sample pushed once to a
//! Sluice ladder stream and to ffmpeg's ladder side by side, each rung's SSIM against the sample
//! scaled to the rung, and the CPU each used over the push (`BENCH_QUALITY=0` leaves it out).
//!
//! Knobs: `BENCH_LADDER_STEPS` (default "1,2,3,4,5,6"), `BENCH_FFMPEG_STEPS` (default: the
//! ladder steps), `BENCH_PASS_STEPS` (default "4,8,16,32,48,64"),
//! `BENCH_NGINX_STEPS` (default: the passthrough steps), `BENCH_WINDOW` seconds (default 20).
//!
//! - `BENCH_IDLE=1`: the servers' own cost with nothing polling them: nginx on one worker, and
//!   each Sluice rendition's playlist read once at the window's start and once at its end (no
//!   part is read, so the frame check is not made; parts that scrolled out between the two
//!   reads count at the mean part duration, as `unseen`). Compare passthrough with nginx here.
//! - `BENCH_BASE_BIN=<path>`: also run the ladder and passthrough ramps on that `sluice` binary
//!   (a release build of the base commit: `git worktree add /tmp/base <rev> && cargo build
//!   --release --manifest-path /tmp/base/Cargo.toml`), its steps alternating with this build's
//!   and the peers', and print this build's CPU per push against the base's.
//!
//! Logs: `benches/out/live_capacity-sluice.log` (`-base.log`), `benches/out/live_capacity-nginx.log`.

#[path = "common/mod.rs"]
mod common;
#[path = "live_capacity/quality.rs"]
mod quality;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, Utc};

use common::{
    connections_to, cpu_seconds, free_port, listening, out_dir, part_samples, push, sample_file, settle,
    Nginx, NginxHls, Proc, Sluice,
};

const WARMUP: Duration = Duration::from_secs(6);
const POLL: Duration = Duration::from_secs(1);

/// `BENCH_IDLE`: nothing polls the servers during the window.
static IDLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

fn idle() -> bool {
    IDLE.get().copied().unwrap_or(false)
}
/// How long the master playlists may take to answer after the pushes start.
const MASTER_DEADLINE: Duration = Duration::from_secs(25);
/// Media published per wall time, and frames per expected frame, at least.
const MIN_RATIO: f64 = 0.95;
/// Live edge at most this far behind the wall clock (seconds).
const MAX_LAG: f64 = 4.0;
/// The sample's frame rate; every rendition keeps it.
const FPS: f64 = 30.0;
const LADDER: &[&str] = &["720p", "480p", "source", "audio"];
const PASSTHROUGH: &[&str] = &["source", "audio"];

fn env_steps(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|n| *n > 0)
        .collect()
}

/// Busy and total CPU seconds of the whole machine, all cores (/proc/stat).
fn machine_cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = stat.lines().next().unwrap_or("");
    let v: Vec<f64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: f64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    ((total - idle) / 100.0, total / 100.0)
}

fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Lines of a log file from byte `from` on that are warnings or errors.
fn log_problems(path: &Path, from: u64) -> (usize, Option<String>) {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(text.get(from as usize..).unwrap_or(&[]));
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.contains("WARN") || l.contains("ERROR") || l.contains("[warn]") || l.contains("[error]")
        })
        .collect();
    (bad.len(), bad.first().map(|l| l.chars().take(160).collect()))
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Playlists

/// What one poll of a Sluice media playlist shows.
#[derive(Default)]
struct MediaPlaylist {
    /// (part number, duration)
    parts: Vec<(u64, f64)>,
    ended: bool,
    /// The newest PROGRAM-DATE-TIME plus the media listed after it.
    edge: Option<DateTime<Utc>>,
}

fn attr<'a>(attrs: &'a str, key: &str) -> Option<&'a str> {
    attrs.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')).map(|v| v.trim_matches('"'))
}

fn parse_media(text: &str) -> MediaPlaylist {
    let mut pl = MediaPlaylist::default();
    let (mut pdt, mut segments_after, mut open_parts) = (None::<DateTime<Utc>>, 0.0, 0.0);
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:") {
            pdt = DateTime::parse_from_rfc3339(v.trim()).ok().map(|d| d.with_timezone(&Utc));
            (segments_after, open_parts) = (0.0, 0.0);
        } else if let Some(attrs) = line.strip_prefix("#EXT-X-PART:") {
            let duration: f64 = attr(attrs, "DURATION").and_then(|d| d.parse().ok()).unwrap_or(0.0);
            let number = attr(attrs, "URI")
                .and_then(|u| u.rsplit('/').next())
                .and_then(|u| u.strip_prefix('p')?.strip_suffix(".m4s")?.parse().ok());
            if let Some(n) = number {
                pl.parts.push((n, duration));
            }
            open_parts += duration;
        } else if let Some(v) = line.strip_prefix("#EXTINF:") {
            segments_after += v.split(',').next().and_then(|d| d.trim().parse::<f64>().ok()).unwrap_or(0.0);
            open_parts = 0.0;
        } else if line.trim() == "#EXT-X-ENDLIST" {
            pl.ended = true;
        }
    }
    pl.edge = pdt.map(|p| p + chrono::Duration::microseconds(((segments_after + open_parts) * 1e6) as i64));
    pl
}

/// The renditions a master playlist lists: (name, URI relative to the master).
fn parse_master(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        let uri = if let Some(attrs) = line.strip_prefix("#EXT-X-MEDIA:") {
            attr(attrs, "URI").map(str::to_string)
        } else if !line.is_empty() && !line.starts_with('#') {
            Some(line.to_string())
        } else {
            None
        };
        if let Some(uri) = uri {
            let name = uri.rsplit('/').nth(1).unwrap_or("").to_string();
            out.push((name, uri));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Sluice

/// What one rendition of one push did over the window.
struct Rendition {
    name: String,
    media_ratio: f64,
    lag: Option<f64>,
    /// How much the lag grew over the window (falling behind real time).
    drift: Option<f64>,
    frames_ratio: Option<f64>,
    unseen: u64,
    problem: Option<String>,
}

impl Rendition {
    fn failed(name: &str, problem: String) -> Rendition {
        Rendition {
            name: name.into(),
            media_ratio: 0.0,
            lag: None,
            drift: None,
            frames_ratio: None,
            unseen: 0,
            problem: Some(problem),
        }
    }

    /// Why it fails the criteria, if it does.
    fn verdict(&self) -> Option<String> {
        if let Some(p) = &self.problem {
            return Some(format!("{}: {p}", self.name));
        }
        let mut why = Vec::new();
        if self.media_ratio < MIN_RATIO {
            why.push(format!("media {:.2}", self.media_ratio));
        }
        match self.lag {
            Some(l) if l <= MAX_LAG => {}
            Some(l) => why.push(format!("lag {l:.1} s")),
            None => why.push("no PROGRAM-DATE-TIME".into()),
        }
        if let Some(f) = self.frames_ratio.filter(|f| *f < MIN_RATIO) {
            why.push(format!("frames {f:.2}"));
        }
        (!why.is_empty()).then(|| format!("{}: {}", self.name, why.join(", ")))
    }
}

fn seconds(d: chrono::TimeDelta) -> f64 {
    d.num_milliseconds() as f64 / 1000.0
}

async fn get_text(client: &reqwest::Client, url: &str) -> Result<String, String> {
    let r = client.get(url).send().await.map_err(|e| format!("GET failed: {e}"))?;
    let status = r.status();
    let text = r.text().await.map_err(|e| format!("body: {e}"))?;
    if status.is_success() {
        Ok(text)
    } else {
        Err(format!("HTTP {status}: {}", text.trim()))
    }
}

/// A master playlist's renditions (name, absolute URL), retried until `deadline`.
async fn fetch_master(
    client: reqwest::Client,
    url: String,
    deadline: Instant,
) -> Result<Vec<(String, String)>, String> {
    let mut last = String::new();
    while Instant::now() < deadline {
        match get_text(&client, &url).await {
            Ok(text) => {
                let base = url.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
                return Ok(parse_master(&text)
                    .into_iter()
                    .map(|(name, uri)| (name, format!("{base}/{uri}")))
                    .collect());
            }
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("master: {last}"))
}

/// Polls one media playlist from now until `end` (see the criteria in the file's comment).
async fn track(client: reqwest::Client, url: String, name: String, end: Instant) -> Rendition {
    let dir = url.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default();
    let video = name != "audio";
    let first = match get_text(&client, &url).await {
        Ok(t) => parse_media(&t),
        Err(e) => return Rendition::failed(&name, format!("first poll: {e}")),
    };
    let (t_first, lag_first) = (Instant::now(), first.edge.map(|e| seconds(Utc::now() - e)));
    let Some(base) = first.parts.iter().map(|p| p.0).max() else {
        return Rendition::failed(&name, "no parts at the start of the window".into());
    };
    let mut seen: BTreeMap<u64, f64> = BTreeMap::new();
    let (mut frames, mut expected_frames, mut counted) = (0u64, 0.0, base);
    let mut next = t_first;
    let mut last: Option<(MediaPlaylist, Instant, DateTime<Utc>)> = None;
    let mut last_error: Option<String>;
    loop {
        // Idle: one more read, at the window's end.
        next = if idle() { end } else { next + POLL };
        let done = next >= end;
        tokio::time::sleep_until(next.min(end).into()).await;
        match get_text(&client, &url).await {
            Ok(text) => {
                let (at, wall) = (Instant::now(), Utc::now());
                let pl = parse_media(&text);
                for &(n, d) in pl.parts.iter().filter(|p| p.0 > base) {
                    seen.insert(n, d);
                }
                if video && !idle() {
                    let new: Vec<(u64, f64)> = pl.parts.iter().copied().filter(|p| p.0 > counted).collect();
                    for (n, d) in new {
                        counted = n;
                        if let Some(count) = part_samples(&client, &format!("{dir}/p{n}.m4s")).await {
                            frames += count;
                            expected_frames += d * FPS;
                        }
                    }
                }
                last = Some((pl, at, wall));
                last_error = None;
            }
            Err(e) => last_error = Some(e),
        }
        if done {
            break;
        }
    }
    let Some((pl, at, wall)) = last else {
        return Rendition::failed(&name, format!("no poll answered: {}", last_error.unwrap_or_default()));
    };
    let newest = seen.keys().next_back().copied().unwrap_or(base);
    let mean = if seen.is_empty() { 0.0 } else { seen.values().sum::<f64>() / seen.len() as f64 };
    let unseen = (newest - base).saturating_sub(seen.len() as u64);
    let media = seen.values().sum::<f64>() + unseen as f64 * mean;
    let elapsed = at.duration_since(t_first).as_secs_f64();
    let problem = if let Some(e) = last_error {
        Some(format!("last poll: {e}"))
    } else if pl.ended {
        Some("playlist ended (EXT-X-ENDLIST)".to_string())
    } else {
        None
    };
    let lag = pl.edge.map(|e| seconds(wall - e));
    Rendition {
        name,
        media_ratio: if elapsed > 0.0 { media / elapsed } else { 0.0 },
        lag,
        drift: lag.zip(lag_first).map(|(end, start)| end - start),
        frames_ratio: (expected_frames > 0.0).then(|| frames as f64 / expected_frames),
        unseen,
        problem,
    }
}

/// Creates `n` streams on `sluice` (numbering their names on from `created`); returns
/// (ingestUrl, master playlist URL) of each.
async fn create_streams(
    sluice: &Sluice,
    created: &mut usize,
    n: usize,
    qualities: &[&str],
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for _ in 0..n {
        *created += 1;
        let s = sluice
            .create_stream(serde_json::json!({"name": format!("cap-{created}"), "qualities": qualities}))
            .await;
        let ingest = s["ingestUrl"].as_str().unwrap_or_else(|| panic!("ingestUrl in {s}")).to_string();
        let hls = s["playbackUrls"]["hls"].as_str().map(str::to_string).unwrap_or_else(|| {
            format!(
                "http://127.0.0.1:{}/play/live/{}/master.m3u8",
                sluice.http,
                s["id"].as_str().unwrap_or("")
            )
        });
        out.push((ingest, hls));
    }
    out
}

/// One step's figures, for either server.
struct Step {
    n: usize,
    passed: usize,
    media_min: f64,
    lag_max: f64,
    drift_max: Option<f64>,
    frames_min: Option<f64>,
    unseen: u64,
    warnings: usize,
    server_cpu: f64,
    client_cpu: f64,
    machine_cpu: f64,
    load1: f64,
    /// The first reasons pushes failed.
    why: Vec<String>,
}

impl Step {
    /// A step before its pushes are judged: `cpu` is (server, client, machine) CPU.
    fn new(n: usize, (server_cpu, client_cpu, machine_cpu): (f64, f64, f64), load1: f64) -> Step {
        Step {
            n,
            passed: 0,
            media_min: f64::INFINITY,
            lag_max: 0.0,
            drift_max: None,
            frames_min: None,
            unseen: 0,
            warnings: 0,
            server_cpu,
            client_cpu,
            machine_cpu,
            load1,
            why: Vec::new(),
        }
    }

    fn not_run(n: usize, why: String) -> Step {
        Step { why: vec![why], ..Step::new(n, (f64::NAN, f64::NAN, f64::NAN), load1()) }
    }

    fn ok(&self) -> bool {
        self.passed == self.n
    }
}

/// CPU meters over the window: the server's pids, the pushers and this process, the machine.
struct Meter {
    server: Vec<u32>,
    pushers: Vec<u32>,
    start: (f64, f64, f64, (f64, f64)),
    t0: Instant,
}

impl Meter {
    fn read(server: &[u32], pushers: &[u32]) -> (f64, f64, f64, (f64, f64)) {
        let sum = |pids: &[u32]| pids.iter().map(|p| cpu_seconds(*p)).sum::<f64>();
        (sum(server), sum(pushers), cpu_seconds(std::process::id()), machine_cpu())
    }

    fn start(server: Vec<u32>, pushers: Vec<u32>) -> Meter {
        let start = Meter::read(&server, &pushers);
        Meter { server, pushers, start, t0: Instant::now() }
    }

    /// (server, client, machine) CPU in % of one core.
    fn stop(&self) -> (f64, f64, f64) {
        let (s, p, me, (busy, total)) = Meter::read(&self.server, &self.pushers);
        let secs = self.t0.elapsed().as_secs_f64();
        let cores = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
        let machine = if total > self.start.3 .1 {
            (busy - self.start.3 .0) / (total - self.start.3 .1) * cores * 100.0
        } else {
            f64::NAN
        };
        ((s - self.start.0) / secs * 100.0, (p - self.start.1 + me - self.start.2) / secs * 100.0, machine)
    }
}

async fn sluice_step(
    sluice: &mut Sluice,
    created: &mut usize,
    file: &Path,
    n: usize,
    qualities: &[&str],
    want: &'static [&'static str],
    window: Duration,
) -> Step {
    let log = sluice.log.clone().expect("sluice logs to a file");
    let log_from = file_len(&log);
    if let Some(gone) = sluice.proc.exited("sluice serve") {
        return Step::not_run(n, gone);
    }
    let streams = create_streams(sluice, created, n, qualities).await;
    let started = Instant::now();
    let mut pushers: Vec<Proc> = streams.iter().map(|(ingest, _)| push(file, ingest)).collect();
    let pusher_pids: Vec<u32> = pushers.iter().map(|p| p.0.id()).collect();

    // Every master playlist as it first answers, and again once the warm-up is over: the
    // renditions it then lists are tracked. (A viewer who starts early keeps the first.)
    let fetch_all = |deadline: Instant| {
        futures_util::future::join_all(
            streams.iter().map(|(_, master)| fetch_master(sluice.client.clone(), master.clone(), deadline)),
        )
    };
    let first = fetch_all(started + MASTER_DEADLINE).await;
    tokio::time::sleep_until((started + WARMUP).max(Instant::now()).into()).await;
    let masters = fetch_all(Instant::now() + Duration::from_secs(10)).await;
    let mut late: Vec<String> = Vec::new();
    for (i, (a, b)) in first.iter().zip(&masters).enumerate() {
        if let (Ok(a), Ok(b)) = (a, b) {
            let missing: Vec<&str> = want
                .iter()
                .copied()
                .filter(|w| !a.iter().any(|(l, _)| l == w) && b.iter().any(|(l, _)| l == w))
                .collect();
            if !missing.is_empty() {
                late.push(format!("push {i}: {}", missing.join(", ")));
            }
        }
    }

    let meter = Meter::start(vec![sluice.proc.0.id()], pusher_pids);
    let end = Instant::now() + window;
    let mut tasks = Vec::new();
    for master in &masters {
        let mut push_tasks = Vec::new();
        match master {
            Ok(listed) => {
                for &name in want {
                    match listed.iter().find(|(l, _)| l == name) {
                        Some((_, url)) => push_tasks.push(tokio::spawn(track(
                            sluice.client.clone(),
                            url.clone(),
                            name.to_string(),
                            end,
                        ))),
                        None => {
                            let names: Vec<&str> = listed.iter().map(|(l, _)| l.as_str()).collect();
                            let why = format!("not in the master (it lists {})", names.join(", "));
                            push_tasks.push(tokio::spawn(async move { Rendition::failed(name, why) }));
                        }
                    }
                }
                for (l, _) in listed.iter().filter(|(l, _)| !want.contains(&l.as_str())) {
                    let why = "listed in the master but not expected".to_string();
                    let l = l.clone();
                    push_tasks.push(tokio::spawn(async move { Rendition::failed(&l, why) }));
                }
            }
            Err(e) => {
                let e = e.clone();
                push_tasks.push(tokio::spawn(async move { Rendition::failed("master", e) }));
            }
        }
        tasks.push(push_tasks);
    }
    let mut results = Vec::new();
    for push_tasks in tasks {
        let mut renditions = Vec::new();
        for t in push_tasks {
            renditions.push(t.await.expect("tracker"));
        }
        results.push(renditions);
    }
    let mut step = Step::new(n, meter.stop(), load1());
    let alive: Vec<bool> = pushers.iter_mut().map(Proc::running).collect();
    drop(pushers);
    for (i, (renditions, alive)) in results.iter().zip(&alive).enumerate() {
        let mut why: Vec<String> = renditions.iter().filter_map(Rendition::verdict).collect();
        if !alive {
            why.insert(0, "ffmpeg exited".into());
        }
        for r in renditions.iter().filter(|r| r.problem.is_none()) {
            step.media_min = step.media_min.min(r.media_ratio);
            if let Some(l) = r.lag {
                step.lag_max = step.lag_max.max(l);
            }
            if let Some(d) = r.drift {
                step.drift_max = Some(step.drift_max.map_or(d, |m: f64| m.max(d)));
            }
            if let Some(f) = r.frames_ratio {
                step.frames_min = Some(step.frames_min.map_or(f, |m: f64| m.min(f)));
            }
            step.unseen += r.unseen;
        }
        if why.is_empty() {
            step.passed += 1;
        } else if step.why.len() < 3 {
            step.why.push(format!("push {i}: {}", why.join("; ")));
        }
    }
    if !late.is_empty() {
        step.why.push(format!(
            "note: the first master answer lacked renditions listed by the window's start ({} of {n} pushes; {})",
            late.len(),
            late.iter().take(2).cloned().collect::<Vec<_>>().join("; ")
        ));
    }
    if let Some(gone) = sluice.proc.exited("sluice serve") {
        step.passed = 0;
        step.why.insert(0, gone);
    }
    // The next step starts once every push of this one has ended (no stream is live).
    let live = format!("{}/streams?status=live&limit=1", sluice.api);
    let ended = settle(Duration::from_secs(30), async || {
        let resp = sluice.client.get(&live).bearer_auth(&sluice.key).send().await;
        match resp {
            Ok(r) => r.json::<serde_json::Value>().await.is_ok_and(|v| v["total"] == 0),
            Err(_) => false,
        }
    })
    .await;
    if !ended {
        step.why.push("streams still live 30 s after their pushers stopped".into());
    }
    let (warnings, first) = log_problems(&log, log_from);
    step.warnings = warnings;
    if let Some(first) = first {
        step.why.push(format!("log: {first}"));
    }
    step
}

// ---------------------------------------------------------------------------------------------
// nginx

/// An nginx playlist: (media sequence number, duration, file) of each fragment.
fn parse_nginx(text: &str) -> Vec<(u64, f64, String)> {
    let mut seq: u64 = 0;
    let mut duration = None;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("#EXT-X-MEDIA-SEQUENCE:") {
            seq = v.parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("#EXTINF:") {
            duration = v.split(',').next().and_then(|d| d.parse::<f64>().ok());
        } else if !line.is_empty() && !line.starts_with('#') {
            if let Some(d) = duration.take() {
                out.push((seq, d, line.to_string()));
                seq += 1;
            }
        }
    }
    out
}

/// One nginx stream over the window.
#[derive(Default)]
struct NginxTrack {
    base: Option<(u64, SystemTime)>,
    seen: BTreeMap<u64, f64>,
    newest: Option<(u64, SystemTime)>,
    problem: Option<String>,
}

impl NginxTrack {
    fn poll(&mut self, hls: &Path, name: &str, first: bool) {
        let text = match std::fs::read_to_string(hls.join(format!("{name}.m3u8"))) {
            Ok(t) => t,
            Err(e) => {
                self.problem = Some(format!("{name}.m3u8: {e}"));
                return;
            }
        };
        self.problem = None;
        let frags = parse_nginx(&text);
        let Some((seq, _, file)) = frags.last() else { return };
        let mtime = std::fs::metadata(hls.join(file)).and_then(|m| m.modified()).ok();
        if first {
            self.base = mtime.map(|t| (*seq, t));
            return;
        }
        let Some((base, _)) = self.base else { return };
        for (s, d, _) in frags.iter().filter(|f| f.0 > base) {
            self.seen.insert(*s, *d);
        }
        let newer = match self.newest {
            Some((n, _)) => n < *seq,
            None => true,
        };
        if *seq > base && newer {
            if let Some(t) = mtime {
                self.newest = Some((*seq, t));
            }
        }
    }

    /// (media ratio, age of the newest fragment, unseen fragments, problem)
    fn result(&self, at: SystemTime) -> (f64, f64, u64, Option<String>) {
        if let Some(p) = &self.problem {
            return (0.0, f64::INFINITY, 0, Some(p.clone()));
        }
        let (Some((base, t0)), Some((newest, t1))) = (self.base, self.newest) else {
            let why =
                if self.base.is_none() { "no fragment at the window's start" } else { "no new fragment" };
            return (0.0, f64::INFINITY, 0, Some(why.into()));
        };
        let mean = self.seen.values().sum::<f64>() / self.seen.len().max(1) as f64;
        let unseen = (newest - base).saturating_sub(self.seen.len() as u64);
        let media = self.seen.values().sum::<f64>() + unseen as f64 * mean;
        let elapsed = t1.duration_since(t0).map_or(0.0, |d| d.as_secs_f64());
        let age = at.duration_since(t1).map_or(0.0, |d| d.as_secs_f64());
        (if elapsed > 0.0 { media / elapsed } else { 0.0 }, age, unseen, None)
    }
}

/// Polls the HLS playlists `<dir>/<name>.m3u8` (nginx's, or ffmpeg's) about every second until
/// `end`: one track per name, its base taken at the first poll.
async fn poll_playlists(dir: &Path, names: &[String], end: Instant) -> Vec<NginxTrack> {
    let mut tracks: Vec<NginxTrack> = names.iter().map(|_| NginxTrack::default()).collect();
    for (t, name) in tracks.iter_mut().zip(names) {
        t.poll(dir, name, true);
    }
    let mut next = Instant::now();
    loop {
        // Idle: one more read, at the window's end.
        next = if idle() { end } else { next + POLL };
        let done = next >= end;
        tokio::time::sleep_until(next.min(end).into()).await;
        for (t, name) in tracks.iter_mut().zip(names) {
            t.poll(dir, name, false);
        }
        if done {
            return tracks;
        }
    }
}

/// Judges the pushes of a playlist step: push `i` owns the `tracks.len() / alive.len()` tracks
/// from `i` times that on, and passes when its process is `alive` (else `exited`) and each of
/// its playlists gained media worth `MIN_RATIO` of the wall time, its newest `file` at most
/// `MAX_LAG` old.
fn judge_playlists(
    step: &mut Step,
    tracks: &[NginxTrack],
    alive: &[bool],
    at: SystemTime,
    exited: &str,
    file: &str,
) {
    let per_push = tracks.len() / alive.len().max(1);
    for (i, (own, alive)) in tracks.chunks(per_push.max(1)).zip(alive).enumerate() {
        let mut why = Vec::new();
        if !alive {
            why.push(exited.to_string());
        }
        for t in own {
            let (ratio, age, unseen, problem) = t.result(at);
            step.media_min = step.media_min.min(ratio);
            step.lag_max = step.lag_max.max(age);
            step.unseen += unseen;
            if let Some(p) = problem {
                why.push(p);
            } else {
                if ratio < MIN_RATIO {
                    why.push(format!("media {ratio:.2}"));
                }
                if age > MAX_LAG {
                    why.push(format!("newest {file} {age:.1} s old"));
                }
            }
        }
        if why.is_empty() {
            step.passed += 1;
        } else if step.why.len() < 3 {
            step.why.push(format!("push {i}: {}", why.join(", ")));
        }
    }
}

/// Step number `number` of nginx (its streams are named after it).
async fn nginx_step(nginx: &Nginx, number: usize, file: &Path, n: usize, window: Duration) -> Step {
    let log_from = file_len(&nginx.log);
    let names: Vec<String> = (0..n).map(|i| format!("step{number}-{i}")).collect();
    let started = Instant::now();
    let mut pushers: Vec<Proc> = names
        .iter()
        .map(|name| push(file, &format!("rtmp://127.0.0.1:{}/live/{name}", nginx.rtmp)))
        .collect();
    let pusher_pids: Vec<u32> = pushers.iter().map(|p| p.0.id()).collect();
    // The first fragment is written after 2 s of media.
    tokio::time::sleep_until((started + WARMUP).into()).await;

    let meter = Meter::start(nginx.pids(), pusher_pids);
    let tracks = poll_playlists(&nginx.hls_dir, &names, Instant::now() + window).await;
    let at = SystemTime::now();
    let mut step = Step::new(n, meter.stop(), load1());
    let alive: Vec<bool> = pushers.iter_mut().map(Proc::running).collect();
    drop(pushers);
    judge_playlists(&mut step, &tracks, &alive, at, "ffmpeg exited", "fragment");
    // nginx logs the ends of the pushes once it has closed them: read its log after that.
    if !settle(Duration::from_secs(30), async || connections_to(nginx.rtmp) == 0).await {
        step.why.push("pushes still connected 30 s after their pushers stopped".into());
    }
    let (warnings, first) = log_problems(&nginx.log, log_from);
    step.warnings = warnings;
    if let Some(first) = first {
        step.why.push(format!("log: {first}"));
    }
    step
}

// ---------------------------------------------------------------------------------------------
// ffmpeg doing the ladder

/// One ffmpeg as the RTMP server of one push (`-listen 1`), encoding what a Sluice ladder stream
/// encodes: 720p at 2.8 Mbit/s and 480p at 1.4 Mbit/s with x264 `veryfast` `zerolatency`, a 1-s
/// VBV buffer and a keyframe every 8 frames (Sluice's rungs get one at every part, 7 or 8 frames
/// at 30 fps with the default 200-ms parts: 8 a segment against ffmpeg's 7.5), the source video
/// and the AAC copied; HLS (2-s MPEG-TS segments) into `dir` as `<name>_<variant>.m3u8`, the
/// newest 5 of them, or every one with `keep`.
fn ffmpeg_ladder(port: u16, name: &str, dir: &Path, keep: bool) -> Proc {
    let mut cmd = std::process::Command::new("ffmpeg");
    cmd.args(["-loglevel", "error", "-nostdin", "-listen", "1", "-i"])
        .arg(format!("rtmp://127.0.0.1:{port}/live/{name}"))
        .args(["-filter_complex", "[0:v]split=2[a][b];[b]scale=854:480[v480]"])
        .args(["-map", "[a]", "-map", "[v480]", "-map", "0:v", "-map", "0:a"]);
    for (i, kbps) in [(0, 2800), (1, 1400)] {
        let opt = |name: &str| format!("-{name}:v:{i}");
        cmd.args([&opt("c"), "libx264", &opt("preset"), "veryfast", &opt("tune"), "zerolatency"])
            .args([&opt("profile"), "high", &opt("pix_fmt"), "yuv420p", &opt("g"), "8"])
            .args([&opt("keyint_min"), "8", &opt("sc_threshold"), "0"])
            .args([&opt("b"), &format!("{kbps}k"), &opt("maxrate"), &format!("{kbps}k")])
            .args([&opt("bufsize"), &format!("{kbps}k")]);
    }
    // Frames as they come (an RTMP push's millisecond timestamps would otherwise make ffmpeg's
    // constant-rate output drop a frame and repeat the one before now and then).
    cmd.args(["-fps_mode", "passthrough", "-c:v:2", "copy", "-c:a", "copy"])
        .args(["-f", "hls", "-hls_time", "2"])
        .args(if keep { ["-hls_list_size", "0"] } else { ["-hls_list_size", "5"] })
        .args(if keep { &[][..] } else { &["-hls_flags", "delete_segments"][..] })
        .args([
            "-var_stream_map",
            "v:0,agroup:aud,name:720p v:1,agroup:aud,name:480p v:2,agroup:aud,name:source a:0,agroup:aud,name:audio",
        ])
        .arg("-hls_segment_filename")
        .arg(dir.join(format!("{name}_%v_%d.ts")))
        .arg(dir.join(format!("{name}_%v.m3u8")))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    Proc(cmd.spawn().expect("ffmpeg runs"))
}

/// Step number `number` of ffmpeg's ladder: `n` pushes, each to its own ffmpeg. Judged like an
/// nginx step, on the 720p and 480p playlists of every push.
async fn ffmpeg_step(dir: &Path, number: usize, file: &Path, n: usize, window: Duration) -> Step {
    let names: Vec<String> = (0..n).map(|i| format!("ff{number}-{i}")).collect();
    let ports: Vec<u16> = names.iter().map(|_| free_port()).collect();
    let mut encoders: Vec<Proc> =
        names.iter().zip(&ports).map(|(name, port)| ffmpeg_ladder(*port, name, dir, false)).collect();
    if !settle(Duration::from_secs(10), async || ports.iter().all(|p| listening(*p))).await {
        return Step::not_run(n, "the ffmpeg transcoders did not listen within 10 s".into());
    }
    let started = Instant::now();
    let pushers: Vec<Proc> = names
        .iter()
        .zip(&ports)
        .map(|(name, port)| push(file, &format!("rtmp://127.0.0.1:{port}/live/{name}")))
        .collect();
    let pusher_pids: Vec<u32> = pushers.iter().map(|p| p.0.id()).collect();
    tokio::time::sleep_until((started + WARMUP).into()).await;

    let meter = Meter::start(encoders.iter().map(|p| p.0.id()).collect(), pusher_pids);
    let variants: Vec<String> =
        names.iter().flat_map(|n| [format!("{n}_720p"), format!("{n}_480p")]).collect();
    let tracks = poll_playlists(dir, &variants, Instant::now() + window).await;
    let at = SystemTime::now();
    let mut step = Step::new(n, meter.stop(), load1());
    let alive: Vec<bool> = encoders.iter_mut().map(Proc::running).collect();
    drop(pushers);
    drop(encoders);
    judge_playlists(&mut step, &tracks, &alive, at, "ffmpeg transcoder exited", "segment");
    step
}

// ---------------------------------------------------------------------------------------------
// Report

const HEADER: &str =
    "  pushes     ok  media min  lag max  drift max  frames min  unseen  warn | server CPU   /push  client  machine  load1";

fn row(s: &Step) -> String {
    let frames = s.frames_min.map_or("-".to_string(), |f| format!("{f:.2}"));
    let drift = s.drift_max.map_or("-".to_string(), |d| format!("{d:+.1} s"));
    let media = if s.media_min.is_finite() { format!("{:.2}", s.media_min) } else { "-".into() };
    let lag = if s.lag_max.is_finite() { format!("{:.1} s", s.lag_max) } else { "none".into() };
    format!(
        "  {:>6} {:>6}  {:>9}  {:>7}  {:>9}  {:>10}  {:>6}  {:>4} | {:>8.1} %  {:>5.1}  {:>5.1}%  {:>6.1}%  {:>5.2}  {}",
        s.n,
        format!("{}/{}", s.passed, s.n),
        media,
        lag,
        drift,
        frames,
        s.unseen,
        s.warnings,
        s.server_cpu,
        s.server_cpu / s.n as f64,
        s.client_cpu,
        s.machine_cpu,
        s.load1,
        if s.ok() { "ok".to_string() } else { "FAIL".to_string() },
    )
}

fn table(title: &str, steps: &[Step], tried: &[usize]) {
    println!("{title}");
    println!("{HEADER}");
    for s in steps {
        println!("{}", row(s));
        if !s.ok() || !s.why.is_empty() {
            for w in &s.why {
                println!("           {w}");
            }
        }
    }
    if steps.len() < tried.len() {
        let skipped: Vec<String> = tried[steps.len()..].iter().map(|n| n.to_string()).collect();
        println!("  (not run after the failure: {})", skipped.join(", "));
    }
}

/// The largest step that passed, and its server CPU per push.
fn sustained(steps: &[Step]) -> (usize, f64) {
    steps.iter().rev().find(|s| s.ok()).map_or((0, f64::NAN), |s| (s.n, s.server_cpu / s.n as f64))
}

fn progress(kind: &str, s: &Step) {
    eprintln!(
        "  [{kind} {}] {}/{} passed, media min {:.2}, lag max {:.1} s, server CPU {:.0} %, machine {:.0} %",
        s.n, s.passed, s.n, s.media_min, s.lag_max, s.server_cpu, s.machine_cpu
    );
    let _ = std::io::stderr().flush();
}

/// Runs two ramps step by step in turn (Sluice's, then its peer's), so both see the machine in
/// the same state; each stops at its first failing step. The peer's steps are numbered from 1.
/// One ramp of steps: its step counts, its name, and how a step of `n` pushes is run (given
/// the step's number within the ramp).
type Ramp<'a> = (&'a [usize], &'a str, Box<dyn FnMut(usize, usize) -> Step + 'a>);

/// Runs the ramps' steps in turn, step by step, so that all see the machine in the same state;
/// a ramp stops at its first failing step. Returns each ramp's steps, in order.
fn alternate(mut ramps: Vec<Ramp<'_>>) -> Vec<Vec<Step>> {
    let mut done: Vec<Vec<Step>> = ramps.iter().map(|_| Vec::new()).collect();
    let mut on: Vec<bool> = ramps.iter().map(|_| true).collect();
    let longest = ramps.iter().map(|r| r.0.len()).max().unwrap_or(0);
    for i in 0..longest {
        for (r, (steps, kind, step)) in ramps.iter_mut().enumerate() {
            if let Some(&n) = steps.get(i).filter(|_| on[r]) {
                let s = step(done[r].len() + 1, n);
                progress(kind, &s);
                on[r] = s.ok();
                done[r].push(s);
            }
        }
        if on.iter().all(|o| !o) {
            break;
        }
    }
    done
}

fn main() {
    let ladder_steps = env_steps("BENCH_LADDER_STEPS", "1,2,3,4,5,6");
    let pass_steps = env_steps("BENCH_PASS_STEPS", "4,8,16,32,48,64");
    let nginx_steps = std::env::var("BENCH_NGINX_STEPS")
        .map(|_| env_steps("BENCH_NGINX_STEPS", ""))
        .unwrap_or_else(|_| pass_steps.clone());
    let ffmpeg_steps = std::env::var("BENCH_FFMPEG_STEPS")
        .map(|_| env_steps("BENCH_FFMPEG_STEPS", ""))
        .unwrap_or_else(|_| ladder_steps.clone());
    let window =
        Duration::from_secs(std::env::var("BENCH_WINDOW").ok().and_then(|s| s.parse().ok()).unwrap_or(20));
    let out = out_dir();
    let file = sample_file();
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");

    let rtsp = ("SLUICE_RTSP_ADDR", format!("127.0.0.1:{}", free_port()));
    // Every push comes from 127.0.0.1: above the per-address cap (16 by default) pushes would be
    // refused, not measured.
    let per_ip = ("SLUICE_RTMP_MAX_PER_IP", "1000".to_string());
    let _ = IDLE.set(std::env::var("BENCH_IDLE").is_ok_and(|v| v == "1"));
    let base_bin = std::env::var("BENCH_BASE_BIN").ok().map(std::path::PathBuf::from);
    let mut sluice =
        rt.block_on(Sluice::start_logged(&[rtsp, per_ip.clone()], out.join("live_capacity-sluice.log")));
    let mut base = base_bin.as_ref().map(|bin| {
        let rtsp = ("SLUICE_RTSP_ADDR", format!("127.0.0.1:{}", free_port()));
        rt.block_on(Sluice::start_logged_bin(bin, &[rtsp, per_ip], out.join("live_capacity-base.log")))
    });
    let hls = NginxHls { fragment: 2, playlist: 10, serve: false, workers: if idle() { 1 } else { 2 } };
    let nginx = Nginx::start_with(dir.path(), Some(hls), out.join("live_capacity-nginx.log"));

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "live capacity bench: 720p30 2.5 Mbit/s H.264+AAC pushes (ffmpeg -re -stream_loop -1 -c copy), \
         {}-s window after a {}-s warm-up, release build, {cores} CPUs",
        window.as_secs(),
        WARMUP.as_secs()
    );
    println!(
        "a push passes when every rendition publishes parts worth >= {MIN_RATIO} x wall time, its live edge \
         is <= {MAX_LAG} s behind, its video parts hold >= {MIN_RATIO} x {FPS} fps, and its ffmpeg runs"
    );
    println!("CPU in % of one core ({cores} cores = {} %)", cores * 100);
    if idle() {
        println!("idle: nothing polls the servers during the window (nginx on one worker; no frame check)");
    }
    if let Some(bin) = &base_bin {
        println!("base: the ladder and passthrough ramps also run on {}", bin.display());
    }

    // Quality first, on an idle machine: one push to each, side by side.
    let quality = (std::env::var("BENCH_QUALITY").as_deref() != Ok("0")).then(|| {
        eprintln!("quality: one push of the sample to a Sluice ladder and to ffmpeg's");
        rt.block_on(quality::measure(&sluice, &file, &out.join("live_capacity-quality")))
    });
    eprintln!("ladder ramp {ladder_steps:?}, passthrough {pass_steps:?}, nginx {nginx_steps:?}");
    let (mut created, mut base_created) = (0, 0);
    // The ladder (and the base's) and ffmpeg doing it alternate step by step, as passthrough
    // (and the base's) and nginx do.
    let ff_dir = dir.path().join("ffmpeg");
    std::fs::create_dir_all(&ff_dir).expect("ffmpeg dir");
    let no_steps: &[usize] = &[];
    let base_ladder_steps = if base.is_some() { &ladder_steps[..] } else { no_steps };
    let base_pass_steps = if base.is_some() { &pass_steps[..] } else { no_steps };
    let mut ramps = alternate(vec![
        (
            &ladder_steps,
            "ladder",
            Box::new(|_, n| {
                rt.block_on(sluice_step(
                    &mut sluice,
                    &mut created,
                    &file,
                    n,
                    &["720p", "480p"],
                    LADDER,
                    window,
                ))
            }),
        ),
        (
            base_ladder_steps,
            "base ladder",
            Box::new(|_, n| match base.as_mut() {
                Some(b) => rt.block_on(sluice_step(
                    b,
                    &mut base_created,
                    &file,
                    n,
                    &["720p", "480p"],
                    LADDER,
                    window,
                )),
                None => Step::not_run(n, "no base".into()),
            }),
        ),
        (
            &ffmpeg_steps,
            "ffmpeg ladder",
            Box::new(|number, n| rt.block_on(ffmpeg_step(&ff_dir, number, &file, n, window))),
        ),
    ])
    .into_iter();
    let (ladder, base_ladder, ff) = (
        ramps.next().unwrap_or_default(),
        ramps.next().unwrap_or_default(),
        ramps.next().unwrap_or_default(),
    );
    let mut ramps = alternate(vec![
        (
            &pass_steps,
            "passthrough",
            Box::new(|_, n| {
                rt.block_on(sluice_step(&mut sluice, &mut created, &file, n, &["1080p"], PASSTHROUGH, window))
            }),
        ),
        (
            base_pass_steps,
            "base passthrough",
            Box::new(|_, n| match base.as_mut() {
                Some(b) => {
                    rt.block_on(sluice_step(b, &mut base_created, &file, n, &["1080p"], PASSTHROUGH, window))
                }
                None => Step::not_run(n, "no base".into()),
            }),
        ),
        (
            &nginx_steps,
            "nginx",
            Box::new(|number, n| rt.block_on(nginx_step(&nginx, number, &file, n, window))),
        ),
    ])
    .into_iter();
    let (pass, base_pass, ngx) = (
        ramps.next().unwrap_or_default(),
        ramps.next().unwrap_or_default(),
        ramps.next().unwrap_or_default(),
    );

    if let Some(q) = &quality {
        quality::print(q);
    }
    println!();
    table("Sluice ladder 720p+480p (renditions 720p, 480p [x264], source, audio):", &ladder, &ladder_steps);
    table(
        "ffmpeg doing the same ladder, one process per push (720p, 480p [x264]; source, audio copied; lag = age of the newest 720p/480p segment):",
        &ff,
        &ffmpeg_steps,
    );
    table("Sluice passthrough (renditions source, audio; no transcode):", &pass, &pass_steps);
    table(
        "nginx-rtmp HLS (remux to 2-s MPEG-TS fragments; lag = age of the newest fragment):",
        &ngx,
        &nginx_steps,
    );
    let (l, l_cpu) = sustained(&ladder);
    let (p, p_cpu) = sustained(&pass);
    let (g, g_cpu) = sustained(&ngx);
    let (f, f_cpu) = sustained(&ff);
    println!();
    println!(
        "sustained: ladder 720p+480p {l} (ffmpeg doing it {f}), passthrough {p}, nginx-rtmp HLS {g} (of the steps tried)"
    );
    let ramps = [
        ("ladder", &ladder, &ladder_steps),
        ("ffmpeg ladder", &ff, &ffmpeg_steps),
        ("passthrough", &pass, &pass_steps),
        ("nginx", &ngx, &nginx_steps),
    ];
    let unbounded: Vec<&str> = ramps
        .iter()
        .filter(|(_, steps, tried)| {
            !tried.is_empty() && steps.len() == tried.len() && steps.iter().all(Step::ok)
        })
        .map(|(name, _, _)| *name)
        .collect();
    let not_run: Vec<&str> =
        ramps.iter().filter(|(_, _, tried)| tried.is_empty()).map(|(name, _, _)| *name).collect();
    if !unbounded.is_empty() {
        println!("  every step passed (the ceiling is higher; add steps): {}", unbounded.join(", "));
    }
    if !not_run.is_empty() {
        println!("  not run (no steps): {}", not_run.join(", "));
    }
    let ratio = |a: f64, b: f64| if b > 0.0 && a.is_finite() && b.is_finite() { a / b } else { f64::NAN };
    println!(
        "  ladder/ffmpeg: pushes {:.2}x; CPU per push at the sustained step: Sluice {l_cpu:.1} %, ffmpeg {f_cpu:.1} % ({:.2}x)",
        ratio(l as f64, f as f64),
        ratio(l_cpu, f_cpu)
    );
    println!(
        "  passthrough/nginx: pushes {:.2}x; server CPU per push at the sustained step: ladder {l_cpu:.1} %, \
         passthrough {p_cpu:.1} %, nginx {g_cpu:.1} % (passthrough/nginx {:.1}x)",
        ratio(p as f64, g as f64),
        ratio(p_cpu, g_cpu)
    );
    if base_bin.is_some() {
        println!();
        table("base Sluice ladder 720p+480p:", &base_ladder, base_ladder_steps);
        table("base Sluice passthrough:", &base_pass, base_pass_steps);
        let (bl, bl_cpu) = sustained(&base_ladder);
        let (bp, bp_cpu) = sustained(&base_pass);
        println!(
            "  this build / base: ladder pushes {l} / {bl}, CPU per push {l_cpu:.1} % / {bl_cpu:.1} % ({:.3}x); \
             passthrough pushes {p} / {bp}, CPU per push {p_cpu:.2} % / {bp_cpu:.2} % ({:.3}x)",
            ratio(l_cpu, bl_cpu),
            ratio(p_cpu, bp_cpu)
        );
        // The same step count on both, step by step: CPU per push of each.
        for (kind, mine, theirs) in [("ladder", &ladder, &base_ladder), ("passthrough", &pass, &base_pass)] {
            for (a, b) in mine.iter().zip(theirs.iter()).filter(|(a, b)| a.ok() && b.ok()) {
                println!(
                    "    {kind} {} pushes: server CPU per push {:.2} % / base {:.2} % ({:.3}x)",
                    a.n,
                    a.server_cpu / a.n as f64,
                    b.server_cpu / b.n as f64,
                    ratio(a.server_cpu, b.server_cpu)
                );
            }
        }
    }
    drop(nginx);
    drop(sluice);
    drop(base);
}
