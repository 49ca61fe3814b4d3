//! `cargo bench --bench churn`: whether a `sluice serve` that runs for a long time under churn
//! keeps its memory flat (issue: faults — "RSS after warm-up and at the end, flat within 10 %").
//!
//! One release `sluice serve` (its log in `benches/out/churn-sluice.log`), default settings, and
//! for `BENCH_MINUTES` (default 30):
//!
//! - **pushes that end and come back**: `BENCH_PUSHES` (default 4) streams of qualities
//!   `BENCH_QUALITIES` (default `480p`), each pushed by `common::sample_file()` (720p30
//!   H.264+AAC, `ffmpeg -re -c copy`) for `BENCH_PUSH_SECS` (default 40) s; the pusher is then
//!   killed, the bench waits for the stream to read `idle` (the session has ended) and pushes
//!   again: every round is a new push session, with its transcode built and torn down. Four of
//!   the embedded default ladder (`720p,480p`: two x264 encodes each) do not fit two cores: the
//!   load went past 15, and what an overloaded server holds is its backlog, not a leak;
//! - **viewers on blocking reloads**: `BENCH_VIEWERS` (default 40) shared among the streams,
//!   each asking for the next part of the first variant's media playlist
//!   (`_HLS_msn`/`_HLS_part`) and fetching it, as an LL-HLS player does; while a stream is
//!   between sessions they poll once a second;
//! - **API churn**: a stream, a webhook and a VOD record created and deleted, over and over
//!   (about `BENCH_API_PER_SEC`, default 3, of each a second).
//!
//! Every 10 s it samples the process's resident memory (VmRSS), its threads and its open files.
//! Printed: a line per minute, then RSS after the warm-up (`BENCH_WARMUP_MINUTES`, default 3:
//! the first sessions, caches and pools filled) and at the end, and their ratio (the target:
//! within 1.10), with the sessions, viewer fetches and API calls done meanwhile.
//!
//! Knobs: `BENCH_MINUTES`, `BENCH_WARMUP_MINUTES`, `BENCH_PUSHES`, `BENCH_QUALITIES`, `BENCH_PUSH_SECS`,
//! `BENCH_VIEWERS`, `BENCH_API_PER_SEC`. Compare an allocator setting by running it again with
//! the environment the server should get, e.g. `BENCH_SERVER_ENV="MALLOC_ARENA_MAX=8"`.

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{next_part, push_file, Sluice};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// (VmRSS in KiB, threads, open files) of `pid`.
fn sample(pid: u32) -> (u64, usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let count = |dir: &str| std::fs::read_dir(format!("/proc/{pid}/{dir}")).map(|d| d.count()).unwrap_or(0);
    (rss, count("task"), count("fd"))
}

#[derive(Default)]
struct Counts {
    sessions: AtomicU64,
    fetches: AtomicU64,
    failed_fetches: AtomicU64,
    api_calls: AtomicU64,
    api_errors: AtomicU64,
}

struct Pushed {
    id: String,
    ingest: String,
    master: String,
}

/// The newest part's URI of a media playlist.
fn newest_part(playlist: &str) -> Option<&str> {
    playlist
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("#EXT-X-PART:"))
        .and_then(|attrs| common::attr(attrs, "URI"))
}

/// An LL-HLS viewer: blocking reloads of the first variant, and every newest part, until `stop`.
async fn viewer(client: reqwest::Client, master: String, counts: Arc<Counts>, stop: Arc<AtomicBool>) {
    let base = |url: &str| url.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default();
    let get = |url: String| {
        let client = client.clone();
        async move {
            let r = client.get(&url).send().await.ok()?;
            if !r.status().is_success() {
                return None;
            }
            r.bytes().await.ok()
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let Some(text) = get(master.clone()).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let text = String::from_utf8_lossy(&text).into_owned();
        let Some(variant) = common::parse_master(&text).into_iter().map(|(_, uri)| uri).next() else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let media = format!("{}/{variant}", base(&master));
        let mut url = media.clone();
        while !stop.load(Ordering::Relaxed) {
            let Some(body) = get(url.clone()).await else {
                counts.failed_fetches.fetch_add(1, Ordering::Relaxed);
                break; // the session ended: start again from the master
            };
            counts.fetches.fetch_add(1, Ordering::Relaxed);
            let playlist = String::from_utf8_lossy(&body).into_owned();
            if playlist.contains("#EXT-X-ENDLIST") {
                break;
            }
            if let Some(part) = newest_part(&playlist) {
                let part_url = format!("{}/{part}", base(&media));
                match get(part_url).await {
                    Some(_) => counts.fetches.fetch_add(1, Ordering::Relaxed),
                    None => counts.failed_fetches.fetch_add(1, Ordering::Relaxed),
                };
            }
            let Some((msn, part)) = next_part(&playlist) else { break };
            url = format!("{media}?_HLS_msn={msn}&_HLS_part={part}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Pushes `stream` for `secs`, kills the pusher, waits for `idle`, again, until `stop`.
async fn pusher(
    sluice: Arc<Sluice>,
    stream: Arc<Pushed>,
    secs: u64,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
) {
    let file = common::sample_file();
    while !stop.load(Ordering::Relaxed) {
        let push = push_file(&file, &stream.ingest);
        let until = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        drop(push);
        counts.sessions.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let status = async {
                let r = sluice
                    .client
                    .get(format!("{}/streams/{}", sluice.api, stream.id))
                    .bearer_auth(&sluice.key)
                    .send()
                    .await
                    .ok()?;
                r.json::<Value>().await.ok()?["status"].as_str().map(str::to_string)
            }
            .await;
            if status.as_deref() == Some("idle") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Creates and deletes a stream, a webhook and a VOD record, about `per_sec` of each a second.
async fn api_churn(sluice: Arc<Sluice>, per_sec: u64, counts: Arc<Counts>, stop: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / per_sec.max(1)));
    let mut n = 0u64;
    let call = |method: reqwest::Method, url: String, body: Option<Value>| {
        let sluice = sluice.clone();
        let counts = counts.clone();
        async move {
            let mut req = sluice.client.request(method, url).bearer_auth(&sluice.key);
            if let Some(body) = body {
                req = req.json(&body);
            }
            counts.api_calls.fetch_add(1, Ordering::Relaxed);
            // A DELETE answers 204 with no body: success is the status.
            let answer = async {
                let r = req.send().await.ok()?.error_for_status().ok()?;
                Some(r.json::<Value>().await.unwrap_or(Value::Null))
            }
            .await;
            if answer.is_none() {
                counts.api_errors.fetch_add(1, Ordering::Relaxed);
            }
            answer
        }
    };
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        n += 1;
        let api = &sluice.api;
        let stream = call(
            reqwest::Method::POST,
            format!("{api}/streams"),
            Some(json!({"name": format!("churn-{n}")})),
        );
        let hook = call(
            reqwest::Method::POST,
            format!("{api}/webhooks"),
            Some(json!({"url": "http://127.0.0.1:9/hook", "events": ["stream.live"]})),
        );
        let vod = call(
            reqwest::Method::POST,
            format!("{api}/vod"),
            Some(json!({"name": format!("churn-{n}"), "filename": "churn.mp4"})),
        );
        let (stream, hook, vod) = tokio::join!(stream, hook, vod);
        let id = |v: &Option<Value>, pointer: &str| {
            v.as_ref().and_then(|v| v.pointer(pointer)?.as_str().map(str::to_string))
        };
        if let Some(id) = id(&stream, "/_id") {
            call(reqwest::Method::DELETE, format!("{api}/streams/{id}"), None).await;
        }
        if let Some(id) = id(&hook, "/_id").or_else(|| id(&hook, "/id")) {
            call(reqwest::Method::DELETE, format!("{api}/webhooks/{id}"), None).await;
        }
        if let Some(id) = id(&vod, "/vod/_id") {
            call(reqwest::Method::DELETE, format!("{api}/vod/{id}"), None).await;
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let minutes = env_u64("BENCH_MINUTES", 30);
    let warmup = env_u64("BENCH_WARMUP_MINUTES", 3).min(minutes);
    let pushes = env_u64("BENCH_PUSHES", 4);
    let push_secs = env_u64("BENCH_PUSH_SECS", 40);
    let qualities: Vec<String> = std::env::var("BENCH_QUALITIES")
        .unwrap_or_else(|_| "480p".into())
        .split(',')
        .map(str::to_string)
        .collect();
    let viewers = env_u64("BENCH_VIEWERS", 40);
    let per_sec = env_u64("BENCH_API_PER_SEC", 3);
    let server_env: Vec<(String, String)> = std::env::var("BENCH_SERVER_ENV")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    let env: Vec<(&str, String)> = server_env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let log = common::out_dir().join("churn-sluice.log");
    let sluice = Arc::new(Sluice::start_logged(&env, log.clone()).await);
    let pid = sluice.proc.0.id();
    println!(
        "churn: {minutes} min ({warmup} warm-up), {pushes} pushes ({qualities:?}) of {push_secs} s each round, {viewers} LL-HLS \
         viewers, ~{per_sec}/s each of stream, webhook and VOD created and deleted; server env {server_env:?}; \
         log {}",
        log.display()
    );

    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let mut streams = Vec::new();
    for i in 0..pushes {
        let s = sluice.create_stream(json!({"name": format!("pushed-{i}"), "qualities": qualities})).await;
        let id = s["_id"].as_str().unwrap_or_else(|| panic!("no id in {s}")).to_string();
        let ingest = s["ingestUrl"].as_str().unwrap_or_else(|| panic!("no ingestUrl in {s}")).to_string();
        let master = s["playbackUrls"]["hls"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("http://127.0.0.1:{}/play/live/{id}/master.m3u8", sluice.http));
        let stream = Arc::new(Pushed { id, ingest, master });
        tasks.push(tokio::spawn(pusher(
            sluice.clone(),
            stream.clone(),
            push_secs,
            counts.clone(),
            stop.clone(),
        )));
        streams.push(stream);
    }
    for v in 0..viewers {
        if let Some(stream) = streams.get(v as usize % streams.len().max(1)) {
            tasks.push(tokio::spawn(viewer(
                sluice.client.clone(),
                stream.master.clone(),
                counts.clone(),
                stop.clone(),
            )));
        }
    }
    tasks.push(tokio::spawn(api_churn(sluice.clone(), per_sec, counts.clone(), stop.clone())));

    let started = Instant::now();
    let (mut at_warmup, mut samples) = (None, Vec::new());
    let mut next = started;
    while started.elapsed() < Duration::from_secs(minutes * 60) {
        next += Duration::from_secs(10);
        tokio::time::sleep_until(next.into()).await;
        let (rss, threads, files) = sample(pid);
        if rss == 0 {
            panic!("sluice serve is gone (its log: {})", log.display());
        }
        let elapsed = started.elapsed();
        samples.push((elapsed, rss));
        if at_warmup.is_none() && elapsed >= Duration::from_secs(warmup * 60) {
            at_warmup = Some(rss);
        }
        if elapsed.as_secs() % 60 < 10 {
            println!(
                "{:>5.1} min  RSS {:>4} MiB  threads {threads:>3}  files {files:>4}  load1 {:>5.2}  sessions {:>4}  \
                 fetches {:>7} ({} failed)  API calls {:>6} ({} errors)",
                elapsed.as_secs_f64() / 60.0,
                rss / 1024,
                common::load1(),
                counts.sessions.load(Ordering::Relaxed),
                counts.fetches.load(Ordering::Relaxed),
                counts.failed_fetches.load(Ordering::Relaxed),
                counts.api_calls.load(Ordering::Relaxed),
                counts.api_errors.load(Ordering::Relaxed),
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    let end = samples.last().map_or(0, |s| s.1);
    let warm = at_warmup.unwrap_or(end);
    let peak = samples.iter().map(|s| s.1).max().unwrap_or(0);
    // A sample moves by ±20 MiB as sessions start and end: the minute after the warm-up and the
    // last minute, each averaged, say more than two samples.
    let mean_of = |from: Duration, to: Duration| {
        let within: Vec<u64> = samples.iter().filter(|s| s.0 >= from && s.0 < to).map(|s| s.1).collect();
        within.iter().sum::<u64>() / (within.len().max(1) as u64)
    };
    let total = Duration::from_secs(minutes * 60);
    let warm_mean = mean_of(Duration::from_secs(warmup * 60), Duration::from_secs(warmup * 60 + 60));
    let end_mean = mean_of(total.saturating_sub(Duration::from_secs(60)), total + Duration::from_secs(10));
    println!(
        "RSS after the {warmup}-min warm-up {} MiB, at the end ({minutes} min) {} MiB, peak {} MiB: \
         end / warm-up = {:.3}; the minute after the warm-up {} MiB and the last minute {} MiB on average: \
         {:.3} (target ≤ 1.10); {} push sessions, {} viewer fetches, {} API calls",
        warm / 1024,
        end / 1024,
        peak / 1024,
        end as f64 / warm.max(1) as f64,
        warm_mean / 1024,
        end_mean / 1024,
        end_mean as f64 / warm_mean.max(1) as f64,
        counts.sessions.load(Ordering::Relaxed),
        counts.fetches.load(Ordering::Relaxed),
        counts.api_calls.load(Ordering::Relaxed),
    );
}
