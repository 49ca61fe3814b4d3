//! `cargo bench --bench origin`: what signed playback costs the playback origin, beside nginx
//! serving the same bytes as static files in the same run.
//!
//! One live stream (the 720p30 2.5 Mbit/s sample pushed in real time with `-c copy`; qualities
//! `["1080p"]`, above the source, so Sluice only remuxes: renditions `source` and `audio`) feeds
//! Sluice's LL-HLS origin. Then, alternating, with signed playback switched off (plain URLs) and
//! on (URLs from a playback ticket, so every request verifies an HMAC token):
//!
//! 1. **part fetches**: `wrk -t2 -c64` for `BENCH_SECONDS` (default 4) on one recent part of the
//!    `source` rendition (70–150 KB), the same part for every case of a round (Sluice runs with
//!    6-s segments so a part stays in memory that long); nginx serves a copy of it from disk at
//!    each of Sluice's two paths (plain and under the token), so both servers read the same
//!    requests and send the same body: what differs is the server.
//!    Requests per second, and any non-2xx answer (which fails the bench); `BENCH_ROUNDS`
//!    (default 3) rounds, each case one position later each round, each run after a 1-s warm-up
//!    run; the median of each ratio.
//! 2. **playlist reloads**: `wrk -t2 -c1000` on the media playlist (non-blocking; with signed
//!    playback, the one under the session's token path that a ticket's master leads to, whose
//!    URIs inherit the token, so it is served as rendered); nginx serves copies of the same
//!    bytes at the same paths, the unsigned playlist and the signed one, as static files — what
//!    the issue holds a reload to ("reloads cost what a static file costs"). Each nginx case
//!    first copies what Sluice serves at that moment: the playlist grows until its window is
//!    full (to about twice its size at set-up) and changes with every part. The same rounds,
//!    order and warm-up as (1); unsigned is compared with nginx's unsigned file, signed with its
//!    signed file; the median of each ratio. Each round's line gives the body sizes each case
//!    answered with.
//! 3. **blocking reloads, 1,000 waiting viewers**: 1,000 clients each loop on
//!    `index.m3u8?_HLS_msn=<m>&_HLS_part=<p+1>` for the part after the newest they have, as
//!    LL-HLS players do, for `BENCH_BLOCKING_SECONDS` (default 10). Printed: answers per second,
//!    against the ideal of 1,000 answers per part (1,000 / part duration; an answer that already
//!    lists two new parts, as at a segment's end, makes its viewer skip one), and the fan-out spread
//!    (from the first to the last viewer answered for the same part, median and p99). nginx has
//!    no blocking reload; its row in (2) is the static figure to compare with.
//!
//! 4. **viewers**: what counting viewers costs (docs/viewers.md), with nothing else changed:
//!    reloads at 1,000 connections carrying 1,000 playback sessions (`vs=`, a wrk script gives
//!    each request the next session's URL) against the same reloads without one, and part
//!    fetches at 1,000 connections right after a second of counted reloads against without;
//!    the median of each ratio (the bar: within 5 %).
//!
//! `BENCH_STAGES` (default `parts,reloads,viewers,blocking`) picks which of the four run, to profile
//! one; `BENCH_HOLD_SECONDS` keeps the servers up that long after setting up, with signed
//! playback off (a token is still checked when a URL carries one; `BENCH_HOLD_SIGNED=1` turns it
//! on, and then only the token URLs answer), and prints the four playlist URLs, for a load and a
//! profiler run by hand.
//!
//! The load generators (wrk, the 1,000 clients) run on the same 2 cores as the servers, so the
//! requests per second are of the machine as a whole and swing by a quarter between identical
//! runs; the ratios are what carries over. Beside them, (1) and (2) print the server's own CPU
//! per answer (Sluice's process, nginx's workers and master, over each measured run), which
//! swings far less.

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{median, push, sample_file, Nginx, Sluice};

const VIEWERS: usize = 1000;

fn secs(var: &str, default: u64) -> u64 {
    std::env::var(var).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// What wrk measured.
#[derive(Debug, Clone, Copy, Default)]
struct Wrk {
    rps: f64,
    non_2xx: u64,
    errors: u64,
}

fn wrk(url: &str, connections: usize, seconds: u64) -> Wrk {
    wrk_with(url, None, connections, seconds)
}

/// [`wrk`], with a Lua script of its own when `script` is given.
fn wrk_with(url: &str, script: Option<&std::path::Path>, connections: usize, seconds: u64) -> Wrk {
    let mut cmd = Command::new("wrk");
    cmd.args(["-t2", &format!("-c{connections}"), &format!("-d{seconds}s"), "--timeout", "10s"]);
    if let Some(script) = script {
        cmd.arg("-s").arg(script);
    }
    let out = cmd.arg(url).output().expect("wrk runs (scripts/deps.sh bench installs it)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "wrk: {text}{}", String::from_utf8_lossy(&out.stderr));
    let number = |prefix: &str| -> Option<f64> {
        text.lines().find_map(|l| l.trim().strip_prefix(prefix)).and_then(|v| v.trim().parse().ok())
    };
    let errors = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Socket errors:"))
        .map(|l| l.split(',').filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok()).sum())
        .unwrap_or(0);
    Wrk {
        rps: number("Requests/sec:").unwrap_or_else(|| panic!("wrk printed no Requests/sec: {text}")),
        non_2xx: number("Non-2xx or 3xx responses:").map_or(0, |n| n as u64),
        errors,
    }
}

/// `(msn, index within its segment, uri)` of the newest part a media playlist lists.
fn last_part(playlist: &str) -> Option<(u64, u64, String)> {
    let mut msn: u64 =
        playlist.lines().find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:"))?.parse().ok()?;
    let mut index = 0;
    let mut last = None;
    for line in playlist.lines() {
        if let Some(attrs) = line.strip_prefix("#EXT-X-PART:") {
            let uri = attrs.split("URI=\"").nth(1)?.split('"').next()?;
            last = Some((msn, index, uri.to_string()));
            index += 1;
        } else if line.starts_with("#EXT-X-SKIP:") {
            let skipped: u64 = line.split('=').nth(1)?.parse().ok()?;
            msn += skipped;
        } else if line.starts_with("#EXTINF:") {
            msn += 1;
            index = 0;
        }
    }
    last
}

fn join(base: &str, uri: &str) -> String {
    format!("{}/{uri}", base.rsplit_once('/').expect("a path").0)
}

async fn text(client: &reqwest::Client, url: &str) -> String {
    let resp = client.get(url).send().await.expect("GET");
    assert!(resp.status().is_success(), "{url}: {}", resp.status());
    resp.text().await.expect("text")
}

/// The `source` rendition's media playlist URL reached from a master URL (with the master's
/// token carried into it, when signed), without the playback session the master started
/// (`vs=`): the stages other than `viewers` measure the origin without counting.
async fn media_url(client: &reqwest::Client, master: &str) -> String {
    let url = session_media_url(client, master).await;
    url.split('?').next().expect("url").to_string()
}

/// [`media_url`] with the playback session (`vs=`) of a new master fetch: a reload of it is
/// counted as a viewer's (docs/viewers.md).
async fn session_media_url(client: &reqwest::Client, master: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(resp) = client.get(master).send().await {
            if resp.status().is_success() {
                let body = resp.text().await.expect("text");
                if let Some(line) = body.lines().find(|l| l.starts_with("source/") || l.contains("/source/"))
                {
                    return join(master.split('?').next().expect("url"), line);
                }
            }
        }
        assert!(Instant::now() < deadline, "no source rendition in {master}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The newest part of `media`, as a URL.
async fn newest_part(client: &reqwest::Client, media: &str) -> String {
    let playlist = text(client, media).await;
    let (_, _, uri) = last_part(&playlist).expect("a part");
    join(media.split('?').next().expect("url"), &uri)
}

/// What one round measured, per case (Sluice unsigned, Sluice signed, nginx serving the
/// unsigned bytes, nginx serving the signed bytes): requests per second, and the server's CPU
/// per answer, µs (Sluice's process; nginx's workers and master).
#[derive(Debug, Clone, Copy)]
struct Row {
    rps: [f64; 4],
    cpu_us: [f64; 4],
    /// The body each case's URL answered with just before its measured run (bytes).
    bytes: [usize; 4],
}

impl Row {
    fn line(&self) -> String {
        let [u, s, nu, ns] = self.rps;
        let [cu, cs, cnu, cns] = self.cpu_us;
        let [bu, bs, bnu, bns] = self.bytes;
        format!(
            "Sluice unsigned {u:.0} req/s, signed {s:.0} req/s; nginx static, the same bytes: {nu:.0} req/s \
             unsigned, {ns:.0} req/s signed; unsigned/nginx {:.2}x, signed/nginx {:.2}x; server CPU per answer: \
             Sluice {cu:.1} / {cs:.1} µs, nginx {cnu:.1} / {cns:.1} µs; bodies: Sluice {bu} / {bs} B, nginx \
             {bnu} / {bns} B",
            u / nu,
            s / ns,
        )
    }

    /// The median of each ratio over `rows`.
    fn medians(rows: &[Row]) -> String {
        let ratio = |f: fn(&Row) -> f64| median(rows.iter().map(f).collect());
        format!(
            "unsigned/nginx {:.2}x, signed/nginx {:.2}x (by req/s, nginx serving the same bytes); server CPU \
             per answer against nginx's: unsigned {:.2}x, signed {:.2}x",
            ratio(|r| r.rps[0] / r.rps[2]),
            ratio(|r| r.rps[1] / r.rps[3]),
            ratio(|r| r.cpu_us[0] / r.cpu_us[2]),
            ratio(|r| r.cpu_us[1] / r.cpu_us[3])
        )
    }
}

/// Where nginx's copies of two of Sluice's URLs (unsigned, signed) live, to be written afresh.
struct Copies<'a> {
    root: &'a std::path::Path,
    port: u16,
    from: [&'a str; 2],
}

/// One round of `urls` (Sluice unsigned, Sluice signed, nginx unsigned bytes, nginx signed
/// bytes) with `connections` for `seconds` each. Each case takes the next position each round
/// (a Latin square over four rounds), and each measured run follows a 1-s warm-up run of its
/// own URL, so order and warm-up even out. With `copies`, each nginx case first writes over its
/// file what Sluice serves at that moment: a live playlist grows until its window is full and
/// changes with every part, so a copy taken once would hold other bytes than Sluice sends. Any
/// non-2xx answer or socket error fails the bench.
async fn round_of(
    (s, nginx): (&Sluice, &Nginx),
    id: &str,
    round: u64,
    connections: usize,
    seconds: u64,
    urls: [&str; 4],
    copies: Option<&Copies<'_>>,
) -> Row {
    let mut row = Row { rps: [0.0; 4], cpu_us: [0.0; 4], bytes: [0; 4] };
    let cpu = |which: usize| if which < 2 { common::cpu_seconds(s.proc.0.id()) } else { nginx.cpu_seconds() };
    let mut order = [0usize, 1, 2, 3];
    order.rotate_left((round % 4) as usize);
    for which in order {
        if which < 2 {
            switch(s, id, which == 1).await;
        } else if let Some(c) = copies {
            // The plain URL answers only while signed playback is off.
            switch(s, id, which == 3).await;
            let bytes = text(&s.client, c.from[which - 2]).await;
            let copied = nginx_copy(c.root, c.port, c.from[which - 2], bytes.as_bytes());
            assert_eq!(copied, urls[which], "nginx's copy is at the URL measured");
        }
        wrk(urls[which], connections, 1);
        row.bytes[which] =
            s.client.get(urls[which]).send().await.expect("GET").bytes().await.expect("body").len();
        let before = cpu(which);
        let w = wrk(urls[which], connections, seconds);
        row.cpu_us[which] = (cpu(which) - before) * 1e6 / (w.rps * seconds as f64).max(1.0);
        assert!(
            w.non_2xx == 0 && w.errors == 0,
            "{}: {} non-2xx, {} socket errors",
            urls[which],
            w.non_2xx,
            w.errors
        );
        row.rps[which] = w.rps;
    }
    row
}

/// nginx's copy of what Sluice serves at `url`: `bytes` written under `root` at the same path,
/// so that both servers get the same request and send the same body; the URL on nginx's `port`.
fn nginx_copy(root: &std::path::Path, port: u16, url: &str, bytes: &[u8]) -> String {
    // "http:", "", "host:port", the path.
    let path = url.splitn(4, '/').nth(3).expect("a URL with a path");
    let file = root.join(path);
    std::fs::create_dir_all(file.parent().expect("a folder")).expect("nginx's folders");
    std::fs::write(&file, bytes).expect("nginx's copy");
    format!("http://127.0.0.1:{port}/{path}")
}

async fn switch(s: &Sluice, id: &str, enabled: bool) {
    let resp = s
        .client
        .patch(format!("{}/streams/{id}/signed-playback", s.api))
        .bearer_auth(&s.key)
        .json(&json!({ "enabled": enabled }))
        .send()
        .await
        .expect("switch");
    assert!(resp.status().is_success(), "switch: {}", resp.status());
}

/// Per part `(msn, index)`: the first answer naming it, the last, and how many.
type Answers = HashMap<(u64, u64), (Instant, Instant, usize)>;

/// Blocking reloads by `VIEWERS` clients for `seconds`: (answers per second, spread median,
/// spread p99, failures).
async fn blocking(media: &str, seconds: u64) -> (f64, Duration, Duration, u64) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(15))
        .pool_max_idle_per_host(VIEWERS)
        .build()
        .expect("client");
    let sep = if media.contains('?') { '&' } else { '?' };
    let seen: Arc<Mutex<Answers>> = Default::default();
    let warm = Instant::now() + Duration::from_secs(3);
    let end = warm + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..VIEWERS {
        let (client, media, seen) = (client.clone(), media.to_string(), seen.clone());
        tasks.push(tokio::spawn(async move {
            let (mut answers, mut failures) = (0u64, 0u64);
            let mut next: Option<(u64, u64)> = None;
            while Instant::now() < end {
                let url = match next {
                    Some((m, p)) => format!("{media}{sep}_HLS_msn={m}&_HLS_part={p}"),
                    None => media.clone(),
                };
                let body = match client.get(&url).send().await {
                    Ok(r) if r.status().is_success() => r.text().await.ok(),
                    _ => None,
                };
                let now = Instant::now();
                let Some((m, p, _)) = body.as_deref().and_then(last_part) else {
                    failures += u64::from(now >= warm);
                    next = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                if now >= warm && now < end && next.is_some() {
                    answers += 1;
                    let mut seen = seen.lock().unwrap();
                    let e = seen.entry((m, p)).or_insert((now, now, 0));
                    e.1 = now;
                    e.2 += 1;
                }
                next = Some((m, p + 1));
            }
            (answers, failures)
        }));
    }
    let (mut answers, mut failures) = (0, 0);
    for t in tasks {
        let (a, f) = t.await.expect("viewer");
        answers += a;
        failures += f;
    }
    let seen = seen.lock().unwrap();
    // Parts every viewer got (those at the window's edges are partial).
    let mut spreads: Vec<Duration> =
        seen.values().filter(|(_, _, n)| *n >= VIEWERS * 9 / 10).map(|(a, b, _)| *b - *a).collect();
    spreads.sort();
    let pick = |q: f64| {
        spreads.get(((spreads.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default()
    };
    (answers as f64 / seconds as f64, pick(0.5), pick(0.99), failures)
}

/// CPU time of one token check (what signing adds to each request), measured in process:
/// (verify µs, playlist rewrite µs for `playlist`).
fn token_costs(resource: &str, playlist: &str) -> (f64, f64) {
    use sluice::domain::keyring::KeyRing;
    use sluice::playback::{rewrite::sign_playlist, token::Claims};
    let keys =
        KeyRing::new(vec![("bench".into(), b"a bench signing key of some length".to_vec())]).expect("key");
    let claims = Claims { resource: resource.into(), expires: i64::MAX / 2, session: None, ip: None };
    let signed = claims.sign(&keys);
    let n = 200_000;
    let started = Instant::now();
    for _ in 0..n {
        let ok =
            sluice::playback::token::verify(&keys, Some(std::hint::black_box(&signed)), resource, None, 0);
        assert!(ok.is_ok());
    }
    let verify = started.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    let m = 2_000;
    let started = Instant::now();
    for _ in 0..m {
        std::hint::black_box(sign_playlist(std::hint::black_box(playlist), &signed));
    }
    (verify, started.elapsed().as_secs_f64() * 1e6 / f64::from(m))
}

/// Stage 4, what counting viewers costs (docs/viewers.md): reloads of the media playlist at 1,000
/// connections with 1,000 playback sessions (each request carries the next session's `vs=`, so
/// every session is touched over and over) against the same reloads with a query that counts
/// nothing (the same wrk script over 1,000 URLs, so that the load generator costs the same);
/// and part fetches at 1,000 connections (a part's URI carries no session, so nothing on its
/// path counts: this checks that the sessions' table and sweep cost the origin nothing), right
/// after a second of counted reloads against right after none. Each round measures both cases of both, in alternating order,
/// on one newest part; the median of each ratio.
async fn viewers_stage(s: &Sluice, master: &str, media: &str, rounds: u64, seconds: u64) {
    let client = &s.client;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut paths = Vec::with_capacity(VIEWERS);
    for _ in 0..VIEWERS {
        let url = session_media_url(client, master).await;
        paths.push(url.splitn(4, '/').nth(3).map(|p| format!("/{p}")).expect("a path"));
    }
    // Both cases run the same wrk script over 1,000 URLs, so the load generator costs the same:
    // the media playlist with a session each, and the same playlist with a query that counts
    // nothing (`?n=<i>`).
    let plain_path = media.splitn(4, '/').nth(3).map(|p| format!("/{p}")).expect("a path");
    let plain: Vec<String> = (0..VIEWERS).map(|i| format!("{plain_path}?n={i}")).collect();
    let script = |name: &str, paths: &[String]| {
        let list = dir.path().join(format!("{name}.txt"));
        std::fs::write(&list, paths.join("\n")).expect("paths file");
        let script = dir.path().join(format!("{name}.lua"));
        std::fs::write(
            &script,
            format!(
                "local paths = {{}}\nfor line in io.lines(\"{}\") do paths[#paths + 1] = line end\n\
                 local i = 0\nrequest = function()\n  i = i % #paths + 1\n  return wrk.format(nil, paths[i])\nend\n",
                list.display()
            ),
        )
        .expect("wrk script");
        script
    };
    let (script, plain_script) = (script("sessions", &paths), script("plain", &plain));
    let pid = s.proc.0.id();
    // Per case: requests per second and CPU per answer (µs): reloads off/on, parts off/on.
    let mut rows: Vec<([f64; 4], [f64; 4])> = Vec::new();
    for round in 0..rounds {
        let part = newest_part(client, media).await;
        let mut rps = [0.0; 4];
        let mut cpu = [0.0; 4];
        let mut order = [0usize, 1, 2, 3];
        if round % 2 == 1 {
            order = [1, 0, 3, 2];
        }
        for which in order {
            let (url, with) = match which {
                0 => (media, Some(plain_script.as_path())),
                1 => (media, Some(script.as_path())),
                _ => (part.as_str(), None),
            };
            if which == 3 {
                // Sessions being counted: a second of reloads with them, then the parts.
                wrk_with(media, Some(&script), VIEWERS, 1);
            }
            wrk_with(url, with, VIEWERS, 1);
            let before = common::cpu_seconds(pid);
            let w = wrk_with(url, with, VIEWERS, seconds);
            assert!(
                w.non_2xx == 0 && w.errors == 0,
                "{url}: {} non-2xx, {} socket errors",
                w.non_2xx,
                w.errors
            );
            cpu[which] = (common::cpu_seconds(pid) - before) * 1e6 / (w.rps * seconds as f64).max(1.0);
            rps[which] = w.rps;
        }
        println!(
            "viewers (1,000 connections), round {}: reloads {:.0} req/s without a session, {:.0} with 1,000 \
             sessions counted ({:.3}x; CPU per answer {:.1} / {:.1} µs); part fetches {:.0} / {:.0} req/s ({:.3}x; \
             {:.1} / {:.1} µs)",
            round + 1,
            rps[0],
            rps[1],
            rps[1] / rps[0],
            cpu[0],
            cpu[1],
            rps[2],
            rps[3],
            rps[3] / rps[2],
            cpu[2],
            cpu[3]
        );
        rows.push((rps, cpu));
    }
    let ratio = |a: usize, b: usize| median(rows.iter().map(|(r, _)| r[b] / r[a]).collect());
    let cpu_ratio = |a: usize, b: usize| median(rows.iter().map(|(_, c)| c[b] / c[a]).collect());
    println!(
        "viewers, median of {rounds} rounds: counted/uncounted reloads {:.3}x, part fetches {:.3}x (req/s; \
         within 5 % is the bar); server CPU per answer {:.3}x and {:.3}x",
        ratio(0, 1),
        ratio(2, 3),
        cpu_ratio(0, 1),
        cpu_ratio(2, 3)
    );
}

fn main() {
    let part_secs = secs("BENCH_SECONDS", 4);
    let blocking_secs = secs("BENCH_BLOCKING_SECONDS", 10);
    let rounds = secs("BENCH_ROUNDS", 3);
    let stages = std::env::var("BENCH_STAGES").unwrap_or_else(|_| "parts,reloads,viewers,blocking".into());
    let stage = |name: &str| stages.split(',').any(|s| s.trim() == name);
    let sample = sample_file();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        // 6-s segments: a part stays in memory for about 26 s (four segments and some), long
        // enough for the four runs of a round (a warm-up and a measured run each) to fetch the
        // same one.
        let sluice = Sluice::start(&[("SLUICE_LLHLS_SEGMENT_MS", "6000".to_string())]).await;
        let stream = sluice.create_stream(json!({"name": "origin", "qualities": ["1080p"]})).await;
        let id = stream["_id"].as_str().expect("id").to_string();
        let _push = push(&sample, stream["ingestUrl"].as_str().expect("ingestUrl"));
        let client = &sluice.client;
        let master = stream["playbackUrls"]["hls"].as_str().expect("hls").to_string();
        let unsigned_media = media_url(client, &master).await;
        let ticket: Value = client
            .post(format!("{}/streams/{id}/playback-ticket", sluice.api))
            .bearer_auth(&sluice.key)
            .json(&json!({}))
            .send()
            .await
            .expect("ticket")
            .json()
            .await
            .expect("json");
        let signed_master = ticket["hls"].as_str().expect("hls").to_string();
        let signed_media = media_url(client, &signed_master).await;
        // A ticket's master names the session's children under `t/<session token>/`.
        let token = signed_media.split("/t/").nth(1).and_then(|t| t.split('/').next()).expect("a session token");
        let under_token = |url: &str| url.replacen(&format!("/live/{id}/"), &format!("/live/{id}/t/{token}/"), 1);
        // Let the stream settle (DVR-less window full, encoder steady).
        tokio::time::sleep(Duration::from_secs(4)).await;
        // The mean duration of the parts listed: one answer per viewer per part is the ideal.
        let durations: Vec<f64> = text(client, &unsigned_media)
            .await
            .lines()
            .filter_map(|l| l.strip_prefix("#EXT-X-PART:DURATION="))
            .filter_map(|v| v.split(',').next()?.parse().ok())
            .collect();
        assert!(!durations.is_empty(), "the playlist lists parts");
        let part_duration = durations.iter().sum::<f64>() / durations.len() as f64;

        // nginx serves copies of the playlists (and, each round, of a part) at Sluice's paths.
        let static_dir = tempfile::tempdir().expect("tempdir");
        let root = static_dir.path().join("www");
        std::fs::create_dir_all(&root).expect("www");
        let nginx = Nginx::serve_static(static_dir.path(), &root);
        let copy = |url: &str, bytes: &[u8]| nginx_copy(&root, nginx.http, url, bytes);
        let nginx_playlist = copy(&unsigned_media, text(client, &unsigned_media).await.as_bytes());
        // The signed bytes too: a static file of them is what a signed reload is held to.
        let nginx_signed_playlist = copy(&signed_media, text(client, &signed_media).await.as_bytes());
        for url in [&nginx_playlist, &nginx_signed_playlist] {
            assert!(client.get(url).send().await.expect("nginx").status().is_success(), "nginx serves {url}");
        }

        let hold = secs("BENCH_HOLD_SECONDS", 0);
        if hold > 0 {
            let signed = std::env::var("BENCH_HOLD_SIGNED").is_ok_and(|v| v == "1");
            switch(&sluice, &id, signed).await;
            println!(
                "holding {hold} s, signed playback {}; server pid {}: unsigned {unsigned_media} signed \
                 {signed_media} nginx {nginx_playlist} {nginx_signed_playlist}",
                if signed { "on" } else { "off" },
                sluice.proc.0.id()
            );
            tokio::time::sleep(Duration::from_secs(hold)).await;
        }
        println!(
            "origin: live passthrough 720p30 2.5 Mbit/s, {} cores, wrk -t2; signed = signed playback on, URLs \
             with a session token",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        // 1. Part fetches: each round one part (parts differ in size: keyframes), fetched by all
        //    four cases.
        let mut rows = Vec::new();
        for round in (0..rounds).filter(|_| stage("parts")) {
            switch(&sluice, &id, false).await;
            let unsigned_url = newest_part(client, &unsigned_media).await;
            let signed_url = under_token(&unsigned_url);
            let part = client.get(&unsigned_url).send().await.expect("part").bytes().await.expect("bytes");
            let (nginx_part, nginx_signed_part) = (copy(&unsigned_url, &part), copy(&signed_url, &part));
            let row = round_of(
                (&sluice, &nginx),
                &id,
                round,
                64,
                part_secs,
                [&unsigned_url, &signed_url, &nginx_part, &nginx_signed_part],
                None,
            )
            .await;
            println!(
                "part fetches (64 connections), round {}, a {}-byte part: {}",
                round + 1,
                part.len(),
                row.line()
            );
            rows.push(row);
        }
        if !rows.is_empty() {
            println!("part fetches, median of {rounds} rounds: {}", Row::medians(&rows));
        }

        // 2. Plain playlist reloads, 1,000 connections: each case its own playlist URL (nginx
        //    serves both copies), in the same rounds.
        let mut rows = Vec::new();
        let copies = Copies { root: &root, port: nginx.http, from: [&unsigned_media, &signed_media] };
        for round in (0..rounds).filter(|_| stage("reloads")) {
            let row = round_of(
                (&sluice, &nginx),
                &id,
                round,
                VIEWERS,
                part_secs,
                [&unsigned_media, &signed_media, &nginx_playlist, &nginx_signed_playlist],
                Some(&copies),
            )
            .await;
            println!("playlist reloads (1,000 connections, not blocking), round {}: {}", round + 1, row.line());
            rows.push(row);
        }
        if !rows.is_empty() {
            println!("playlist reloads, median of {rounds} rounds: {}", Row::medians(&rows));
        }
        // NaN when the reloads did not run.
        let nginx_rps = median(rows.iter().map(|r| r.rps[2]).collect());

        if stage("viewers") {
            switch(&sluice, &id, false).await;
            viewers_stage(&sluice, &master, &unsigned_media, rounds, part_secs).await;
        }

        // What signing costs per request, without the noise of the load generators.
        switch(&sluice, &id, false).await;
        let plain = text(client, &unsigned_media).await;
        let (verify_us, rewrite_us) = token_costs(&format!("stream:{id}"), &plain);
        println!(
            "per request, in process: token check {verify_us:.2} µs; rewriting a {}-line media playlist with the \
             token {rewrite_us:.1} µs, which a player with `?token=` gets and one under the token path does not \
             ({} bytes unsigned and under the token path, {} with `?token=`)",
            plain.lines().count(),
            plain.len(),
            text(client, &format!("{unsigned_media}?token={token}")).await.len()
        );

        // 3. Blocking reloads, 1,000 viewers waiting on the next part.
        if !stage("blocking") {
            return;
        }
        let ideal = VIEWERS as f64 / part_duration;
        let mut results = Vec::new();
        for (label, enabled, media) in [("unsigned", false, &unsigned_media), ("signed", true, &signed_media)] {
            switch(&sluice, &id, enabled).await;
            let (rps, p50, p99, failures) = blocking(media, blocking_secs).await;
            assert_eq!(failures, 0, "{label} blocking reloads failed");
            results.push(rps);
            println!(
                "blocking reloads ({VIEWERS} waiting viewers, {blocking_secs} s), {label}: {rps:.0} answers/s = \
                 {:.2} of the ideal {ideal:.0}/s (1,000 per {part_duration:.3}-s part); fan-out spread per part \
                 median {:.0} ms, p99 {:.0} ms",
                rps / ideal,
                p50.as_secs_f64() * 1000.0,
                p99.as_secs_f64() * 1000.0
            );
        }
        println!(
            "blocking reloads signed/unsigned {:.2}x; beside them nginx serves the static playlist at \
             {nginx_rps:.0} req/s to 1,000 connections reloading without waiting (nginx cannot block)",
            results[1] / results[0],
        );
        drop(nginx);
    });
}
