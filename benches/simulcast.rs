//! `cargo bench --bench simulcast`: what a simulcast target costs (CONTRACT: Simulcast).
//!
//! **CPU per target**, Sluice beside nginx's rtmp module (`push`, its way of sending a push on),
//! in one run. The push is the sample file (720p30 2.5 Mbit/s H.264 + AAC, keyframe every 2 s),
//! sent in real time by `ffmpeg -re -stream_loop -1 -c copy`. Sluice gets it on a passthrough
//! stream (`"qualities": ["1080p"]`, above the source: its LL-HLS is the source remuxed, nothing
//! is encoded), first with no target for `BENCH_WINDOW` seconds (default 30), then with
//! `BENCH_TARGETS` (default 4) targets, all on a receiving nginx, for as long; the difference in
//! Sluice's CPU (user + system, /proc/<pid>/stat) over the targets is the CPU per target, in % of
//! one core. nginx is measured the same way: an nginx relay taking the same push with no `push`
//! line, then one with a `push` per target to the same receiving nginx. The bar: at most
//! 1 % of a core a target.
//!
//! **Memory with a hanging target**: one more target, on an nginx of its own that is then stopped
//! (SIGSTOP: its sockets stay open and take nothing), for `BENCH_HANG_SECONDS` (default 60) while
//! the push goes on; Sluice's resident memory is read every 5 s. The target's queue (2 MiB) fills
//! in its first seconds, its connection fails after 10 s without progress and is tried again with
//! backoff (each try hangs in the handshake); after the first 15 s the memory should be flat.
//!
//! Prints a table on stdout and writes it to `benches/out/simulcast.txt`.

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{cpu_seconds, out_dir, push, sample_file, Nginx, Sluice};
use support::rss_kib;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// CPU of `cpu` over `window`, in % of one core.
async fn cpu_percent(window: Duration, cpu: impl Fn() -> f64) -> f64 {
    let (c0, t0) = (cpu(), Instant::now());
    tokio::time::sleep(window).await;
    (cpu() - c0) / t0.elapsed().as_secs_f64() * 100.0
}

async fn targets(s: &Sluice, stream: &str) -> Vec<Value> {
    let v: Value = s
        .client
        .get(format!("{}/streams/{stream}/simulcast-targets", s.api))
        .bearer_auth(&s.key)
        .send()
        .await
        .expect("list targets")
        .json()
        .await
        .expect("targets JSON");
    v["items"].as_array().cloned().unwrap_or_default()
}

async fn add_target(s: &Sluice, stream: &str, url: &str, name: &str) {
    let r = s
        .client
        .post(format!("{}/streams/{stream}/simulcast-targets", s.api))
        .bearer_auth(&s.key)
        .json(&json!({"url": url, "name": name}))
        .send()
        .await
        .expect("add target");
    assert_eq!(r.status(), 201, "add target {name}");
}

/// Waits until `n` targets are live; panics after 60 s.
async fn all_live(s: &Sluice, stream: &str, n: usize) {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let live = targets(s, stream).await.iter().filter(|t| t["status"] == "live").count();
        if live >= n {
            return;
        }
        assert!(Instant::now() < until, "{live} of {n} targets live after 60 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// nginx with the rtmp module (two workers, as the other nginx of the benches) taking a push at
/// `application live`, with a `push` line per URL of `push_to`; and its RTMP port.
fn relay(dir: &std::path::Path, push_to: &[String]) -> (Nginx, u16) {
    let rtmp = support::free_port();
    let pushes: String = push_to.iter().map(|u| format!("push {u}; ")).collect();
    let config = format!(
        "load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;\nworker_processes 2;\n\
         events {{ worker_connections 256; }}\n\
         rtmp {{ server {{ listen 127.0.0.1:{rtmp}; application live {{ live on; record off; {pushes}}} }} }}\n"
    );
    (Nginx::balancer(dir, &config, rtmp), rtmp)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = env_or("BENCH_TARGETS", 4) as usize;
    let window = Duration::from_secs(env_or("BENCH_WINDOW", 30));
    let hang = env_or("BENCH_HANG_SECONDS", 60);
    let file = sample_file();
    let receiver_dir = tempfile::tempdir().expect("tempdir");
    let receiver = Nginx::start(receiver_dir.path(), None);
    let target_urls: Vec<String> =
        (0..n).map(|i| format!("rtmp://127.0.0.1:{}/live/target{i}", receiver.rtmp)).collect();

    // Sluice.
    let log = out_dir().join("simulcast-sluice.log");
    let sluice = Sluice::start_logged(&[], log).await;
    let pid = sluice.proc.0.id();
    let created =
        sluice.create_stream(json!({"name": "simulcast", "qualities": ["1080p"], "vodEnabled": false})).await;
    let id = created["_id"].as_str().expect("stream id").to_string();
    let _pusher = push(&file, created["ingestUrl"].as_str().expect("ingestUrl"));
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let v: Value = sluice
            .client
            .get(format!("{}/streams/{id}", sluice.api))
            .bearer_auth(&sluice.key)
            .send()
            .await
            .expect("get stream")
            .json()
            .await
            .expect("stream JSON");
        if v["status"] == "live" {
            break;
        }
        assert!(Instant::now() < until, "the push did not go live");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await; // past the start's transient work
    let sluice_alone = cpu_percent(window, || cpu_seconds(pid)).await;
    for (i, url) in target_urls.iter().enumerate() {
        add_target(&sluice, &id, url, &format!("target{i}")).await;
    }
    all_live(&sluice, &id, n).await;
    let sluice_with = cpu_percent(window, || cpu_seconds(pid)).await;
    let sluice_per = (sluice_with - sluice_alone) / n as f64;

    // Memory with one hanging target, on an nginx of its own, stopped once the target is live.
    let hang_dir = tempfile::tempdir().expect("tempdir");
    let hanging = Nginx::start(hang_dir.path(), None);
    add_target(&sluice, &id, &format!("rtmp://127.0.0.1:{}/live/hanging", hanging.rtmp), "hanging").await;
    all_live(&sluice, &id, n + 1).await;
    let signal = |sig: &str| {
        for p in hanging.pids() {
            let _ = Command::new("kill").arg(sig).arg(p.to_string()).status();
        }
    };
    signal("-STOP");
    let mut rss = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(hang) {
        rss.push((start.elapsed().as_secs(), rss_kib(pid)));
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    rss.push((start.elapsed().as_secs(), rss_kib(pid)));
    let hung: Vec<Value> = targets(&sluice, &id).await;
    let hung = hung.iter().find(|t| t["name"] == "hanging").cloned().unwrap_or(Value::Null);
    let others_live = targets(&sluice, &id).await.iter().filter(|t| t["status"] == "live").count();
    signal("-CONT");
    drop(_pusher);
    drop(sluice);

    // nginx's rtmp module as the peer: a relay without and with a `push` per target.
    let file = &file;
    let peer = |push_to: Vec<String>| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let (relay, port) = relay(dir.path(), &push_to);
        let _pusher = push(file, &format!("rtmp://127.0.0.1:{port}/live/in"));
        tokio::time::sleep(Duration::from_secs(5)).await; // connected and past its start
        cpu_percent(window, || relay.cpu_seconds()).await
    };
    let nginx_alone = peer(Vec::new()).await;
    let nginx_with = peer(target_urls.clone()).await;
    let nginx_per = (nginx_with - nginx_alone) / n as f64;

    let after_fill = rss.iter().find(|(t, _)| *t >= 15).map_or(0, |(_, k)| *k);
    let last = rss.last().map_or(0, |(_, k)| *k);
    let mut out = String::new();
    let _ =
        writeln!(out, "simulcast: {n} targets, one 720p30 2.5 Mbit/s push, {} s windows", window.as_secs());
    let _ =
        writeln!(out, "{:<28} {:>10} {:>14} {:>16}", "", "no target", format!("{n} targets"), "per target");
    let _ = writeln!(
        out,
        "{:<28} {:>9.2}% {:>13.2}% {:>15.2}%",
        "Sluice CPU (% of a core)", sluice_alone, sluice_with, sluice_per
    );
    let _ = writeln!(
        out,
        "{:<28} {:>9.2}% {:>13.2}% {:>15.2}%",
        "nginx-rtmp push (peer)", nginx_alone, nginx_with, nginx_per
    );
    let _ = writeln!(
        out,
        "per target: Sluice {:.2}% of a core = {:.2}x nginx's {:.2}%; the bar is 1% ({})",
        sluice_per,
        sluice_per / nginx_per.max(0.01),
        nginx_per,
        if sluice_per <= 1.0 { "met" } else { "NOT met" }
    );
    let series: Vec<String> = rss.iter().map(|(t, k)| format!("{t}s {:.1}", *k as f64 / 1024.0)).collect();
    let _ = writeln!(out, "memory with a hanging target (MiB): {}", series.join(", "));
    let _ = writeln!(
        out,
        "after its queue filled (15 s → {} s): {:+.1} MiB; the hanging target: {} ({}); the other {} targets live: {}",
        hang,
        (last as f64 - after_fill as f64) / 1024.0,
        hung["status"],
        hung["lastError"],
        n,
        others_live
    );
    print!("{out}");
    std::fs::write(out_dir().join("simulcast.txt"), &out).expect("benches/out/simulcast.txt");
}
