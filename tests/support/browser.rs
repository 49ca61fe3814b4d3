//! Real Chromium driven through WebDriver (Debian's `chromium-driver`) with fantoccini, for the
//! console's tests: a `chromedriver` on a free port, one headless session, and waits that poll
//! the page with a deadline.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};

use super::{eventually, free_port, Killed};

/// A Chromium session and the driver that holds it.
pub struct Browser {
    pub client: Client,
    /// The driver's URL (for the commands fantoccini has no call for).
    driver_url: String,
    _driver: Killed,
}

/// `[data-testid=…]`
pub fn testid(id: &str) -> String {
    format!("[data-testid=\"{id}\"]")
}

impl Browser {
    /// Signs in on the console's sign-in form (already on the page) and waits for the signed-in
    /// navigation.
    pub async fn sign_in(&self, email: &str, password: &str) {
        self.fill(&testid("login-email"), email).await;
        self.fill(&testid("login-password"), password).await;
        self.click(&testid("login-submit")).await;
        self.find_within(&testid("nav-streams"), Duration::from_secs(15)).await;
    }

    /// A headless Chromium at `width`×900 (autoplay allowed, for the previews).
    pub async fn start(width: u32) -> Browser {
        let port = free_port();
        let driver = Killed(
            Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("chromedriver runs (Debian's chromium-driver; scripts/deps.sh test installs it)"),
        );
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        eventually("chromedriver to answer", Duration::from_secs(20), || async {
            http.get(format!("{url}/status")).send().await.ok().filter(|r| r.status().is_success())
        })
        .await;
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    format!("--window-size={width},900"), "--autoplay-policy=no-user-gesture-required",
                ],
            }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("a Chromium session");
        Browser { client, driver_url: url, _driver: driver }
    }

    /// Runs a DevTools command in the page through the driver (`goog/cdp/execute`).
    pub async fn devtools(&self, cmd: &str, params: Value) -> Value {
        let session = self.client.session_id().await.expect("session").expect("a session id");
        let resp = reqwest::Client::new()
            .post(format!("{}/session/{session}/goog/cdp/execute", self.driver_url))
            .json(&json!({"cmd": cmd, "params": params}))
            .send()
            .await
            .expect("the driver answers");
        let status = resp.status();
        let body: Value = resp.json().await.expect("JSON");
        assert!(status.is_success(), "{cmd}: {status} {body}");
        body["value"].clone()
    }

    /// The network as the page sees it: `offline`, or online with an upload rate in bytes a
    /// second (`None`: unthrottled).
    pub async fn network(&self, offline: bool, upload_bytes_per_s: Option<u64>) {
        self.devtools("Network.enable", json!({})).await;
        let up = upload_bytes_per_s.map_or(-1.0, |b| b as f64);
        let conditions =
            json!({"offline": offline, "latency": 0, "downloadThroughput": -1, "uploadThroughput": up});
        self.devtools("Network.emulateNetworkConditions", conditions).await;
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    /// The first element matching `css`, once there is one (10 s at most).
    pub async fn find(&self, css: &str) -> Element {
        self.find_within(css, Duration::from_secs(10)).await
    }

    pub async fn find_within(&self, css: &str, within: Duration) -> Element {
        let until = Instant::now() + within;
        loop {
            if let Ok(e) = self.client.find(Locator::Css(css)).await {
                return e;
            }
            assert!(Instant::now() < until, "no {css} on {:?}", self.client.current_url().await.ok());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn exists(&self, css: &str) -> bool {
        self.client.find_all(Locator::Css(css)).await.is_ok_and(|all| !all.is_empty())
    }

    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// Types into the input `css` (after clearing it).
    pub async fn fill(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        e.clear().await.unwrap_or_else(|err| panic!("clear {css}: {err}"));
        e.send_keys(text).await.unwrap_or_else(|err| panic!("type into {css}: {err}"));
    }

    /// What an element shows: an input's value, or else its text.
    pub async fn shown(&self, css: &str) -> String {
        let e = self.find(css).await;
        match e.prop("value").await.ok().flatten() {
            Some(v) if !v.is_empty() => v,
            _ => e.text().await.unwrap_or_default(),
        }
    }

    /// Waits until what `css` shows passes `ok`; returns it.
    pub async fn wait_shown(&self, css: &str, within: Duration, ok: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + within;
        loop {
            if let Ok(e) = self.client.find(Locator::Css(css)).await {
                let text = match e.prop("value").await.ok().flatten() {
                    Some(v) if !v.is_empty() => v,
                    _ => e.text().await.unwrap_or_default(),
                };
                if ok(&text) {
                    return text;
                }
                assert!(Instant::now() < until, "{css} still shows {text:?}");
            } else {
                assert!(Instant::now() < until, "no {css}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    pub async fn run(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.unwrap_or_else(|e| panic!("script: {e}"))
    }

    /// Runs axe-core (tests/player's copy, npm) on the page; returns its serious and critical
    /// violations, each as `impact id: help (targets)`.
    pub async fn accessibility_problems(&self) -> Vec<String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/player/node_modules/axe-core/axe.min.js");
        let axe = std::fs::read_to_string(path).expect("axe-core (npm ci --prefix tests/player)");
        // WebDriver's scripts are the driver's, not the page's: the page's CSP does not apply.
        self.run(&axe, vec![]).await;
        let result = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];\
                 axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations), e => done(String(e)));",
                vec![],
            )
            .await
            .expect("axe runs");
        let violations = result.as_array().unwrap_or_else(|| panic!("axe: {result}"));
        violations
            .iter()
            .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
            .map(|v| {
                let targets: Vec<String> =
                    v["nodes"].as_array().into_iter().flatten().map(|n| n["target"].to_string()).collect();
                format!("{} {}: {} ({})", v["impact"], v["id"], v["help"], targets.join(", "))
            })
            .collect()
    }
}
