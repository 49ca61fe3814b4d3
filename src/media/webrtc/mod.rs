//! WebRTC with `webrtcbin`: WHEP viewers ([`whep`]) and WHIP publishers ([`whip`]). Both are
//! answerers: the client's offer comes in one HTTP request, the answer goes back with every
//! candidate Sluice gathered (no server-side trickle), and the client may trickle its own
//! candidates with PATCH.
//!
//! NAT (docs/webrtc.md): media uses UDP ports of `SLUICE_WEBRTC_UDP_PORTS`; behind a 1:1 NAT or a
//! port-forwarding router, `SLUICE_WEBRTC_PUBLIC_IP` is announced as an extra host candidate on
//! the same port; STUN and TURN servers come from `SLUICE_ICE_SERVERS`.

pub mod sdp;

use std::net::IpAddr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_sdp as gst_sdp;
use gstreamer_webrtc as gst_webrtc;

pub use crate::slots::Refused;
use crate::slots::{Slot, Slots};

/// How long gathering may take before the answer goes out with the candidates found so far.
const GATHERING: Duration = Duration::from_secs(3);
/// How long a promise of `webrtcbin` (set a description, create the answer) may take.
const PROMISE: Duration = Duration::from_secs(5);
/// A session whose ICE has not connected by then is ended.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(30);

/// The WebRTC settings (CONTRACT: the `SLUICE_WEBRTC_*` and `SLUICE_ICE_SERVERS` rows).
#[derive(Debug, Clone, Default)]
pub struct WebrtcConfig {
    /// The UDP ports media may use, inclusive.
    pub ports: (u16, u16),
    /// Announced beside the host candidates, on the same ports.
    pub public_ip: Option<IpAddr>,
    /// `stun:host:port` / `turn:user:pass@host:port` URLs.
    pub ice_servers: Vec<String>,
    /// WHEP viewers one client IP may hold at once.
    pub max_per_ip: usize,
}

/// Why a WebRTC session could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WebrtcError {
    /// The offer cannot be used (400 at the HTTP edge).
    #[error("{0}")]
    BadOffer(String),
    /// GStreamer failed.
    #[error("webrtc: {0}")]
    Media(String),
}

impl WebrtcConfig {
    /// Applies the settings to a new `webrtcbin`.
    pub fn configure(&self, webrtc: &gst::Element) {
        if let Some(ice) = webrtc.property::<Option<gst::glib::Object>>("ice-agent") {
            if ice.has_property("min-rtp-port") && self.ports.0 > 0 {
                ice.set_property("min-rtp-port", u32::from(self.ports.0));
                ice.set_property("max-rtp-port", u32::from(self.ports.1));
            }
            // No UPnP port mappings asked of the LAN's router: a server announces its own
            // addresses (and SLUICE_WEBRTC_PUBLIC_IP).
            if ice.has_property("agent") {
                if let Some(agent) = ice.property::<Option<gst::glib::Object>>("agent") {
                    if agent.has_property("upnp") {
                        agent.set_property("upnp", false);
                    }
                    // Keepalives as connectivity checks: a peer that vanishes without a
                    // DELETE (a closed tab, a lost network) stops answering them and its ICE
                    // goes failed, which ends the session (without this, libnice 0.1.21 sends
                    // indications that need no answer and a connected session never fails).
                    if agent.has_property("keepalive-conncheck") {
                        agent.set_property("keepalive-conncheck", true);
                    }
                }
            }
        }
        for server in &self.ice_servers {
            if let Some(rest) = server.strip_prefix("stun:") {
                webrtc.set_property("stun-server", format!("stun://{}", rest.trim_start_matches("//")));
            } else if let Some(rest) = server.strip_prefix("turn:") {
                let url = format!("turn://{}", rest.trim_start_matches("//"));
                let _ = webrtc.emit_by_name::<bool>("add-turn-server", &[&url]);
            } else if let Some(rest) = server.strip_prefix("turns:") {
                let url = format!("turns://{}", rest.trim_start_matches("//"));
                let _ = webrtc.emit_by_name::<bool>("add-turn-server", &[&url]);
            }
        }
    }
}

/// Sets the client's offer, creates and sets the answer, gathers candidates (up to
/// [`GATHERING`]) and returns the answer's SDP with them (and the public IP's).
pub fn answer(
    webrtc: &gst::Element,
    offer: gst_sdp::SDPMessage,
    config: &WebrtcConfig,
) -> Result<String, String> {
    let candidates = Arc::new(Mutex::new(Vec::<(u32, String)>::new()));
    let found = candidates.clone();
    webrtc.connect("on-ice-candidate", false, move |values| {
        let mline = values.get(1).and_then(|v| v.get::<u32>().ok());
        let candidate = values.get(2).and_then(|v| v.get::<String>().ok());
        if let (Some(mline), Some(candidate)) = (mline, candidate) {
            found.lock().unwrap_or_else(|p| p.into_inner()).push((mline, candidate));
        }
        None
    });
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let done_tx = Mutex::new(done_tx);
    webrtc.connect_notify(Some("ice-gathering-state"), move |w, _| {
        let state = w.property::<gst_webrtc::WebRTCICEGatheringState>("ice-gathering-state");
        if state == gst_webrtc::WebRTCICEGatheringState::Complete {
            let _ = done_tx.lock().unwrap_or_else(|p| p.into_inner()).send(());
        }
    });

    let offer = gst_webrtc::WebRTCSessionDescription::new(gst_webrtc::WebRTCSDPType::Offer, offer);
    settle("setting the offer", |p| webrtc.emit_by_name::<()>("set-remote-description", &[&offer, p]))?;
    let reply = settle("creating the answer", |p| {
        webrtc.emit_by_name::<()>("create-answer", &[&None::<gst::Structure>, p])
    })?
    .ok_or("no answer was created")?;
    let answer = reply
        .value("answer")
        .ok()
        .and_then(|v| v.get::<gst_webrtc::WebRTCSessionDescription>().ok())
        .ok_or("creating the answer: no answer in the reply")?;
    settle("setting the answer", |p| webrtc.emit_by_name::<()>("set-local-description", &[&answer, p]))?;

    if webrtc.property::<gst_webrtc::WebRTCICEGatheringState>("ice-gathering-state")
        != gst_webrtc::WebRTCICEGatheringState::Complete
    {
        let _ = done_rx.recv_timeout(GATHERING);
    }
    let local = webrtc
        .property::<Option<gst_webrtc::WebRTCSessionDescription>>("local-description")
        .ok_or("no local description")?;
    let found = candidates.lock().unwrap_or_else(|p| p.into_inner()).clone();
    sdp::with_candidates(local.sdp(), &found, config.public_ip)
}

/// Calls `emit` with a new promise and waits for its reply (up to [`PROMISE`]); an error reply
/// is an error.
fn settle(what: &str, emit: impl FnOnce(&gst::Promise)) -> Result<Option<gst::Structure>, String> {
    let (tx, rx) = mpsc::sync_channel(1);
    let promise = gst::Promise::with_change_func(move |reply| {
        let _ = tx.try_send(reply.map(|r| r.map(|s| s.to_owned())).map_err(|e| format!("{e:?}")));
    });
    emit(&promise);
    let reply = match rx.recv_timeout(PROMISE) {
        Ok(reply) => reply.map_err(|e| format!("{what}: {e}"))?,
        Err(_) => {
            promise.interrupt();
            return Err(format!("{what}: no reply within {PROMISE:?}"));
        }
    };
    if let Some(error) = reply.as_ref().and_then(|r| r.value("error").ok()) {
        let message = error.get::<gst::glib::Error>().map(|e| e.to_string()).unwrap_or_default();
        return Err(format!("{what}: {message}"));
    }
    Ok(reply)
}

/// Adds the client's trickled candidates (an `application/trickle-ice-sdpfrag` body).
pub fn add_candidates(webrtc: &gst::Element, fragment: &str) -> Result<usize, WebrtcError> {
    let candidates = sdp::fragment_candidates(fragment).map_err(WebrtcError::BadOffer)?;
    for (mline, candidate) in &candidates {
        webrtc.emit_by_name::<()>("add-ice-candidate", &[mline, candidate]);
    }
    Ok(candidates.len())
}

/// Whether the session's ICE has failed or closed (its end).
pub fn ice_ended(state: gst_webrtc::WebRTCICEConnectionState) -> bool {
    matches!(
        state,
        gst_webrtc::WebRTCICEConnectionState::Failed | gst_webrtc::WebRTCICEConnectionState::Closed
    )
}

/// One WebRTC session (a WHEP viewer or a WHIP publisher), for the PATCH and DELETE of its
/// `Location`.
pub struct Peer {
    pub id: String,
    pub stream_id: String,
    /// The client's address, for the per-IP limit.
    pub ip: Option<std::net::IpAddr>,
    /// The `ETag` of the 201; a trickle PATCH must send it as `If-Match`.
    pub etag: String,
    webrtc: gst::Element,
    pub(crate) end: tokio::sync::Notify,
}

impl Peer {
    pub(crate) fn new(stream_id: &str, ip: Option<std::net::IpAddr>, webrtc: gst::Element) -> Peer {
        let id = crate::domain::new_id();
        Peer {
            ip,
            etag: format!("\"{}\"", &id[..id.len().min(16)]),
            id,
            stream_id: stream_id.to_string(),
            webrtc,
            end: tokio::sync::Notify::new(),
        }
    }

    /// Ends the session (DELETE of its location).
    pub fn end(&self) {
        self.end.notify_one();
    }

    /// A trickle PATCH: `If-Match` must be the session's ETag (or `*`).
    pub fn trickle(&self, if_match: Option<&str>, fragment: &str) -> Result<usize, TrickleError> {
        match if_match.map(str::trim) {
            Some(tag) if tag == "*" || tag == self.etag => {}
            _ => return Err(TrickleError::PreconditionFailed),
        }
        add_candidates(&self.webrtc, fragment).map_err(|e| TrickleError::Bad(e.to_string()))
    }

    /// Resolves when the session's ICE fails or closes, or when it has not connected within
    /// [`CONNECT_DEADLINE`].
    pub(crate) async fn lost(&self) {
        let (tx, mut rx) = tokio::sync::watch::channel(
            self.webrtc.property::<gst_webrtc::WebRTCICEConnectionState>("ice-connection-state"),
        );
        let id = self.webrtc.connect_notify(Some("ice-connection-state"), move |w, _| {
            tx.send_replace(w.property::<gst_webrtc::WebRTCICEConnectionState>("ice-connection-state"));
        });
        let connected = async {
            loop {
                let state = *rx.borrow_and_update();
                if ice_ended(state) {
                    return false;
                }
                if matches!(
                    state,
                    gst_webrtc::WebRTCICEConnectionState::Connected
                        | gst_webrtc::WebRTCICEConnectionState::Completed
                ) {
                    return true;
                }
                if rx.changed().await.is_err() {
                    return false;
                }
            }
        };
        let connected = tokio::time::timeout(CONNECT_DEADLINE, connected).await.unwrap_or(false);
        if connected {
            loop {
                if ice_ended(*rx.borrow_and_update()) || rx.changed().await.is_err() {
                    break;
                }
            }
        }
        self.webrtc.disconnect(id);
    }
}

/// Why a trickle PATCH was refused.
#[derive(Debug, thiserror::Error)]
pub enum TrickleError {
    #[error("If-Match does not name this session's ETag")]
    PreconditionFailed,
    #[error("{0}")]
    Bad(String),
}

/// The open sessions of one kind, by id, and their places against the caps.
pub struct Peers {
    peers: Mutex<Open>,
    /// Places per client address, held from the moment a request is admitted (so concurrent
    /// offers cannot all pass the check) until the session is removed.
    places: Arc<Slots<Option<std::net::IpAddr>>>,
}

/// A session's place against the caps of its [`Peers`]; given back on drop.
pub type Place = Slot<Option<std::net::IpAddr>>;

/// The open sessions by id, each with its place (if it was admitted with one).
type Open = std::collections::HashMap<String, (Arc<Peer>, Option<Place>)>;

impl Default for Peers {
    /// Sessions with no cap (they are bounded before they get here, as WHIP publishers are by
    /// the ingest limits).
    fn default() -> Peers {
        Peers::capped(usize::MAX, usize::MAX)
    }
}

impl Peers {
    /// At most `max_total` sessions (open and being set up) and `max_per_ip` from one address.
    pub fn capped(max_total: usize, max_per_ip: usize) -> Peers {
        Peers { peers: Mutex::default(), places: Slots::capped(max_per_ip, max_total) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds a place for a new session from `ip`, or says which cap refused it; the place goes
    /// to [`Peers::insert`] with the session.
    pub fn reserve(&self, ip: Option<std::net::IpAddr>) -> Result<Place, Refused> {
        self.places.try_take(ip)
    }

    pub fn get(&self, id: &str) -> Option<Arc<Peer>> {
        self.lock().get(id).map(|(p, _)| p.clone())
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// The sessions of one stream.
    pub fn of_stream(&self, stream_id: &str) -> usize {
        self.lock().values().filter(|(p, _)| p.stream_id == stream_id).count()
    }

    /// The sessions of each stream that has any.
    pub fn per_stream(&self) -> std::collections::HashMap<String, usize> {
        let mut out = std::collections::HashMap::new();
        for (p, _) in self.lock().values() {
            *out.entry(p.stream_id.clone()).or_insert(0) += 1;
        }
        out
    }

    /// Adds an open session, with the place it was admitted with (if it needed one).
    pub(crate) fn insert(&self, peer: Arc<Peer>, place: Option<Place>) {
        self.lock().insert(peer.id.clone(), (peer, place));
    }

    /// Removes a session; its place is given back.
    pub(crate) fn remove(&self, id: &str) {
        let gone = self.lock().remove(id);
        drop(gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_count_against_the_caps_until_dropped() {
        let peers = Peers::capped(3, 2);
        let (a, b): (std::net::IpAddr, std::net::IpAddr) =
            ("192.0.2.1".parse().expect("ip"), "192.0.2.2".parse().expect("ip"));
        // Offers being set up at once from one address: the third is refused before any work.
        let first = peers.reserve(Some(a)).expect("first");
        let _second = peers.reserve(Some(a)).expect("second");
        assert_eq!(peers.reserve(Some(a)).err(), Some(Refused::Holder));
        let _other = peers.reserve(Some(b)).expect("another address");
        assert_eq!(peers.reserve(Some(b)).err(), Some(Refused::Full));
        assert_eq!(peers.reserve(None).err(), Some(Refused::Full));
        drop(first);
        assert!(peers.reserve(Some(a)).is_ok(), "a place given back is free again");
    }
}
