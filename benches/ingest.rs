//! `cargo bench --bench ingest`: how many concurrent 2.5 Mbit/s RTMP pushes one Sluice accepts
//! and keeps live on this machine, and the CPU each costs, beside nginx's rtmp module
//! (Debian's libnginx-mod-rtmp) receiving the same pushes in the same run.
//!
//! The pushes are one pre-encoded 2.5 Mbit/s H.264/AAC FLV file, sent in real time by
//! `ffmpeg -re -stream_loop -1 -c copy` (so the pushers themselves cost little CPU). For each
//! step of the ramp, Sluice and then nginx receive N pushes; after a warm-up, the server's CPU
//! is read from /proc over the window, and a push counts as kept live when its ffmpeg is still
//! sending at the end (and, for Sluice, its stream is `live`). Sluice runs the real ingest: RTMP
//! parsing and its GStreamer pipeline (flvdemux, h264parse, aacparse) per push.
//! Knobs: `BENCH_STEPS` (default "4,8,16,32,48"), `BENCH_WINDOW` seconds (default 10).

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{connections_to, cpu_seconds, push, sample_file, settle, Nginx, Proc, Sluice};

struct Round {
    alive: usize,
    live: usize,
    cpu_percent: f64,
}

/// Pushes `urls` for a warm-up and the window; `cpu` reads the server's CPU seconds.
async fn round(
    file: &Path,
    urls: &[String],
    window: Duration,
    cpu: impl Fn() -> f64,
    live_count: impl AsyncFn() -> usize,
) -> Round {
    let mut pushers: Vec<Proc> = urls.iter().map(|u| push(file, u)).collect();
    // A fixed warm-up, the same for both servers, so that connection setup is not measured.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (cpu0, t0) = (cpu(), Instant::now());
    tokio::time::sleep(window).await;
    let cpu_percent = (cpu() - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    let alive =
        pushers.iter_mut().map(|p| matches!(p.0.try_wait(), Ok(None))).filter(|running| *running).count();
    let live = live_count().await;
    drop(pushers);
    // The next round starts once the server has ended every push of this one.
    if !settle(Duration::from_secs(30), async || live_count().await == 0).await {
        eprintln!("  (pushes still open 30 s after their pushers stopped)");
    }
    Round { alive, live, cpu_percent }
}

fn main() {
    let steps: Vec<usize> = std::env::var("BENCH_STEPS")
        .unwrap_or_else(|_| "4,8,16,32,48".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let window =
        Duration::from_secs(std::env::var("BENCH_WINDOW").ok().and_then(|s| s.parse().ok()).unwrap_or(10));
    let file = sample_file();
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");

    // Sluice: the release binary with the defaults, pushes authenticated as ingestUrl says.
    let sluice = rt.block_on(Sluice::start(&[]));
    let client = reqwest::Client::new();
    let max = steps.iter().copied().max().unwrap_or(0);
    let ingest_urls: Vec<String> = rt.block_on(async {
        let mut urls = Vec::new();
        for i in 0..max {
            // Ingest alone: a stream without `llhls` gets no transcode or packaging (those are
            // measured by benches/live_capacity), and RTSP egress does not run yet.
            let body = serde_json::json!({"name": format!("push-{i}"), "protocols": ["rtsp"]});
            let s = sluice.create_stream(body).await;
            urls.push(s["ingestUrl"].as_str().expect("ingestUrl").to_string());
        }
        urls
    });
    let (api, key) = (sluice.api.clone(), sluice.key.clone());

    // nginx with the rtmp module relaying only (no HLS), two workers like Sluice's two cores.
    let nginx = Nginx::start(dir.path(), None);
    let nginx_port = nginx.rtmp;

    println!(
        "ingest bench: 2.5 Mbit/s H.264+AAC pushes (ffmpeg -c copy), {}-s windows, release build",
        window.as_secs()
    );
    println!("  pushes | Sluice live  CPU total  CPU/push | nginx-rtmp alive  CPU total  CPU/push");
    let (mut sluice_max, mut nginx_max) = (0, 0);
    let (mut sluice_cpu_at, mut nginx_cpu_at) = (0.0, 0.0);
    for &n in &steps {
        let urls: Vec<String> = ingest_urls[..n].to_vec();
        let sluice_pid = sluice.proc.0.id();
        let s = rt.block_on(round(
            &file,
            &urls,
            window,
            || cpu_seconds(sluice_pid),
            async || {
                let v: Value = client
                    .get(format!("{api}/streams?status=live&limit=1"))
                    .bearer_auth(&key)
                    .send()
                    .await
                    .expect("list")
                    .json()
                    .await
                    .expect("list JSON");
                v["total"].as_u64().unwrap_or(0) as usize
            },
        ));
        let nginx_urls: Vec<String> =
            (0..n).map(|i| format!("rtmp://127.0.0.1:{nginx_port}/live/push-{i}")).collect();
        // nginx has no API to ask: its open pushes are its established RTMP connections.
        let g = rt.block_on(round(
            &file,
            &nginx_urls,
            window,
            || nginx.cpu_seconds(),
            async || connections_to(nginx_port),
        ));
        let nginx_cpu = g.cpu_percent;
        let sluice_ok = s.alive == n && s.live == n;
        let nginx_ok = g.alive == n;
        if sluice_ok {
            sluice_max = n;
            sluice_cpu_at = s.cpu_percent / n as f64;
        }
        if nginx_ok {
            nginx_max = n;
            nginx_cpu_at = nginx_cpu / n as f64;
        }
        println!(
            "  {n:>6} | {:>5}/{n:<4} {:>7.1} %  {:>6.2} % | {:>10}/{n:<4} {:>7.1} %  {:>6.2} %",
            s.live,
            s.cpu_percent,
            s.cpu_percent / n as f64,
            g.alive,
            nginx_cpu,
            nginx_cpu / n as f64
        );
    }
    println!(
        "  kept live: Sluice {sluice_max}, nginx-rtmp {nginx_max} (of the steps tried); CPU per push at that load: \
         Sluice {sluice_cpu_at:.2} %, nginx-rtmp {nginx_cpu_at:.2} % (ratio {:.1}x)",
        if nginx_cpu_at > 0.0 { sluice_cpu_at / nginx_cpu_at } else { f64::NAN }
    );
    drop(nginx);
    drop(sluice);
}
