//! SRT ingest (CONTRACT: Live media, SRT): callers connect to `SLUICE_SRT_ADDR` (UDP) with
//! `streamid=publish:<streamKey>` and the push password as their passphrase, and send MPEG-TS
//! with H.264 and AAC, which enters the same push session and outputs as RTMP (LL-HLS, DVR,
//! WebRTC and RTSP playback, the status moves and events).
//!
//! The decision is taken in the handshake, before any session exists: libsrt calls
//! [`on_handshake`] with the caller's stream id on its receiving thread; it looks the stream up
//! (bounded by [`LOOKUP_DEADLINE`], and per client address by a handshake rate) and either
//! rejects the caller with a reason (unknown key 1404, disabled 1403, live already 1409, over
//! a cap or, with billing on, out of credits 1402) or sets the stream's push password as the
//! new socket's passphrase. libsrt then completes the key exchange itself, and a caller whose
//! passphrase differs (or that has none) is refused by libsrt without ever being accepted: no
//! session, no event, nothing changes.
//!
//! An accepted caller takes a place in the ingest [`Limits`] (shared with RTMP), opens the push
//! session (`Streams::begin_push`) and gets a thread that receives its messages into the
//! pipeline's `appsrc` (never waiting: a full source drops); a tokio task watches the session as
//! WHIP's does and ends it on disconnect, DELETE/disable, a pipeline error, no media for 10 s
//! or no keyframe for 30 s.
//!
//! A caller with `streamid=backup:<streamKey>` is the stream's backup (CONTRACT: Continuity): it
//! is accepted while the stream is live, and stands by ([`input`]), as RTMP's does.

pub mod ffi;
mod input;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use self::ffi::{Opt, Reject, Socket, SrtError, SrtSocket};
use crate::domain::content_key::MasterKey;
use crate::domain::stream::{InputRole, StreamStatus};
use crate::media::ingest::limits::{Admitted, Limits};
use crate::media::live::session::LiveSessions;
use crate::ratelimit::{per_second, Limiter};
use crate::services::streams::Streams;
use crate::store::streams::StreamRow;
use crate::store::Db;

/// The most the handshake waits for the stream's row: it holds libsrt's receiving thread
/// (every SRT caller's packets) meanwhile.
pub const LOOKUP_DEADLINE: Duration = Duration::from_secs(2);
/// Handshakes one client address may have decided per second, sustained, and in a burst: each
/// costs a database read on libsrt's receiving thread. Beyond it the caller is refused (1402).
const HANDSHAKES_PER_SEC: f64 = 2.0;
const HANDSHAKE_BURST: u32 = 20;
/// Callers waiting to be accepted.
const BACKLOG: i32 = 64;
/// Largest SRT payload (live mode sends 1316 bytes: seven TS packets).
const MESSAGE: usize = 1500;

/// What SRT ingest decides pushes with, and where their media goes.
pub struct Srt {
    pub db: Db,
    /// Opens the sealed push passwords (the passphrases).
    pub master_key: MasterKey,
    pub streams: Arc<Streams>,
    pub outputs: Arc<LiveSessions>,
    /// Shared with RTMP and RTMPS.
    pub limits: Arc<Limits>,
    handshakes: Limiter<IpAddr>,
    /// SRT callers connected now, pushing or standing by (`sluice_srt_sessions`).
    live: AtomicUsize,
}

impl Srt {
    pub fn new(
        db: Db,
        master_key: MasterKey,
        streams: Arc<Streams>,
        outputs: Arc<LiveSessions>,
        limits: Arc<Limits>,
    ) -> Srt {
        let handshakes = Limiter::new(per_second(HANDSHAKES_PER_SEC, HANDSHAKE_BURST));
        Srt { db, master_key, streams, outputs, limits, handshakes, live: AtomicUsize::new(0) }
    }
}

/// The listening socket; closed when this goes, which ends its accepting thread (sessions under
/// way go on until they end).
pub struct SrtServer {
    pub addr: SocketAddr,
    listener: Arc<Socket>,
    /// The one strong reference: the hook and the accepting thread hold weak ones.
    srt: Arc<Srt>,
}

impl SrtServer {
    /// SRT callers connected now, pushing or standing by.
    pub fn sessions(&self) -> usize {
        self.srt.live.load(Ordering::Relaxed)
    }
}

impl Drop for SrtServer {
    fn drop(&mut self) {
        self.listener.close();
    }
}

/// What the handshake callback reaches: weakly, so a listener that outlives its server holds
/// no database pool.
struct Gate {
    srt: Weak<Srt>,
    runtime: tokio::runtime::Handle,
}

/// Binds SRT ingest on `addr` (UDP; port 0 picks one) and accepts callers on a thread of its
/// own. Blocking.
pub fn start(
    srt: Arc<Srt>,
    addr: SocketAddr,
    runtime: tokio::runtime::Handle,
) -> Result<SrtServer, SrtError> {
    ffi::startup()?;
    let listener = Socket::new()?;
    listener.set_i32(Opt::RcvSyn, 1)?;
    // Live mode (the default, said here): TSBPD delivery, messages of at most 1316 bytes.
    listener.set_i32(Opt::TransType, 0)?;
    listener.set_i32(Opt::EnforcedEncryption, 1)?;
    listener.bind(addr)?;
    // The gate lives as long as the process: libsrt may call the hook until the listener is
    // closed, and closing does not wait for a call under way. It holds only weak references.
    let gate = Box::into_raw(Box::new(Gate { srt: Arc::downgrade(&srt), runtime: runtime.clone() }));
    // SAFETY: the gate is never freed, and `on_handshake` reads it as a `Gate`.
    unsafe { listener.listen(BACKLOG, on_handshake, gate.cast())? };
    let addr = listener.local_addr()?;
    let listener = Arc::new(listener);
    let (accepting, srt_strong, srt) = (listener.clone(), srt.clone(), Arc::downgrade(&srt));
    std::thread::Builder::new()
        .name("srt-accept".into())
        .spawn(move || accept_loop(&accepting, &srt, &runtime))
        .map_err(|e| SrtError { code: 0, text: format!("starting the SRT accept thread: {e}") })?;
    Ok(SrtServer { addr, listener, srt: srt_strong })
}

fn accept_loop(listener: &Socket, srt: &Weak<Srt>, runtime: &tokio::runtime::Handle) {
    loop {
        let (socket, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            // The listener was closed (the server stopped).
            Err(e) => {
                tracing::debug!(error = %e, "srt: listener closed");
                return;
            }
        };
        let Some(srt) = srt.upgrade() else { return };
        let Some(peer) = peer else { continue };
        let Some(admitted) = srt.limits.admit(peer.ip()) else {
            tracing::info!(%peer, "srt: too many connections (from this address or in all); closing");
            continue;
        };
        runtime.spawn(session(srt, Arc::new(socket), peer, admitted));
    }
}

/// The stream key a caller's stream id names: `publish:<key>` or `backup:<key>`, or the SRT
/// access-control form `#!::r=<key>,m=publish`. A key is what Sluice hands out (letters,
/// digits, `-`, `_`).
pub fn stream_key(stream_id: &str) -> Result<&str, Reject> {
    caller(stream_id).map(|(key, _)| key)
}

/// The stream key a caller's stream id names, and which of the stream's inputs it is.
pub fn caller(stream_id: &str) -> Result<(&str, InputRole), Reject> {
    let mut role = InputRole::Primary;
    let key = if let Some(fields) = stream_id.strip_prefix("#!::") {
        let (mut key, mut mode) = (None, None);
        for field in fields.split(',') {
            match field.split_once('=') {
                Some(("r", v)) => key = Some(v),
                Some(("m", v)) => mode = Some(v),
                _ => {}
            }
        }
        if mode != Some("publish") {
            return Err(Reject::BadMode);
        }
        key.ok_or(Reject::BadRequest)?
    } else if let Some(key) = stream_id.strip_prefix("publish:") {
        key
    } else if let Some(key) = stream_id.strip_prefix("backup:") {
        role = InputRole::Backup;
        key
    } else if stream_id.starts_with("play:") || stream_id.starts_with("read:") {
        return Err(Reject::BadMode);
    } else {
        return Err(Reject::BadRequest);
    };
    let well_formed = (1..=128).contains(&key.len())
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if well_formed {
        Ok((key, role))
    } else {
        Err(Reject::BadRequest)
    }
}

/// libsrt's listen hook: 0 lets the caller's handshake go on with the passphrase set, -1
/// rejects it with the reason set.
extern "C" fn on_handshake(
    opaque: *mut c_void,
    ns: SrtSocket,
    hs_version: c_int,
    peer: *const libc::sockaddr,
    stream_id: *const c_char,
) -> c_int {
    let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `opaque` is the gate `start` leaked for the life of the process.
        let gate = unsafe { &*opaque.cast::<Gate>() };
        // SAFETY: libsrt hands a sockaddr of the caller's family, or null.
        let peer = unsafe { ffi::from_sockaddr(peer) };
        let stream_id = if stream_id.is_null() {
            ""
        } else {
            // SAFETY: libsrt hands a NUL-terminated string valid during the call.
            unsafe { CStr::from_ptr(stream_id) }.to_str().unwrap_or("")
        };
        decide(gate, ns, hs_version, peer, stream_id)
    }));
    let refusal = match decided {
        Ok(Ok(())) => return 0,
        Ok(Err(reason)) => reason,
        Err(_) => Reject::Internal,
    };
    ffi::set_reject_reason(ns, refusal);
    -1
}

fn decide(
    gate: &Gate,
    ns: SrtSocket,
    hs_version: c_int,
    peer: Option<SocketAddr>,
    id: &str,
) -> Result<(), Reject> {
    let srt = gate.srt.upgrade().ok_or(Reject::Internal)?;
    let peer = peer.ok_or(Reject::BadRequest)?;
    if srt.handshakes.take(&peer.ip()).is_err() {
        tracing::debug!(%peer, "srt: handshakes from this address beyond their rate; refused");
        return Err(Reject::Overload);
    }
    // Version 4 handshakes carry no stream id.
    if hs_version < 5 {
        return Err(Reject::BadRequest);
    }
    let refused = |reason: Reject, why: &str| {
        tracing::info!(%peer, ?reason, why, "srt push refused");
        reason
    };
    let (key, role) = caller(id)
        .map_err(|r| refused(r, "the stream id is not publish:<stream key> or backup:<stream key>"))?;
    if !srt.limits.has_room(peer.ip()) {
        return Err(refused(Reject::Overload, "too many connections"));
    }
    let looked_up = gate.runtime.block_on(async {
        let lookup = async {
            let Some(stream) = srt.db.stream_by_key(key).await? else { return Ok(None) };
            let paid = srt.streams.may_push(&stream.project_id).await?;
            Ok::<_, crate::store::DbError>(Some((stream, paid)))
        };
        tokio::time::timeout(LOOKUP_DEADLINE, lookup).await
    });
    let (stream, paid) = match looked_up {
        Ok(Ok(Some(found))) => found,
        Ok(Ok(None)) => return Err(refused(Reject::NotFound, "unknown stream key")),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "srt: loading stream");
            return Err(Reject::Internal);
        }
        Err(_) => return Err(refused(Reject::Internal, "the stream lookup timed out")),
    };
    let sessions = &srt.streams.sessions;
    match (stream.state().status, role) {
        (StreamStatus::Disabled, _) => return Err(refused(Reject::Forbidden, "the stream is disabled")),
        // A session here that waits for its publisher (within the reconnect window) takes it
        // back; the primary back while the backup feeds the stream stands by.
        (StreamStatus::Live, InputRole::Primary)
            if !sessions.is_waiting(&stream.id) && !sessions.backup_feeds(&stream.id) =>
        {
            return Err(refused(Reject::Conflict, "the stream is live already"))
        }
        (StreamStatus::Live, _) => {}
        (_, InputRole::Backup) => {
            return Err(refused(Reject::Conflict, "the stream has no live primary to back up"))
        }
        _ => {}
    }
    // SRT's access-control code 1402 (`SRT_REJX_OVERLOAD`) also stands for "exceeded credits".
    if !paid {
        return Err(refused(Reject::Overload, "the project has no live seconds left (billing)"));
    }
    let Some(passphrase) = crate::store::secrets::push_secret(&srt.master_key, &stream) else {
        tracing::info!(stream = %stream.id, "srt push refused: the stream has no stored push password (created before SRT ingest); rotate its push credentials");
        return Err(Reject::Unauthorized);
    };
    ffi::set_str(ns, Opt::Passphrase, &passphrase).map_err(|e| {
        tracing::error!(stream = %stream.id, error = %e, "srt: setting the passphrase");
        Reject::Internal
    })?;
    Ok(())
}

/// An accepted caller's connection, from opening its push session (or standing by) to its end.
async fn session(srt: Arc<Srt>, socket: Arc<Socket>, peer: SocketAddr, admitted: Admitted) {
    let _admitted = admitted;
    let Some((stream, role)) = accepted_stream(&srt, &socket).await else { return };
    srt.live.fetch_add(1, Ordering::Relaxed);
    input::run(&srt, socket, peer, stream, role).await;
    srt.live.fetch_sub(1, Ordering::Relaxed);
}

/// The stream an accepted caller named (its passphrase was that stream's: libsrt checked it).
async fn accepted_stream(srt: &Srt, socket: &Socket) -> Option<(StreamRow, InputRole)> {
    let id = socket.stream_id()?;
    let (key, role) = caller(&id).ok()?;
    match srt.db.stream_by_key(key).await {
        Ok(stream) => stream.map(|s| (s, role)),
        Err(e) => {
            tracing::error!(error = %e, "srt: loading stream");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_name_a_key_to_publish_to() {
        assert_eq!(stream_key("publish:abcDEF123"), Ok("abcDEF123"));
        assert_eq!(stream_key("#!::r=abc_1-2,m=publish"), Ok("abc_1-2"));
        assert_eq!(stream_key("#!::m=publish,u=someone,r=abc"), Ok("abc"));
        assert_eq!(stream_key("#!::r=abc"), Err(Reject::BadMode), "the access-control default is to play");
        assert_eq!(stream_key("#!::r=abc,m=request"), Err(Reject::BadMode));
        assert_eq!(stream_key("play:abc"), Err(Reject::BadMode));
        assert_eq!(stream_key("abc"), Err(Reject::BadRequest));
        assert_eq!(stream_key(""), Err(Reject::BadRequest));
        assert_eq!(stream_key("publish:"), Err(Reject::BadRequest));
        assert_eq!(stream_key("publish:a b"), Err(Reject::BadRequest));
        assert_eq!(stream_key("publish:a/../b"), Err(Reject::BadRequest));
        assert_eq!(stream_key(&format!("publish:{}", "a".repeat(129))), Err(Reject::BadRequest));
        assert_eq!(caller("backup:abc"), Ok(("abc", InputRole::Backup)));
        assert_eq!(caller("publish:abc"), Ok(("abc", InputRole::Primary)));
        assert_eq!(caller("backup:"), Err(Reject::BadRequest));
    }
}
