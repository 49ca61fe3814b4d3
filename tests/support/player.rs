//! A real player for playback tests: headless Chromium playing an HLS URL with hls.js
//! (`tests/player/player.html`, hls.js pinned in `tests/player/package-lock.json`).
//!
//! `Player::start` serves the page on 127.0.0.1:0 with poem and opens it in Chromium with
//! `?src=<url>`; the page POSTs a `Report` of what the `<video>` and hls.js see every 250 ms.
//! The HLS URL is on another origin (the server under test), so it must answer with
//! `Access-Control-Allow-Origin: *`. Chromium is `chromium` on PATH unless
//! `SLUICE_TEST_CHROMIUM` names another binary; hls.js comes from `npm ci --prefix tests/player`,
//! run once per process when `tests/player/node_modules` is missing or stale.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use poem::http::StatusCode;
use poem::web::Data;
use poem::{get, handler, post, EndpointExt, Response, Route};
use serde::Deserialize;
// Sluice's own live demo page (WHEP and LL-HLS side by side), played from the harness's origin
// with `?whep=&hls=&hlsjs=&report=`.
use sluice::playback::demo::PAGE as DEMO;

/// The page, compiled in so it always matches this module, with the start at the live edge that
/// the demo page and the console share inlined.
static PAGE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    sluice::playback::demo::with_start_at_edge(include_str!("../player/player.html"))
});
/// How long `start` waits for the page's first report.
const FIRST_REPORT: Duration = Duration::from_secs(30);
/// Reports kept (4 a second: over 15 minutes of playback).
const MAX_REPORTS: usize = 4000;
/// Lines of Chromium's stderr kept for failure messages.
const MAX_STDERR: usize = 200;

/// What the page saw at one instant (see `tests/player/player.html`).
#[derive(Debug, Clone, Deserialize)]
pub struct Report {
    /// `Date.now()` in the page, in ms.
    pub t: f64,
    #[serde(rename = "currentTime")]
    pub current_time: f64,
    /// `hls.latency` in seconds: None until hls.js has measured it, and for VOD.
    pub latency: Option<f64>,
    #[serde(rename = "targetLatency")]
    pub target_latency: Option<f64>,
    pub drift: Option<f64>,
    /// `hls.playingDate` in ms: the `EXT-X-PROGRAM-DATE-TIME` time of the frame on screen.
    pub playing_date: Option<f64>,
    /// `hls.currentLevel`: -1 until a level plays.
    pub level: i64,
    pub levels: Vec<Level>,
    pub buffered_end: Option<f64>,
    pub paused: bool,
    pub ended: bool,
    /// hls.js ERROR events as `type/details fatal=bool ...`, and page or `<video>` errors.
    pub errors: Vec<String>,
    /// Notable events, each once unless it repeats meaningfully: `MEDIA_ATTACHED`,
    /// `MANIFEST_LOADED`, `MANIFEST_PARSED`, `LEVEL_LOADED live|vod`, `BUFFER_CODECS ...`,
    /// `FRAG_LOADED`, `FRAG_BUFFERED`, `LEVEL_SWITCHED <n>`, `BUFFER_EOS`, `video playing`,
    /// `video waiting`, `video stalled`, `video ended`.
    pub events: Vec<String>,
    /// The start-up, stamped: `<ms since the page started> <event> | t=<currentTime> buf=<range>`
    /// for hls.js's loads, parses and appends and the `<video>`'s events of its first 8 s.
    #[serde(default)]
    pub timeline: Vec<String>,
    /// The playing playlist is live (no `#EXT-X-ENDLIST`).
    pub live: bool,
    /// From the playing media playlist: `#EXT-X-TARGETDURATION`, `#EXT-X-PART-INF:PART-TARGET`
    /// (None without parts) and `CAN-BLOCK-RELOAD=YES` of `#EXT-X-SERVER-CONTROL`.
    pub target_duration: Option<f64>,
    pub part_target: Option<f64>,
    pub can_block_reload: bool,
    pub low_latency: bool,
    pub playback_rate: f64,
    pub ready_state: u32,
    /// The mean colour of the picture on screen, `[r, g, b]`, once a frame shows.
    #[serde(default)]
    pub colour: Option<[f64; 3]>,
    /// Decoded picture size: non-zero only once video actually decodes.
    pub video_width: u32,
    pub video_height: u32,
    /// `getVideoPlaybackQuality()` counters.
    pub decoded_frames: Option<u64>,
    pub dropped_frames: Option<u64>,
    /// `MediaSource.isTypeSupported('video/mp4; codecs="avc1.64001f,mp4a.40.2"')`.
    pub mse_h264: bool,
    pub hls_supported: bool,
    pub hls_version: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Level {
    pub width: u32,
    pub height: u32,
    pub bitrate: u64,
}

impl Report {
    pub fn fatal_errors(&self) -> Vec<&String> {
        self.errors.iter().filter(|e| e.contains("fatal=true")).collect()
    }

    pub fn has_event(&self, prefix: &str) -> bool {
        self.events.iter().any(|e| e.starts_with(prefix))
    }
}

/// Taken by a test that judges hls.js's stalls across a publisher's switch on a live ladder
/// (tests/api/continuity.rs, backup.rs; tests/players.rs's two) for as long as it watches: two of them at once on a
/// 2-core machine starve each other's encoders and players (seen in a debug build: hls.js held
/// for good after the publisher came back, in one of two), so they take turns.
pub async fn one_watcher_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// The picture on screen is mostly red (the tests' primary input) / blue (their backup).
pub fn red(r: &Report) -> bool {
    r.colour.is_some_and(|[r, _, b]| r > b + 60.0)
}

pub fn blue(r: &Report) -> bool {
    r.colour.is_some_and(|[r, _, b]| b > r + 60.0)
}

/// The longest time (s) between page times `since` and `until` (ms) that the picture did not
/// move on while the page's clock did, and the page time it began at: consecutive reports whose
/// `currentTime` advanced less than half the time between them, added up while that lasts
/// (catching up, a rate above 1, plays more than the clock: that ends a run).
pub fn longest_hold(reports: &[Report], since: f64, until: f64) -> (f64, f64) {
    let (mut longest, mut run, mut began, mut at) = (0.0f64, 0.0f64, since, since);
    let from: Vec<&Report> = reports.iter().filter(|r| r.t >= since && r.t <= until).collect();
    for pair in from.windows(2) {
        let (dt, played) = ((pair[1].t - pair[0].t) / 1000.0, pair[1].current_time - pair[0].current_time);
        if played < dt * 0.5 {
            if run == 0.0 {
                began = pair[0].t;
            }
            run += (dt - played).max(0.0);
        } else {
            run = 0.0;
        }
        if run > longest {
            (longest, at) = (run, began);
        }
    }
    (longest, at)
}

/// Seconds of media played across `reports`: the last `currentTime` minus the first non-zero one.
pub fn played(reports: &[Report]) -> f64 {
    let first = reports.iter().find(|r| r.current_time > 0.0);
    match (first, reports.last()) {
        (Some(f), Some(l)) => l.current_time - f.current_time,
        _ => 0.0,
    }
}

#[derive(Default)]
struct State {
    reports: Mutex<Vec<Report>>,
    /// The demo page's reports (`{t, whep: {...}, hls: {...}}`).
    demo: Mutex<Vec<serde_json::Value>>,
    /// The matrix page's reports (`{matrix: {...}}`, tests/player/matrix.html).
    matrix: Mutex<Vec<serde_json::Value>>,
    /// Report bodies the harness could not read.
    bad_reports: Mutex<Vec<String>>,
    hls_js: Vec<u8>,
}

pub struct Player {
    /// The page URL Chromium opened.
    pub page_url: String,
    state: Arc<State>,
    chromium: Mutex<Option<Child>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    _profile: tempfile::TempDir,
    _shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

#[handler]
fn page() -> Response {
    Response::builder()
        .content_type("text/html; charset=utf-8")
        .header("cache-control", "no-store")
        .body(PAGE.as_str())
}

#[handler]
fn script(state: Data<&Arc<State>>) -> Response {
    Response::builder()
        .content_type("application/javascript")
        .header("cache-control", "no-store")
        .body(state.hls_js.clone())
}

/// The matrix page, with the start at the live edge inlined as in [`PAGE`].
static MATRIX: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    sluice::playback::demo::with_start_at_edge(include_str!("../player/matrix.html"))
});

#[handler]
fn matrix_page() -> Response {
    Response::builder()
        .content_type("text/html; charset=utf-8")
        .header("cache-control", "no-store")
        .body(MATRIX.as_str())
}

/// The matrix page's players, from `tests/player/node_modules` (pinned by its lockfile).
#[handler]
fn lib(poem::web::Path(name): poem::web::Path<String>) -> Response {
    let file = match name.as_str() {
        "hls.js" => "hls.js/dist/hls.min.js",
        "shaka.js" => "shaka-player/dist/shaka-player.compiled.js",
        "shaka-debug.js" => "shaka-player/dist/shaka-player.compiled.debug.js",
        "videojs.js" => "video.js/dist/video.min.js",
        _ => return Response::builder().status(StatusCode::NOT_FOUND).finish(),
    };
    match std::fs::read(player_dir().join("node_modules").join(file)) {
        Ok(body) => Response::builder()
            .content_type("application/javascript")
            .header("cache-control", "no-store")
            .body(body),
        Err(e) => Response::builder().status(StatusCode::INTERNAL_SERVER_ERROR).body(format!("{file}: {e}")),
    }
}

#[handler]
fn demo() -> Response {
    Response::builder()
        .content_type("text/html; charset=utf-8")
        .header("cache-control", "no-store")
        .body(DEMO.as_str())
}

#[handler]
fn report(body: Vec<u8>, state: Data<&Arc<State>>) -> StatusCode {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) {
        if v.get("whep").is_some() {
            state.demo.lock().unwrap().push(v);
            return StatusCode::NO_CONTENT;
        }
        if let Some(m) = v.get("matrix") {
            let mut reports = state.matrix.lock().unwrap();
            if reports.len() >= MAX_REPORTS {
                reports.drain(..MAX_REPORTS / 4);
            }
            reports.push(m.clone());
            return StatusCode::NO_CONTENT;
        }
    }
    match serde_json::from_slice::<Report>(&body) {
        Ok(r) => {
            let mut reports = state.reports.lock().unwrap();
            if reports.len() >= MAX_REPORTS {
                reports.drain(..MAX_REPORTS / 4);
            }
            reports.push(r);
            StatusCode::NO_CONTENT
        }
        Err(e) => {
            let mut bad = state.bad_reports.lock().unwrap();
            if bad.len() < 20 {
                bad.push(format!("{e}: {}", String::from_utf8_lossy(&body[..body.len().min(2000)])));
            }
            StatusCode::BAD_REQUEST
        }
    }
}

/// `tests/player`, found from this file's own path (also when included with `#[path]`).
fn player_dir() -> PathBuf {
    let here = Path::new(file!());
    let here = if here.is_absolute() {
        here.to_path_buf()
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(here)
    };
    here.parent().and_then(Path::parent).expect("tests/support/player.rs has a grandparent").join("player")
}

/// The hls.js version `package.json` pins, and the installed one.
fn hls_versions(dir: &Path) -> (Option<String>, Option<String>) {
    let read =
        |p: PathBuf| -> Option<serde_json::Value> { serde_json::from_slice(&std::fs::read(p).ok()?).ok() };
    let pinned =
        read(dir.join("package.json")).and_then(|v| v["dependencies"]["hls.js"].as_str().map(str::to_string));
    let installed = read(dir.join("node_modules/hls.js/package.json"))
        .and_then(|v| v["version"].as_str().map(str::to_string));
    (pinned, installed)
}

/// Runs `npm ci` once per process if hls.js is missing or not the pinned version.
fn ensure_hls_js() -> Result<PathBuf, String> {
    static DONE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let dir = player_dir();
        let js = dir.join("node_modules/hls.js/dist/hls.min.js");
        let (pinned, installed) = hls_versions(&dir);
        if pinned.is_none() {
            return Err(format!("{} has no hls.js dependency", dir.join("package.json").display()));
        }
        if !js.exists() || pinned != installed {
            let out = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("hls.js is not installed and `npm` cannot run ({e}): install Node.js and npm, then `npm ci --prefix tests/player`"))?;
            if !out.status.success() {
                return Err(format!(
                    "`npm ci --prefix {}` failed ({}): {}",
                    dir.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        if !js.exists() {
            return Err(format!("{} is missing after npm ci", js.display()));
        }
        Ok(js)
    })
    .clone()
}

/// Percent-encodes everything but RFC 3986 unreserved characters, for a query value.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Player {
    /// Plays the VOD at `url` (not in low-latency mode) to its end and checks that it got past
    /// `at_least` seconds without a fatal error; returns the last report.
    pub async fn play_to_the_end(url: &str, at_least: f64) -> Report {
        let player = Player::start_with(url, false).await;
        let reports = player
            .wait_until("the end of the video", Duration::from_secs(60), |r| {
                r.last().is_some_and(|r| r.ended)
            })
            .await;
        let last = reports.last().expect("a report").clone();
        assert!(last.current_time > at_least, "played to {}", last.current_time);
        assert!(last.fatal_errors().is_empty(), "{:?}", last.errors);
        last
    }

    /// Plays `hls_url` with `lowLatencyMode: true`.
    pub async fn start(hls_url: &str) -> Player {
        Player::start_with(hls_url, true).await
    }

    /// Serves the page on 127.0.0.1:0, starts headless Chromium on it with `?src=<hls_url>` and
    /// waits for the page's first report.
    pub async fn start_with(hls_url: &str, low_latency: bool) -> Player {
        Player::start_opts(hls_url, &format!("lowLatency={}", if low_latency { 1 } else { 0 })).await
    }

    /// Low latency with ABR on and catching up to its target latency (as
    /// [`Player::start_catching_up`]), starting on the lowest rung (`startLevel: 0`) and kept
    /// there (`autoLevelCapping: 0`) until `hold` seconds have played; then ABR may pick any rung
    /// up to `up_to` pixels tall, as when a player grows: hls.js switches up mid-play, with the
    /// buffer it keeps at the live edge.
    pub async fn start_lowest(hls_url: &str, hold: f64, up_to: u32) -> Player {
        Player::start_opts(
            hls_url,
            &format!("lowLatency=1&catchUp=1&startLevel=0&holdLowest={hold}&upTo={up_to}"),
        )
        .await
    }

    /// Low latency, and hls.js may play at up to 1.5x to get back to its target latency after a
    /// stall (`maxLiveSyncPlaybackRate`): latency then measures the stream, not the join.
    pub async fn start_catching_up(hls_url: &str) -> Player {
        Player::start_catching_up_with(hls_url, "").await
    }

    /// [`Player::start_catching_up`] with more of player.html's query options (`switchTo=`,
    /// `log=1`, ...).
    pub async fn start_catching_up_with(hls_url: &str, more: &str) -> Player {
        Player::start_opts(hls_url, &format!("lowLatency=1&catchUp=1&{more}")).await
    }

    /// Sluice's live demo page playing `whep_url` and `hls_url` side by side.
    pub async fn start_demo(whep_url: &str, hls_url: &str) -> Player {
        Player::open(|addr| {
            format!(
                "http://{addr}/demo.html?whep={}&hls={}&hlsjs=/hls.min.js&report=/report",
                encode(whep_url),
                encode(hls_url)
            )
        })
        .await
    }

    /// The matrix page (tests/player/matrix.html) playing `hls_url` with `options` after it
    /// (`player=shaka&ll=1&switchAt=8`, ...); waits for its first report.
    pub async fn start_matrix(hls_url: &str, options: &str) -> Player {
        let player =
            Player::open(|addr| format!("http://{addr}/matrix.html?src={}&{options}", encode(hls_url))).await;
        player.wait_matrix("the matrix page's first report", FIRST_REPORT, |_| true).await;
        player
    }

    /// The matrix page's reports so far.
    pub fn matrix_reports(&self) -> Vec<serde_json::Value> {
        self.state.matrix.lock().unwrap().clone()
    }

    /// Polls the matrix page's reports until `cond` holds on the last one; panics on `timeout`
    /// or when Chromium exits.
    pub async fn wait_matrix(
        &self,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        self.wait_json("matrix page", what, timeout, || self.matrix_reports(), cond).await
    }

    /// The demo page's reports so far.
    pub fn demo_reports(&self) -> Vec<serde_json::Value> {
        self.state.demo.lock().unwrap().clone()
    }

    /// Polls the demo page's reports until `cond` holds on the last one; panics on `timeout`
    /// or when Chromium exits.
    pub async fn wait_demo(
        &self,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        self.wait_json("demo page", what, timeout, || self.demo_reports(), cond).await
    }

    /// Polls `reports` (a page's JSON reports) until `cond` holds on the last one; panics on
    /// `timeout` or as soon as Chromium exits, with the last report and Chromium's stderr.
    async fn wait_json(
        &self,
        which: &str,
        what: &str,
        timeout: Duration,
        reports: impl Fn() -> Vec<serde_json::Value>,
        cond: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let until = Instant::now() + timeout;
        loop {
            if let Some(last) = reports().last() {
                if cond(last) {
                    return last.clone();
                }
            }
            let exited = self.chromium.lock().unwrap().as_mut().and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() >= until {
                let last = reports().last().cloned();
                let stderr = self.stderr();
                panic!(
                    "{which}: {} waiting for {what}; page {}; last report {last:?}; chromium stderr: {:?}",
                    if exited.is_some() { "Chromium exited" } else { "timed out" },
                    self.page_url,
                    &stderr[stderr.len().saturating_sub(30)..]
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The player page on `hls_url` with `options` (player.html's query) after it.
    pub async fn start_opts(hls_url: &str, options: &str) -> Player {
        let player =
            Player::open(|addr| format!("http://{addr}/player.html?src={}&{options}", encode(hls_url))).await;
        player.wait_until("the player page's first report", FIRST_REPORT, |r| !r.is_empty()).await;
        player
    }

    async fn open(page_of: impl FnOnce(std::net::SocketAddr) -> String) -> Player {
        let js = tokio::task::spawn_blocking(ensure_hls_js)
            .await
            .expect("npm ci task")
            .unwrap_or_else(|e| panic!("{e}"));
        let hls_js = std::fs::read(&js).unwrap_or_else(|e| panic!("read {}: {e}", js.display()));
        let state = Arc::new(State { hls_js, ..Default::default() });

        let routes = Route::new()
            .at("/", get(page))
            .at("/player.html", get(page))
            .at("/demo.html", get(demo))
            .at("/hls.min.js", get(script))
            .at("/matrix.html", get(matrix_page))
            .at("/lib/:name", get(lib))
            .at("/report", post(report))
            .data(state.clone());
        let (addr, tx) = super::serve_loopback(routes).await;

        let page_url = page_of(addr);
        let profile = tempfile::tempdir().expect("chromium profile dir");
        let bin = std::env::var("SLUICE_TEST_CHROMIUM").unwrap_or_else(|_| "chromium".into());
        let mut child = Command::new(&bin)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--autoplay-policy=no-user-gesture-required",
                "--mute-audio",
                "--disable-gpu",
                // Debian's wrapper means to add this when /dev/shm is small but its check is
                // broken; containers often have a 64 MB /dev/shm.
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--disable-breakpad",
                "--disable-background-timer-throttling",
                "--disable-renderer-backgrounding",
                "--disable-backgrounding-occluded-windows",
                "--disable-features=Translate,MediaRouter,OptimizationHints",
                "--window-size=800,600",
                "--enable-logging=stderr",
                "--log-level=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(&page_url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group, so Drop can end the renderer and GPU processes too.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start `{bin}` (Debian package chromium, or set SLUICE_TEST_CHROMIUM): {e}")
            });

        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let pipe = child.stderr.take().expect("stderr pipe");
        let lines = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                // D-Bus is absent in CI containers and Chromium says so on every start.
                if line.contains("dbus") || line.contains("DBus") {
                    continue;
                }
                let mut l = lines.lock().unwrap();
                if l.len() >= MAX_STDERR {
                    l.pop_front();
                }
                l.push_back(line);
            }
        });

        Player {
            page_url,
            state,
            chromium: Mutex::new(Some(child)),
            stderr,
            _profile: profile,
            _shutdown: Some(tx),
        }
    }

    /// Every report received so far, oldest first.
    pub fn reports(&self) -> Vec<Report> {
        self.state.reports.lock().unwrap().clone()
    }

    pub fn last(&self) -> Option<Report> {
        self.state.reports.lock().unwrap().last().cloned()
    }

    /// Waits (60 s at most) until the player has played `secs` s of media from where it started
    /// (hls.js starts near the live edge) with the last report passing `showing`.
    pub async fn wait_played(&self, what: &str, secs: f64, showing: fn(&Report) -> bool) -> Vec<Report> {
        self.wait_until(what, Duration::from_secs(60), |rs| {
            let start = rs.iter().find(|r| r.current_time > 0.0).map(|r| r.current_time);
            start
                .zip(rs.last())
                .is_some_and(|(start, last)| showing(last) && last.current_time >= start + secs)
        })
        .await
    }

    /// Waits (20 s at most) until the screen shows `colour` after page time `from` (ms); the time
    /// (s) from the last report showing `before` to the first showing `colour`.
    pub async fn switch(
        &self,
        what: &str,
        from: f64,
        before: fn(&Report) -> bool,
        colour: fn(&Report) -> bool,
    ) -> f64 {
        let reports = self
            .wait_until(what, Duration::from_secs(20), |rs| rs.iter().any(|r| r.t > from && colour(r)))
            .await;
        let first = reports.iter().find(|r| r.t > from && colour(r)).map(|r| r.t).unwrap_or_default();
        let last = reports.iter().rev().find(|r| r.t < first && before(r)).map_or(from, |r| r.t);
        (first - last) / 1000.0
    }

    /// Polls the reports until `cond` holds and returns them; panics on `timeout`, or as soon as
    /// Chromium exits, with the last reports and Chromium's stderr.
    pub async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&[Report]) -> bool,
    ) -> Vec<Report> {
        let start = Instant::now();
        let until = start + timeout;
        loop {
            let reports = self.reports();
            if cond(&reports) {
                return reports;
            }
            let exited = self.chromium.lock().unwrap().as_mut().and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.fail(&format!("Chromium exited ({status}) while waiting for {what}"), &reports);
            }
            if Instant::now() >= until {
                self.fail(&format!("timed out after {:?} waiting for {what}", start.elapsed()), &reports);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn fail(&self, why: &str, reports: &[Report]) -> ! {
        let mut msg = format!("player: {why}\npage: {}\n{} reports", self.page_url, reports.len());
        for r in &reports[reports.len().saturating_sub(3)..] {
            msg.push_str(&format!("\n{r:?}"));
        }
        let bad = self.state.bad_reports.lock().unwrap().clone();
        for b in bad {
            msg.push_str(&format!("\nunreadable report: {b}"));
        }
        let stderr = self.stderr();
        msg.push_str(&format!("\nchromium stderr (last {} lines):", stderr.len().min(40)));
        for l in &stderr[stderr.len().saturating_sub(40)..] {
            msg.push_str(&format!("\n  {l}"));
        }
        panic!("{msg}");
    }

    /// Chromium's stderr lines kept so far (console messages included), D-Bus noise left out.
    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().iter().cloned().collect()
    }
}

impl Drop for Player {
    fn drop(&mut self) {
        let child = self.chromium.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut child) = child {
            // SIGKILL to Chromium's whole process group (renderer, GPU, zygote), then reap.
            let pgid = child.id().to_string();
            let _ = Command::new("sh")
                .args(["-c", "kill -KILL -- \"-$0\" 2>/dev/null", &pgid])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
        self._shutdown.take();
    }
}
