//! The console (CONTRACT: Console) in real Chromium through WebDriver, on the server with its
//! embedded console: sign in, create a stream and read how to push to it off the page, push to
//! that URL with ffmpeg and see its row turn `live` without a reload and the preview play,
//! upload a file through the file input, make a webhook and an API key (each secret shown once,
//! the key working), a 400 beside its field, a viewer without a control that writes, and
//! axe-core on every page. Prints the figures the issue asks for.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::browser::{testid, Browser};
use crate::support::{
    bootstrap_json, clip, eventually, ffmpeg_push, free_port, sluice_command, spawn_app, vod_clip_name,
    wait_ready, Backend, Killed,
};

/// The real `sluice` binary, with the console it embeds, serving a bootstrapped `demo` project
/// (its admin's e-mail and password, its `*` key); the calls the tests make of it.
struct Served {
    dir: tempfile::TempDir,
    port: u16,
    proc: Option<Killed>,
    key: String,
    email: String,
    password: String,
    client: reqwest::Client,
}

impl Served {
    async fn start() -> Served {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let boot = bootstrap_json(sluice_command(dir.path(), port));
        let text = |v: &Value| v.as_str().expect("bootstrap field").to_string();
        let mut served = Served {
            dir,
            port,
            proc: None,
            key: text(&boot["apiKey"]["key"]),
            email: text(&boot["user"]["email"]),
            password: text(&boot["user"]["password"]),
            client: reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap(),
        };
        served.serve().await;
        served
    }

    async fn serve(&mut self) {
        let child = sluice_command(self.dir.path(), self.port)
            .arg("serve")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sluice serve");
        self.proc = Some(Killed(child));
        wait_ready(self.port).await;
    }

    /// SIGTERM, the process gone, then started again on the same data and port.
    async fn restart(&mut self) {
        let mut proc = self.proc.take().expect("running");
        let pid = proc.0.id().to_string();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let _ = proc.0.wait();
        self.serve().await;
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn project_url(&self, rest: &str) -> String {
        self.url(&format!("/v1/projects/demo{rest}"))
    }

    fn with_key(&self, method: Method, url: &str, key: &str) -> reqwest::RequestBuilder {
        self.client.request(method, url).bearer_auth(key)
    }

    async fn get_with(&self, url: &str, key: &str) -> reqwest::Response {
        self.with_key(Method::GET, url, key).send().await.expect("request")
    }

    async fn post_json_with(&self, url: &str, key: &str, body: &Value) -> reqwest::Response {
        self.with_key(Method::POST, url, key).json(body).send().await.expect("request")
    }
}

/// Where the page is: its path.
async fn path_of(b: &Browser) -> String {
    b.client.current_url().await.expect("url").path().to_string()
}

/// Saves a screenshot of the page as `target/console-screenshots/<name>.png` (docs/console.md
/// shows copies of them).
async fn shot(b: &Browser, name: &str) {
    let png = b.client.screenshot().await.expect("screenshot");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target/console-screenshots");
    std::fs::create_dir_all(dir).expect("screenshot folder");
    std::fs::write(format!("{dir}/{name}.png"), png).expect("screenshot");
}

/// Checks the page with axe-core, naming it; collects what is found.
async fn audit(b: &Browser, page: &str, found: &mut Vec<String>) {
    for problem in b.accessibility_problems().await {
        found.push(format!("{page}: {problem}"));
    }
}

async fn stream_status(t: &Served, id: &str) -> String {
    let s: Value = t.get_with(&t.project_url(&format!("/streams/{id}")), &t.key).await.json().await.unwrap();
    s["status"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn the_console_drives_a_project_from_sign_in_to_a_live_preview() {
    let t = Served::start().await;
    assert!(
        sluice::console::Console::is_built(),
        "the console is built into the binary (scripts/console.sh)"
    );
    let b = Browser::start(1280).await;
    let mut a11y = Vec::new();

    // Sign in from the first load; the streams page of the project comes up.
    let started = Instant::now();
    b.goto(&t.url("/")).await;
    b.find(&testid("login-email")).await;
    audit(&b, "sign-in", &mut a11y).await;
    shot(&b, "sign-in").await;
    b.fill(&testid("login-email"), &t.email).await;
    b.fill(&testid("login-password"), &t.password).await;
    b.click(&testid("login-submit")).await;
    b.find_within(&testid("stream-new"), Duration::from_secs(15)).await;
    let first_load = started.elapsed();
    assert_eq!(path_of(&b).await, "/p/demo/streams");
    audit(&b, "streams", &mut a11y).await;
    let (js_gzipped, scripts) = scripts_loaded(&b).await;
    assert!(scripts.iter().all(|s| !s.contains("hls")), "hls.js waits for a preview: {scripts:?}");
    assert!(js_gzipped <= 200 * 1024, "{js_gzipped} bytes of JS, gzipped");

    // Create a stream; its page shows how to push, the password included (this once).
    b.click(&testid("stream-new")).await;
    audit(&b, "new stream", &mut a11y).await;
    b.fill(&testid("stream-name"), "console-cam").await;
    b.click(&testid("stream-save")).await;
    let ingest =
        b.wait_shown(&testid("ingest-url"), Duration::from_secs(10), |s| s.starts_with("rtmp://")).await;
    let server = b.shown(&testid("obs-server")).await;
    let key = b.shown(&testid("obs-stream-key")).await;
    let user = b.shown(&testid("push-username")).await;
    let password = b.shown(&testid("push-password")).await;
    let id = path_of(&b).await.rsplit('/').next().unwrap().to_string();
    let created: Value =
        t.get_with(&t.project_url(&format!("/streams/{id}")), &t.key).await.json().await.unwrap();
    assert_eq!(key, created["streamKey"].as_str().unwrap(), "the stream key of the stream made");
    assert_eq!(server, created["obs"]["server"].as_str().unwrap());
    assert_eq!(user, created["pushUsername"].as_str().unwrap());
    assert!(ingest.starts_with(&format!("{server}/{key}?")) && ingest.contains(&password), "{ingest}");
    assert!(b.exists(&testid("srt-url")).await && b.exists(&testid("whip-url")).await);
    audit(&b, "stream", &mut a11y).await;
    shot(&b, "stream-created").await;

    // The list, open while ffmpeg pushes to the URL read off the page: the row turns `live`
    // within 2 s of the stream going live, without a reload.
    b.click(&testid("nav-streams")).await;
    let row = format!("{}[data-id=\"{id}\"] {}", testid("stream-row"), testid("stream-status"));
    b.wait_shown(&row, Duration::from_secs(10), |s| s == "idle").await;
    let marker: Value = b.run("window.__sameDocument = true; return true;", vec![]).await;
    assert_eq!(marker, json!(true));
    let push = ffmpeg_push(&ingest, "testsrc=size=320x240:rate=15", 15, &[]);
    eventually("the stream live (API)", Duration::from_secs(20), || async {
        (stream_status(&t, &id).await == "live").then_some(())
    })
    .await;
    let live_at = Instant::now();
    b.wait_shown(&row, Duration::from_secs(5), |s| s == "live").await;
    let row_delay = live_at.elapsed();
    assert!(row_delay <= Duration::from_secs(2), "the row turned live {row_delay:?} after the stream");
    let same: Value = b.run("return window.__sameDocument === true;", vec![]).await;
    assert_eq!(same, json!(true), "no reload");
    shot(&b, "streams-live").await;

    // Its page: the preview plays (its currentTime advances).
    b.click(&format!("{}[data-id=\"{id}\"] a", testid("stream-row"))).await;
    b.wait_shown(&testid("stream-status"), Duration::from_secs(10), |s| s == "live").await;
    let time = "const v = document.querySelector('[data-testid=preview]'); return v ? v.currentTime : -1;";
    let first = eventually("the preview to play", Duration::from_secs(30), || async {
        let now = b.run(time, vec![]).await.as_f64().unwrap_or(-1.0);
        (now > 0.5).then_some(now)
    })
    .await;
    eventually("the preview to go on playing", Duration::from_secs(10), || async {
        let now = b.run(time, vec![]).await.as_f64().unwrap_or(-1.0);
        (now > first + 1.0).then_some(())
    })
    .await;
    // The preview is a viewer: the page shows it counted (each node reports every 2 s, the page
    // re-reads the record every 5 s while live).
    b.wait_shown(&testid("stream-viewers"), Duration::from_secs(15), |s| s.starts_with("1 now")).await;
    audit(&b, "live stream", &mut a11y).await;
    shot(&b, "stream-live-preview").await;
    drop(push);

    // A 400 shows beside the field its message names.
    b.click(&testid("nav-streams")).await;
    b.click(&testid("stream-new")).await;
    b.fill(&testid("stream-name"), "no-qualities").await;
    for q in ["720p", "480p"] {
        b.click(&format!("#qualities-{q}")).await;
    }
    b.click(&testid("stream-save")).await;
    let beside = b.wait_shown("#qualities-error", Duration::from_secs(10), |s| !s.is_empty()).await;
    assert!(beside.starts_with("qualities "), "{beside}");
    audit(&b, "new stream with an error", &mut a11y).await;
    shot(&b, "stream-new-error").await;

    // Upload a 10-s file through the file input: the progress reaches 100 %, the row `complete`.
    b.click(&testid("nav-vod")).await;
    audit(&b, "VOD", &mut a11y).await;
    let file = clip(&vod_clip_name(Some(("testsrc", "320x240", 15)), 10)).canonicalize().expect("the clip");
    b.find(&testid("vod-file")).await.send_keys(&file.display().to_string()).await.expect("choose the file");
    b.wait_shown(&testid("upload-progress"), Duration::from_secs(60), |s| s.trim_end().ends_with("100%"))
        .await;
    b.wait_shown(&testid("vod-status"), Duration::from_secs(120), |s| s == "complete").await;
    let vods: Value = t.get_with(&t.project_url("/vod"), &t.key).await.json().await.unwrap();
    assert_eq!(vods["total"], 1);
    assert_eq!(vods["items"][0]["status"], "complete");
    assert!(
        b.exists(&format!(
            "{}[data-id=\"{}\"]",
            testid("vod-row"),
            vods["items"][0]["_id"].as_str().unwrap()
        ))
        .await
    );
    shot(&b, "vod-uploaded").await;
    b.goto(&t.url(&format!("/p/demo/vod/{}", vods["items"][0]["_id"].as_str().unwrap()))).await;
    b.wait_shown(&testid("vod-status"), Duration::from_secs(10), |s| s == "complete").await;
    audit(&b, "VOD page", &mut a11y).await;

    // A webhook: its secret is shown once.
    b.click(&testid("nav-webhooks")).await;
    b.click(&testid("webhook-new")).await;
    b.fill(&testid("webhook-url"), "http://127.0.0.1:9/console-hook").await;
    b.click(&testid("webhook-save")).await;
    let secret = b.wait_shown(&testid("webhook-secret"), Duration::from_secs(10), |s| !s.is_empty()).await;
    assert!(secret.len() == 32 && secret.bytes().all(|c| c.is_ascii_hexdigit()), "{secret:?}");
    audit(&b, "webhooks", &mut a11y).await;
    shot(&b, "webhook-created").await;
    b.client.refresh().await.expect("reload");
    b.find(&testid("webhook-new")).await;
    assert!(!b.exists(&testid("webhook-secret")).await, "the secret is not shown again");
    // Its page (the delivery log), then deleted elsewhere: the page says it is gone.
    let hooks: Value = t.get_with(&t.project_url("/webhooks"), &t.key).await.json().await.unwrap();
    let hook = hooks["items"][0]["_id"].as_str().unwrap().to_string();
    b.goto(&t.url(&format!("/p/demo/webhooks/{hook}"))).await;
    b.find("main h1").await;
    audit(&b, "webhook", &mut a11y).await;
    let gone = t.with_key(Method::DELETE, &t.project_url(&format!("/webhooks/{hook}")), &t.key).send().await;
    assert_eq!(gone.unwrap().status(), 200);
    b.client.refresh().await.expect("reload");
    b.wait_shown("main h1", Duration::from_secs(10), |s| s.contains("not found")).await;
    assert!(b.exists(".gone").await, "a deleted webhook shows as gone, not a blank page");

    // An API key: shown once, and it works.
    b.click(&testid("nav-api-keys")).await;
    b.click(&testid("api-key-new")).await;
    b.fill(&testid("api-key-label"), "from the console").await;
    b.click(&testid("api-key-save")).await;
    let raw =
        b.wait_shown(&testid("api-key-secret"), Duration::from_secs(10), |s| s.starts_with("svc_")).await;
    audit(&b, "API keys", &mut a11y).await;
    shot(&b, "api-key-created").await;
    // curl on a thread of its own: the server runs on this test's runtime.
    let (auth, url) = (format!("Authorization: Bearer {raw}"), t.project_url("/streams"));
    let curl = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", &auth, &url])
            .output()
            .expect("curl runs")
    })
    .await
    .expect("curl");
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "200", "the key made in the console works with curl");
    b.client.refresh().await.expect("reload");
    b.find(&testid("api-key-new")).await;
    assert!(!b.exists(&testid("api-key-secret")).await, "the raw key is not shown again");
    b.click(&testid("nav-members")).await;
    b.find("main h1, main h2").await;
    audit(&b, "members", &mut a11y).await;

    for (page, heading) in [("/account", "account"), ("/projects", "projects")] {
        b.goto(&t.url(page)).await;
        b.find("main h1").await;
        audit(&b, heading, &mut a11y).await;
    }

    // A session that is over brings back the sign-in, and then the page the user was on.
    let page = format!("/p/demo/streams/{id}");
    b.goto(&t.url(&page)).await;
    b.find(&testid("stream-status")).await;
    b.client.delete_all_cookies().await.expect("the session ends");
    b.client.refresh().await.expect("reload");
    b.find(&testid("login-email")).await;
    b.fill(&testid("login-email"), &t.email).await;
    b.fill(&testid("login-password"), &t.password).await;
    b.click(&testid("login-submit")).await;
    b.find(&testid("stream-status")).await;
    assert_eq!(path_of(&b).await, page, "back on the page after signing in again");

    // A viewer sees no control that writes.
    let added: Value = t
        .post_json_with(
            &t.project_url("/members"),
            &t.key,
            &json!({"email": "viewer@console.test", "role": "viewer"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let token = added["invitation"]["token"].as_str().expect("an invitation").to_string();
    b.client.delete_all_cookies().await.expect("sign out");
    b.goto(&t.url(&format!("/accept-invitation?token={token}"))).await;
    b.find("input[type=password]").await;
    audit(&b, "accept invitation", &mut a11y).await;
    let accepted = t
        .client
        .post(t.url("/v1/auth/accept-invitation"))
        .json(&json!({"token": token, "password": "viewer-password-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 200);
    b.goto(&t.url("/")).await;
    b.sign_in("viewer@console.test", "viewer-password-1").await;
    b.find(&row).await;
    for control in ["stream-new", "nav-api-keys", "nav-members"] {
        assert!(!b.exists(&testid(control)).await, "a viewer sees no {control}");
    }
    b.click(&format!("{}[data-id=\"{id}\"] a", testid("stream-row"))).await;
    b.find(&testid("stream-status")).await;
    let writes = "return [...document.querySelectorAll('main button')]\
                  .map(e => (e.textContent || e.getAttribute('aria-label') || '').trim());";
    let controls = b.run(writes, vec![]).await;
    audit(&b, "stream, as a viewer", &mut a11y).await;
    shot(&b, "stream-as-viewer").await;
    for verb in ["Delete", "Disable", "Rotate", "Enable", "Signed playback"] {
        assert!(!controls.to_string().contains(verb), "a viewer sees {verb}: {controls}");
    }
    b.click(&testid("nav-vod")).await;
    b.find(&testid("vod-row")).await;
    assert!(!b.exists(&testid("vod-file")).await, "a viewer cannot upload");
    b.click(&testid("nav-webhooks")).await;
    b.find("main h1, main h2").await;
    assert!(!b.exists(&testid("webhook-new")).await, "a viewer makes no webhook");

    assert!(a11y.is_empty(), "serious or critical accessibility problems:\n{}", a11y.join("\n"));
    eprintln!(
        "console figures: JS of the streams page {:.1} KiB gzipped ({} files); first load to the signed-in \
         streams page {:.0} ms; a row turned live {:.0} ms after the stream",
        js_gzipped as f64 / 1024.0,
        scripts.len(),
        first_load.as_secs_f64() * 1000.0,
        row_delay.as_secs_f64() * 1000.0
    );
}

/// The scripts the page loaded, and their size gzipped (the server sends them as they are;
/// gzip -9 of the built files says what a compressing proxy would send).
async fn scripts_loaded(b: &Browser) -> (u64, Vec<String>) {
    let names = b
        .run("return performance.getEntriesByType('resource').map(e => e.name).filter(n => n.endsWith('.js'));", vec![])
        .await;
    let scripts: Vec<String> =
        names.as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
    let mut total = 0;
    for url in &scripts {
        let file = url.rsplit('/').next().unwrap();
        let path = format!("{}/console/dist/assets/{file}", env!("CARGO_MANIFEST_DIR"));
        let out = std::process::Command::new("gzip").args(["-9", "-c", &path]).output().expect("gzip runs");
        assert!(out.status.success(), "gzip {path}");
        total += out.stdout.len() as u64;
    }
    assert!(!scripts.is_empty(), "the page loaded its script");
    (total, scripts)
}

/// A project of 1,001 streams: the list renders one page of them, fast.
#[tokio::test]
async fn a_thousand_streams_list_in_pages() {
    let t = spawn_app(Backend::Sqlite).await;
    let resp = t.post_json_with(&t.project_url("/streams"), &t.key, &json!({"name": "template"})).await;
    let template: Value = resp.json().await.unwrap();
    // Copies of the template, straight into the database (the API's rate limit would take 20 s).
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) \
         INSERT INTO streams (id, project_id, name, stream_key, push_username, push_salt, push_verifier, \
         qualities, protocols, vod_enabled, dvr_enabled, dvr_duration, drm_enabled, signed_playback, status, \
         disabled_reason, created_at, updated_at, last_push_at, input_info, live_node, push_secret) \
         SELECT 'bulk' || i, project_id, 'bulk-' || i, stream_key || i, push_username || i, push_salt, \
         push_verifier, qualities, protocols, vod_enabled, dvr_enabled, dvr_duration, drm_enabled, \
         signed_playback, status, NULL, created_at - i, updated_at, NULL, NULL, NULL, push_secret \
         FROM streams, n WHERE streams.id = $1",
    )
    .bind(template["_id"].as_str().unwrap())
    .execute(t.db.pool())
    .await
    .expect("1,000 copies");
    let b = Browser::start(1280).await;
    b.goto(&t.url("/")).await;
    b.sign_in(&t.email, &t.password).await;
    b.goto(&t.url("/login")).await;
    let started = Instant::now();
    b.goto(&t.url("/p/demo/streams")).await;
    b.find(&format!("{}[data-id=\"bulk1\"]", testid("stream-row"))).await;
    let rendered = started.elapsed();
    let rows = b.run("return document.querySelectorAll('[data-testid=stream-row]').length;", vec![]).await;
    let rows = rows.as_u64().unwrap();
    assert!((1..=100).contains(&rows), "one page, not 1,001 rows: {rows}");
    let text = b.run("return document.querySelector('main').innerText;", vec![]).await;
    assert!(text.as_str().unwrap().contains("1001"), "the page says how many there are");
    eprintln!(
        "console figures: a 1,001-stream project's list rendered in {:.0} ms ({rows} rows a page)",
        rendered.as_secs_f64() * 1000.0
    );
}

/// The real binary, stopped and started again while the console's page follows the event log
/// (the browser's own `EventSource`, as the console uses it): every event of both runs arrives
/// once, in order.
#[tokio::test]
async fn the_event_log_followed_in_the_browser_across_a_restart_misses_and_repeats_nothing() {
    let mut t = Served::start().await;
    let create = |t: &Served, name: &'static str| {
        let request =
            t.with_key(Method::POST, &t.project_url("/streams"), &t.key).json(&json!({"name": name}));
        async move {
            assert_eq!(request.send().await.unwrap().status(), 201);
        }
    };
    let b = Browser::start(1024).await;
    b.goto(&t.url("/")).await;
    b.sign_in(&t.email, &t.password).await;
    let names: Vec<&str> = sluice::events::EventName::ALL.iter().map(|e| e.as_str()).collect();
    b.run(
        "window.__seen = []; const log = new EventSource('/v1/projects/demo/events');\
         for (const name of arguments[0]) log.addEventListener(name, (e) => window.__seen.push(JSON.parse(e.data)));\
         window.__log = log; return true;",
        vec![json!(names)],
    )
    .await;
    let seen = || async {
        let v = b.run("return window.__seen.map(e => e.data.name);", vec![]).await;
        v.as_array().unwrap().iter().map(|n| n.as_str().unwrap_or_default().to_string()).collect::<Vec<_>>()
    };
    for name in ["first-0", "first-1", "first-2"] {
        create(&t, name).await;
    }
    eventually("the first three events", Duration::from_secs(10), || async {
        (seen().await.len() >= 3).then_some(())
    })
    .await;
    t.restart().await;
    for name in ["second-0", "second-1", "second-2"] {
        create(&t, name).await;
    }
    eventually("the browser to reconnect and catch up", Duration::from_secs(20), || async {
        (seen().await.len() >= 6).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // anything repeated would come now
    assert_eq!(seen().await, ["first-0", "first-1", "first-2", "second-0", "second-1", "second-2"]);
}

/// An upload whose connection drops goes on from the server's offset once the network is back,
/// not from the start: a 19-MB file (three 8-MiB chunks) sent at 2 MB/s, the network cut for 2 s
/// once the first chunk is in.
#[tokio::test]
async fn an_upload_that_drops_resumes_from_the_servers_offset() {
    let t = spawn_app(Backend::Sqlite).await;
    let b = Browser::start(1280).await;
    b.goto(&t.url("/")).await;
    b.sign_in(&t.email, &t.password).await;
    b.click(&testid("nav-vod")).await;
    let file = clip(&vod_clip_name(Some(("testsrc2", "1280x720", 30)), 20)).canonicalize().expect("the clip");
    let size = std::fs::metadata(&file).expect("the clip").len();
    let first_chunk = (8 * 1024 * 1024) as f64 / size as f64 * 100.0;
    b.network(false, Some(2_000_000)).await;
    b.find(&testid("vod-file")).await.send_keys(&file.display().to_string()).await.expect("choose the file");
    let percent = |text: &str| -> f64 {
        text.trim_end().trim_end_matches('%').rsplit(' ').next().and_then(|p| p.parse().ok()).unwrap_or(-1.0)
    };
    let progress = testid("upload-progress");
    let at_cut =
        percent(&b.wait_shown(&progress, Duration::from_secs(60), |s| percent(s) > first_chunk + 5.0).await);
    b.network(true, None).await;
    let mut lowest = at_cut;
    let mut retrying = false;
    let back = Instant::now() + Duration::from_secs(2);
    while Instant::now() < back {
        lowest = lowest.min(percent(&b.shown(&progress).await));
        retrying |= b.exists(".upload-retrying").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(retrying, "the cut broke the upload off (it waits to retry)");
    b.network(false, None).await;
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let now = percent(&b.shown(&progress).await);
        lowest = lowest.min(now);
        if now >= 100.0 {
            break;
        }
        assert!(Instant::now() < until, "the upload did not finish: {now} %");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        lowest >= first_chunk - 1.0,
        "the upload went back to {lowest:.0} % (cut at {at_cut:.0} %): it resumed from before the server's offset"
    );
    let vods: Value = eventually("the VOD uploaded", Duration::from_secs(30), || async {
        let v: Value = t.get_with(&t.project_url("/vod"), &t.key).await.json().await.ok()?;
        (v["items"][0]["status"] != "pending_upload").then_some(v)
    })
    .await;
    assert_eq!(vods["items"][0]["sourceSize"], json!(size), "every byte arrived once");
    assert_ne!(vods["items"][0]["status"], "failed");
    eprintln!("console: an upload cut at {at_cut:.0} % went on from {lowest:.0} % (the first chunk is {first_chunk:.0} %)");
}

#[tokio::test]
async fn the_stream_page_shows_the_backup_encoder_and_replaces_the_slate() {
    let t = spawn_app(Backend::Sqlite).await;
    let b = Browser::start(1280).await;
    b.goto(&t.url("/")).await;
    b.sign_in(&t.email, &t.password).await;
    b.click(&testid("stream-new")).await;
    b.fill(&testid("stream-name"), "backed-up").await;
    b.click(&testid("stream-save")).await;
    // The backup encoder's settings, shown with the credentials (this once).
    let primary =
        b.wait_shown(&testid("ingest-url"), Duration::from_secs(10), |s| s.starts_with("rtmp://")).await;
    let backup = b.shown(&testid("backup-ingest-url")).await;
    assert!(backup.contains("/backup/") && backup == primary.replacen("/live/", "/backup/", 1), "{backup}");
    assert!(b.shown(&testid("backup-srt-url")).await.contains("streamid=backup:"));
    assert!(b.shown(&testid("backup-obs-server")).await.ends_with("/backup"));
    let id = path_of(&b).await.rsplit('/').next().unwrap_or_default().to_string();

    // The slate: the default card, then a picture chosen in the file input, then the card again.
    let slate = testid("stream-slate");
    b.wait_shown(&slate, Duration::from_secs(10), |s| s.starts_with("The default card")).await;
    let dir = tempfile::tempdir().expect("a folder");
    let png = dir.path().join("slate.png");
    std::fs::write(&png, crate::slate::picture("png", "green", "640x360")).expect("written");
    b.find(&testid("slate-file")).await.send_keys(&png.display().to_string()).await.expect("choose the file");
    b.wait_shown(&slate, Duration::from_secs(10), |s| s.starts_with("Your picture: PNG, 640×360")).await;
    let url = t.project_url(&format!("/streams/{id}/slate"));
    assert_eq!(t.get_with(&url, &t.key).await.status(), 200);
    shot(&b, "stream-slate").await;
    // Not a picture: the server's reason, and nothing changes.
    let text = dir.path().join("notes.png");
    std::fs::write(&text, "not a picture").expect("written");
    b.find(&testid("slate-file"))
        .await
        .send_keys(&text.display().to_string())
        .await
        .expect("choose the file");
    b.wait_shown(".alert", Duration::from_secs(10), |s| s.contains("not a JPEG or PNG")).await;
    assert_eq!(t.get_with(&url, &t.key).await.status(), 200, "the picture stays");
    b.click(&testid("slate-restore")).await;
    b.wait_shown(&slate, Duration::from_secs(10), |s| s.starts_with("The default card")).await;
    assert_eq!(t.get_with(&url, &t.key).await.status(), 404);

    // Live with the backup standing by: the health panel says so.
    let _primary = ffmpeg_push(&primary, "testsrc=size=320x240:rate=15", 15, &[]);
    eventually("the stream live", Duration::from_secs(20), || async {
        let v: Value =
            t.get_with(&t.project_url(&format!("/streams/{id}")), &t.key).await.json().await.ok()?;
        (v["status"] == "live").then_some(())
    })
    .await;
    let _backup = ffmpeg_push(&backup, "testsrc=size=320x240:rate=15", 15, &[]);
    b.wait_shown(&testid("stream-standing-by"), Duration::from_secs(40), |s| s.starts_with("backup, ready"))
        .await;
    assert_eq!(b.shown(&testid("stream-input")).await, "primary");
    shot(&b, "stream-backup-standing-by").await;
}
