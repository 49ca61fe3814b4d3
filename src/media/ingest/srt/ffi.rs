//! The few calls of libsrt 1.5 (Debian's `libsrt-gnutls-dev`, `<srt/srt.h>`) that SRT ingest
//! uses, wrapped so that the rest of the module holds no raw pointer. The GnuTLS build, because
//! it is the one GStreamer's libav plugin brings into the process (through libavformat): a
//! second libsrt beside it would share its C++ statics, which both would then destroy at exit. Why libsrt and not
//! GStreamer's `srtsrc` or a Rust SRT crate: `docs/srt.md`.
//!
//! Every socket is an `SRTSOCKET` (an `i32` handle into libsrt's own table, not a file
//! descriptor); a handle closed twice or used after close is refused by libsrt with
//! `SRT_EINVSOCK`, never undefined behaviour, so [`Socket`] may be closed from any thread while
//! another blocks on it (which is how a blocked receive or accept is woken).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::OnceLock;

pub type SrtSocket = i32;

/// `SRT_INVALID_SOCK` / `SRT_ERROR`.
const INVALID: i32 = -1;

/// Socket options (`SRT_SOCKOPT`).
#[derive(Debug, Clone, Copy)]
#[repr(i32)]
pub enum Opt {
    RcvSyn = 2,
    RcvTimeo = 14,
    Passphrase = 26,
    PbKeyLen = 27,
    RcvLatency = 43,
    StreamId = 46,
    TransType = 50,
    EnforcedEncryption = 53,
    PeerIdleTimeo = 55,
}

/// `SRT_ETIMEOUT`: a receive with `SRTO_RCVTIMEO` found nothing in time.
pub const E_TIMEOUT: i32 = 6003;

/// Rejection reasons a listener gives (`<srt/access_control.h>`); the caller sees
/// `1000 + HTTP status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Reject {
    BadRequest = 1400,
    Unauthorized = 1401,
    Overload = 1402,
    Forbidden = 1403,
    NotFound = 1404,
    BadMode = 1405,
    Conflict = 1409,
    Internal = 1500,
}

/// `srt_listen_callback_fn`: called on libsrt's receiving thread for each caller's conclusion
/// handshake, before the socket is accepted; returning -1 rejects the caller.
pub type ListenCallback = extern "C" fn(
    opaque: *mut c_void,
    ns: SrtSocket,
    hs_version: c_int,
    peer: *const libc::sockaddr,
    stream_id: *const c_char,
) -> c_int;

#[link(name = "srt-gnutls")]
extern "C" {
    fn srt_startup() -> c_int;
    fn srt_setloglevel(level: c_int);
    fn srt_create_socket() -> SrtSocket;
    fn srt_bind(u: SrtSocket, name: *const libc::sockaddr, namelen: c_int) -> c_int;
    fn srt_listen(u: SrtSocket, backlog: c_int) -> c_int;
    fn srt_listen_callback(lsn: SrtSocket, hook: ListenCallback, opaque: *mut c_void) -> c_int;
    fn srt_accept(u: SrtSocket, addr: *mut libc::sockaddr, addrlen: *mut c_int) -> SrtSocket;
    fn srt_close(u: SrtSocket) -> c_int;
    fn srt_setsockflag(u: SrtSocket, opt: c_int, optval: *const c_void, optlen: c_int) -> c_int;
    fn srt_getsockflag(u: SrtSocket, opt: c_int, optval: *mut c_void, optlen: *mut c_int) -> c_int;
    fn srt_getsockname(u: SrtSocket, name: *mut libc::sockaddr, namelen: *mut c_int) -> c_int;
    fn srt_recvmsg(u: SrtSocket, buf: *mut c_char, len: c_int) -> c_int;
    fn srt_setrejectreason(u: SrtSocket, value: c_int) -> c_int;
    fn srt_getlasterror(errno_loc: *mut c_int) -> c_int;
    fn srt_getlasterror_str() -> *const c_char;
}

/// The last error of this thread's libsrt call: its code and text.
#[derive(Debug, Clone, thiserror::Error)]
#[error("SRT error {code}: {text}")]
pub struct SrtError {
    pub code: i32,
    pub text: String,
}

fn last_error() -> SrtError {
    // SAFETY: both read libsrt's thread-local error; the string is libsrt's, copied at once.
    unsafe {
        let code = srt_getlasterror(std::ptr::null_mut());
        let text = srt_getlasterror_str();
        let text =
            if text.is_null() { String::new() } else { CStr::from_ptr(text).to_string_lossy().into_owned() };
        SrtError { code, text }
    }
}

fn check(r: c_int) -> Result<c_int, SrtError> {
    if r == INVALID {
        Err(last_error())
    } else {
        Ok(r)
    }
}

/// Starts libsrt once for the process (its own threads: one receive and one send queue per
/// bound UDP port). Its log goes to stderr unstructured, so only critical lines are let through;
/// Sluice logs what it decides itself.
pub fn startup() -> Result<(), SrtError> {
    static STARTED: OnceLock<Result<(), SrtError>> = OnceLock::new();
    STARTED
        .get_or_init(|| {
            // SAFETY: no arguments; libsrt counts startups.
            check(unsafe { srt_startup() })?;
            // LOG_CRIT (syslog numbering).
            // SAFETY: sets a global level.
            unsafe { srt_setloglevel(2) };
            Ok(())
        })
        .clone()
}

/// A libsrt socket; closed on drop.
#[derive(Debug)]
pub struct Socket(SrtSocket);

impl Socket {
    pub fn new() -> Result<Socket, SrtError> {
        // SAFETY: no arguments.
        let s = unsafe { srt_create_socket() };
        if s == INVALID {
            return Err(last_error());
        }
        Ok(Socket(s))
    }

    pub fn id(&self) -> SrtSocket {
        self.0
    }

    pub fn set_i32(&self, opt: Opt, value: i32) -> Result<(), SrtError> {
        set_i32(self.0, opt, value)
    }

    pub fn bind(&self, addr: SocketAddr) -> Result<(), SrtError> {
        let (storage, len) = to_sockaddr(addr);
        // SAFETY: `storage` is a sockaddr of `len` bytes for the address's family.
        check(unsafe { srt_bind(self.0, (&raw const storage).cast(), len) }).map(|_| ())
    }

    pub fn local_addr(&self) -> Result<SocketAddr, SrtError> {
        // SAFETY: zeroed storage is a valid sockaddr_storage.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as c_int;
        // SAFETY: libsrt writes at most `len` bytes into `storage`.
        check(unsafe { srt_getsockname(self.0, (&raw mut storage).cast(), &mut len) })?;
        // SAFETY: libsrt filled a sockaddr of its family.
        unsafe { from_sockaddr((&raw const storage).cast()) }
            .ok_or_else(|| SrtError { code: 0, text: "unknown address family".into() })
    }

    /// Listens, with `callback` deciding each caller (see [`ListenCallback`]). `opaque` is
    /// handed to every call.
    ///
    /// # Safety
    /// `opaque` must stay valid for as long as the socket listens (libsrt may call the hook
    /// until it is closed), as what `callback` takes it for.
    pub unsafe fn listen(
        &self,
        backlog: i32,
        callback: ListenCallback,
        opaque: *mut c_void,
    ) -> Result<(), SrtError> {
        // SAFETY: the callback is an `extern "C"` function; the opaque pointer is the caller's
        // promise.
        check(unsafe { srt_listen_callback(self.0, callback, opaque) })?;
        // SAFETY: plain handle.
        check(unsafe { srt_listen(self.0, backlog) }).map(|_| ())
    }

    /// Blocks until a caller is accepted; fails once the listener is closed.
    pub fn accept(&self) -> Result<(Socket, Option<SocketAddr>), SrtError> {
        // SAFETY: zeroed storage is a valid sockaddr_storage.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as c_int;
        // SAFETY: libsrt writes at most `len` bytes into `storage`.
        let s = unsafe { srt_accept(self.0, (&raw mut storage).cast(), &mut len) };
        if s == INVALID {
            return Err(last_error());
        }
        // SAFETY: libsrt filled a sockaddr of its family.
        let peer = unsafe { from_sockaddr((&raw const storage).cast()) };
        Ok((Socket(s), peer))
    }

    /// Receives one message into `buf`: its length, `Ok(None)` when the receive timed out
    /// (`SRTO_RCVTIMEO`), an error when the connection is gone or the socket was closed.
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<usize>, SrtError> {
        let len = c_int::try_from(buf.len()).unwrap_or(c_int::MAX);
        // SAFETY: libsrt writes at most `len` bytes into `buf`.
        let n = unsafe { srt_recvmsg(self.0, buf.as_mut_ptr().cast(), len) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = last_error();
        if e.code == E_TIMEOUT {
            Ok(None)
        } else {
            Err(e)
        }
    }

    pub fn stream_id(&self) -> Option<String> {
        let mut buf = [0u8; 512];
        let mut len = buf.len() as c_int;
        // SAFETY: libsrt writes at most `len` bytes and sets `len` to what it wrote.
        let r = unsafe { srt_getsockflag(self.0, Opt::StreamId as c_int, buf.as_mut_ptr().cast(), &mut len) };
        if r == INVALID {
            return None;
        }
        let len = usize::try_from(len).ok()?.min(buf.len());
        Some(String::from_utf8_lossy(&buf[..len]).trim_end_matches('\0').to_string())
    }

    /// Closes the socket now (a receive or accept blocked on it returns an error); the drop
    /// that follows does nothing more.
    pub fn close(&self) {
        // SAFETY: closing a handle twice is refused by libsrt, not undefined.
        unsafe { srt_close(self.0) };
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.close();
    }
}

/// Sets an integer option of a socket known only by its handle (in the listen callback).
pub fn set_i32(socket: SrtSocket, opt: Opt, value: i32) -> Result<(), SrtError> {
    let v: c_int = value;
    // SAFETY: an int option of 4 bytes.
    check(unsafe { srt_setsockflag(socket, opt as c_int, (&raw const v).cast(), 4) }).map(|_| ())
}

/// Sets a string option (the passphrase) of a socket known only by its handle.
pub fn set_str(socket: SrtSocket, opt: Opt, value: &str) -> Result<(), SrtError> {
    let len =
        c_int::try_from(value.len()).map_err(|_| SrtError { code: 0, text: "option too long".into() })?;
    // SAFETY: libsrt copies `len` bytes.
    check(unsafe { srt_setsockflag(socket, opt as c_int, value.as_ptr().cast(), len) }).map(|_| ())
}

/// Tells the caller why it is rejected (before the callback returns -1).
pub fn set_reject_reason(socket: SrtSocket, reason: Reject) {
    // SAFETY: plain handle and value.
    unsafe { srt_setrejectreason(socket, reason as c_int) };
}

fn to_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, c_int) {
    // SAFETY: zeroed storage is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and suitably aligned.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as c_int)
}

/// The address in a sockaddr that libsrt filled.
///
/// # Safety
/// `sa` is null or points to a sockaddr whose family says how many bytes follow.
pub unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    match i32::from((*sa).sa_family) {
        libc::AF_INET => {
            let sin = &*sa.cast::<libc::sockaddr_in>();
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            let sin6 = &*sa.cast::<libc::sockaddr_in6>();
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(sin6.sin6_port)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_through_sockaddr() {
        for addr in ["127.0.0.1:8890", "[::1]:9000", "0.0.0.0:0"] {
            let addr: SocketAddr = addr.parse().expect("address");
            let (storage, _) = to_sockaddr(addr);
            // SAFETY: to_sockaddr wrote a sockaddr of the address's family.
            let back = unsafe { from_sockaddr((&raw const storage).cast()) };
            assert_eq!(back, Some(addr));
        }
    }

    #[test]
    fn a_listener_binds_and_reports_its_port() {
        startup().expect("libsrt starts");
        let s = Socket::new().expect("socket");
        s.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = s.local_addr().expect("local addr");
        assert_ne!(addr.port(), 0);
        s.close();
        let mut buf = [0u8; 16];
        assert!(s.recv(&mut buf).is_err(), "a closed socket refuses");
    }
}
