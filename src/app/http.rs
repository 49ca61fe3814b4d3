//! The HTTP server: hyper serves the routes on each accepted connection, HTTP/1.1 or HTTP/2
//! (by ALPN or the connection preface), until a graceful shutdown.
//!
//! Why not `poem::Server`: it boxes every acceptor, and its boxed connection splits each
//! socket into halves behind a lock and hides vectored writes from hyper, which then copies
//! every response body into its write buffer; every connection's poll also checks one
//! cancellation token shared by all connections. Here each connection is served on its
//! acceptor's own type (plain TCP, or [`crate::tls::HttpsAcceptor`]'s stream), bodies go out
//! with `writev`, and each connection waits on a token of its own. The rest is as poem does it:
//! the same endpoint, the same HTTP/2 header and reset limits, the same graceful shutdown; HTTP/2
//! streams per connection are capped at hyper's 200 (poem lifted the cap). Connections are
//! accepted here and served on the HTTP threads ([`threads`]).
//!
//! A connection with no request in flight for [`IDLE`] is closed gracefully: one that sends
//! nothing, drips a request head, or sits idle between requests cannot hold a socket for long.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::task::AtomicWaker;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use poem::listener::Acceptor;
use poem::{Endpoint, Response};
use tokio_util::sync::CancellationToken;

mod activity;
mod threads;
use activity::{Activity, Busy, Quiet, Watched};
pub use threads::OnRuntime;

/// HTTP/2 streams one connection may have open at once.
const H2_MAX_STREAMS: u32 = 200;
/// HTTP/2 streams a client may open and reset at once before the connection is closed
/// (the rapid-reset flood); h2's own default.
const H2_MAX_PENDING_RESETS: usize = 20;
/// The largest header block an HTTP/2 request may carry.
const H2_MAX_HEADER_LIST: u32 = 16 * 1024;
/// How long the acceptor rests after the process ran out of descriptors or memory, so that a
/// flood of connections does not spin the accept loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);
/// How long a connection may go with no request in flight before it is closed: a client that
/// connects and sends nothing, drips a request head a byte at a time, or keeps an idle
/// keep-alive connection (HTTP/1.1 or HTTP/2). A request is in flight from the moment its head
/// has been read until its answer's body has been sent: a slow upload or a long download keeps
/// its connection.
pub const IDLE: Duration = Duration::from_secs(10);
/// How long a response may wait for its client to take more of it (the socket accepting no more
/// bytes) before the connection is dropped: a client that stops reading, such as a stalled
/// follower of the event log, holds nothing for longer. Checked every [`IDLE`], so a stalled
/// connection goes between this and this plus [`IDLE`] after its last write went through.
pub const WRITE_STALL: Duration = Duration::from_secs(30);
/// How long an idle connection that was told to close may take to do so.
const IDLE_CLOSE: Duration = Duration::from_secs(1);
/// How long a server dropped before its shutdown waits for its connections to close.
const DROP_WAIT: Duration = Duration::from_secs(2);

/// Serves `ep` on the connections `acceptor` accepts until `shutdown` resolves; then stops
/// accepting, lets each connection finish the requests it has (HTTP/1.1: the one in flight;
/// HTTP/2: a GOAWAY), and after `grace` closes those still open. Returns once every connection
/// is gone.
pub async fn serve<A, E>(
    mut acceptor: A,
    ep: E,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> io::Result<()>
where
    A: Acceptor,
    A::Io: threads::Portable,
    E: Endpoint<Output = Response> + 'static,
{
    let ep = Arc::new(ep);
    let stop = CancellationToken::new();
    let hard = CancellationToken::new();
    // Every connection is counted while it lives; a shutdown waits for none to be left.
    let open = Arc::new(Open::default());
    let _closing = CloseOnDrop { open: open.clone(), stop: stop.clone(), hard: hard.clone() };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = acceptor.accept() => match accepted {
                Ok((io, local, remote, scheme)) => {
                    let (ep, counted) = (ep.clone(), open.count());
                    let (stop, hard) = (stop.child_token(), hard.clone());
                    // On an HTTP thread (`threads`), the acceptor's runtime left behind.
                    threads::spawn_connection(io, move |io| async move {
                        connection(io, (local, remote, scheme), ep, (stop, hard)).await;
                        drop(counted);
                    });
                }
                Err(e) => {
                    // Out of descriptors or memory: rest, or the loop spins. Anything else is
                    // one connection's failure (reset before it was accepted).
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)) {
                        tracing::warn!(error = %e, "HTTP accept failed; pausing");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    } else {
                        tracing::debug!(error = %e, "HTTP accept failed");
                    }
                }
            },
        }
    }
    drop(acceptor);
    stop.cancel();
    tracing::info!(grace_seconds = grace.as_secs_f32(), "HTTP server stopping: letting open requests finish");
    let closer = hard.clone();
    let timer = tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        closer.cancel();
    });
    open.none_left().await;
    timer.abort();
    tracing::info!("HTTP server stopped");
    Ok(())
}

/// The connections one server has open: a shutdown waits for none to be left, asynchronously
/// ([`Open::none_left`]); a server dropped before its shutdown, blocking ([`CloseOnDrop`]).
#[derive(Default)]
struct Open {
    count: std::sync::Mutex<usize>,
    /// Told when the count falls to zero, for the blocking wait.
    none: std::sync::Condvar,
    /// Told when the count falls to zero, for the asynchronous wait.
    gone: tokio::sync::Notify,
}

/// One open connection of an [`Open`]; uncounted when dropped.
struct Counted(Arc<Open>);

impl Open {
    fn count(self: &Arc<Self>) -> Counted {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        Counted(self.clone())
    }

    /// Returns once no connection is counted.
    async fn none_left(&self) {
        loop {
            // Registered before the count is read: a last connection that goes in between
            // still wakes this wait.
            let mut gone = std::pin::pin!(self.gone.notified());
            gone.as_mut().enable();
            if *self.count.lock().unwrap_or_else(|p| p.into_inner()) == 0 {
                return;
            }
            gone.await;
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut n = self.0.count.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        if *n == 0 {
            self.0.none.notify_all();
            self.0.gone.notify_waiters();
        }
    }
}

/// A server dropped before its shutdown (the runtime that ran it went away, as at a test's
/// end) closes its connections at once and waits for them, up to [`DROP_WAIT`]: they live on
/// the HTTP threads, and what they hold (the endpoint, so the whole app) must be let go before
/// the drop returns, as it was when they were tasks of the same runtime, not at some later
/// moment (a process's exit, say, while libraries tear down). A server that shut down has no
/// connection left, and does not wait.
struct CloseOnDrop {
    open: Arc<Open>,
    stop: CancellationToken,
    hard: CancellationToken,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.stop.cancel();
        self.hard.cancel();
        let n = self.open.count.lock().unwrap_or_else(|p| p.into_inner());
        let (n, waited) =
            self.open.none.wait_timeout_while(n, DROP_WAIT, |n| *n > 0).unwrap_or_else(|p| p.into_inner());
        if waited.timed_out() {
            tracing::warn!(connections = *n, "HTTP server dropped with connections still closing");
        }
    }
}

/// Serves one connection until the client closes it, or until `stop` (finish what is in
/// flight, then close) and `hard` (close now).
async fn connection<Io, E>(
    io: Io,
    (local, remote, scheme): (poem::web::LocalAddr, poem::web::RemoteAddr, poem::http::uri::Scheme),
    ep: Arc<E>,
    (stop, hard): (CancellationToken, CancellationToken),
) where
    Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    E: Endpoint<Output = Response> + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = Watched { io, activity: activity.clone() };
    let (seen, peer) = (activity.clone(), remote.clone());
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let ep = ep.clone();
        let busy = seen.begin();
        let req = poem::Request::from((req, local.clone(), remote.clone(), scheme.clone()));
        // Boxed: hyper moves the future it is given, and this one holds every layer's state.
        Box::pin(async move {
            let response = hyper::Response::from(ep.get_response(req).await);
            // In flight until its body has been sent (or dropped with the connection).
            Ok::<_, Infallible>(response.map(|body| Tracked { body, _busy: busy }))
        })
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_pending_accept_reset_streams(H2_MAX_PENDING_RESETS)
        .max_header_list_size(H2_MAX_HEADER_LIST);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    let idle = {
        // Dropped with this block: its timer and its place among the token's waiters go with it.
        let until = std::pin::pin!(async {
            tokio::select! {
                _ = stop.cancelled() => None,
                quiet = activity.quiet(IDLE, WRITE_STALL) => Some(quiet),
            }
        });
        match Race::new(conn.as_mut(), until).await {
            Won::First(_) => return,
            Won::Second(None) => false,
            Won::Second(Some(Quiet::Idle)) => true,
            Won::Second(Some(Quiet::Stalled)) => {
                tracing::info!(?peer, "dropping an HTTP connection whose client stopped reading");
                return;
            }
        }
    };
    conn.as_mut().graceful_shutdown();
    if idle {
        tracing::debug!(?peer, "closing an idle HTTP connection");
        // Nothing was in flight, so an idle connection closes at once, unless it is in the
        // middle of a request head (hyper waits for the head): that one is dropped. A request
        // whose head came in meanwhile is let finish.
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = hard.cancelled() => return,
            _ = tokio::time::sleep(IDLE_CLOSE) => {}
        }
        if activity.in_flight() == 0 {
            return;
        }
    }
    tokio::select! {
        _ = conn => {}
        _ = hard.cancelled() => {}
    }
}

/// `first` raced against `second`, which is polled only on the first poll and when its own
/// waker has fired since: a connection's task wakes for every request it serves, and polling
/// the stop token and the idle timer each time (the token takes a lock) cost 1–2 % of a
/// playlist reload. `first` wins a tie.
struct Race<'a, A, B> {
    first: Pin<&'a mut A>,
    second: Pin<&'a mut B>,
    flag: Arc<SecondWoken>,
}

/// Set by `second`'s waker, which then wakes the task.
struct SecondWoken {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for SecondWoken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

enum Won<A, B> {
    First(A),
    Second(B),
}

impl<'a, A: Future, B: Future> Race<'a, A, B> {
    fn new(first: Pin<&'a mut A>, second: Pin<&'a mut B>) -> Self {
        let flag = Arc::new(SecondWoken { woken: AtomicBool::new(true), task: AtomicWaker::new() });
        Race { first, second, flag }
    }
}

impl<A: Future, B: Future> Future for Race<'_, A, B> {
    type Output = Won<A::Output, B::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.flag.task.register(cx.waker());
        if let Poll::Ready(out) = this.first.as_mut().poll(cx) {
            return Poll::Ready(Won::First(out));
        }
        if this.flag.woken.swap(false, Ordering::AcqRel) {
            let waker = Waker::from(this.flag.clone());
            if let Poll::Ready(out) = this.second.as_mut().poll(&mut Context::from_waker(&waker)) {
                return Poll::Ready(Won::Second(out));
            }
        }
        Poll::Pending
    }
}

/// A response body that keeps its request in flight until it has been sent or dropped.
struct Tracked<B> {
    body: B,
    _busy: Busy,
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// The second future is polled on the first poll and then only after its own waker fired,
    /// and wins then; the first wins whenever it is ready.
    #[tokio::test]
    async fn a_race_polls_the_second_only_when_it_woke() {
        let polls = AtomicUsize::new(0);
        let stop = CancellationToken::new();
        // Counts its polls, and is ready once the token is cancelled.
        let counted = std::future::poll_fn(|cx| {
            polls.fetch_add(1, Ordering::SeqCst);
            let cancelled = std::pin::pin!(stop.cancelled());
            cancelled.poll(cx)
        });
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(4);
        let (first, second) = (std::pin::pin!(rx.recv()), std::pin::pin!(counted));
        let mut race = Race::new(first, second);
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..5 {
            assert!(Pin::new(&mut race).poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1, "polled once, then not again until woken");
        tx.send(()).await.expect("send");
        assert!(matches!(Pin::new(&mut race).poll(&mut cx), Poll::Ready(Won::First(Some(())))));
        assert_eq!(polls.load(Ordering::SeqCst), 1, "the first won without polling the second");

        let (first, second) =
            (std::pin::pin!(std::future::pending::<()>()), std::pin::pin!(stop.cancelled()));
        let mut race = Race::new(first, second);
        assert!(Pin::new(&mut race).poll(&mut cx).is_pending());
        assert!(!race.flag.woken.load(Ordering::SeqCst));
        stop.cancel();
        assert!(race.flag.woken.load(Ordering::SeqCst), "the token woke the second");
        assert!(matches!(Pin::new(&mut race).poll(&mut cx), Poll::Ready(Won::Second(()))));
    }

    /// A server whose runtime goes away lets go of its connections, and so of its endpoint,
    /// before the runtime's drop returns, though they are served on the HTTP threads.
    #[test]
    fn a_dropped_server_lets_go_of_its_connections_before_the_drop_returns() {
        use poem::listener::{Listener, TcpListener};
        use poem::EndpointExt;
        use std::io::{Read, Write};
        let marker = Arc::new(());
        let held = marker.clone();
        let ep = poem::endpoint::make(move |_req| {
            let _held = &held;
            async { "ok" }
        })
        .map_to_response();
        let rt =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
        let addr = rt.block_on(async {
            let acceptor = TcpListener::bind("127.0.0.1:0").into_acceptor().await.expect("bind");
            let addr = acceptor.local_addr()[0].as_socket_addr().copied().expect("addr");
            tokio::spawn(serve(acceptor, ep, std::future::pending(), Duration::from_secs(5)));
            addr
        });
        // A keep-alive connection, answered and left open.
        let mut client = std::net::TcpStream::connect(addr).expect("connect");
        client.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !got.ends_with(b"ok") {
            let n = client.read(&mut buf).expect("read");
            assert!(n > 0, "closed before the answer: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(Arc::strong_count(&marker), 2, "the server holds its endpoint");
        drop(rt);
        assert_eq!(Arc::strong_count(&marker), 1, "the endpoint was let go with the runtime");
        // And the connection was closed.
        assert_eq!(client.read(&mut buf).map_err(|e| e.kind()), Ok(0));
    }
}
