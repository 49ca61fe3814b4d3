//! What tests and benches share: `spawn_app()` (the server in-process on a fresh database),
//! the real `sluice` binary as a child process, pushers and media fixtures, a headless hls.js
//! player, a webhook receiver and the OpenAPI contract check.
//!
//! Mounted at the crate root as `support` by `tests/api/main.rs` and by each bench
//! (`#[path = "../tests/support/mod.rs"] mod support;`), so paths inside it (and in the
//! `both_backends!` macro) are `crate::support::…`. Each binary uses a part of it.

#![allow(dead_code, unused_imports, unused_macros)]

pub mod app;
pub mod browser;
pub mod contract;
pub mod llhls_check;
pub mod media;
pub mod player;
pub mod process;
pub mod proxy;
pub mod receiver;
pub mod webrtc;

pub use app::*;
pub use media::*;
pub use process::*;

use std::time::{Duration, Instant};

/// The part a player blocks on next in a media playlist: (media sequence number of the open
/// segment, its next part index), counting the segments a delta update skipped.
pub fn next_part(playlist: &str) -> Option<(u64, u64)> {
    let mut msn: u64 =
        playlist.lines().find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:")?.trim().parse().ok())?;
    msn += playlist
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-SKIP:SKIPPED-SEGMENTS="))
        .and_then(|v| v.split(',').next()?.parse::<u64>().ok())
        .unwrap_or(0);
    let mut parts = 0;
    for line in playlist.lines() {
        if line.starts_with("#EXTINF:") {
            msn += 1;
            parts = 0;
        } else if line.starts_with("#EXT-X-PART:") {
            parts += 1;
        }
    }
    Some((msn, parts))
}

/// Polls `check` until it returns `Some` or the deadline passes.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let until = Instant::now() + deadline;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A child process (a real `sluice serve`, a pusher, nginx) killed when dropped.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Killed {
    /// Waits for the child to exit on its own (a refused push).
    pub async fn exits(&mut self, within: Duration) {
        let until = Instant::now() + within;
        while self.0.try_wait().expect("wait").is_none() {
            assert!(Instant::now() < until, "the pusher did not give up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }

    /// Why `what` (this process) is not running any more, if it is not.
    pub fn exited(&mut self, what: &str) -> Option<String> {
        match self.0.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(format!("{what} exited ({status})")),
            Err(e) => Some(format!("{what}: {e}")),
        }
    }
}

/// A port free on 127.0.0.1 a moment ago (for a child process that must be told its port).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Serves `routes` on 127.0.0.1:0 until the returned sender is dropped; returns the address.
pub async fn serve_loopback(
    routes: impl poem::Endpoint + 'static,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    use poem::listener::{Acceptor, Listener, TcpListener};
    let acceptor = TcpListener::bind("127.0.0.1:0").into_acceptor().await.expect("loopback listener");
    let addr = *acceptor.local_addr()[0].as_socket_addr().expect("socket address");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = poem::Server::new_with_acceptor(acceptor)
            .run_with_graceful_shutdown(
                routes,
                async move {
                    let _ = rx.await;
                },
                Some(Duration::from_secs(1)),
            )
            .await;
    });
    (addr, tx)
}
