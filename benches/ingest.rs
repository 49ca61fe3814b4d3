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

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// CPU seconds (user + system) a process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the command name.
    (ticks(11) + ticks(12)) / 100.0
}

fn sample_file(dir: &Path) -> PathBuf {
    let file = dir.join("ingest-2500k.flv");
    if !file.exists() {
        let ok = Command::new("ffmpeg")
            .args(["-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30"])
            .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "20"])
            .args([
                "-c:v", "libx264", "-preset", "veryfast", "-b:v", "2400k", "-maxrate", "2400k", "-bufsize",
                "4800k",
            ])
            .args(["-g", "60", "-c:a", "aac", "-b:a", "96k", "-f", "flv"])
            .arg(&file)
            .status()
            .expect("ffmpeg encodes the sample")
            .success();
        assert!(ok, "encoding the sample failed");
    }
    file
}

fn push(file: &Path, url: &str) -> Proc {
    Proc(
        Command::new("ffmpeg")
            .args(["-loglevel", "quiet", "-re", "-stream_loop", "-1", "-i"])
            .arg(file)
            .args(["-c", "copy", "-f", "flv", url])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ffmpeg runs"),
    )
}

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
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (cpu0, t0) = (cpu(), Instant::now());
    tokio::time::sleep(window).await;
    let cpu_percent = (cpu() - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    let alive =
        pushers.iter_mut().map(|p| matches!(p.0.try_wait(), Ok(None))).filter(|running| *running).count();
    let live = live_count().await;
    drop(pushers);
    tokio::time::sleep(Duration::from_secs(2)).await;
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
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/out");
    std::fs::create_dir_all(&out).expect("benches/out");
    let file = sample_file(&out);
    let dir = tempfile::tempdir().expect("tempdir");
    let (http, rtmp, nginx_port) = (free_port(), free_port(), free_port());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");

    // Sluice: the release binary with the defaults, pushes authenticated as ingestUrl says.
    let env = |cmd: &mut Command| {
        cmd.env("SLUICE_DATA_DIR", dir.path())
            .env("SLUICE_HTTP_ADDR", format!("127.0.0.1:{http}"))
            .env("SLUICE_RTMP_ADDR", format!("127.0.0.1:{rtmp}"))
            .env("SLUICE_RATE_LIMIT_PER_KEY", "100000")
            .env("SLUICE_RATE_LIMIT_BURST", "100000")
            .env("RUST_LOG", "warn");
    };
    let mut boot = Command::new(env!("CARGO_BIN_EXE_sluice"));
    env(&mut boot);
    let boot = boot.args(["admin", "bootstrap", "--project", "bench", "--json"]).output().expect("bootstrap");
    let key = serde_json::from_slice::<Value>(&boot.stdout).expect("bootstrap JSON")["apiKey"]["key"]
        .as_str()
        .expect("key")
        .to_string();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_sluice"));
    env(&mut serve);
    let sluice = Proc(serve.arg("serve").stdout(Stdio::null()).spawn().expect("sluice serve"));
    let api = format!("http://127.0.0.1:{http}/v1/projects/bench");
    let client = reqwest::Client::new();
    let max = steps.iter().copied().max().unwrap_or(0);
    let ingest_urls: Vec<String> = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        while client.get(format!("http://127.0.0.1:{http}/healthz")).send().await.is_err() {
            assert!(Instant::now() < deadline, "sluice did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut urls = Vec::new();
        for i in 0..max {
            let s: Value = client
                .post(format!("{api}/streams"))
                .bearer_auth(&key)
                .json(&serde_json::json!({"name": format!("push-{i}")}))
                .send()
                .await
                .expect("create stream")
                .json()
                .await
                .expect("stream JSON");
            urls.push(s["ingestUrl"].as_str().expect("ingestUrl").to_string());
        }
        urls
    });

    // nginx with the rtmp module, two workers like Sluice's two cores.
    let conf = dir.path().join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;\ndaemon off;\nworker_processes 2;\npid {pid};\n\
             error_log {log} warn;\nevents {{ worker_connections 4096; }}\n\
             rtmp {{ server {{ listen 127.0.0.1:{nginx_port}; application live {{ live on; record off; }} }} }}\n",
            pid = dir.path().join("nginx.pid").display(),
            log = dir.path().join("nginx.log").display(),
        ),
    )
    .expect("nginx.conf");
    let nginx = Proc(
        Command::new("nginx")
            .args(["-c"])
            .arg(&conf)
            .args(["-p"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx runs (libnginx-mod-rtmp from scripts/deps.sh)"),
    );
    std::thread::sleep(Duration::from_secs(1));
    // nginx's CPU is its master plus its workers.
    let nginx_pids: Vec<u32> = {
        let mut pids = vec![nginx.0.id()];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            if let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let ppid = stat
                    .rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().nth(1))
                    .and_then(|p| p.parse::<u32>().ok());
                if ppid == Some(nginx.0.id()) {
                    pids.push(pid);
                }
            }
        }
        pids
    };

    println!(
        "ingest bench: 2.5 Mbit/s H.264+AAC pushes (ffmpeg -c copy), {}-s windows, release build",
        window.as_secs()
    );
    println!("  pushes | Sluice live  CPU total  CPU/push | nginx-rtmp alive  CPU total  CPU/push");
    let (mut sluice_max, mut nginx_max) = (0, 0);
    let (mut sluice_cpu_at, mut nginx_cpu_at) = (0.0, 0.0);
    for &n in &steps {
        let urls: Vec<String> = ingest_urls[..n].to_vec();
        let sluice_pid = sluice.0.id();
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
        let g = rt.block_on(round(
            &file,
            &nginx_urls,
            window,
            || nginx_pids.iter().map(|p| cpu_seconds(*p)).sum(),
            async || 0,
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
