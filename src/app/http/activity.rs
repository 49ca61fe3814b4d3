//! What a connection does: its requests in flight (for the idle close) and whether its writes
//! wait for a client that stopped reading (for the stall close), read by `connection`.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Requests in flight on one connection, and when the last one ended (or the connection opened).
pub(super) struct Activity {
    opened: std::time::Instant,
    in_flight: AtomicUsize,
    /// Milliseconds from `opened` to the end of the last request.
    last_ms: AtomicU64,
    /// One more than the milliseconds from `opened` to when a write began to wait for the client
    /// to take bytes; 0 while writes go through.
    blocked_ms: AtomicU64,
}

/// Why a connection ends on its own.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Quiet {
    /// No request in flight for [`IDLE`].
    Idle,
    /// A response waited [`WRITE_STALL`] for its client to read.
    Stalled,
}

/// One request in flight: ends it when dropped (also when the client goes away mid-request).
pub(super) struct Busy(Arc<Activity>);

impl Activity {
    pub(super) fn new() -> Activity {
        Activity {
            opened: std::time::Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            blocked_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A write waits for the client (the first of a run of them sets the time).
    pub(super) fn write_blocked(&self) {
        if self.blocked_ms.load(Ordering::Relaxed) == 0 {
            let _ =
                self.blocked_ms.compare_exchange(0, self.now_ms() + 1, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// A write went through.
    pub(super) fn write_went(&self) {
        if self.blocked_ms.load(Ordering::Relaxed) != 0 {
            self.blocked_ms.store(0, Ordering::Release);
        }
    }

    /// How long writes have waited for the client, if they wait.
    pub(super) fn blocked_for(&self) -> Option<Duration> {
        match self.blocked_ms.load(Ordering::Acquire) {
            0 => None,
            since => Some(Duration::from_millis(self.now_ms().saturating_sub(since - 1))),
        }
    }

    /// Requests in flight now.
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    pub(super) fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// Resolves once no request has been in flight for `idle`, or writes have waited `stall`
    /// for the client to read.
    pub(super) async fn quiet(&self, idle: Duration, stall: Duration) -> Quiet {
        loop {
            // While a request is in flight, look again an `idle` later: a connection closes
            // between one and two `idle`s after its last request ended.
            let mut wait = idle;
            if self.in_flight.load(Ordering::Acquire) == 0 {
                let since = Duration::from_millis(self.last_ms.load(Ordering::Acquire));
                let quiet = self.opened.elapsed().saturating_sub(since);
                if quiet >= idle {
                    return Quiet::Idle;
                }
                wait = idle - quiet;
            } else if self.blocked_for().is_some_and(|blocked| blocked >= stall) {
                return Quiet::Stalled;
            }
            tokio::time::sleep(wait).await;
        }
    }
}

/// A connection's socket, telling its [`Activity`] when writes wait for the client.
pub(super) struct Watched<Io> {
    pub(super) io: Io,
    pub(super) activity: Arc<Activity>,
}

impl<Io> Watched<Io> {
    fn noted<T>(&self, poll: Poll<T>) -> Poll<T> {
        match poll {
            Poll::Pending => self.activity.write_blocked(),
            Poll::Ready(_) => self.activity.write_went(),
        }
        poll
    }
}

impl<Io: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<Io: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<Io> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        self.noted(poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.noted(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        self.noted(poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        let now = u64::try_from(a.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        a.last_ms.fetch_max(now, Ordering::AcqRel);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_counts_from_the_end_of_the_last_request_and_never_during_one() {
        let idle = Duration::from_millis(300);
        let a = Arc::new(Activity::new());
        // A request in flight for three idle periods: the connection is not idle.
        let busy = a.begin();
        assert!(
            tokio::time::timeout(idle * 3, a.quiet(idle, Duration::MAX)).await.is_err(),
            "idle during a request"
        );
        drop(busy);
        // From its end, idle after `idle` (and not much later).
        let ended = std::time::Instant::now();
        tokio::time::timeout(idle * 3, a.quiet(idle, Duration::MAX)).await.expect("idle after the request");
        let after = ended.elapsed();
        assert!(after >= idle - Duration::from_millis(5), "idle after {after:?}");
        // A fresh connection is idle `idle` after it opened.
        let opened = std::time::Instant::now();
        let b = Activity::new();
        tokio::time::timeout(idle * 3, b.quiet(idle, Duration::MAX)).await.expect("idle without requests");
        assert!(opened.elapsed() >= idle - Duration::from_millis(5));
    }

    #[tokio::test]
    async fn a_request_whose_writes_wait_too_long_is_stalled_and_one_that_writes_is_not() {
        let (idle, stall) = (Duration::from_millis(100), Duration::from_millis(250));
        let a = Arc::new(Activity::new());
        let _busy = a.begin();
        a.write_blocked();
        tokio::time::sleep(Duration::from_millis(50)).await;
        a.write_went();
        let quiet = tokio::time::timeout(idle * 5, a.quiet(idle, stall)).await;
        assert!(quiet.is_err(), "writes go through: neither idle nor stalled");
        a.write_blocked();
        let blocked = std::time::Instant::now();
        a.write_blocked(); // a later wait does not move the start
        let quiet = tokio::time::timeout(stall * 4, a.quiet(idle, stall)).await.expect("stalled");
        assert_eq!(quiet, Quiet::Stalled);
        assert!(blocked.elapsed() >= stall - Duration::from_millis(5));
    }
}
