//! A real HTTP server that receives webhook deliveries, records the exact bytes and headers, and
//! answers as the test tells it to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use poem::http::StatusCode;
use poem::web::Data;
use poem::{handler, post, EndpointExt, Request, Response, Route};

#[derive(Clone, Debug)]
pub struct Received {
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub at: Instant,
    /// The status this request was answered with.
    pub answered: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
    /// The body, checked against the document's `webhooks` entry for its event.
    pub fn json(&self) -> serde_json::Value {
        if let Some(problem) = super::contract::delivery_violation(self.header("x-service-event"), &self.body)
        {
            panic!("contract violation: {problem}");
        }
        serde_json::from_slice(&self.body).expect("delivery body is JSON")
    }
    pub fn id(&self) -> String {
        self.header("x-service-delivery").to_string()
    }
}

#[derive(Default)]
struct State {
    /// Requests that arrived, including ones still being held.
    arrivals: std::sync::atomic::AtomicUsize,
    /// Requests being held now, and the most ever held at once.
    held: std::sync::atomic::AtomicUsize,
    most_held: std::sync::atomic::AtomicUsize,
    received: Mutex<Vec<Received>>,
    /// Status to answer with, and how long to wait first.
    behaviour: Mutex<(u16, Duration)>,
}

pub struct Receiver {
    pub base: String,
    state: Arc<State>,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

#[handler]
async fn hook(req: &Request, body: Vec<u8>, state: Data<&Arc<State>>) -> Response {
    use std::sync::atomic::Ordering::SeqCst;
    /// Counts the request as held until it is answered or dropped (its sender gave up).
    struct Held<'a>(&'a std::sync::atomic::AtomicUsize);
    impl Drop for Held<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, SeqCst);
        }
    }
    state.arrivals.fetch_add(1, SeqCst);
    let held = state.held.fetch_add(1, SeqCst) + 1;
    let _held = Held(&state.held);
    state.most_held.fetch_max(held, SeqCst);
    let (status, delay) = *state.behaviour.lock().unwrap();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    state.received.lock().unwrap().push(Received { headers, body, at: Instant::now(), answered: status });
    Response::builder().status(StatusCode::from_u16(status).unwrap()).body("")
}

#[handler]
fn redirect() -> Response {
    Response::builder().status(StatusCode::TEMPORARY_REDIRECT).header("location", "/hook").body("")
}

impl Receiver {
    pub async fn start() -> Receiver {
        let state = Arc::new(State::default());
        *state.behaviour.lock().unwrap() = (200, Duration::ZERO);
        let routes = Route::new().at("/hook", post(hook)).at("/redirect", post(redirect)).data(state.clone());
        let (addr, tx) = super::serve_loopback(routes).await;
        Receiver { base: format!("http://{addr}"), state, _shutdown: tx }
    }

    pub fn url(&self) -> String {
        format!("{}/hook", self.base)
    }

    pub fn port(&self) -> u16 {
        self.base.rsplit(':').next().unwrap().parse().unwrap()
    }

    pub fn answer(&self, status: u16, delay: Duration) {
        *self.state.behaviour.lock().unwrap() = (status, delay);
    }

    pub fn arrivals(&self) -> usize {
        self.state.arrivals.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The most requests this receiver held at one time.
    pub fn most_at_once(&self) -> usize {
        self.state.most_held.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The events received whose `data.id` is `id`, by name, in order.
    pub fn events_for(&self, id: &str) -> Vec<String> {
        self.received()
            .iter()
            .map(|r| r.json())
            .filter(|b| b["data"]["id"] == id)
            .map(|b| b["event"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived.
    pub async fn wait_for(&self, n: usize, deadline: Duration) -> Vec<Received> {
        super::eventually(&format!("{n} deliveries"), deadline, || async {
            let r = self.received();
            (r.len() >= n).then_some(r)
        })
        .await
    }
}
