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
//! streams per connection are capped at hyper's 200 (poem lifted the cap).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use poem::listener::Acceptor;
use poem::{Endpoint, Response};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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
    E: Endpoint<Output = Response> + 'static,
{
    let ep = Arc::new(ep);
    let stop = CancellationToken::new();
    let hard = CancellationToken::new();
    // Every connection holds a sender; `recv` returns `None` once all have dropped theirs.
    let (alive, mut gone) = mpsc::channel::<Infallible>(1);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = acceptor.accept() => match accepted {
                Ok((io, local, remote, scheme)) => {
                    let (ep, alive) = (ep.clone(), alive.clone());
                    let (stop, hard) = (stop.child_token(), hard.clone());
                    tokio::spawn(async move {
                        connection(io, (local, remote, scheme), ep, (stop, hard)).await;
                        drop(alive);
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
    drop(alive);
    stop.cancel();
    tracing::info!(grace_seconds = grace.as_secs_f32(), "HTTP server stopping: letting open requests finish");
    let closer = hard.clone();
    let timer = tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        closer.cancel();
    });
    // Only ends once every connection task has dropped its sender.
    let _ = gone.recv().await;
    timer.abort();
    tracing::info!("HTTP server stopped");
    Ok(())
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
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let ep = ep.clone();
        let req = poem::Request::from((req, local.clone(), remote.clone(), scheme.clone()));
        async move { Ok::<_, Infallible>(hyper::Response::from(ep.get_response(req).await)) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_pending_accept_reset_streams(H2_MAX_PENDING_RESETS)
        .max_header_list_size(H2_MAX_HEADER_LIST);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        biased;
        _ = conn.as_mut() => return,
        _ = stop.cancelled() => {}
    }
    conn.as_mut().graceful_shutdown();
    tokio::select! {
        _ = conn => {}
        _ = hard.cancelled() => {}
    }
}
