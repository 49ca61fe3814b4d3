//! The live relay (docs/scale-out.md): a node asked for a stream whose push another node holds
//! fetches what was asked from that node — an internal request to the same path, carrying the
//! node-to-node bearer — and serves it as if it were its own: its own authorisation first (the
//! token check, the playlist rewrite for signed sessions), then the relayed bytes.
//!
//! Every fetch goes through one small cache keyed by the upstream URL: concurrent viewers asking
//! for the same thing (the same blocking reload `_HLS_msn`/`_HLS_part`, the same part) share one
//! upstream request, so 1,000 viewers on an edge node cost the holding node about one reader per
//! rendition. Answers live briefly (media 10 s, blocking playlists 6 s, plain playlists and
//! blocking ones given at once 0.3 s); failures are not kept. Bounded in entries and bytes;
//! bodies are capped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::OnceCell;

use crate::services::nodes::{Holder, Nodes, RELAY_HEADER};

/// Entries kept at most; beyond, expired ones go, then everything.
const MAX_ENTRIES: usize = 4096;
/// Bytes kept at most across entries (a full cache stops keeping; requests still share).
const MAX_BYTES: usize = 256 << 20;
/// The largest body relayed (a segment of the top rung at a few seconds).
const MAX_BODY: usize = 32 << 20;
/// Upstream requests in flight at once; beyond, a relayed request is answered 503 at once (a
/// flood of distinct URLs cannot open unbounded connections to the holding nodes).
const MAX_IN_FLIGHT: usize = 256;

/// What the holding node answered.
#[derive(Debug, Clone)]
pub struct Relayed {
    pub status: u16,
    pub content_type: String,
    /// Its `Cache-Control`, when it sent one.
    pub cache_control: Option<String>,
    pub body: Bytes,
}

impl Relayed {
    fn failed(status: u16, text: &'static str) -> Relayed {
        Relayed {
            status,
            content_type: "text/plain; charset=utf-8".into(),
            cache_control: None,
            body: Bytes::from_static(text.as_bytes()),
        }
    }

    pub fn ok(&self) -> bool {
        self.status == 200
    }

    /// Whether caches may keep it: not a blocking reload answered at once (see
    /// `origin::AT_ONCE_CACHE`), which this relay keeps no longer than a plain playlist.
    pub fn kept(&self) -> bool {
        self.cache_control.as_deref() != Some(super::origin::AT_ONCE_CACHE)
    }
}

/// How long an answer may be shared.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A playlist without `_HLS_msn`: it changes with every part.
    Playlist,
    /// A blocking reload: the answer for one `_HLS_msn`/`_HLS_part` does not change much.
    Blocking,
    /// Init sections, parts, segments: immutable under their URL.
    Media,
}

impl Kind {
    fn ttl(self) -> Duration {
        match self {
            Kind::Playlist => Duration::from_millis(300),
            Kind::Blocking => Duration::from_secs(6),
            Kind::Media => Duration::from_secs(10),
        }
    }
}

struct Entry {
    born: Instant,
    ttl: Duration,
    answer: OnceCell<Relayed>,
}

impl Entry {
    /// A blocking answer the holding node gave at once lives as a plain playlist does: shared
    /// by the viewers asking together, not kept for the next reload.
    fn fresh(&self) -> bool {
        let ttl = match self.answer.get() {
            Some(a) if !a.kept() => self.ttl.min(Kind::Playlist.ttl()),
            _ => self.ttl,
        };
        self.born.elapsed() < ttl
    }
}

pub struct Relay {
    pub nodes: Arc<Nodes>,
    client: reqwest::Client,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    in_flight: tokio::sync::Semaphore,
    /// Upstream requests made, and requests answered through the relay.
    pub fetches: AtomicU64,
    pub served: AtomicU64,
}

/// How long a viewer's request waits for the database to say which node holds a stream.
const HOLDER_WAIT: Duration = Duration::from_secs(1);

impl Relay {
    /// `extra_root`: a PEM certificate to trust besides the system's (the nodes' own, when
    /// their internal URLs are HTTPS with a self-signed certificate).
    pub fn new(nodes: Arc<Nodes>, extra_root: Option<&[u8]>) -> anyhow::Result<Relay> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            // Below the 10 s after which a node closes an idle connection (src/app/http.rs),
            // so a pooled connection is dropped here before the other end closes it.
            .pool_idle_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(64)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(pem) = extra_root {
            for cert in reqwest::Certificate::from_pem_bundle(pem)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(Relay {
            nodes,
            client: builder.build()?,
            entries: Mutex::new(HashMap::new()),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            fetches: AtomicU64::new(0),
            served: AtomicU64::new(0),
        })
    }

    /// The node holding `stream_id`'s push when another one does; `None` when the request is
    /// itself relayed (a node never relays a relayed request: no loops) or nobody holds it.
    pub async fn holder(&self, stream_id: &str, relayed: bool) -> Option<Holder> {
        if relayed {
            return None;
        }
        // Bounded: a viewer does not wait on a database that hangs (the stream reads as not
        // held elsewhere meanwhile).
        match crate::store::within(HOLDER_WAIT, self.nodes.holder(stream_id)).await {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(stream = %stream_id, error = %e, "relay: looking up the node holding a stream");
                None
            }
        }
    }

    /// `GET {holder}/play{path_and_query}`, shared with every concurrent and recent request for
    /// the same URL. `wait` is how long the holding node may hold the request (blocking reload).
    pub async fn get(&self, holder: &Holder, path_and_query: &str, kind: Kind, wait: Duration) -> Relayed {
        self.served.fetch_add(1, Ordering::Relaxed);
        let url = format!("{}/play{path_and_query}", holder.url);
        let entry = self.entry(&url, kind);
        let answer = entry.answer.get_or_init(|| self.fetch(&url, wait)).await.clone();
        if !answer.ok() {
            // A failure is not kept: the next request asks again.
            let mut entries = self.lock();
            if entries.get(&url).is_some_and(|e| Arc::ptr_eq(e, &entry)) {
                entries.remove(&url);
            }
        }
        answer
    }

    fn entry(&self, url: &str, kind: Kind) -> Arc<Entry> {
        let mut entries = self.lock();
        if let Some(e) = entries.get(url).filter(|e| e.fresh()) {
            return e.clone();
        }
        if entries.len() >= MAX_ENTRIES || self.kept_bytes(&entries) > MAX_BYTES {
            entries.retain(|_, e| e.fresh());
            if entries.len() >= MAX_ENTRIES || self.kept_bytes(&entries) > MAX_BYTES {
                // Still too much: everything goes (requests in flight keep their own entry).
                entries.clear();
            }
        }
        let e = Arc::new(Entry { born: Instant::now(), ttl: kind.ttl(), answer: OnceCell::new() });
        entries.insert(url.to_string(), e.clone());
        e
    }

    fn kept_bytes(&self, entries: &HashMap<String, Arc<Entry>>) -> usize {
        // At most a few thousand lengths, read in memory: no IO under the lock.
        entries.values().filter_map(|e| e.answer.get()).map(|a| a.body.len()).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn fetch(&self, url: &str, wait: Duration) -> Relayed {
        let Ok(_permit) = self.in_flight.try_acquire() else {
            return Relayed::failed(503, "too many relayed requests in flight; retry");
        };
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let request = self
            .client
            .get(url)
            .header(RELAY_HEADER, self.nodes.relay_token())
            .timeout(wait + Duration::from_secs(5));
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "relay: the node holding the stream did not answer");
                return Relayed::failed(502, "the node holding the stream did not answer");
            }
        };
        let status = response.status().as_u16();
        let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let content_type =
            header(reqwest::header::CONTENT_TYPE).unwrap_or_else(|| "application/octet-stream".to_string());
        let cache_control = header(reqwest::header::CACHE_CONTROL);
        match read_capped(response).await {
            Some(body) => Relayed { status, content_type, cache_control, body },
            None => Relayed::failed(502, "the node holding the stream sent an unusable answer"),
        }
    }

    /// A request to `holder` with the node-to-node bearer, for WHEP signalling (not cached).
    pub fn request(
        &self,
        method: reqwest::Method,
        holder: &Holder,
        path_and_query: &str,
    ) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}/play{path_and_query}", holder.url))
            .header(RELAY_HEADER, self.nodes.relay_token())
            .timeout(Duration::from_secs(20))
    }
}

/// The whole body, or `None` past [`MAX_BODY`].
async fn read_capped(mut response: reqwest::Response) -> Option<Bytes> {
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await.ok()? {
        if body.len() + chunk.len() > MAX_BODY {
            return None;
        }
        body.extend_from_slice(&chunk);
    }
    Some(body.freeze())
}

#[cfg(test)]
mod tests {
    use super::super::origin::AT_ONCE_CACHE;
    use super::*;

    fn entry(age: Duration, cache_control: Option<&str>) -> Entry {
        let answer = Relayed {
            status: 200,
            content_type: "application/vnd.apple.mpegurl".into(),
            cache_control: cache_control.map(str::to_string),
            body: Bytes::from_static(b"#EXTM3U\n"),
        };
        let born = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
        Entry { born, ttl: Kind::Blocking.ttl(), answer: OnceCell::from(answer) }
    }

    /// A blocking answer held for its part is shared for its 6 s; one the holding node gave at
    /// once (`no-cache`) only as long as a plain playlist, so a viewer asking the same again
    /// soon gets a newer one.
    #[test]
    fn a_blocking_answer_given_at_once_is_kept_as_briefly_as_a_plain_playlist() {
        let second = Duration::from_secs(1);
        assert!(entry(second, Some("public, max-age=6")).fresh());
        assert!(!entry(second, Some(AT_ONCE_CACHE)).fresh());
        assert!(entry(Duration::ZERO, Some(AT_ONCE_CACHE)).fresh(), "shared by those asking together");
        assert!(entry(second, None).fresh());
    }
}
