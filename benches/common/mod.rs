//! What the media benches share beyond `tests/support` (child processes, free ports, `Sluice`,
//! pushers and clips, mounted by each bench as `crate::support`): CPU and load readings from
//! /proc, `benches/out`, nginx with its rtmp module, a `sluice serve` with TLS ([`TlsSluice`]:
//! HTTPS, RTMPS, and RTMP and SRT beside them), and the reading of LL-HLS master playlists and of
//! the `moof` of CMAF parts.

#![allow(dead_code, unused_imports)]

pub use crate::support::{clip, free_port, push_file as push, Killed as Proc, Sluice};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice::media::cmaf;

/// CPU seconds (user + system) a process has used so far.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the command name.
    (ticks(11) + ticks(12)) / 100.0
}

/// The 1-minute load average (/proc/loadavg).
pub fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// IPv4 TCP sockets on 127.0.0.1:`port` on this machine in `state` (/proc/net/tcp's hex code).
fn sockets_on(port: u16, state: &str) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let local = format!("0100007F:{port:04X}");
    // Fields: sl, local_address, rem_address, st, ...
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() > 3 && f[1] == local && f[3] == state)
        .count()
}

/// Established TCP connections to 127.0.0.1:`port` on this machine, from /proc/net/tcp: how a
/// bench sees that a server has let go of its pushers.
pub fn connections_to(port: u16) -> usize {
    sockets_on(port, "01")
}

/// Whether something listens on 127.0.0.1:`port` (TCP, IPv4), from /proc/net/tcp.
pub fn listening(port: u16) -> bool {
    sockets_on(port, "0A") > 0
}

/// The median of `v` (the upper one of an even count); NaN when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Polls `settled` every 50 ms until it holds or `within` passes; returns whether it held.
pub async fn settle(within: Duration, mut settled: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if settled().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `benches/out`, created.
pub fn out_dir() -> PathBuf {
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/out");
    std::fs::create_dir_all(&out).expect("benches/out");
    out
}

/// A 20-s 720p30 2.5 Mbit/s H.264 (keyframe every 2 s) + AAC FLV, from `media-fixtures`.
pub fn sample_file() -> PathBuf {
    clip("ingest-720p30-2500k-20s.flv")
}

/// HLS that nginx writes into `<dir>/hls`.
#[derive(Clone, Copy)]
pub struct NginxHls {
    /// `hls_fragment`, seconds.
    pub fragment: u32,
    /// `hls_playlist_length`, seconds.
    pub playlist: u32,
    /// Also serve `<dir>/hls` over HTTP at `/hls/` (with CORS) on `Nginx::http`.
    pub serve: bool,
    /// `worker_processes` (2 by default, like Sluice's two cores).
    pub workers: u32,
}

/// nginx with the rtmp module, two workers like Sluice's two cores. Dropping it stops the master
/// and whatever of its workers is left.
pub struct Nginx {
    pub proc: Proc,
    pub rtmp: u16,
    pub http: u16,
    pub hls_dir: PathBuf,
    /// Its error log (warnings and up).
    pub log: PathBuf,
    /// The master and its workers as they started.
    started: Vec<u32>,
}

impl Nginx {
    /// With `hls_fragment` (seconds) it also writes HLS (12-s playlists) into `<dir>/hls` and
    /// serves it over HTTP with CORS. Its log is `<dir>/nginx.log`.
    pub fn start(dir: &Path, hls_fragment: Option<u32>) -> Nginx {
        let hls = hls_fragment.map(|fragment| NginxHls { fragment, playlist: 12, serve: true, workers: 2 });
        Nginx::start_with(dir, hls, dir.join("nginx.log"))
    }

    /// Runs it in `dir` with `hls`, its error log in `log`.
    pub fn start_with(dir: &Path, hls: Option<NginxHls>, log: PathBuf) -> Nginx {
        let (rtmp, http) = (free_port(), free_port());
        let hls_dir = dir.join("hls");
        std::fs::create_dir_all(&hls_dir).expect("hls dir");
        // Workers run as `nobody` when the bench runs as root: let them write the fragments.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
        let _ = std::fs::set_permissions(&hls_dir, std::fs::Permissions::from_mode(0o777));
        let path = hls_dir.display();
        let hls_conf = hls.map_or(String::new(), |h| {
            format!(
                "hls on; hls_path {path}; hls_fragment {}s; hls_playlist_length {}s;",
                h.fragment, h.playlist
            )
        });
        let http_conf = match hls {
            Some(h) if h.serve => format!(
                "http {{ access_log off; server {{ listen 127.0.0.1:{http}; location /hls/ {{ alias {path}/; \
                 types {{ application/vnd.apple.mpegurl m3u8; video/mp2t ts; }} \
                 add_header Cache-Control no-cache; add_header Access-Control-Allow-Origin *; }} }} }}\n"
            ),
            _ => String::new(),
        };
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;\ndaemon off;\nworker_processes {workers};\n\
                 pid {pid};\nerror_log {log} warn;\nevents {{ worker_connections 4096; }}\n\
                 rtmp {{ server {{ listen 127.0.0.1:{rtmp}; application live {{ live on; record off; {hls_conf} }} }} }}\n\
                 {http_conf}",
                pid = dir.join("nginx.pid").display(),
                log = log.display(),
                workers = hls.map_or(2, |h| h.workers),
            ),
        )
        .expect("nginx.conf");
        Nginx::spawn(dir, &conf, rtmp, http, hls_dir, log)
    }

    /// nginx (two workers) serving the files of `root` over HTTP, nothing else: the static peer
    /// of the origin benches. Its log is `<dir>/nginx.log`.
    pub fn serve_static(dir: &Path, root: &Path) -> Nginx {
        let http = free_port();
        let log = dir.join("nginx.log");
        use std::os::unix::fs::PermissionsExt;
        // Workers run as `nobody` when the bench runs as root: let them read the files.
        for d in [dir, root] {
            let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755));
        }
        let conf = dir.join("nginx-static.conf");
        std::fs::write(
            &conf,
            format!(
                "daemon off;\nworker_processes 2;\npid {pid};\nerror_log {log} warn;\n\
                 events {{ worker_connections 8192; }}\n\
                 http {{ access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000; \
                 server {{ listen 127.0.0.1:{http}; root {root}; \
                 types {{ application/vnd.apple.mpegurl m3u8; video/mp4 m4s mp4; }} \
                 add_header Access-Control-Allow-Origin *; }} }}\n",
                pid = dir.join("nginx-static.pid").display(),
                log = log.display(),
                root = root.display(),
            ),
        )
        .expect("nginx-static.conf");
        Nginx::spawn(dir, &conf, 0, http, root.to_path_buf(), log)
    }

    /// nginx running `config` (the load balancer of docs/scale-out.md, its ports already
    /// replaced) with its pid and error log in `dir`; ready once `http` listens.
    pub fn balancer(dir: &Path, config: &str, http: u16) -> Nginx {
        let log = dir.join("nginx-lb.log");
        let conf = dir.join("nginx-lb.conf");
        let full = format!(
            "daemon off;\npid {pid};\nerror_log {log} warn;\n{config}",
            pid = dir.join("nginx-lb.pid").display(),
            log = log.display(),
        );
        std::fs::write(&conf, full).expect("nginx-lb.conf");
        Nginx::spawn(dir, &conf, 0, http, dir.to_path_buf(), log)
    }

    fn spawn(dir: &Path, conf: &Path, rtmp: u16, http: u16, hls_dir: PathBuf, log: PathBuf) -> Nginx {
        let proc = Proc(
            Command::new("nginx")
                .args(["-c"])
                .arg(conf)
                .args(["-p"])
                .arg(dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nginx runs (scripts/deps.sh bench installs it)"),
        );
        // Ready when it listens and both workers run (their CPU is counted from `started`).
        let port = if rtmp != 0 { rtmp } else { http };
        let deadline = Instant::now() + Duration::from_secs(10);
        let started = loop {
            let pids = family(proc.0.id());
            if pids.len() >= 3 && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break pids;
            }
            assert!(Instant::now() < deadline, "nginx did not start listening on {port} with 2 workers");
            std::thread::sleep(Duration::from_millis(20));
        };
        Nginx { proc, rtmp, http, hls_dir, log, started }
    }

    /// The master and its workers now.
    pub fn pids(&self) -> Vec<u32> {
        family(self.proc.0.id())
    }

    /// CPU seconds of the master and its workers (those it started with).
    pub fn cpu_seconds(&self) -> f64 {
        self.started.iter().map(|p| cpu_seconds(*p)).sum()
    }
}

/// `master` and its children.
fn family(master: u32) -> Vec<u32> {
    let mut pids = vec![master];
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(master) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// nginx's workers outlive a killed master: ask the master to stop (SIGTERM, fast shutdown),
/// then kill whatever of it is left.
impl Drop for Nginx {
    fn drop(&mut self) {
        let pids = self.pids();
        let signal = |sig: &str, pid: u32| {
            let _ = Command::new("kill").arg(sig).arg(pid.to_string()).stderr(Stdio::null()).status();
        };
        signal("-TERM", self.proc.0.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && self.proc.running() {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.proc.0.kill();
        let _ = self.proc.0.wait();
        for pid in pids.into_iter().skip(1) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "nginx" {
                signal("-KILL", pid);
            }
        }
    }
}

/// A self-signed certificate in `dir` (the tests' recipe).
pub fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    super::support::self_signed(dir, "bench")
}

/// A `sluice serve` (the build's binary) with a self-signed certificate: its HTTP address serves
/// HTTPS (API and playback), RTMPS listens on `rtmps`, plain RTMP on `rtmp` and SRT on a port
/// of its choosing (`srtUrl` names it). Project `bench`, as [`Sluice`].
pub struct TlsSluice {
    pub proc: Proc,
    pub http: u16,
    pub rtmp: u16,
    pub rtmps: u16,
    pub key: String,
    /// `https://127.0.0.1:<http>/v1/projects/bench`.
    pub api: String,
    /// A client that trusts only the certificate: no proxy, 15-s timeout, many idle connections.
    pub client: reqwest::Client,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsSluice {
    /// Starts it with extra environment `env`, its log written to `log`, and waits until it
    /// answers over HTTPS.
    pub async fn start(env: &[(&str, String)], log: PathBuf) -> TlsSluice {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key_file) = self_signed(dir.path());
        let (http, rtmp, rtmps) = (free_port(), free_port(), free_port());
        let configure = || {
            let mut cmd = crate::support::sluice_command(dir.path(), http);
            // A bench measures the server, not the per-key limiter or the per-address cap.
            cmd.env("SLUICE_RTMP_ADDR", format!("127.0.0.1:{rtmp}"))
                .env("SLUICE_RTMPS_ADDR", format!("127.0.0.1:{rtmps}"))
                .env("SLUICE_TLS_CERT", &cert)
                .env("SLUICE_TLS_KEY", &key_file)
                .env("SLUICE_RTMP_MAX_PER_IP", "500")
                .env("SLUICE_RATE_LIMIT_PER_KEY", "100000")
                .env("SLUICE_RATE_LIMIT_BURST", "100000");
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd
        };
        let out = configure()
            .args(["admin", "bootstrap", "--project", "bench", "--json"])
            .output()
            .expect("sluice runs");
        assert!(out.status.success(), "bootstrap: {}", String::from_utf8_lossy(&out.stderr));
        let key = serde_json::from_slice::<Value>(&out.stdout).expect("bootstrap JSON")["apiKey"]["key"]
            .as_str()
            .expect("key")
            .to_string();
        let mut serve = configure();
        serve
            .arg("serve")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("sluice log"));
        let proc = Proc(serve.spawn().expect("sluice serve"));
        let pem = std::fs::read(&cert).expect("cert");
        let client = reqwest::Client::builder()
            .no_proxy()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("pem"))
            .timeout(Duration::from_secs(15))
            .pool_max_idle_per_host(256)
            .build()
            .expect("client");
        let ready = format!("https://127.0.0.1:{http}/readyz");
        let answered = settle(Duration::from_secs(30), async || {
            client.get(&ready).send().await.is_ok_and(|r| r.status() == 200)
        })
        .await;
        assert!(answered, "sluice serve with TLS did not answer {ready} in 30 s (log: {})", log.display());
        let api = format!("https://127.0.0.1:{http}/v1/projects/bench");
        TlsSluice { proc, http, rtmp, rtmps, key, api, client, log, _dir: dir }
    }

    /// Creates a stream; returns its record with credentials (`ingestUrl`, `srtUrl`).
    pub async fn create_stream(&self, body: Value) -> Value {
        let resp = self
            .client
            .post(format!("{}/streams", self.api))
            .bearer_auth(&self.key)
            .json(&body)
            .send()
            .await
            .expect("create stream");
        assert!(resp.status().is_success(), "create stream: {}", resp.status());
        resp.json().await.expect("stream JSON")
    }

    /// The stream `id`'s `status`, if it answers.
    pub async fn status(&self, id: &str) -> Option<String> {
        let resp =
            self.client.get(format!("{}/streams/{id}", self.api)).bearer_auth(&self.key).send().await.ok()?;
        let v: Value = resp.json().await.ok()?;
        v["status"].as_str().map(str::to_string)
    }

    /// How many of the project's streams are live, if it answers.
    pub async fn live_count(&self) -> Option<u64> {
        let url = format!("{}/streams?status=live&limit=1", self.api);
        let resp = self.client.get(url).bearer_auth(&self.key).send().await.ok()?;
        resp.json::<Value>().await.ok()?["total"].as_u64()
    }
}

// ---------------------------------------------------------------------------------------------
// LL-HLS

/// The value of `key` in an attribute list (RFC 8216bis 4.2), quotes removed.
pub fn attr<'a>(attrs: &'a str, key: &str) -> Option<&'a str> {
    attrs.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')).map(|v| v.trim_matches('"'))
}

/// The renditions a master playlist lists: (name, URI relative to the master), the name being
/// the URI's folder (`source/index.m3u8` is `source`).
pub fn parse_master(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        let uri = if let Some(attrs) = line.strip_prefix("#EXT-X-MEDIA:") {
            attr(attrs, "URI").map(str::to_string)
        } else if !line.is_empty() && !line.starts_with('#') {
            Some(line.to_string())
        } else {
            None
        };
        // Without the viewer's playback session (`vs=`, docs/viewers.md): the benches add their
        // own queries and measure the origin without counting.
        if let Some(uri) = uri.map(|u| u.split('?').next().unwrap_or(&u).to_string()) {
            let name = uri.rsplit('/').nth(1).unwrap_or("").to_string();
            out.push((name, uri));
        }
    }
    out
}

/// What the `moof` of a CMAF chunk says about its samples (one track, as a Sluice part), read
/// with Sluice's own box reader (`sluice::media::cmaf`).
#[derive(Clone, Debug, Default)]
pub struct Moof {
    /// `sample_count`s of its `trun`s, summed.
    pub samples: u64,
    /// `baseMediaDecodeTime` of its first `traf` (`tfdt`), in the track's timescale.
    pub decode_time: Option<u64>,
    /// The duration of each sample of the first `traf`, in decode order (from the `trun`, or the
    /// `tfhd` default); empty when neither gives them.
    pub durations: Vec<u32>,
}

/// Reads the `moof` at the start of a CMAF chunk (ISO/IEC 14496-12 8.8); `data` may be the
/// chunk's first bytes only.
pub fn parse_moof(data: &[u8]) -> Option<Moof> {
    Some(Moof {
        samples: cmaf::samples(data)?,
        decode_time: cmaf::decode_time(data),
        durations: cmaf::sample_durations(data, 10_000).unwrap_or_default(),
    })
}

/// Samples in a CMAF chunk: the `sample_count`s of the `trun` boxes of its `moof`.
pub fn moof_samples(data: &[u8]) -> Option<u64> {
    cmaf::samples(data)
}

/// The timescale of the first track of an init segment (`moov`/`trak`/`mdia`/`mdhd`, 8.4.2).
pub fn init_timescale(data: &[u8]) -> Option<u32> {
    cmaf::timescale(data)
}

/// The `moof` of the part at `url`, read from its first 8 KiB (an HTTP range, so reading costs
/// the server little).
pub async fn part_moof(client: &reqwest::Client, url: &str) -> Option<Moof> {
    let r = client.get(url).header("Range", "bytes=0-8191").send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    parse_moof(&r.bytes().await.ok()?)
}

/// The samples of the part at `url` (see [`part_moof`]).
pub async fn part_samples(client: &reqwest::Client, url: &str) -> Option<u64> {
    part_moof(client, url).await.map(|m| m.samples)
}
