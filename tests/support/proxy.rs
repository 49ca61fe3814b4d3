//! A TCP proxy a test can cut, freeze and restore: what stands between `sluice serve` and a
//! dependency (Postgres, the S3 server) when the test plays that dependency failing.
//! - [`Mode::Open`]: bytes flow both ways.
//! - [`Mode::Refuse`]: every open connection is closed, and every new one as soon as it is
//!   accepted (the dependency is down).
//! - [`Mode::Hang`]: connections stay open and new ones are accepted, but no byte moves either
//!   way until the mode changes (the dependency hangs: nothing fails, nothing answers). Back to
//!   `Open`, what was held moves on.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Open,
    Refuse,
    Hang,
}

/// The proxy: listens on 127.0.0.1 (a free port) for as long as it lives.
pub struct Proxy {
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Closes every connection still open.
        self.mode.send_replace(Mode::Refuse);
    }
}

impl Proxy {
    /// Proxies to `upstream`, open.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy listener");
        let addr = listener.local_addr().expect("proxy address");
        let (mode, watching) = watch::channel(Mode::Open);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                let mode = watching.clone();
                tokio::spawn(connection(client, upstream, mode));
            }
        });
        Proxy { addr, mode, accept }
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }
}

/// Waits until the mode lets bytes move: `true` when open, `false` when refused (or gone).
async fn open(mode: &mut watch::Receiver<Mode>) -> bool {
    loop {
        match *mode.borrow_and_update() {
            Mode::Open => return true,
            Mode::Refuse => return false,
            Mode::Hang => {}
        }
        if mode.changed().await.is_err() {
            return false;
        }
    }
}

async fn connection(client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    // Refused: closed at once. Hung: accepted, and then nothing is said.
    if !open(&mut mode).await {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let mut up = tokio::spawn(pump(client_read, server_write, mode.clone()));
    let mut down = tokio::spawn(pump(server_read, client_write, mode));
    // Either way closed closes both.
    tokio::select! {
        _ = &mut up => {}
        _ = &mut down => {}
    }
    up.abort();
    down.abort();
}

/// Moves bytes from `from` to `to` while the mode lets them; returns when either end closes or
/// the mode refuses.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if !open(&mut mode).await {
            return;
        }
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            // Hang or refuse: read nothing more until the mode says so.
            _ = mode.changed() => continue,
        };
        if !open(&mut mode).await {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
