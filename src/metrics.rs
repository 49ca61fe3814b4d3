//! Prometheus metrics: requests by route and status, and a latency histogram.

use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};

pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    /// Tells this instance's entries in [`RECENT`] from another's (a test process runs many).
    id: u64,
}

/// How many label sets [`RECENT`] keeps per thread.
const RECENT_SETS: usize = 8;
/// The longest path [`RECENT`] keeps (a signed live path with its token is about 200 bytes).
const RECENT_PATH: usize = 256;

/// The counter and histogram of one request's labels, found by its method, path and status.
struct Handles {
    metrics: u64,
    method: poem::http::Method,
    status: poem::http::StatusCode,
    path: String,
    requests: prometheus::IntCounter,
    latency: prometheus::Histogram,
}

thread_local! {
    /// The label sets this thread counted last, with their handles: a playlist reload repeats
    /// its path for every viewer several times a second, and a hit skips the route template
    /// and both label lookups (hashing the labels, a lock). Replaced round-robin; a miss counts
    /// as before, so the labels are the same whatever is cached.
    static RECENT: std::cell::RefCell<(Vec<Handles>, usize)> = const { std::cell::RefCell::new((Vec::new(), 0)) };
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("sluice_http_requests_total", "HTTP requests by method, route and status"),
            &["method", "route", "status"],
        )
        .expect("static metric definition");
        let latency = HistogramVec::new(
            HistogramOpts::new("sluice_http_request_duration_seconds", "HTTP request latency")
                .buckets(vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["method", "route"],
        )
        .expect("static metric definition");
        registry.register(Box::new(requests.clone())).expect("unique metric");
        registry.register(Box::new(latency.clone())).expect("unique metric");
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Metrics { registry, requests, latency, id }
    }

    pub fn observe(
        &self,
        method: &poem::http::Method,
        path: &str,
        status: poem::http::StatusCode,
        seconds: f64,
    ) {
        RECENT.with_borrow_mut(|(recent, next)| {
            let hit = recent
                .iter()
                .find(|h| h.metrics == self.id && h.status == status && h.method == method && h.path == path);
            if let Some(h) = hit {
                h.requests.inc();
                h.latency.observe(seconds);
                return;
            }
            let route = route_of(path);
            let requests = self.requests.with_label_values(&[method.as_str(), &route, status.as_str()]);
            let latency = self.latency.with_label_values(&[method.as_str(), &route]);
            requests.inc();
            latency.observe(seconds);
            if path.len() > RECENT_PATH {
                return;
            }
            let handles = Handles {
                metrics: self.id,
                method: method.clone(),
                status,
                path: path.to_string(),
                requests,
                latency,
            };
            if recent.len() < RECENT_SETS {
                recent.push(handles);
            } else {
                recent[*next] = handles;
                *next = (*next + 1) % RECENT_SETS;
            }
        });
    }

    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The route template of a path, so that labels stay few whatever clients request:
/// identifiers become `:slug` / `:id`, words outside the API's vocabulary become `*`, and paths
/// outside the served surface collapse to `other`.
pub fn route_of(path: &str) -> String {
    // Word tests as `matches!` rather than scans of word arrays: every request whose label set
    // is not among its thread's recent ones passes here.
    fn collection(s: &str) -> bool {
        matches!(
            s,
            "streams" | "vod" | "webhooks" | "api-keys" | "members" | "deliveries" | "live" | "projects"
        )
    }
    fn fixed(s: &str) -> bool {
        matches!(
            s,
            "events"
                | "scopes"
                | "deliveries"
                | "uploaded"
                | "heartbeat"
                | "rotate-push"
                | "playback-ticket"
                | "signed-playback"
                | "redeliver"
                | "test"
        )
    }
    fn word(s: &str) -> bool {
        matches!(
            s,
            "v1" | "play"
                | "upload"
                | "thumb.jpg"
                | "auth"
                | "login"
                | "refresh"
                | "logout"
                | "me"
                | "accept-invitation"
                | "password"
                | "openapi.json"
                | "healthz"
                | "readyz"
                | "master.m3u8"
                | "index.m3u8"
                | "metrics"
        )
    }
    let segments = path.split('/').filter(|s| !s.is_empty());
    let top = segments.clone().next().unwrap_or("");
    if !matches!(top, "v1" | "play" | "upload" | "healthz" | "readyz" | "metrics" | "docs") {
        return "other".into();
    }
    if top == "docs" {
        return "/docs".into();
    }
    let mut out = String::with_capacity(48);
    let mut prev = "";
    for seg in segments.take(8) {
        let shown = if prev == "projects" {
            ":slug"
        } else if collection(prev) && !fixed(seg) {
            ":id"
        } else if collection(seg) || fixed(seg) || word(seg) {
            seg
        } else {
            "*"
        };
        out.push('/');
        out.push_str(shown);
        prev = seg;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::route_of;

    /// The per-thread handles count into the instance they came from, under the same labels as
    /// a first request, past the number of label sets kept.
    #[test]
    fn repeated_requests_count_under_their_labels_in_their_own_instance() {
        use poem::http::{Method, StatusCode};
        let (a, b) = (super::Metrics::new(), super::Metrics::new());
        let reload = "/play/live/abc/Xy12/720p/index.m3u8";
        for _ in 0..3 {
            a.observe(&Method::GET, reload, StatusCode::OK, 0.001);
        }
        b.observe(&Method::GET, reload, StatusCode::OK, 0.001);
        a.observe(&Method::GET, reload, StatusCode::NOT_FOUND, 0.001);
        // More label sets than are kept, then the first again.
        for n in 0..super::RECENT_SETS * 2 {
            a.observe(&Method::GET, &format!("/play/live/abc/Xy12/720p/p{n}.m4s"), StatusCode::OK, 0.001);
        }
        a.observe(&Method::GET, reload, StatusCode::OK, 0.001);
        let line = |m: &super::Metrics, route: &str, status: &str| {
            let want = format!(
                "sluice_http_requests_total{{method=\"GET\",route=\"{route}\",status=\"{status}\"}} "
            );
            m.render().lines().find_map(|l| l.strip_prefix(&want).map(str::to_string))
        };
        let route = "/play/live/:id/*/*/index.m3u8";
        assert_eq!(line(&a, route, "200").as_deref(), Some("4"));
        assert_eq!(line(&a, route, "404").as_deref(), Some("1"));
        assert_eq!(line(&a, "/play/live/:id/*/*/*", "200").as_deref(), Some("16"));
        assert_eq!(line(&b, route, "200").as_deref(), Some("1"));
        assert!(a.render().contains("sluice_http_request_duration_seconds_count{method=\"GET\",route=\"/play/live/:id/*/*/index.m3u8\"} 5"));
    }

    #[test]
    fn ids_and_slugs_become_placeholders() {
        assert_eq!(route_of("/v1/projects/demo/api-keys"), "/v1/projects/:slug/api-keys");
        assert_eq!(route_of("/v1/projects/demo/api-keys/abc123"), "/v1/projects/:slug/api-keys/:id");
        assert_eq!(route_of("/v1/projects/demo/api-keys/scopes"), "/v1/projects/:slug/api-keys/scopes");
        assert_eq!(
            route_of("/v1/projects/demo/webhooks/deliveries"),
            "/v1/projects/:slug/webhooks/deliveries"
        );
        assert_eq!(route_of("/healthz"), "/healthz");
        assert_eq!(route_of("/wp-admin/x.php"), "other");
        assert_eq!(route_of("/play/live/abc/master.m3u8"), "/play/live/:id/master.m3u8");
        assert_eq!(route_of("/play/live/abc/Xy12/720p/index.m3u8"), "/play/live/:id/*/*/index.m3u8");
        assert_eq!(route_of("/play/live/abc/Xy12/720p/p41.m4s"), "/play/live/:id/*/*/*");
        assert_eq!(route_of("/play/vod/abc/thumb.jpg"), "/play/vod/:id/thumb.jpg");
        assert_eq!(route_of("/play/vod/abc/720p/s3.m4s"), "/play/vod/:id/*/*");
        assert_eq!(route_of("/upload/vod/abc"), "/upload/vod/:id");
        assert_eq!(route_of("/docs/swagger.js"), "/docs");
        assert_eq!(route_of("/v1/random-1234"), "/v1/*");
        assert_eq!(route_of("/v1/auth/login"), "/v1/auth/login");
        assert_eq!(route_of("/v1/auth/accept-invitation"), "/v1/auth/accept-invitation");
        assert_eq!(route_of("/v1/projects/demo/webhooks/abc/test"), "/v1/projects/:slug/webhooks/:id/test");
        assert_eq!(route_of(&"/v1/x".repeat(50)).matches('/').count(), 8, "depth is capped");
    }
}

/// Bytes in and out of one stream on this process (`sluice_stream_*`): media that reached its
/// ingest pipeline, and LL-HLS playlists and media the origin served.
#[derive(Default)]
pub struct StreamCounters {
    pub bytes_in: std::sync::atomic::AtomicU64,
    pub bytes_out: std::sync::atomic::AtomicU64,
}

/// The [`StreamCounters`] of the streams pushed to or played from this process, by stream id.
/// An entry lives as long as the process (one per stream that ever had traffic here).
#[derive(Default)]
pub struct PerStream {
    map: std::sync::Mutex<std::collections::BTreeMap<String, std::sync::Arc<StreamCounters>>>,
}

impl PerStream {
    pub fn get(&self, stream_id: &str) -> std::sync::Arc<StreamCounters> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        // Looked up first: the id is copied only to insert it, and [`PerStream::served`] runs
        // on every answer of the origin.
        if let Some(c) = map.get(stream_id) {
            return c.clone();
        }
        map.entry(stream_id.to_string()).or_default().clone()
    }

    /// Counts `bytes` served of `stream_id`'s playback: under the lock when the stream has its
    /// counters already (every answer but the first), so no reference is taken and dropped.
    pub fn served(&self, stream_id: &str, bytes: usize) {
        let add =
            |c: &StreamCounters| c.bytes_out.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = map.get(stream_id) {
            add(c);
            return;
        }
        add(map.entry(stream_id.to_string()).or_default());
    }

    /// The per-stream lines: `live(id)` (1 while this process holds its push), `viewers(id)`
    /// (its viewers here by protocol), and the byte counters.
    pub fn render(
        &self,
        live: impl Fn(&str) -> bool,
        viewers: impl Fn(&str) -> [(&'static str, i64); 3],
    ) -> String {
        use std::fmt::Write;
        use std::sync::atomic::Ordering;
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut out = String::from(
            "# HELP sluice_stream_live Whether this process holds the stream's push session\n\
             # TYPE sluice_stream_live gauge\n",
        );
        for id in map.keys() {
            let _ = writeln!(out, "sluice_stream_live{{stream=\"{id}\"}} {}", u8::from(live(id)));
        }
        out.push_str("# HELP sluice_stream_viewers Viewers of the stream on this process by protocol (HLS: playback sessions as of the last report)\n# TYPE sluice_stream_viewers gauge\n");
        for id in map.keys() {
            for (protocol, n) in viewers(id) {
                let _ = writeln!(out, "sluice_stream_viewers{{stream=\"{id}\",protocol=\"{protocol}\"}} {n}");
            }
        }
        out.push_str("# HELP sluice_stream_bytes_in_total Media bytes pushed into the stream on this process\n# TYPE sluice_stream_bytes_in_total counter\n");
        for (id, c) in &map {
            let _ = writeln!(
                out,
                "sluice_stream_bytes_in_total{{stream=\"{id}\"}} {}",
                c.bytes_in.load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP sluice_stream_bytes_out_total LL-HLS bytes (playlists and media) served of the stream by this process\n# TYPE sluice_stream_bytes_out_total counter\n");
        for (id, c) in &map {
            let _ = writeln!(
                out,
                "sluice_stream_bytes_out_total{{stream=\"{id}\"}} {}",
                c.bytes_out.load(Ordering::Relaxed)
            );
        }
        out
    }
}
