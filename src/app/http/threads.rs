//! The HTTP threads: one single-threaded tokio runtime per core, for the life of the process,
//! each serving the connections handed to it, and [`OnRuntime`], which runs the API's handlers
//! back on the main runtime.
//!
//! Why: a playlist reload is a few microseconds of work, and on tokio's work-stealing runtime a
//! good part of what it costs is the runtime's own: a worker that finds work wakes a parked one
//! to steal, tasks move between threads with their cache lines, and the two workers share one
//! I/O driver. A connection that stays on one thread, with its own I/O driver and timers, is
//! served with none of that (a bare hyper server measured 20 % less CPU an answer this way).
//! The connection's task (hyper, the metrics, the live media path) runs on its HTTP thread;
//! every other request's handler is spawned on the main runtime ([`OnRuntime`]), where the
//! API's background tasks, ingest's `block_in_place` and the database's connections belong.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use poem::http::StatusCode;
use poem::{Endpoint, IntoResponse, Request, Response};
use tokio::runtime::Handle;
use tokio_util::task::AbortOnDropHandle;

/// A connection that can move from the runtime that accepted it to the one that serves it:
/// packed off the first one's I/O driver, unpacked (inside the second) onto the second's.
pub trait Portable: Sized {
    type Packed: Send + 'static;
    fn pack(self) -> io::Result<Self::Packed>;
    /// Must be called inside the runtime that is to serve the connection.
    fn unpack(packed: Self::Packed) -> io::Result<Self>;
}

impl Portable for tokio::net::TcpStream {
    type Packed = std::net::TcpStream;

    fn pack(self) -> io::Result<std::net::TcpStream> {
        // Still non-blocking, as `from_std` wants it.
        self.into_std()
    }

    fn unpack(packed: std::net::TcpStream) -> io::Result<Self> {
        tokio::net::TcpStream::from_std(packed)
    }
}

impl<IO: Portable> Portable for crate::tls::Handshake<IO> {
    type Packed = (Arc<rustls::ServerConfig>, IO::Packed);

    /// Only before the handshake began (as the acceptor hands it over).
    fn pack(self) -> io::Result<Self::Packed> {
        match self {
            crate::tls::Handshake::Start(config, io) => Ok((config, io.pack()?)),
            _ => Err(io::Error::other("the TLS handshake has begun")),
        }
    }

    fn unpack((config, packed): Self::Packed) -> io::Result<Self> {
        Ok(crate::tls::Handshake::Start(config, IO::unpack(packed)?))
    }
}

/// The HTTP threads' runtimes, started on first use: as many as the machine has cores. Empty
/// when the threads could not be started (then connections are served on the caller's
/// runtime, as before there were HTTP threads).
fn runtimes() -> &'static [Handle] {
    static RUNTIMES: OnceLock<Vec<Handle>> = OnceLock::new();
    RUNTIMES.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut handles = Vec::with_capacity(cores);
        for i in 0..cores {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::warn!(error = %e, "no HTTP thread runtime; serving on the main runtime");
                    return Vec::new();
                }
            };
            let handle = rt.handle().clone();
            let started = std::thread::Builder::new()
                .name(format!("sluice-http-{i}"))
                .spawn(move || rt.block_on(std::future::pending::<()>()));
            if let Err(e) = started {
                tracing::warn!(error = %e, "no HTTP thread; serving on the main runtime");
                return Vec::new();
            }
            handles.push(handle);
        }
        handles
    })
}

/// Spawns `serve` with the connection `io` on the next HTTP thread in turn, with `io` moved
/// onto that thread's runtime; on the current runtime where there are no HTTP threads.
pub fn spawn_connection<Io, F, Fut>(io: Io, serve: F)
where
    Io: Portable + Send + 'static,
    F: FnOnce(Io) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let all = runtimes();
    let Some(rt) = all.get(NEXT.fetch_add(1, Ordering::Relaxed) % all.len().max(1)) else {
        tokio::spawn(serve(io));
        return;
    };
    let packed = match io.pack() {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(error = %e, "an accepted connection could not be handed over");
            return;
        }
    };
    rt.spawn(async move {
        match Io::unpack(packed) {
            Ok(io) => serve(io).await,
            Err(e) => tracing::debug!(error = %e, "an accepted connection could not be taken over"),
        }
    });
}

/// Runs `inner` on `runtime`: the handler of a request that came in on an HTTP thread. If the
/// request is dropped (its client went away), its handler is aborted, as it would be had it
/// run on the connection's task; a handler that panics answers 500.
pub struct OnRuntime<E> {
    runtime: Handle,
    inner: Arc<E>,
}

impl<E> OnRuntime<E> {
    pub fn new(runtime: Handle, inner: E) -> Self {
        OnRuntime { runtime, inner: Arc::new(inner) }
    }
}

impl<E: Endpoint + 'static> Endpoint for OnRuntime<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        let inner = self.inner.clone();
        // Aborted when dropped: a request dropped before its answer takes its handler with it.
        let task = AbortOnDropHandle::new(self.runtime.spawn(async move { inner.get_response(req).await }));
        Ok(match task.await {
            Ok(response) => response,
            Err(e) => {
                if e.is_panic() {
                    tracing::error!("a request handler panicked");
                }
                (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections are served on the HTTP threads, in turn, with their socket working there.
    #[tokio::test]
    async fn connections_are_served_on_the_http_threads() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut seen = std::collections::BTreeSet::new();
        // In turn, so every thread comes up within a few connections (other tests take turns
        // too, in parallel).
        for _ in 0..64 {
            let mut client = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let (io, _) = listener.accept().await.expect("accept");
            let (tx, rx) = tokio::sync::oneshot::channel();
            spawn_connection(io, move |mut io: tokio::net::TcpStream| async move {
                let mut b = [0u8; 4];
                if io.read_exact(&mut b).await.is_ok() && io.write_all(&b).await.is_ok() {
                    let _ = tx.send(std::thread::current().name().map(str::to_owned));
                }
            });
            client.write_all(b"ping").await.expect("write");
            let mut b = [0u8; 4];
            client.read_exact(&mut b).await.expect("echo");
            assert_eq!(&b, b"ping");
            let name = rx.await.expect("served").expect("a named thread");
            assert!(name.starts_with("sluice-http-"), "served on {name}");
            seen.insert(name);
            if seen.len() == runtimes().len() {
                return;
            }
        }
        panic!("only {seen:?} of {} HTTP threads served", runtimes().len());
    }

    /// The handler runs on the given runtime; a panic answers 500; a dropped request aborts it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn handlers_run_on_the_given_runtime_and_end_with_their_request() {
        let main = Handle::current();
        let ep = OnRuntime::new(
            main.clone(),
            poem::endpoint::make(|req: Request| async move {
                match req.uri().path() {
                    "/panic" => panic!("handler panic"),
                    "/hang" => std::future::pending::<()>().await,
                    _ => {}
                }
                std::thread::current().name().unwrap_or_default().to_owned()
            }),
        );
        let (tx, rx) = tokio::sync::oneshot::channel();
        runtimes()[0].spawn(async move {
            let get = |p: &str| Request::builder().uri(p.parse().expect("uri")).finish();
            let ran = ep.get_response(get("/")).await.into_body().into_string().await.expect("body");
            let panicked = ep.get_response(get("/panic")).await.status();
            let hang = tokio::time::timeout(std::time::Duration::from_millis(100), ep.call(get("/hang")));
            let timed_out = hang.await.is_err();
            let _ = tx.send((ran, panicked, timed_out, std::thread::current().name().map(str::to_owned)));
        });
        let (ran, panicked, timed_out, caller) = rx.await.expect("answers");
        assert!(caller.is_some_and(|c| c.starts_with("sluice-http-")));
        assert!(!ran.starts_with("sluice-http-"), "handler ran on {ran}");
        assert_eq!(panicked, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(timed_out);
        // The hung handler was aborted with its request: the main runtime has no task left.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while main.metrics().num_alive_tasks() > 0 {
            assert!(std::time::Instant::now() < deadline, "the dropped handler is still alive");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
