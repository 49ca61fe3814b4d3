//! `cargo bench --bench recording`: what recording a live session to VOD (`"vodEnabled": true`,
//! docs/recording.md) costs — the extra CPU and the storage write rate over the same session
//! unrecorded (target: under 5 % CPU over the unrecorded session) — and the time from the end of
//! a session to its `vod.complete`.
//!
//! One release `sluice serve` (its log in `benches/out/recording-sluice.log`), default settings:
//! storage is the local folder `<data dir>/storage` (the data dir is read from the process's
//! environment, `SLUICE_DATA_DIR`), DVR is off, so an unrecorded session writes nothing there.
//! Every push is the pre-encoded 720p30 2.5 Mbit/s H.264+AAC FLV of `common::sample_file()`
//! (keyframe every 2 s, so 2-s segments), sent in real time by
//! `ffmpeg -re -stream_loop -1 -c copy` (cheap for the client). Two kinds of stream:
//!
//! - **ladder**: `"qualities": ["720p","480p"]`: one decode and two x264 encodes per push;
//!   renditions `720p`, `480p`, `source`, `audio`, all of them recorded;
//! - **passthrough**: `"qualities": ["1080p"]` (above the source, so left out): `source` and
//!   `audio` only, no transcode; here recording's share of the session's CPU is largest.
//!
//! **Cost.** For each kind, rounds alternate unrecorded and recorded sessions (U R U R …): each
//! round creates N fresh streams, with or without `vodEnabled`, starts the N pushes, waits until
//! every master lists the kind's renditions and every media playlist lists a part, settles 2 s,
//! then measures over the window:
//!
//! - the CPU of the `sluice serve` process (all its threads, user + system, /proc/<pid>/stat),
//!   and the same by thread (each thread's `schedstat`, grouped by name): `runtime` (tokio's
//!   workers and blocking pool: the recording task, storage writes, HTTP), `database` (the SQLite
//!   threads), `media` (GStreamer's threads), `ended` (the process's total less what the threads
//!   there at the end account for: threads that ended in the window);
//! - the growth of its storage folder (the sizes of its files, before and after: what was
//!   stored), and its `/proc/<pid>/io` `write_bytes` (bytes it dirtied in the page cache: storage,
//!   database and log).
//!
//! The mean recorded CPU minus the mean unrecorded CPU is recording's cost, printed in % of one
//! core and in % of the unrecorded session's CPU, and by thread group: recording does no media
//! work, so its cost shows in `runtime` + `database`, which is also printed alone (a figure
//! without the media threads' noise). The storage write rate is printed beside the bitrate the
//! pushes bring in, and per push over whole recorded sessions (the VODs' `sourceSize` /
//! `duration`). A window starts no earlier than 13 s after the previous round's pushes ended, so
//! a previous session's end (its 10-s reconnect grace, 2-s drain bound) is not in it; a
//! recorded round is followed by its completion before the next round starts.
//!
//! **Session end to `vod.complete`.** At the end of each recorded round the pushers are killed
//! (SIGKILL: the connection closes at once), and from each kill the bench times the arrival of
//! the stream's `stream.ended` and its VOD's `vod.complete` at a real webhook receiver (a
//! webhook created for those two events), and the first `GET /vod?streamId=` (polled every
//! 100 ms) that lists the VOD `complete`. That time is the reconnect grace (10 s, during which a
//! reconnect would continue the session and its recording) plus the completion: the ingest
//! pipeline's drain, the playlists, master and thumbnail, the database transaction, and the
//! webhook sender's pick-up. Each VOD's `duration` must be within 1 s of the time its push was
//! live: from its first frame (the first `EXT-X-PROGRAM-DATE-TIME` of the live `source`
//! playlist, read during the warm-up: Sluice stamps it from the wall-clock time of the push's
//! first frame) to the kill; the time its pusher ran (spawn to kill, which includes ffmpeg's
//! start and the RTMP handshake) is printed beside it.
//!
//! Knobs: `BENCH_PUSHES` (ladder pushes per round, default 1: a ladder push takes about half a
//! core), `BENCH_PASS_PUSHES` (passthrough pushes per round, default 8: a passthrough push costs
//! little, so more of them put more recording work in a window against the same noise),
//! `BENCH_WINDOW` seconds (default 20, rounded up to whole 2-s segments so that every window
//! stores as many segments), `BENCH_ROUNDS` (U R pairs per kind, default 2), `BENCH_KINDS`
//! (default "ladder,passthrough"). The default run takes about 4.5 minutes.
//!
//! Caveats: recording's cost is a small difference of two CPU readings; round-to-round noise
//! (x264's work varies with the pictures, other work on the machine, the scheduler) is of the
//! same order for the ladder, so each kind's spread is printed beside its means: run it on an
//! idle machine, with more rounds, for a tighter figure. The CPU of the kernel's writeback of
//! the stored bytes is not Sluice's and is not counted. The window's storage growth counts the
//! segments stored in it, each at once when it closes; a window of whole segments holds as
//! many of them whatever its phase, but a push that starts late or a segment written late still
//! moves it by a segment: the whole-session rate is the exact one.

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use common::{cpu_seconds, load1, out_dir, parse_master, push, sample_file, Proc, Sluice};
use support::receiver::Receiver;

/// Sluice's reconnect grace (`RECONNECT_GRACE` in src/media/live/channel.rs).
const GRACE: Duration = Duration::from_secs(10);
/// The most an ended push's pipeline waits for its last parts (`DRAIN`, live/pipeline.rs).
const DRAIN: Duration = Duration::from_secs(2);
/// How long pushes may take to be live with a part in every rendition.
const LIVE_DEADLINE: Duration = Duration::from_secs(40);
/// After every stream is live with parts, before the window.
const SETTLE: Duration = Duration::from_secs(2);
/// How long a recording may take to be complete after its push ended.
const COMPLETE_DEADLINE: Duration = Duration::from_secs(60);
/// A recorded duration within this of the time its push was live (seconds).
const DURATION_TOLERANCE: f64 = 1.0;
/// The sample's keyframe interval, so Sluice's segment duration (seconds).
const SEGMENT: u64 = 2;
/// The target: recording's extra CPU in % of the unrecorded session's.
const TARGET: f64 = 5.0;

fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// The kinds of stream measured.
struct Kind {
    name: &'static str,
    qualities: &'static [&'static str],
    renditions: &'static [&'static str],
    pushes: usize,
}

// ---------------------------------------------------------------------------------------------
// /proc and the file system

/// The data dir of process `pid` (`SLUICE_DATA_DIR` of its environment).
fn data_dir(pid: u32) -> PathBuf {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("the environment of sluice serve");
    environ
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"SLUICE_DATA_DIR="))
        .map(|v| PathBuf::from(String::from_utf8_lossy(v).into_owned()))
        .expect("sluice serve has SLUICE_DATA_DIR")
}

/// `write_bytes` of /proc/<pid>/io: bytes the process caused to be written to storage devices.
fn write_bytes(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines().find_map(|l| l.strip_prefix("write_bytes:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// The sizes of the files under `dir`, summed.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

/// Where a thread of `sluice serve` works, by its name: the tokio runtime (its workers and its
/// blocking pool: the recording task, storage writes, HTTP), the SQLite connection threads, and
/// the rest (GStreamer's streaming threads: ingest, muxers, encoders).
const GROUPS: [&str; 3] = ["runtime", "database", "media"];

fn group(comm: &str) -> usize {
    match comm {
        "tokio-rt-worker" => 0,
        c if c.starts_with("sqlx-sqlite") => 1,
        _ => 2,
    }
}

/// CPU seconds of each thread of `pid` now: (thread id, group, seconds). From `schedstat`
/// (nanoseconds on a CPU): a thread's `stat` times are rounded down to 10 ms each and adjusted
/// in steps, which over a hundred threads is off by more than what recording costs.
fn threads(pid: u32) -> Vec<(u32, usize, f64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let Ok(tid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let schedstat = std::fs::read_to_string(entry.path().join("schedstat")).unwrap_or_default();
        let ns: f64 = schedstat.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        out.push((tid, group(comm.trim()), ns / 1e9));
    }
    out
}

/// CPU seconds per group between two readings of [`threads`], and those of threads that ended
/// in between (the process's total minus what the threads still there account for).
fn by_group(before: &[(u32, usize, f64)], after: &[(u32, usize, f64)], total: f64) -> [f64; 4] {
    let mut out = [0.0; 4];
    for (tid, g, secs) in after {
        let was = before.iter().find(|b| b.0 == *tid).map_or(0.0, |b| b.2);
        out[*g] += secs - was;
    }
    out[3] = total - out[..3].iter().sum::<f64>();
    out
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Lines of the log from byte `from` on that are warnings or errors: (count, the first).
fn log_problems(path: &Path, from: u64) -> (usize, Option<String>) {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(text.get(from as usize..).unwrap_or(&[]));
    let bad: Vec<&str> = text.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
    (bad.len(), bad.first().map(|l| l.chars().take(200).collect()))
}

/// The average bitrate of the sample file in bit/s: its size over its duration (ffprobe).
fn file_bitrate(file: &Path) -> f64 {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0"])
        .arg(file)
        .output()
        .expect("ffprobe runs");
    let duration: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(20.0);
    file_len(file) as f64 * 8.0 / duration
}

// ---------------------------------------------------------------------------------------------
// One round

struct Bench {
    sluice: Sluice,
    rx: Receiver,
    storage: PathBuf,
    log: PathBuf,
    file: PathBuf,
    window: Duration,
    created: usize,
}

/// A stream of a round.
struct Stream {
    id: String,
    name: String,
    ingest: String,
    master: String,
}

/// What one recorded push gave once it ended.
#[derive(Default, Clone)]
struct End {
    /// Seconds from the kill of its pusher to its `stream.ended` at the receiver.
    stream_ended: Option<f64>,
    /// ... to its VOD's `vod.complete` at the receiver.
    webhook: Option<f64>,
    /// ... to the first `GET /vod?streamId=` listing it complete.
    listed: Option<f64>,
    /// The VOD's `duration` and `sourceSize`.
    duration: Option<f64>,
    size: Option<u64>,
    /// Seconds its pusher ran (spawn to kill).
    pushed: f64,
    /// Seconds from its first frame (the live playlist's first PROGRAM-DATE-TIME) to the kill.
    live: Option<f64>,
}

/// One round's figures.
struct Round {
    recorded: bool,
    /// Sluice's CPU over the window, % of one core.
    cpu: f64,
    /// The same by [`GROUPS`], and of threads that ended during the window.
    groups: [f64; 4],
    /// Storage folder growth and process `write_bytes` over the window, bit/s.
    storage_bps: f64,
    write_bps: f64,
    load1: f64,
    warnings: usize,
    problems: Vec<String>,
    ends: Vec<End>,
}

async fn create_streams(b: &mut Bench, kind: &Kind, recorded: bool) -> Vec<Stream> {
    let mut out = Vec::new();
    for _ in 0..kind.pushes {
        b.created += 1;
        let name = format!("rec-{}-{}{}", kind.name, b.created, if recorded { "r" } else { "u" });
        let body = json!({"name": name, "qualities": kind.qualities, "vodEnabled": recorded});
        let s = b.sluice.create_stream(body).await;
        let id = s["_id"].as_str().or(s["id"].as_str()).unwrap_or_else(|| panic!("no id in {s}")).to_string();
        let ingest = s["ingestUrl"].as_str().unwrap_or_else(|| panic!("no ingestUrl in {s}")).to_string();
        let master = s["playbackUrls"]["hls"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("http://127.0.0.1:{}/play/live/{id}/master.m3u8", b.sluice.http));
        out.push(Stream { id, name, ingest, master });
    }
    out
}

async fn get_text(client: &reqwest::Client, url: &str) -> Option<String> {
    let r = client.get(url).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.text().await.ok()
}

/// The first `EXT-X-PROGRAM-DATE-TIME` of a media playlist that still starts at its first
/// segment (`EXT-X-MEDIA-SEQUENCE:0`): the wall-clock time of the push's first frame, as Sluice
/// stamps it.
fn first_pdt(media: &str) -> Option<DateTime<Utc>> {
    let sequence = media.lines().find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:")).map(str::trim);
    if !matches!(sequence, None | Some("0")) {
        return None;
    }
    let pdt = media.lines().find_map(|l| l.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:"))?;
    DateTime::parse_from_rfc3339(pdt.trim()).ok().map(|d| d.with_timezone(&Utc))
}

/// Waits until the master at `url` lists every rendition of `want` and each of their media
/// playlists lists a part; returns the push's first frame time from the `source` playlist
/// ([`first_pdt`]). `Err` says what was missing at the deadline.
async fn live_with_parts(
    client: &reqwest::Client,
    url: &str,
    want: &[&str],
) -> Result<Option<DateTime<Utc>>, String> {
    let deadline = Instant::now() + LIVE_DEADLINE;
    let base = url.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    let mut missing = String::from("no master");
    while Instant::now() < deadline {
        if let Some(text) = get_text(client, url).await {
            let listed = parse_master(&text);
            let absent: Vec<&str> =
                want.iter().copied().filter(|w| !listed.iter().any(|(n, _)| n == w)).collect();
            if absent.is_empty() {
                let (mut without, mut first) = (Vec::new(), None);
                for (name, uri) in listed.iter().filter(|(n, _)| want.contains(&n.as_str())) {
                    let media = get_text(client, &format!("{base}/{uri}")).await.unwrap_or_default();
                    if !media.contains("#EXT-X-PART:") {
                        without.push(name.as_str());
                    }
                    if name == "source" {
                        first = first_pdt(&media);
                    }
                }
                if without.is_empty() {
                    return Ok(first);
                }
                missing = format!("no part yet in {}", without.join(", "));
            } else {
                missing = format!("master lacks {}", absent.join(", "));
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(missing)
}

/// A round of `kind`, recorded or not; its window starts no earlier than `not_before`. Returns
/// it and the earliest start of the next round's window.
async fn round(b: &mut Bench, kind: &Kind, recorded: bool, not_before: Instant) -> (Round, Instant) {
    let pid = b.sluice.proc.0.id();
    let streams = create_streams(b, kind, recorded).await;
    let mut problems = Vec::new();
    let mut pushers: Vec<(Proc, Instant)> =
        streams.iter().map(|s| (push(&b.file, &s.ingest), Instant::now())).collect();
    let ready = futures_util::future::join_all(
        streams.iter().map(|s| live_with_parts(&b.sluice.client, &s.master, kind.renditions)),
    )
    .await;
    for (s, r) in streams.iter().zip(&ready) {
        if let Err(e) = r {
            problems.push(format!("{}: not live with parts in {} s: {e}", s.name, LIVE_DEADLINE.as_secs()));
        }
    }
    tokio::time::sleep_until((Instant::now() + SETTLE).max(not_before).into()).await;

    let log_from = file_len(&b.log);
    let (threads0, cpu0, io0, st0, t0) =
        (threads(pid), cpu_seconds(pid), write_bytes(pid), dir_bytes(&b.storage), Instant::now());
    tokio::time::sleep(b.window).await;
    let (cpu1, threads1, io1, st1) =
        (cpu_seconds(pid), threads(pid), write_bytes(pid), dir_bytes(&b.storage));
    let secs = t0.elapsed().as_secs_f64();
    let groups = by_group(&threads0, &threads1, cpu1 - cpu0).map(|g| g / secs * 100.0);
    let load = load1();
    let (warnings, first) = log_problems(&b.log, log_from);
    if let Some(w) = first {
        problems.push(format!("log: {w}"));
    }
    for ((p, _), s) in pushers.iter_mut().zip(&streams) {
        if let Some(gone) = p.exited(&format!("the pusher of {}", s.name)) {
            problems.push(gone);
        }
    }
    for s in &streams {
        let url = format!("{}/streams/{}", b.sluice.api, s.id);
        let resp = b.sluice.client.get(url).bearer_auth(&b.sluice.key).send().await;
        let status = match resp {
            Ok(r) => r.json::<Value>().await.ok().and_then(|v| v["status"].as_str().map(str::to_string)),
            Err(_) => None,
        };
        if status.as_deref() != Some("live") {
            problems.push(format!("{} is {} at the window's end", s.name, status.as_deref().unwrap_or("?")));
        }
    }

    // The end of the sessions: SIGKILL, so the connection closes at once.
    let mut killed = Vec::new();
    for ((p, spawned), ready) in pushers.iter_mut().zip(&ready) {
        let _ = p.0.kill();
        let (at, wall) = (Instant::now(), Utc::now());
        let live = ready.as_ref().ok().copied().flatten().map(|first| (wall - first).as_seconds_f64());
        killed.push(Killed { at, pushed: at.duration_since(*spawned).as_secs_f64(), live });
    }
    drop(pushers);
    let last_kill = killed.iter().map(|k| k.at).max().unwrap_or_else(Instant::now);
    let mut ends = Vec::new();
    let next = if recorded {
        ends = completion(b, &streams, &killed).await;
        for (s, e) in streams.iter().zip(&ends) {
            if e.webhook.is_none() || e.listed.is_none() {
                problems.push(format!(
                    "{}: {} {} s after its push ended",
                    s.name,
                    if e.listed.is_none() { "no VOD listed complete" } else { "no vod.complete" },
                    COMPLETE_DEADLINE.as_secs()
                ));
            }
        }
        Instant::now()
    } else {
        last_kill + GRACE + DRAIN + Duration::from_secs(1)
    };
    if let Some(gone) = b.sluice.proc.exited("sluice serve") {
        problems.push(gone);
    }
    let round = Round {
        recorded,
        cpu: (cpu1 - cpu0) / secs * 100.0,
        groups,
        storage_bps: st1.saturating_sub(st0) as f64 * 8.0 / secs,
        write_bps: io1.saturating_sub(io0) as f64 * 8.0 / secs,
        load1: load,
        warnings,
        problems,
        ends,
    };
    (round, next)
}

/// The end of a push.
struct Killed {
    /// When its pusher was killed.
    at: Instant,
    /// How long its pusher had run, and how long since its first frame (seconds).
    pushed: f64,
    live: Option<f64>,
}

/// Times each recorded session of `streams` from the kill of its pusher to its `stream.ended`,
/// its `vod.complete` and its VOD listed complete.
async fn completion(b: &Bench, streams: &[Stream], killed: &[Killed]) -> Vec<End> {
    let mut ends: Vec<End> =
        killed.iter().map(|k| End { pushed: k.pushed, live: k.live, ..End::default() }).collect();
    let deadline = Instant::now() + COMPLETE_DEADLINE;
    loop {
        let received = b.rx.received();
        for ((s, Killed { at, .. }), end) in streams.iter().zip(killed).zip(ends.iter_mut()) {
            let since = |r: &support::receiver::Received| r.at.saturating_duration_since(*at).as_secs_f64();
            for r in &received {
                let Ok(body) = serde_json::from_slice::<Value>(&r.body) else { continue };
                let data = &body["data"];
                match body["event"].as_str() {
                    Some("stream.ended") if data["id"] == s.id.as_str() && end.stream_ended.is_none() => {
                        end.stream_ended = Some(since(r));
                    }
                    Some("vod.complete")
                        if data["name"].as_str().is_some_and(|n| n.starts_with(&format!("{} ", s.name)))
                            && end.webhook.is_none() =>
                    {
                        end.webhook = Some(since(r));
                    }
                    _ => {}
                }
            }
            if end.listed.is_none() {
                let url = format!("{}/vod?streamId={}", b.sluice.api, s.id);
                let resp = b.sluice.client.get(url).bearer_auth(&b.sluice.key).send().await;
                let list = match resp {
                    Ok(r) => r.json::<Value>().await.unwrap_or_default(),
                    Err(_) => Value::Null,
                };
                let items = list["items"].as_array().cloned().unwrap_or_default();
                if let Some(vod) = items.iter().find(|v| v["status"] == "complete") {
                    end.listed = Some(at.elapsed().as_secs_f64());
                    end.duration = vod["duration"].as_f64();
                    end.size = vod["sourceSize"].as_u64();
                }
            }
        }
        let done = ends.iter().all(|e| e.listed.is_some() && e.webhook.is_some() && e.stream_ended.is_some());
        if done || Instant::now() >= deadline {
            return ends;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Report

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn spread(v: &[f64]) -> f64 {
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    if v.is_empty() {
        f64::NAN
    } else {
        max - min
    }
}

/// The median and the largest of `v`.
fn median_max(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let mid = s.len() / 2;
    let median = if s.len() % 2 == 1 { s[mid] } else { (s[mid - 1] + s[mid]) / 2.0 };
    (median, s[s.len() - 1])
}

fn mbit(bps: f64) -> String {
    format!("{:.2} Mbit/s", bps / 1e6)
}

fn print_round(i: usize, r: &Round) {
    println!(
        "  {:>5}  {:<10} | {:>6.1} % | {:>7.1} {:>8.1} {:>6.1} {:>6.1} | {:>13} | {:>13} | {:>5} | {:>5.2}",
        i,
        if r.recorded { "recorded" } else { "unrecorded" },
        r.cpu,
        r.groups[0],
        r.groups[1],
        r.groups[2],
        r.groups[3],
        mbit(r.storage_bps),
        mbit(r.write_bps),
        r.warnings,
        r.load1
    );
    for p in &r.problems {
        println!("           {p}");
    }
}

/// Prints a kind's rounds and what recording adds.
fn summary(kind: &Kind, rounds: &[Round], input_bps: f64) {
    let pick = |recorded: bool, f: fn(&Round) -> f64| -> Vec<f64> {
        rounds.iter().filter(|r| r.recorded == recorded).map(f).collect()
    };
    let (u_cpu, r_cpu) = (pick(false, |r| r.cpu), pick(true, |r| r.cpu));
    let (u, r) = (mean(&u_cpu), mean(&r_cpu));
    let extra = r - u;
    let share = extra / u * 100.0;
    let verdict = if !share.is_finite() {
        "-"
    } else if share < TARGET {
        "met"
    } else {
        "NOT met"
    };
    println!(
        "  CPU: unrecorded {u:.1} % (spread {:.1}), recorded {r:.1} % (spread {:.1}): recording adds {extra:+.1} % \
         of one core = {share:+.1} % of the unrecorded session (target < {TARGET} %: {verdict})",
        spread(&u_cpu),
        spread(&r_cpu),
    );
    let by: Vec<String> = GROUPS
        .iter()
        .chain(&["ended threads"])
        .enumerate()
        .map(|(g, name)| {
            let of = |recorded: bool| -> Vec<f64> {
                rounds.iter().filter(|r| r.recorded == recorded).map(|r| r.groups[g]).collect()
            };
            format!("{name} {:+.2}", mean(&of(true)) - mean(&of(false)))
        })
        .collect();
    println!("  extra CPU by thread (recorded - unrecorded, % of one core): {}", by.join(", "));
    // Recording adds no media work: its cost is in the runtime (the recording task, storage
    // writes on the blocking pool) and the database threads; the media threads' noise left out.
    let own = |recorded: bool| -> f64 {
        mean(
            &rounds
                .iter()
                .filter(|r| r.recorded == recorded)
                .map(|r| r.groups[0] + r.groups[1])
                .collect::<Vec<_>>(),
        )
    };
    let own_extra = own(true) - own(false);
    println!(
        "  runtime + database alone: {own_extra:+.2} % of one core = {:+.1} % of the unrecorded session \
         (the media threads' work is the same recorded or not)",
        own_extra / u * 100.0
    );
    let pushed = input_bps * kind.pushes as f64;
    let (u_st, r_st) = (mean(&pick(false, |r| r.storage_bps)), mean(&pick(true, |r| r.storage_bps)));
    let (u_wb, r_wb) = (mean(&pick(false, |r| r.write_bps)), mean(&pick(true, |r| r.write_bps)));
    println!(
        "  storage written: recorded {} ({:.2} x the {} pushed), unrecorded {}; process write_bytes: \
         recorded {}, unrecorded {}",
        mbit(r_st),
        r_st / pushed,
        mbit(pushed),
        mbit(u_st),
        mbit(r_wb),
        mbit(u_wb),
    );
    let ends: Vec<&End> = rounds.iter().flat_map(|r| &r.ends).collect();
    let (bytes, secs): (u64, f64) = ends
        .iter()
        .filter_map(|e| Some((e.size?, e.duration?)))
        .fold((0, 0.0), |(b, s), (eb, es)| (b + eb, s + es));
    if secs > 0.0 {
        println!(
            "  whole recorded sessions: {} per push (sourceSize / duration of {} VODs; {:.2} x the {} pushed)",
            mbit(bytes as f64 * 8.0 / secs),
            ends.len(),
            bytes as f64 * 8.0 / secs / input_bps,
            mbit(input_bps),
        );
    }
}

/// Prints the times from session end to completion of `ends` under `label`.
fn completion_row(label: &str, ends: &[&End]) {
    let col = |f: fn(&End) -> Option<f64>| -> (f64, f64) {
        median_max(&ends.iter().filter_map(|e| f(e)).collect::<Vec<_>>())
    };
    let (ended, webhook, listed) = (col(|e| e.stream_ended), col(|e| e.webhook), col(|e| e.listed));
    let grace = GRACE.as_secs_f64();
    let completion = col(|e| e.webhook.map(|w| w - GRACE.as_secs_f64()));
    let got = ends.iter().filter(|e| e.webhook.is_some()).count();
    println!(
        "  {label:<12} {got:>3}/{:<3} | {:>5.2} {:>5.2} | {:>5.2} {:>5.2} | {:>5.2} {:>5.2} | {grace:.0} s + {:.2} s (max {:.2} s)",
        ends.len(),
        ended.0,
        ended.1,
        webhook.0,
        webhook.1,
        listed.0,
        listed.1,
        completion.0,
        completion.1,
    );
}

fn main() {
    // A whole number of 2-s segments, so that each window sees as many segments stored.
    let window = Duration::from_secs(knob("BENCH_WINDOW", 20u64).max(1).div_ceil(SEGMENT) * SEGMENT);
    let rounds_n: usize = knob("BENCH_ROUNDS", 2usize).max(1);
    let kinds_wanted = std::env::var("BENCH_KINDS").unwrap_or_else(|_| "ladder,passthrough".into());
    let all = [
        Kind {
            name: "ladder",
            qualities: &["720p", "480p"],
            renditions: &["720p", "480p", "source", "audio"],
            pushes: knob("BENCH_PUSHES", 1usize).max(1),
        },
        Kind {
            name: "passthrough",
            qualities: &["1080p"],
            renditions: &["source", "audio"],
            pushes: knob("BENCH_PASS_PUSHES", 8usize).max(1),
        },
    ];
    let kinds: Vec<&Kind> =
        all.iter().filter(|k| kinds_wanted.split(',').any(|w| w.trim() == k.name)).collect();
    let file = sample_file();
    let input_bps = file_bitrate(&file);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    let log = out_dir().join("recording-sluice.log");
    let started = Instant::now();

    let mut b = rt.block_on(async {
        let sluice = Sluice::start_logged(&[], log.clone()).await;
        let rx = Receiver::start().await;
        let resp = sluice
            .client
            .post(format!("{}/webhooks", sluice.api))
            .bearer_auth(&sluice.key)
            .json(&json!({"url": rx.url(), "events": ["stream.ended", "vod.complete"]}))
            .send()
            .await
            .expect("create webhook");
        assert!(resp.status().is_success(), "create webhook: {}", resp.status());
        let storage = data_dir(sluice.proc.0.id()).join("storage");
        Bench { sluice, rx, storage, log: log.clone(), file: file.clone(), window, created: 0 }
    });

    println!(
        "recording bench: pushes of a 720p30 H.264+AAC FLV ({} each; ffmpeg -re -stream_loop -1 -c copy), \
         {}-s windows, {rounds_n} unrecorded/recorded round pairs per kind, release build, {cores} CPUs",
        mbit(input_bps),
        window.as_secs(),
    );
    println!(
        "CPU: sluice serve, % of one core ({cores} cores = {} %), and by thread: runtime (tokio workers and \
         blocking pool), database (SQLite threads), media (GStreamer), ended (threads gone by the window's end)",
        cores * 100
    );
    println!(
        "storage write: growth of <data dir>/storage over the window; write_bytes: /proc/<pid>/io (storage, \
         database, log)"
    );
    let mut all_ends: Vec<(&str, End)> = Vec::new();
    for kind in &kinds {
        let mut rounds = Vec::new();
        let mut not_before = Instant::now();
        for _ in 0..rounds_n {
            for recorded in [false, true] {
                let (r, next) = rt.block_on(round(&mut b, kind, recorded, not_before));
                eprintln!(
                    "  [{} {}] CPU {:.1} %, storage {}, load1 {:.2}",
                    kind.name,
                    if recorded { "recorded" } else { "unrecorded" },
                    r.cpu,
                    mbit(r.storage_bps),
                    r.load1
                );
                not_before = next;
                rounds.push(r);
            }
        }
        // The next kind starts once the last unrecorded session is over.
        rt.block_on(async { tokio::time::sleep_until(not_before.into()).await });
        println!();
        println!(
            "{} ({}), {} push{} per round (renditions {}):",
            kind.name,
            kind.qualities.join("+"),
            kind.pushes,
            if kind.pushes == 1 { "" } else { "es" },
            kind.renditions.join(", ")
        );
        println!(
            "  round  session    |    CPU   | runtime database  media  ended | storage write |   write_bytes | warns | load1"
        );
        for (i, r) in rounds.iter().enumerate() {
            print_round(i / 2 + 1, r);
        }
        summary(kind, &rounds, input_bps);
        for r in &rounds {
            all_ends.extend(r.ends.iter().map(|e| (kind.name, e.clone())));
        }
    }

    println!();
    println!(
        "session end (pusher killed) -> stream.ended, vod.complete (at the webhook receiver) and the VOD listed \
         complete (GET /vod?streamId=, polled every 100 ms), seconds:"
    );
    println!(
        "  kind          VODs   | stream.ended | vod.complete |  listed      | = reconnect grace + completion (median, max)"
    );
    println!("                       | median   max | median   max | median   max |");
    for kind in &kinds {
        let ends: Vec<&End> = all_ends.iter().filter(|(k, _)| *k == kind.name).map(|(_, e)| e).collect();
        completion_row(kind.name, &ends);
    }
    let every: Vec<&End> = all_ends.iter().map(|(_, e)| e).collect();
    if kinds.len() > 1 {
        completion_row("all", &every);
    }
    println!(
        "recorded duration vs the time the push was live (its first frame, the live playlist's first \
         PROGRAM-DATE-TIME, to the kill; within {DURATION_TOLERANCE} s), and the time its pusher ran (spawn to kill):"
    );
    let mut bad = 0;
    for (kind, e) in &all_ends {
        let live = e.live.unwrap_or(e.pushed);
        let (verdict, d) = match e.duration {
            Some(d) if (d - live).abs() <= DURATION_TOLERANCE => ("ok", d),
            Some(d) => ("OFF", d),
            None => ("NO VOD", f64::NAN),
        };
        if verdict != "ok" {
            bad += 1;
        }
        println!(
            "  {kind:<12} duration {d:>6.2} s, live {} ({:+.2} s), pusher ran {:>6.2} s ({:+.2} s), {}: {verdict}",
            e.live.map_or("     - (no PDT; pusher time used)".into(), |l| format!("{l:>6.2} s")),
            d - live,
            e.pushed,
            d - e.pushed,
            e.size.map_or("-".into(), |s| format!("{:.1} MB", s as f64 / 1e6)),
        );
    }
    println!(
        "  {} of {} VODs within {DURATION_TOLERANCE} s; run took {:.0} s, load1 {:.2} at the end",
        all_ends.len() - bad,
        all_ends.len(),
        started.elapsed().as_secs_f64(),
        load1()
    );
    rt.block_on(async { drop(b) });
}
