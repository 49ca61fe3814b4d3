//! `cargo bench --bench edge`: what the live relay of several nodes costs (docs/scale-out.md).
//!
//! Three `sluice serve` nodes on one fresh Postgres database behind nginx, configured with the
//! load-balancer block of docs/scale-out.md (read from that file, its ports replaced). The 720p30
//! 2.5 Mbit/s sample is pushed in real time (`-c copy`, qualities `["1080p"]`: passthrough) to
//! the balancer's RTMP port; the node it lands on is the **origin** (found through
//! `GET /v1/admin/nodes`), the next one the **edge**. Printed, in one run:
//!
//! 1. **part latency added by the relay**: for `BENCH_PARTS` (default 40) consecutive parts, a
//!    blocking reload for the next part and then the part itself, asked at the same instant of
//!    the origin directly, of the edge (relayed) and of the balancer (round robin: either);
//!    for each, the instant the part's last byte arrived. Added = edge (or balancer) − origin:
//!    median and p95.
//! 2. **origin CPU with 1,000 blocked viewers**: 1,000 clients each looping as an LL-HLS player
//!    does (blocking reload for the next part, then GET of that part) for `BENCH_SECONDS`
//!    (default 15, after 3 s of warm-up), first all on the edge, then all on the origin. The
//!    origin node's CPU (user + system, from /proc) in each case, the edge's, answers per second,
//!    and the ratio origin-CPU-behind-the-edge / origin-CPU-serving-directly.
//!
//! The viewers run on the same 2 cores as the nodes, so the absolute figures are of the machine
//! as a whole; the ratio is what carries over.

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{cpu_seconds, free_port, load1, push, sample_file, Nginx, Sluice};

const VIEWERS: usize = 1000;
const ADMIN: &str = "edge-bench-operator-token";

fn env_u64(var: &str, default: u64) -> u64 {
    std::env::var(var).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
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
        } else if line.starts_with("#EXTINF:") {
            msn += 1;
            index = 0;
        }
    }
    last
}

/// The load-balancer configuration of docs/scale-out.md with `http` and `rtmp` as the
/// balancer's ports and the nodes' own in place of the document's.
fn balancer_config(http: u16, rtmp: u16, nodes: &[(u16, u16)]) -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/scale-out.md"))
        .expect("docs/scale-out.md");
    let block = doc.split("```nginx\n").nth(1).and_then(|b| b.split("```").next()).expect("an nginx block");
    let mut conf = block.replace("127.0.0.1:8080;", &format!("127.0.0.1:{http};"));
    conf = conf.replace("127.0.0.1:1935;", &format!("127.0.0.1:{rtmp};"));
    for (i, (node_http, node_rtmp)) in nodes.iter().enumerate() {
        conf = conf.replace(&format!("127.0.0.1:808{} ", i + 1), &format!("127.0.0.1:{node_http} "));
        conf = conf.replace(&format!("127.0.0.1:1935{};", i + 1), &format!("127.0.0.1:{node_rtmp};"));
    }
    for port in ["8080", "8081", "8082", "8083", "19351", "19352", "19353"] {
        assert!(!conf.contains(&format!("127.0.0.1:{port}")), "a port of the document left in:\n{conf}");
    }
    conf
}

async fn text(client: &reqwest::Client, url: &str) -> Option<String> {
    let resp = client.get(url).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.text().await.ok()
}

/// The `source` media playlist under `master`, once listed.
async fn media_url(client: &reqwest::Client, master: &str) -> String {
    let until = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(body) = text(client, master).await {
            if let Some(line) =
                body.lines().find(|l| l.split('?').next().is_some_and(|p| p.ends_with("source/index.m3u8")))
            {
                // Without its playback session (`vs=`): blocking reloads add their own query.
                return master.replace("master.m3u8", line.split('?').next().unwrap_or(line));
            }
        }
        assert!(Instant::now() < until, "no source rendition at {master}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A blocking reload of `media` for part `(msn, part)`, then the part it names: the instant its
/// last byte arrived.
async fn part_arrival(client: &reqwest::Client, media: &str, msn: u64, part: u64) -> Option<Instant> {
    let body = text(client, &format!("{media}?_HLS_msn={msn}&_HLS_part={part}")).await?;
    let (_, _, uri) = last_part(&body)?;
    let resp = client.get(media.replace("index.m3u8", &uri)).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.bytes().await.ok()?;
    Some(Instant::now())
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN)
}

/// `VIEWERS` players on `media` for `seconds` after a 3-s warm-up; returns (answers per second,
/// failures, CPU seconds of each pid over the window).
async fn viewers(media: &str, seconds: u64, pids: &[u32]) -> (f64, u64, Vec<f64>) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .pool_max_idle_per_host(VIEWERS * 2)
        .build()
        .expect("client");
    let warm = Instant::now() + Duration::from_secs(3);
    let end = warm + Duration::from_secs(seconds);
    let (answers, failures) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for _ in 0..VIEWERS {
        let (client, media) = (client.clone(), media.to_string());
        let (answers, failures) = (answers.clone(), failures.clone());
        tasks.push(tokio::spawn(async move {
            let mut next: Option<(u64, u64)> = None;
            while Instant::now() < end {
                let url = match next {
                    Some((m, p)) => format!("{media}?_HLS_msn={m}&_HLS_part={p}"),
                    None => media.clone(),
                };
                let listed = text(&client, &url).await.as_deref().and_then(last_part);
                let Some((m, p, uri)) = listed else {
                    if Instant::now() >= warm {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    next = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let part = client.get(media.replace("index.m3u8", &uri)).send().await;
                let ok = match part {
                    Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                    _ => false,
                };
                let now = Instant::now();
                if now >= warm && now < end && next.is_some() {
                    if ok {
                        answers.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
                next = Some((m, p + 1));
            }
        }));
    }
    tokio::time::sleep_until(warm.into()).await;
    let before: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    tokio::time::sleep_until(end.into()).await;
    let cpu: Vec<f64> = pids.iter().zip(&before).map(|(p, b)| cpu_seconds(*p) - b).collect();
    for t in tasks {
        let _ = t.await;
    }
    (answers.load(Ordering::Relaxed) as f64 / seconds as f64, failures.load(Ordering::Relaxed), cpu)
}

fn main() {
    let parts = env_u64("BENCH_PARTS", 40);
    let seconds = env_u64("BENCH_SECONDS", 15);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let db = support::fresh_postgres_url().await;
        let (lb_http, lb_rtmp) = (free_port(), free_port());
        let public = format!("http://127.0.0.1:{lb_http}");
        let env = vec![
            ("SLUICE_DATABASE_URL", db.clone()),
            ("SLUICE_PUBLIC_URL", public.clone()),
            ("SLUICE_TRUSTED_PROXIES", "127.0.0.1".to_string()),
            ("SLUICE_ADMIN_TOKEN", ADMIN.to_string()),
            ("SLUICE_NODE_TIMEOUT", "10".to_string()),
            ("SLUICE_WEBRTC_MAX_PER_IP", "1000".to_string()),
        ];
        let first = Sluice::start(&env).await;
        let second = Sluice::join(&env, &first.key).await;
        let third = Sluice::join(&env, &first.key).await;
        let nodes = [first, second, third];
        let ports: Vec<(u16, u16)> = nodes.iter().map(|n| (n.http, n.rtmp)).collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let _balancer = Nginx::balancer(dir.path(), &balancer_config(lb_http, lb_rtmp, &ports), lb_http);
        let client = &nodes[0].client;
        let api = format!("{public}/v1/projects/bench");

        let stream: Value = client
            .post(format!("{api}/streams"))
            .bearer_auth(&nodes[0].key)
            .json(&json!({"name": "edge", "qualities": ["1080p"]}))
            .send()
            .await
            .expect("create through the balancer")
            .json()
            .await
            .expect("json");
        let id = stream["_id"].as_str().expect("id").to_string();
        let ingest = stream["ingestUrl"].as_str().expect("ingestUrl").to_string();
        let path = ingest.split_once("/live/").expect("an RTMP URL").1;
        let _push = push(&sample_file(), &format!("rtmp://127.0.0.1:{lb_rtmp}/live/{path}"));

        // The node the balancer gave the push to.
        let until = Instant::now() + Duration::from_secs(30);
        let origin = loop {
            let listed: Value = client
                .get(format!("{public}/v1/admin/nodes"))
                .bearer_auth(ADMIN)
                .send()
                .await
                .expect("nodes")
                .json()
                .await
                .expect("json");
            let holder = listed["nodes"].as_array().into_iter().flatten().find(|n| {
                n["sessions"].as_array().is_some_and(|s| s.iter().any(|x| x["streamId"] == id.as_str()))
            });
            if let Some(url) = holder.and_then(|n| n["internalUrl"].as_str()) {
                let port: u16 = url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
                break nodes.iter().position(|n| n.http == port).expect("one of ours");
            }
            assert!(Instant::now() < until, "no node holds the push: {listed}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let edge = (origin + 1) % nodes.len();
        let (o, e) = (&nodes[origin], &nodes[edge]);
        let master = |port: u16| format!("http://127.0.0.1:{port}/play/live/{id}/master.m3u8");
        let origin_media = media_url(client, &master(o.http)).await;
        let edge_media = media_url(client, &master(e.http)).await;
        let lb_media = media_url(client, &master(lb_http)).await;
        // A few segments in, the encoder steady.
        tokio::time::sleep(Duration::from_secs(4)).await;
        println!(
            "edge: 3 nodes on Postgres behind nginx (docs/scale-out.md), passthrough 720p30 2.5 Mbit/s pushed \
             through the balancer's RTMP; origin = node {origin} (holds the push), edge = node {edge}; {} cores, \
             load1 {:.2}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            load1()
        );

        // 1. Part latency added by the relay.
        let (mut via_edge, mut via_lb, mut misses) = (Vec::new(), Vec::new(), 0);
        for _ in 0..parts {
            let Some((msn, index, _)) = text(client, &origin_media).await.as_deref().and_then(last_part) else {
                misses += 1;
                continue;
            };
            let (a, b, c) = tokio::join!(
                part_arrival(client, &origin_media, msn, index + 1),
                part_arrival(client, &edge_media, msn, index + 1),
                part_arrival(client, &lb_media, msn, index + 1),
            );
            match (a, b, c) {
                (Some(a), Some(b), Some(c)) => {
                    via_edge.push((b.saturating_duration_since(a).as_secs_f64()) * 1000.0);
                    via_lb.push((c.saturating_duration_since(a).as_secs_f64()) * 1000.0);
                }
                _ => misses += 1,
            }
        }
        via_edge.sort_by(f64::total_cmp);
        via_lb.sort_by(f64::total_cmp);
        assert!(via_edge.len() as u64 >= parts * 9 / 10, "parts measured {} of {parts}", via_edge.len());
        println!(
            "part latency added by the relay ({} parts; a part's last byte, edge vs origin): median {:.1} ms, \
             p95 {:.1} ms; through the balancer (either node): median {:.1} ms, p95 {:.1} ms; {misses} missed",
            via_edge.len(),
            quantile(&via_edge, 0.5),
            quantile(&via_edge, 0.95),
            quantile(&via_lb, 0.5),
            quantile(&via_lb, 0.95),
        );

        // 2. Origin CPU with 1,000 blocked viewers, on the edge and then on the origin.
        let pids = [o.proc.0.id(), e.proc.0.id()];
        let fetches = |port: u16| {
            let client = client.clone();
            async move {
                let m = text(&client, &format!("http://127.0.0.1:{port}/metrics")).await.unwrap_or_default();
                m.lines()
                    .find_map(|l| l.strip_prefix("sluice_relay_fetches_total "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            }
        };
        let fetched_before = fetches(e.http).await;
        let (edge_rps, edge_failures, edge_cpu) = viewers(&edge_media, seconds, &pids).await;
        let fetched = fetches(e.http).await - fetched_before;
        let load_edge = load1();
        let (direct_rps, direct_failures, direct_cpu) = viewers(&origin_media, seconds, &pids).await;
        let load_direct = load1();
        let pct = |s: f64| s / seconds as f64 * 100.0;
        println!(
            "{VIEWERS} viewers on the edge ({seconds} s): origin CPU {:.1} %, edge CPU {:.1} % of a core; \
             {edge_rps:.0} parts/s delivered, {edge_failures} failures; the edge asked the origin {fetched} \
             times ({:.1}/s); load1 {load_edge:.2}",
            pct(edge_cpu[0]),
            pct(edge_cpu[1]),
            fetched as f64 / (seconds + 3) as f64,
        );
        println!(
            "{VIEWERS} viewers on the origin ({seconds} s): origin CPU {:.1} % of a core; {direct_rps:.0} parts/s \
             delivered, {direct_failures} failures; load1 {load_direct:.2}",
            pct(direct_cpu[0]),
        );
        println!(
            "origin CPU with the viewers behind an edge / serving them directly: {:.3}×",
            edge_cpu[0] / direct_cpu[0]
        );
        for (what, rps, failures) in [("edge", edge_rps, edge_failures), ("origin", direct_rps, direct_failures)] {
            assert!(rps > 0.0 && failures < (rps * seconds as f64 / 100.0) as u64 + 10, "{what}: {failures} failures");
        }
    });
}
