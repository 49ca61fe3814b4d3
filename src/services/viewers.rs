//! Who is watching (CONTRACT: Viewers): this node's HLS playback sessions, its RTSP clients per
//! stream, and the VOD views and watch time it has not written yet. WHEP viewers are counted by
//! the WHEP server itself; [`crate::app`] reports all three for the node every
//! [`REPORT_EVERY`].
//!
//! An HLS session is minted by the origin when a master playlist is fetched: `vs=`, a random id
//! and a MAC over it and the resource, so that only this service mints one and a session minted
//! for one stream says nothing on another. A session counts while a request carrying it came in
//! the last [`ALIVE`]. Touching one is a shard's lock held for a hash-map update (no IO, no
//! await); only a session's first request computes its HMAC, later ones are compared with the MAC
//! kept. Sessions are counted and dropped by the report's sweep, off the request path. The table
//! is capped per node ([`MAX_SESSIONS`]) and per stream ([`MAX_SESSIONS_PER_STREAM`]), VOD
//! sessions per node ([`MAX_VOD_SESSIONS`]): past a cap a new session is served but not counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// How long after its last request a session still counts.
pub const ALIVE: Duration = Duration::from_secs(10);
/// How often each node reports its counts (and sweeps its table).
pub const REPORT_EVERY: Duration = Duration::from_secs(2);
/// A report older than this is not summed (its node stopped reporting).
pub const REPORT_STALE: Duration = Duration::from_secs(12);
/// Sessions one node counts at once, over all streams.
pub const MAX_SESSIONS: usize = 200_000;
/// Sessions one node counts at once for one stream.
pub const MAX_SESSIONS_PER_STREAM: u32 = 50_000;
/// VOD sessions one node tracks at once (each a bit per segment position: 2.3 KB for 10 h).
pub const MAX_VOD_SESSIONS: usize = 50_000;
/// VODs with views or watch time waiting to be written; past it a new VOD's are dropped.
const MAX_PENDING_VODS: usize = 10_000;
/// How long a VOD session is remembered after its last segment (a paused viewer resumes).
pub const VOD_SESSION_KEEP: Duration = Duration::from_secs(600);
/// Segment positions a VOD session tracks (past it nothing more counts: 36 h of 2-s segments).
const MAX_VOD_SEGMENTS: u32 = 65_536;
/// VOD media playlists whose segment durations are kept (all are forgotten past it).
const MAX_DURATIONS: usize = 1_024;
const SHARDS: usize = 64;
/// Hex characters of a session id and of its MAC.
const ID_HEX: usize = 16;
const MAC_BYTES: usize = 8;

/// A session: the stream it watches, the MAC it was verified with, and when it last asked
/// (seconds since the table began).
struct Seen {
    stream: Arc<str>,
    mac: [u8; MAC_BYTES],
    last: u32,
}

/// The id and MAC of a `vs` value.
fn parse(vs: &str) -> Option<(u64, [u8; MAC_BYTES])> {
    if vs.len() != ID_HEX + 2 * MAC_BYTES || !vs.is_ascii() {
        return None;
    }
    let id = u64::from_str_radix(&vs[..ID_HEX], 16).ok()?;
    let mut mac = [0u8; MAC_BYTES];
    hex::decode_to_slice(&vs[ID_HEX..], &mut mac).ok()?;
    Some((id, mac))
}

/// A VOD playback session this service minted ([`Viewers::vod_session`]).
pub struct VodSession {
    vod: String,
    id: u64,
}

/// Views and watch time of one VOD, not written yet.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct VodTally {
    pub views: u64,
    pub watch_seconds: f64,
}

/// What one node sees.
pub struct Viewers {
    key: Hmac<Sha256>,
    began: Instant,
    shards: Box<[Mutex<HashMap<u64, Seen>>]>,
    /// Sessions in the table, in all and per stream (for the caps).
    total: AtomicUsize,
    per_stream: Mutex<HashMap<Arc<str>, u32>>,
    rtsp: Mutex<HashMap<String, u32>>,
    vods: Mutex<HashMap<String, VodTally>>,
    /// The positions each VOD session has fetched (a bit per segment) and when it last did.
    vod_sessions: Mutex<HashMap<u64, (u32, Vec<u64>)>>,
    /// Segment durations of VOD media playlists, by `<vod>/<rendition>` then file name.
    durations: Mutex<HashMap<String, Arc<HashMap<String, f64>>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Viewers {
    /// `secret`: the same on every node (derived from the master key), so a session minted by one
    /// node counts on another.
    pub fn new(secret: &[u8; 32]) -> Viewers {
        let key = <Hmac<Sha256> as Mac>::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        Viewers {
            key,
            began: Instant::now(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            total: AtomicUsize::new(0),
            per_stream: Mutex::default(),
            rtsp: Mutex::default(),
            vods: Mutex::default(),
            vod_sessions: Mutex::default(),
            durations: Mutex::default(),
        }
    }

    fn mac(&self, resource: &str, id: u64) -> [u8; MAC_BYTES] {
        let mut mac = self.key.clone();
        mac.update(b"sluice viewer session\n");
        mac.update(resource.as_bytes());
        mac.update(b"\n");
        mac.update(&id.to_be_bytes());
        let full = mac.finalize().into_bytes();
        let mut out = [0; MAC_BYTES];
        out.copy_from_slice(&full[..MAC_BYTES]);
        out
    }

    /// A new session for `resource` (`stream:<id>` or `vod:<id>`): the `vs=` value.
    pub fn mint(&self, resource: &str) -> String {
        let id: u64 = rand::random();
        format!("{id:016x}{}", hex::encode(self.mac(resource, id)))
    }

    /// The session id `vs` names, when this service minted it for `resource`.
    fn verify(&self, resource: &str, vs: &str) -> Option<u64> {
        let (id, given) = parse(vs)?;
        bool::from(self.mac(resource, id).ct_eq(&given)).then_some(id)
    }

    fn now(&self) -> u32 {
        u32::try_from(self.began.elapsed().as_secs()).unwrap_or(u32::MAX)
    }

    /// A request of stream `stream`'s session `vs`: counted when the session is genuine and
    /// there is room for it. False when it is not counted. A session in the table is known by
    /// its id and the MAC it was verified with, so a reload computes no HMAC; a new one is
    /// verified outside the shard's lock.
    pub fn touch(&self, stream: &str, vs: &str) -> bool {
        let Some((id, given)) = parse(vs) else { return false };
        let now = self.now();
        let shard = &self.shards[(id % SHARDS as u64) as usize];
        if let Some(seen) = lock(shard).get_mut(&id) {
            // A replayed id of another stream's session is not this stream's viewer.
            if &*seen.stream != stream || !bool::from(seen.mac.ct_eq(&given)) {
                return false;
            }
            seen.last = now;
            return true;
        }
        if !bool::from(self.mac(&format!("stream:{stream}"), id).ct_eq(&given)) {
            return false;
        }
        let mut shard = lock(shard);
        if let Some(seen) = shard.get_mut(&id) {
            // Its first requests raced: counted once.
            seen.last = now;
            return true;
        }
        if self.total.load(Ordering::Relaxed) >= MAX_SESSIONS {
            return false;
        }
        let stream: Arc<str> = {
            let mut per = lock(&self.per_stream);
            let key = per.get_key_value(stream).map(|(k, _)| k.clone()).unwrap_or_else(|| Arc::from(stream));
            let n = per.entry(key.clone()).or_insert(0);
            if *n >= MAX_SESSIONS_PER_STREAM {
                return false;
            }
            *n += 1;
            key
        };
        self.total.fetch_add(1, Ordering::Relaxed);
        shard.insert(id, Seen { stream, mac: given, last: now });
        true
    }

    /// Drops the sessions not seen for [`ALIVE`] and counts the rest per stream.
    pub fn sweep(&self) -> HashMap<Arc<str>, u32> {
        let now = self.now();
        let alive = u32::try_from(ALIVE.as_secs()).unwrap_or(u32::MAX);
        let mut counts: HashMap<Arc<str>, u32> = HashMap::new();
        let mut gone: HashMap<Arc<str>, u32> = HashMap::new();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            shard.retain(|_, seen| {
                let keep = now.saturating_sub(seen.last) < alive;
                let tally = if keep { &mut counts } else { &mut gone };
                *tally.entry(seen.stream.clone()).or_insert(0) += 1;
                keep
            });
        }
        let keep = u32::try_from(VOD_SESSION_KEEP.as_secs()).unwrap_or(u32::MAX);
        lock(&self.vod_sessions).retain(|_, (last, _)| now.saturating_sub(*last) < keep);
        if !gone.is_empty() {
            let mut per = lock(&self.per_stream);
            for (stream, n) in gone {
                self.total.fetch_sub(n as usize, Ordering::Relaxed);
                if let Some(left) = per.get_mut(&stream) {
                    *left = left.saturating_sub(n);
                    if *left == 0 {
                        per.remove(&stream);
                    }
                }
            }
        }
        counts
    }

    /// An RTSP client began playing `stream`.
    pub fn rtsp_joined(&self, stream: &str) {
        *lock(&self.rtsp).entry(stream.to_string()).or_insert(0) += 1;
    }

    /// An RTSP client of `stream` is gone.
    pub fn rtsp_left(&self, stream: &str) {
        let mut rtsp = lock(&self.rtsp);
        if let Some(n) = rtsp.get_mut(stream) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                rtsp.remove(stream);
            }
        }
    }

    /// RTSP clients per stream.
    pub fn rtsp(&self) -> HashMap<String, u32> {
        lock(&self.rtsp).clone()
    }

    /// A playback session of VOD `vod` began.
    pub fn vod_viewed(&self, vod: &str) {
        self.add_vod(vod, VodTally { views: 1, watch_seconds: 0.0 });
    }

    /// The session `vs` names, when this service minted it for VOD `vod`.
    pub fn vod_session(&self, vod: &str, vs: &str) -> Option<VodSession> {
        let id = self.verify(&format!("vod:{vod}"), vs)?;
        Some(VodSession { vod: vod.to_string(), id })
    }

    /// Session `session` fetched segment `index`, `seconds` long: the VOD's watch time grows
    pub fn vod_watched(&self, session: &VodSession, index: u32, seconds: f64) -> bool {
        let VodSession { ref vod, id } = *session;
        if !seconds.is_finite() || seconds <= 0.0 || index >= MAX_VOD_SEGMENTS {
            return false;
        }
        let now = self.now();
        {
            let mut sessions = lock(&self.vod_sessions);
            if sessions.len() >= MAX_VOD_SESSIONS && !sessions.contains_key(&id) {
                return false;
            }
            let seen = sessions.entry(id).or_insert_with(|| (now, Vec::new()));
            seen.0 = now;
            let (word, bit) = ((index / 64) as usize, 1u64 << (index % 64));
            if seen.1.len() <= word {
                seen.1.resize(word + 1, 0);
            }
            if seen.1[word] & bit != 0 {
                return false;
            }
            seen.1[word] |= bit;
        }
        self.add_vod(vod, VodTally { views: 0, watch_seconds: seconds });
        true
    }

    fn add_vod(&self, vod: &str, add: VodTally) {
        let mut vods = lock(&self.vods);
        if vods.len() >= MAX_PENDING_VODS && !vods.contains_key(vod) {
            tracing::warn!("viewers: too many VODs waiting to be written; a view is not counted");
            return;
        }
        let t = vods.entry(vod.to_string()).or_default();
        t.views += add.views;
        t.watch_seconds += add.watch_seconds;
    }

    /// Keeps the segment durations of a VOD media playlist (`key`: `<vod>/<rendition>`).
    pub fn learn_durations(&self, key: &str, durations: Vec<(String, f64)>) {
        let mut known = lock(&self.durations);
        if known.len() >= MAX_DURATIONS && !known.contains_key(key) {
            known.clear();
        }
        known.insert(key.to_string(), Arc::new(durations.into_iter().collect()));
    }

    /// The duration of segment `file` of a VOD media playlist learnt before; `None` when the
    /// playlist is not known (`Some(None)`: known, without that file).
    pub fn segment_duration(&self, key: &str, file: &str) -> Option<Option<f64>> {
        let known = lock(&self.durations).get(key).cloned()?;
        Some(known.get(file).copied())
    }

    /// The VOD tallies not written yet; [`Viewers::restore_vods`] gives back what could not be.
    pub fn take_vods(&self) -> HashMap<String, VodTally> {
        std::mem::take(&mut *lock(&self.vods))
    }

    pub fn restore_vods(&self, unwritten: HashMap<String, VodTally>) {
        for (vod, t) in unwritten {
            self.add_vod(&vod, t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_minted_sessions_of_the_stream_count_and_once_each() {
        let v = Viewers::new(&[7; 32]);
        let a = v.mint("stream:a");
        assert_eq!(a.len(), 32);
        assert!(v.touch("a", &a));
        assert!(v.touch("a", &a), "the same session again");
        assert!(!v.touch("b", &a), "minted for another stream");
        let mut forged = a.clone().into_bytes();
        forged[31] = if forged[31] == b'0' { b'1' } else { b'0' };
        assert!(!v.touch("a", std::str::from_utf8(&forged).unwrap()), "a known id with another MAC");
        assert!(!v.touch("a", "zz"));
        assert!(!v.touch("a", &"é".repeat(16)));
        let other = Viewers::new(&[8; 32]);
        assert!(!other.touch("a", &a), "another secret");
        v.touch("a", &v.mint("stream:a"));
        let counts = v.sweep();
        assert_eq!(counts.get("a"), Some(&2));
        assert_eq!(counts.get("b"), None);
    }

    #[test]
    fn the_per_stream_cap_holds_and_sweeping_frees_it() {
        let v = Viewers::new(&[1; 32]);
        {
            let mut per = lock(&v.per_stream);
            per.insert(Arc::from("s"), MAX_SESSIONS_PER_STREAM);
        }
        assert!(!v.touch("s", &v.mint("stream:s")), "over the stream's cap");
        assert!(v.touch("t", &v.mint("stream:t")), "another stream has room");
        assert_eq!(v.total.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn rtsp_and_vod_tallies() {
        let v = Viewers::new(&[2; 32]);
        v.rtsp_joined("s");
        v.rtsp_joined("s");
        v.rtsp_left("s");
        v.rtsp_left("x");
        assert_eq!(v.rtsp(), HashMap::from([("s".to_string(), 1)]));
        v.rtsp_left("s");
        assert!(v.rtsp().is_empty());
        v.vod_viewed("v");
        let s = v.vod_session("v", &v.mint("vod:v")).expect("a session this service minted");
        assert!(v.vod_watched(&s, 0, 2.0));
        assert!(!v.vod_watched(&s, 0, 2.0), "the same position again (another rendition)");
        assert!(v.vod_watched(&s, 130, 1.5));
        let other = v.vod_session("v", &v.mint("vod:v")).expect("another session");
        assert!(v.vod_watched(&other, 0, 2.0), "another session");
        assert!(v.vod_session("v", &v.mint("vod:w")).is_none(), "minted for another VOD");
        assert!(v.vod_session("v", "0123456789abcdef0123456789abcdef").is_none(), "invented");
        assert!(!v.vod_watched(&s, 1, f64::NAN));
        assert!(!v.vod_watched(&s, MAX_VOD_SEGMENTS, 2.0));
        let taken = v.take_vods();
        assert_eq!(taken["v"], VodTally { views: 1, watch_seconds: 5.5 });
        assert!(v.take_vods().is_empty());
        v.restore_vods(taken);
        assert_eq!(v.take_vods()["v"].views, 1);
    }
}
