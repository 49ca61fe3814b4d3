//! The HTTP listener against clients that hold connections without asking for anything: a
//! connection with no request in flight for 10 s is closed (`src/app/http.rs`, `IDLE`),
//! whatever it is doing meanwhile, while the server goes on answering everyone else.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{spawn_app, Backend};

/// The idle limit the server is built with.
const IDLE: Duration = Duration::from_secs(10);

/// Reads `sock` until the server closes it (a read of 0 bytes, or an error) and returns when
/// that happened; panics if it is still open after `limit`.
async fn closed_after(mut sock: impl AsyncReadExt + Unpin, limit: Duration, what: &str) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = limit.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, sock.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => continue, // the answer to its own request
            Err(_) => panic!("{what}: still open after {limit:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_a_request_in_flight_are_closed_and_others_are_served() {
    let t = spawn_app(Backend::Sqlite).await;
    let addr: SocketAddr = t.base.trim_start_matches("http://").parse().expect("the server's address");
    let connect = || async { TcpStream::connect(addr).await.expect("connect") };

    // Silent: connects and sends nothing, not even the bytes that tell HTTP/1.1 from HTTP/2.
    let silent = connect().await;
    // HTTP/2: the connection preface, then nothing.
    let mut h2 = connect().await;
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.expect("preface");
    // Keep-alive: one request answered, then nothing.
    let mut kept = connect().await;
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n").await.expect("request");
    let mut answer = [0u8; 12];
    kept.read_exact(&mut answer).await.expect("the answer");
    assert_eq!(&answer, b"HTTP/1.1 200");
    // Slowloris: a request head dripped a byte every 200 ms, never finished.
    let (slow_read, mut slow_write) = connect().await.into_split();
    let drip = tokio::spawn(async move {
        let head = b"GET /healthz HTTP/1.1\r\nHost: sluice\r\nX-Slow: ";
        for b in head.iter().chain(std::iter::repeat(&b'a')) {
            if slow_write.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let opened = Instant::now();

    // Meanwhile everyone else is answered, on fresh connections and on a kept one that asks
    // again every 2 s (well inside the idle limit, so it is never cut).
    let client = reqwest::Client::new();
    let watcher = {
        let (client, url) = (client.clone(), t.url("/healthz"));
        tokio::spawn(async move {
            let mut answered = 0;
            while opened.elapsed() < IDLE + Duration::from_secs(3) {
                let r = client.get(&url).send().await.expect("healthz while idle connections are held");
                assert_eq!(r.status(), 200);
                answered += 1;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            answered
        })
    };

    let limit = IDLE + Duration::from_secs(4);
    let (silent, h2, kept, slow) = tokio::join!(
        closed_after(silent, limit, "silent"),
        closed_after(h2, limit, "HTTP/2 preface only"),
        closed_after(kept, limit, "idle keep-alive"),
        closed_after(slow_read, limit, "dripped head"),
    );
    for (what, after) in
        [("silent", silent), ("HTTP/2 preface only", h2), ("idle keep-alive", kept), ("dripped head", slow)]
    {
        assert!(
            after >= IDLE - Duration::from_secs(1),
            "{what}: closed after {after:?}, before the idle limit"
        );
        println!("{what}: closed {:.1} s after it opened", after.as_secs_f64());
    }
    drip.await.expect("the drip ends once its connection is closed");
    let answered = watcher.await.expect("watcher");
    assert!(answered >= 6, "{answered} answers");
    // The kept client connection still works: it asked every 2 s and was never idle for 10 s.
    let r = client.get(t.url("/healthz")).send().await.expect("healthz");
    assert_eq!(r.status(), 200);
}
