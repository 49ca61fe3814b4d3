//! TLS for the HTTP and RTMPS listeners (`SLUICE_TLS_CERT`, `SLUICE_TLS_KEY`): TLS 1.3 and 1.2
//! (rustls on ring). The certificate chain and key are read from their PEM files at start and
//! read again whenever either file's contents change, so a renewal (certbot, an ACME client, a
//! secret mount) takes effect without a restart. A pair that does not load (half written, a key
//! that does not match) leaves the previous pair in service and is logged once; every new
//! connection takes the pair in service when it arrives.
//!
//! A handshake has [`HANDSHAKE_TIMEOUT`]: a client that opens a connection and says nothing,
//! or speaks plain HTTP or RTMP to a TLS port, is closed and holds nothing.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use poem::http::uri::Scheme;
use poem::listener::Acceptor;
use poem::web::{LocalAddr, RemoteAddr};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

/// How long a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the files are read for a change.
const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// Why a certificate pair did not load.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {0}: {1}")]
    Read(PathBuf, io::Error),
    #[error("{0} holds no PEM certificate")]
    NoCertificate(PathBuf),
    #[error("{0}: {1}")]
    Pem(PathBuf, String),
    #[error("certificate and key: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The server configurations of one certificate pair.
struct Configs {
    /// For HTTPS: ALPN offers HTTP/2 and HTTP/1.1.
    https: Arc<ServerConfig>,
    /// For RTMPS: no ALPN.
    plain: Arc<ServerConfig>,
}

/// The certificate pair in service, kept current from its files. Clones share it.
#[derive(Clone)]
pub struct Tls {
    current: watch::Receiver<Arc<Configs>>,
    /// Changed pairs that did not load (and were not put in service).
    refused: Arc<AtomicU64>,
}

impl Tls {
    /// Loads the pair (an error names the file), then follows the files' changes until every
    /// clone of the returned value is dropped. Needs a tokio runtime.
    pub async fn load(cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let (cert, key) = (cert.to_path_buf(), key.to_path_buf());
        let (bytes, digest) = read_pair(&cert, &key).await?;
        let (tx, rx) = watch::channel(Arc::new(configs(&cert, &key, &bytes)?));
        let refused = Arc::new(AtomicU64::new(0));
        tokio::spawn(follow(tx, cert, key, digest, refused.clone()));
        Ok(Tls { current: rx, refused })
    }

    /// How many changed pairs did not load (each was logged and left out of service).
    pub fn refused_reloads(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Performs the server side of a handshake on `io` with the pair in service, for RTMPS.
    pub async fn accept<IO>(&self, io: IO) -> io::Result<tokio_rustls::server::TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let config = self.current.borrow().plain.clone();
        handshake(config, io).await
    }

    /// Wraps an HTTP acceptor (poem's `TcpListener`) so that it serves HTTPS.
    pub fn https<A: Acceptor>(&self, inner: A) -> HttpsAcceptor<A> {
        HttpsAcceptor { inner, tls: self.clone() }
    }
}

/// The server side of a handshake with `config`, within [`HANDSHAKE_TIMEOUT`].
async fn handshake<IO>(config: Arc<ServerConfig>, io: IO) -> io::Result<tokio_rustls::server::TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    tokio::time::timeout(HANDSHAKE_TIMEOUT, tokio_rustls::TlsAcceptor::from(config).accept(io))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))?
}

async fn read_pair(cert: &Path, key: &Path) -> Result<((Vec<u8>, Vec<u8>), [u8; 32]), TlsError> {
    let c = tokio::fs::read(cert).await.map_err(|e| TlsError::Read(cert.to_path_buf(), e))?;
    let k = tokio::fs::read(key).await.map_err(|e| TlsError::Read(key.to_path_buf(), e))?;
    let mut hash = Sha256::new();
    hash.update((c.len() as u64).to_be_bytes());
    hash.update(&c);
    hash.update(&k);
    Ok(((c, k), hash.finalize().into()))
}

fn configs(cert: &Path, key: &Path, (c, k): &(Vec<u8>, Vec<u8>)) -> Result<Configs, TlsError> {
    let chain = CertificateDer::pem_slice_iter(c)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem(cert.to_path_buf(), e.to_string()))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert.to_path_buf()));
    }
    let private =
        PrivateKeyDer::from_pem_slice(k).map_err(|e| TlsError::Pem(key.to_path_buf(), e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let plain = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(chain, private)?;
    let mut https = plain.clone();
    https.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Configs { https: Arc::new(https), plain: Arc::new(plain) })
}

/// Reads the files every [`RELOAD_EVERY`] and puts a changed pair in service.
async fn follow(
    tx: watch::Sender<Arc<Configs>>,
    cert: PathBuf,
    key: PathBuf,
    mut seen: [u8; 32],
    refused: Arc<AtomicU64>,
) {
    let mut tick = tokio::time::interval(RELOAD_EVERY);
    loop {
        tick.tick().await;
        if tx.is_closed() {
            return;
        }
        let (bytes, digest) = match read_pair(&cert, &key).await {
            Ok(read) => read,
            // A file being replaced may be missing for a moment; the next tick reads it again.
            Err(e) => {
                tracing::debug!(error = %e, "TLS files not readable now");
                continue;
            }
        };
        if digest == seen {
            continue;
        }
        seen = digest;
        match configs(&cert, &key, &bytes) {
            Ok(new) => {
                tx.send_replace(Arc::new(new));
                tracing::info!(cert = %cert.display(), "TLS certificate reloaded");
            }
            Err(e) => {
                refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "TLS files changed but do not load; the previous certificate stays")
            }
        }
    }
}

/// [`Tls::https`]: accepts TCP connections and hands them to the HTTP server at once, with the
/// handshake done on the connection's own task (a slow handshake holds up no one else).
pub struct HttpsAcceptor<A> {
    inner: A,
    tls: Tls,
}

impl<A: Acceptor> Acceptor for HttpsAcceptor<A> {
    type Io = Handshake<A::Io>;

    fn local_addr(&self) -> Vec<LocalAddr> {
        self.inner.local_addr()
    }

    async fn accept(&mut self) -> io::Result<(Self::Io, LocalAddr, RemoteAddr, Scheme)> {
        let (io, local, remote, _) = self.inner.accept().await?;
        let config = self.tls.current.borrow().https.clone();
        Ok((Handshake::Start(config, io), local, remote, Scheme::HTTPS))
    }
}

/// A server-side TLS stream whose handshake begins and completes on first use (until then the
/// accepted connection can still be handed to another thread: `app::http`).
pub enum Handshake<IO> {
    Start(Arc<ServerConfig>, IO),
    Pending(BoxFuture<'static, io::Result<tokio_rustls::server::TlsStream<IO>>>),
    Ready(Box<tokio_rustls::server::TlsStream<IO>>),
    Failed,
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> Handshake<IO> {
    /// Drives the handshake; `Ready(Ok)` once the stream is usable.
    fn poll_ready(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<&mut tokio_rustls::server::TlsStream<IO>>> {
        loop {
            match self {
                Handshake::Start(..) => {
                    if let Handshake::Start(config, io) = std::mem::replace(self, Handshake::Failed) {
                        *self = Handshake::Pending(handshake(config, io).boxed());
                    }
                }
                Handshake::Pending(f) => match f.poll_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(s)) => *self = Handshake::Ready(Box::new(s)),
                    Poll::Ready(Err(e)) => {
                        *self = Handshake::Failed;
                        return Poll::Ready(Err(e));
                    }
                },
                Handshake::Ready(s) => return Poll::Ready(Ok(s)),
                Handshake::Failed => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "TLS handshake failed",
                    )))
                }
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncRead for Handshake<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().poll_ready(cx) {
            Poll::Ready(Ok(s)) => Pin::new(s).poll_read(cx, buf),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncWrite for Handshake<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut().poll_ready(cx) {
            Poll::Ready(Ok(s)) => Pin::new(s).poll_write(cx, buf),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().poll_ready(cx) {
            Poll::Ready(Ok(s)) => Pin::new(s).poll_flush(cx),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().poll_ready(cx) {
            Poll::Ready(Ok(s)) => Pin::new(s).poll_shutdown(cx),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Passed on, so that hyper hands a response's head and body over without first copying
    /// them into one buffer (rustls takes the pieces into its own records either way).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().poll_ready(cx) {
            Poll::Ready(Ok(s)) => Pin::new(s).poll_write_vectored(cx, bufs),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Asked before the handshake is done: a rustls stream always takes vectored writes.
    fn is_write_vectored(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        let ok = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
            .args(["-days", "1", "-subj", "/CN=localhost", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl runs")
            .status
            .success();
        assert!(ok);
        (cert, key)
    }

    #[tokio::test]
    async fn a_changed_pair_that_does_not_load_leaves_the_last_good_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = self_signed(dir.path(), "a");
        assert!(matches!(Tls::load(&cert, &dir.path().join("missing")).await, Err(TlsError::Read(..))));
        assert!(matches!(Tls::load(&key, &key).await, Err(TlsError::NoCertificate(_))));
        let (_, other_key) = self_signed(dir.path(), "b");
        assert!(matches!(Tls::load(&cert, &other_key).await, Err(TlsError::Rustls(_))), "mismatched key");

        let tls = Tls::load(&cert, &key).await.expect("loads");
        let mut current = tls.current.clone();
        let first = current.borrow_and_update().clone();
        std::fs::copy(&other_key, &key).expect("copy");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tls.refused_reloads() == 0 {
            assert!(tokio::time::Instant::now() < deadline, "the bad pair is noticed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!current.has_changed().expect("sender alive"), "the bad pair is not put in service");
        assert!(Arc::ptr_eq(&first, &current.borrow()));

        // The right key again: a new pair in service.
        let (new_cert, new_key) = self_signed(dir.path(), "c");
        std::fs::copy(&new_key, &key).expect("copy");
        std::fs::copy(&new_cert, &cert).expect("copy");
        tokio::time::timeout(Duration::from_secs(10), current.changed())
            .await
            .expect("reloaded")
            .expect("alive");
    }
}
