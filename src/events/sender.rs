//! The delivery sender: leases due deliveries from the outbox and POSTs them
//! (interface: Delivery; Response handling and retries).
//!
//! Each attempt is a new request with the same id and body bytes, a 10 s timeout and no
//! redirects; a 2xx is success. Failures are retried after 5 s, 30 s, 2 min and 10 min (counted
//! from the previous attempt, times `SLUICE_WEBHOOK_RETRY_SCALE`); the 5th failure is final.
//!
//! The main loop only finds webhooks with due deliveries. Each such webhook gets a worker that
//! leases its next few deliveries in event order and sends them one at a time, so first attempts
//! leave in the order the events happened, one slow receiver holds up only its own deliveries,
//! and memory stays bounded whatever the backlog.
//!
//! Delivery is fair between projects (CONTRACT: Webhooks — one project's slow or hanging
//! endpoints cannot delay another project's first attempts by more than a second): an attempt
//! takes a slot of its project ([`PER_PROJECT`] at once) before one of the [`IN_FLIGHT`] shared
//! ones, so a project whose endpoints all hang holds at most [`PER_PROJECT`] shared slots and
//! its other attempts wait on its own slots, not on everyone's. A lease outlives the attempts it covers, so a
//! row is never sent by two processes at once; a process that died with leases gets them back
//! when it starts again with the same node id (its data dir).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

use super::delivery;
use super::guard::{check_url, GuardedResolver};
use super::signing::sign;
use crate::domain::content_key::MasterKey;
use crate::domain::delivery::{DeliveryMove, DeliveryStatus};
use crate::domain::time::now_ms;
use crate::store::secrets;
use crate::store::webhooks::{AttemptOutcome, Claimed, DeliveryWrite};
use crate::store::Db;

/// Attempts in total.
pub const MAX_ATTEMPTS: i64 = 5;
/// Delay before attempt n+1 (index n), counted from the previous attempt.
pub const RETRY_DELAYS: [Duration; 5] = [
    Duration::from_secs(0),
    Duration::from_secs(5),
    Duration::from_secs(30),
    Duration::from_secs(120),
    Duration::from_secs(600),
];
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
pub const USER_AGENT: &str = "service-webhook/1.0";
/// Deliveries one worker leases at a time.
const CLAIM: i64 = 16;
/// How long a lease lasts: every claimed attempt can time out, with room to spare. (Only a
/// process that dies and does not come back makes others wait this long for its rows.)
const LEASE: Duration = Duration::from_secs(16 * 10 + 20);
/// How often to look for due deliveries when nothing in this process woke the sender (other
/// processes' events, retries coming due).
const POLL: Duration = Duration::from_millis(250);
/// Webhooks looked at per pass.
const DUE_WEBHOOKS: i64 = 256;
/// Attempts running at once across all webhooks (each holds a socket and at most 10 s).
const IN_FLIGHT: usize = 256;
/// Attempts one project may have running at once.
pub const PER_PROJECT: usize = 8;
/// A webhook worker with nothing to do for this long ends.
const WORKER_IDLE: Duration = Duration::from_secs(30);

pub struct Sender {
    db: Db,
    client: reqwest::Client,
    allow_private: bool,
    retry_scale: f64,
    owner: String,
    wake: Arc<Notify>,
    /// Opens the webhook secrets, kept sealed in the database.
    master: MasterKey,
    in_flight: Arc<Semaphore>,
    /// Each project's slots, taken before a shared one.
    projects: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// The running worker of each webhook, and how to tell it there is work.
    workers: Mutex<HashMap<String, Arc<Notify>>>,
}

/// The result of one HTTP attempt.
struct Attempt {
    success: bool,
    response_code: Option<i64>,
    error: Option<String>,
}

impl Sender {
    pub fn new(
        db: Db,
        allow_private: bool,
        retry_scale: f64,
        owner: String,
        wake: Arc<Notify>,
        master: MasterKey,
    ) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .timeout(ATTEMPT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(GuardedResolver { allow_private }))
            .build()?;
        Ok(Sender {
            db,
            client,
            allow_private,
            retry_scale,
            owner,
            wake,
            master,
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
            projects: Mutex::new(HashMap::new()),
            workers: Mutex::new(HashMap::new()),
        })
    }

    /// Runs until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        match self.db.release_leases(&self.owner).await {
            Ok(n) if n > 0 => tracing::info!(deliveries = n, "took back deliveries leased before a restart"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "releasing old leases"),
        }
        loop {
            let due = match self.db.due_webhooks(now_ms(), DUE_WEBHOOKS).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "looking for due deliveries");
                    Vec::new()
                }
            };
            for webhook_id in due {
                self.ensure_worker(webhook_id);
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// Wakes the webhook's worker, starting one if there is none.
    fn ensure_worker(self: &Arc<Self>, webhook_id: String) {
        let mut workers = lock(&self.workers);
        if let Some(wake) = workers.get(&webhook_id) {
            wake.notify_one();
            return;
        }
        let wake = Arc::new(Notify::new());
        workers.insert(webhook_id.clone(), wake.clone());
        tokio::spawn(self.clone().work(webhook_id, wake));
    }

    /// Sends one webhook's due deliveries in event order until it has been idle for a while.
    async fn work(self: Arc<Self>, webhook_id: String, wake: Arc<Notify>) {
        loop {
            let now = now_ms();
            let lease_until = now + LEASE.as_millis() as i64;
            let claimed =
                match self.db.claim_deliveries(&self.owner, &webhook_id, now, lease_until, CLAIM).await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, webhook = %webhook_id, "claiming deliveries");
                        Vec::new()
                    }
                };
            if claimed.is_empty() {
                if tokio::time::timeout(WORKER_IDLE, wake.notified()).await.is_err() {
                    // Gone from the map, the next pass of the main loop starts a new worker if
                    // work arrives; a wake-up sent meanwhile is not lost, the rows stay due.
                    lock(&self.workers).remove(&webhook_id);
                    return;
                }
                continue;
            }
            for delivery in claimed {
                self.deliver(delivery).await;
            }
        }
    }

    async fn deliver(&self, d: Claimed) {
        let webhook = match self.db.webhook_by_id(&d.webhook_id).await {
            Ok(Some(w)) if w.enabled == 1 => w,
            Ok(Some(_)) => return self.abandon(&d, "webhook was disabled before delivery").await,
            Ok(None) => return self.abandon(&d, "webhook was deleted before delivery").await,
            Err(e) => {
                // The lease runs out and a later pass tries again.
                tracing::warn!(error = %e, delivery = %d.id, "loading webhook");
                return;
            }
        };
        let secret =
            match secrets::open(&self.master, &webhook.secret, &secrets::webhook_context(&webhook.id)) {
                Ok(s) => s,
                Err(e) => {
                    // The lease runs out and a later pass tries again (once the right master key is
                    // configured).
                    tracing::error!(webhook = %webhook.id, error = %e, "the webhook secret does not open");
                    return;
                }
            };
        let project = self.project_slots(&webhook.project_id);
        let (Ok(_own), Ok(_shared)) =
            (project.acquire_owned().await, self.in_flight.clone().acquire_owned().await)
        else {
            return;
        };
        let attempt = self.post(&webhook.url, &secret, &d).await;
        let attempts_done = d.attempts + 1;
        let give_up = !attempt.success && attempts_done >= MAX_ATTEMPTS;
        let next_attempt_at = if attempt.success || give_up {
            now_ms()
        } else {
            let delay = RETRY_DELAYS[attempts_done as usize].mul_f64(self.retry_scale);
            now_ms() + delay.as_millis() as i64
        };
        if attempt.success {
            tracing::debug!(delivery = %d.id, event = %d.event, "delivered");
        } else {
            tracing::info!(delivery = %d.id, event = %d.event, attempt = attempts_done, give_up,
                error = attempt.error.as_deref().unwrap_or(""), "delivery attempt failed");
        }
        let outcome = AttemptOutcome {
            response_code: attempt.response_code,
            error: attempt.error.as_deref(),
            next_attempt_at,
        };
        let mv = match attempt.success {
            true => DeliveryMove::Answered,
            false => DeliveryMove::AttemptFailed { last: give_up },
        };
        let write =
            DeliveryWrite::Attempt { owner: &self.owner, webhook_id: &d.webhook_id, outcome: &outcome };
        if let Err(e) = delivery::apply(&self.db, None, &d.id, DeliveryStatus::Pending, mv, &write).await {
            tracing::warn!(error = %e, delivery = %d.id, "recording attempt");
        }
    }

    /// The project's slots; projects with none in use are forgotten as others come and go.
    fn project_slots(&self, project_id: &str) -> Arc<Semaphore> {
        let mut projects = lock(&self.projects);
        if projects.len() > 1024 {
            projects.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < PER_PROJECT);
        }
        projects
            .entry(project_id.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(PER_PROJECT)))
            .clone()
    }

    async fn abandon(&self, d: &Claimed, why: &str) {
        let write = DeliveryWrite::Abandon { owner: &self.owner, error: why };
        let (pending, mv) = (DeliveryStatus::Pending, DeliveryMove::Abandoned);
        if let Err(e) = delivery::apply(&self.db, None, &d.id, pending, mv, &write).await {
            tracing::warn!(error = %e, delivery = %d.id, "abandoning delivery");
        }
    }

    async fn post(&self, url: &str, secret: &str, d: &Claimed) -> Attempt {
        let failed = |code: Option<i64>, error: String| Attempt {
            success: false,
            response_code: code,
            error: Some(error),
        };
        // IP literals never reach the resolver; check them (and the scheme) here.
        let url = match check_url(url, self.allow_private) {
            Ok(u) => u,
            Err(e) => return failed(None, format!("url {e}")),
        };
        let result = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("x-service-event", &d.event)
            .header("x-service-delivery", &d.id)
            .header("x-service-signature", sign(secret, d.body.as_bytes()))
            .body(d.body.clone())
            .send()
            .await;
        match result {
            Ok(resp) if resp.status().is_success() => {
                Attempt { success: true, response_code: Some(i64::from(resp.status().as_u16())), error: None }
            }
            Ok(resp) => {
                let code = resp.status().as_u16();
                failed(Some(i64::from(code)), format!("receiver answered {code}"))
            }
            Err(e) if e.is_timeout() => {
                failed(None, format!("no response within {} s", ATTEMPT_TIMEOUT.as_secs()))
            }
            Err(e) => failed(None, describe(&e)),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The whole chain of a request error (reqwest's top level says little).
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
