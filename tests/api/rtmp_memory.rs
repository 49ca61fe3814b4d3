//! The real server's memory under 500 idle RTMP connections, and under 500 connections that
//! each declare a 16 MiB message and send a megabyte of it (issue 21). Prints the server's peak
//! RSS (`VmHWM`) and asserts a bound. `SLUICE_TEST_BIN` runs the same against another build.
//!
//! Measured on a 2-core machine (debug builds, 42 MiB idle), before the bounded chunk reader
//! (959e72a, through `SLUICE_TEST_BIN`) and after: 500 idle connections, peak 53 → 51 MiB;
//! 500 × 16 MiB headers with 1 MB each, peak 1226 → 80 MiB (the old build fails the bound).

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::{wait_ready, Killed};

/// `VmHWM` and `VmRSS` of process `pid`, in MiB.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            / 1024
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// 500 connections, 16 from each of 32 loopback addresses `127.0.<net>.x` (under every
/// per-address cap).
async fn connect_500(addr: SocketAddr, net: u8) -> Vec<TcpStream> {
    let mut out = Vec::new();
    for host in 0..32 {
        for _ in 0..16 {
            if out.len() == 500 {
                return out;
            }
            let socket = TcpSocket::new_v4().expect("socket");
            socket.bind(format!("127.0.{net}.{}:0", host + 10).parse().expect("addr")).expect("bind");
            out.push(socket.connect(addr).await.expect("connect"));
        }
    }
    out
}

/// A completed handshake's worth of bytes (the server answers; nobody reads it), a chunk size
/// as large as a message, and the header of a 16 MiB video message on chunk stream 4 with a
/// megabyte of its payload.
fn big_message_start() -> Vec<u8> {
    let mut out = vec![3u8];
    out.extend(vec![0u8; 1536]); // C1
    out.extend(vec![0u8; 1536]); // C2
                                 // SetChunkSize 0xFFFFFF, so the megabyte that follows is one chunk's payload.
    out.extend([0x02, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0x00, 0xFF, 0xFF, 0xFF]);
    out.extend([0x04, 0, 0, 0, 0xFF, 0xFF, 0xFF, 9, 1, 0, 0, 0]);
    out.extend(vec![0u8; 1000 * 1024]);
    out
}

/// Connects from 127.0.0.1 and waits for the server's first handshake bytes.
async fn answers_a_handshake(addr: SocketAddr) {
    let mut c = TcpStream::connect(addr).await.expect("connect");
    let mut c0c1 = vec![3u8];
    c0c1.extend(vec![0u8; 1536]);
    c.write_all(&c0c1).await.expect("write");
    let mut b = [0u8; 1];
    let n =
        tokio::time::timeout(Duration::from_secs(30), c.read(&mut b)).await.expect("answer").expect("read");
    assert_eq!(n, 1, "the server answers a handshake");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_memory_under_500_rtmp_connections() {
    let bin = std::env::var("SLUICE_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sluice").to_string());
    let dir = tempfile::tempdir().unwrap();
    let free = crate::support::free_port;
    let (port, rtmp) = (free(), free());
    let child = std::process::Command::new(&bin)
        .arg("serve")
        .env("SLUICE_DATA_DIR", dir.path())
        .env("SLUICE_HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env("SLUICE_RTMP_ADDR", format!("127.0.0.1:{rtmp}"))
        .env("RUST_LOG", "error")
        .env_remove("SLUICE_CONFIG")
        .stdout(Stdio::null())
        .spawn()
        .expect("sluice serve");
    let server = Killed(child);
    let pid = server.0.id();
    wait_ready(port).await;
    let addr: SocketAddr = format!("127.0.0.1:{rtmp}").parse().unwrap();
    let (_, base) = memory(pid);

    let idle = connect_500(addr, 2).await;
    // Accepts run in order: once a later connection gets its handshake answered, the 500 before
    // it have been taken in.
    answers_a_handshake(addr).await;
    let (idle_peak, idle_rss) = memory(pid);
    drop(idle);

    let mut big = connect_500(addr, 3).await;
    let start = big_message_start();
    for c in big.iter_mut() {
        let _ = tokio::time::timeout(Duration::from_millis(200), c.write_all(&start)).await;
    }
    answers_a_handshake(addr).await;
    let big_rss = memory(pid).1;
    // The peak is read once the server has let go of all of them (at once when it refuses the
    // header; after the 10-s start deadline when it buffers).
    let reads = big.iter_mut().map(|c| async move {
        let mut b = vec![0u8; 16 * 1024];
        loop {
            match tokio::time::timeout(Duration::from_secs(30), c.read(&mut b)).await {
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    });
    let closed = futures_util::future::join_all(reads).await.into_iter().filter(|&c| c).count();
    assert_eq!(closed, 500, "the server closes every connection that never publishes");
    let big_peak = memory(pid).0;
    drop(big);
    eprintln!(
        "rtmp memory ({bin}; before the change: 53 and 1226 MiB peaks): base {base} MiB; 500 idle connections: RSS {idle_rss} MiB, peak {idle_peak} MiB; \
         500 × 16 MiB headers with 1 MB each: RSS {big_rss} MiB, peak {big_peak} MiB"
    );
    assert!(idle_peak < base + 200, "500 idle connections took {} MiB", idle_peak - base);
    assert!(big_peak < base + 300, "500 large headers took {} MiB", big_peak - base);
}
