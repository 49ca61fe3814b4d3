//! The listeners of `App::start`: HTTP (HTTPS with TLS), and the media ones, RTMP (and RTMPS
//! with TLS), SRT and RTSP, each bound on its configured address with the bound one recorded in
//! the endpoints.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use poem::endpoint::BoxEndpoint;
use poem::listener::{Acceptor, Listener, TcpAcceptor, TcpListener};
use poem::Response;

use super::App;
use crate::media::rtmp::server::Ingest;
use crate::tls::{HttpsAcceptor, Tls};

/// The HTTP listener, plain or TLS, served by its own type and not through poem's boxed
/// acceptor: that one splits every connection into halves behind a lock and hides vectored
/// writes from hyper, which then copies each response body into its buffer before writing it.
pub(super) enum Http {
    Plain(TcpAcceptor),
    Tls(HttpsAcceptor<TcpAcceptor>),
}

impl Http {
    /// Binds `addr`; returns the listener and the bound address (port 0 picks a free port).
    pub(super) async fn bind(addr: SocketAddr, tls: Option<&Tls>) -> anyhow::Result<(Http, SocketAddr)> {
        let plain =
            TcpListener::bind(addr).into_acceptor().await.with_context(|| format!("binding {addr}"))?;
        let bound = plain
            .local_addr()
            .first()
            .and_then(|a| a.as_socket_addr().copied())
            .context("listener has no address")?;
        let http = match tls {
            Some(tls) => Http::Tls(tls.https(plain)),
            None => Http::Plain(plain),
        };
        Ok((http, bound))
    }

    /// Serves `routes` until `shutdown` resolves (then 10 s for requests in flight).
    pub(super) fn serve(
        self,
        routes: BoxEndpoint<'static, Response>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> tokio::task::JoinHandle<std::io::Result<()>> {
        async fn run(
            acceptor: impl Acceptor + 'static,
            routes: BoxEndpoint<'static, Response>,
            shutdown: impl Future<Output = ()> + Send + 'static,
        ) -> std::io::Result<()> {
            poem::Server::new_with_acceptor(acceptor)
                .run_with_graceful_shutdown(routes, shutdown, Some(Duration::from_secs(10)))
                .await
        }
        match self {
            Http::Plain(acceptor) => tokio::spawn(run(acceptor, routes, shutdown)),
            Http::Tls(acceptor) => tokio::spawn(run(acceptor, routes, shutdown)),
        }
    }
}

impl App {
    /// Binds RTMP (RTMPS too when `tls` is given), SRT and RTSP. RTMP, RTMPS and SRT share one
    /// set of connection caps.
    pub(super) async fn start_media_listeners(self: &Arc<Self>, tls: Option<Tls>) -> anyhow::Result<()> {
        let limits = Arc::new(crate::media::limits::Limits::new(self.settings.rtmp_max_per_ip as usize));
        let ingest = Arc::new(Ingest {
            limits: limits.clone(),
            db: self.db.clone(),
            master_key: self.master_key.clone(),
            streams: self.streams.clone(),
            outputs: self.outputs.clone(),
            challenges: Default::default(),
        });
        let rtmp = crate::media::rtmp::server::start(ingest.clone(), self.settings.rtmp_addr, None)
            .await
            .with_context(|| format!("binding RTMP on {}", self.settings.rtmp_addr))?;
        self.endpoints.rtmp_bound(rtmp);
        if let Some(tls) = tls {
            let addr = self.settings.rtmps_addr;
            let rtmps = crate::media::rtmp::server::start(ingest, addr, Some(tls))
                .await
                .with_context(|| format!("binding RTMPS on {addr}"))?;
            self.endpoints.rtmps_bound(rtmps);
        }
        self.start_srt(limits).await?;
        self.start_rtsp().await?;
        Ok(())
    }

    /// Starts SRT ingest on `SLUICE_SRT_ADDR`, under the same connection caps as RTMP.
    async fn start_srt(self: &Arc<Self>, limits: Arc<crate::media::limits::Limits>) -> anyhow::Result<()> {
        let srt = Arc::new(crate::media::srt::Srt::new(
            self.db.clone(),
            self.master_key.clone(),
            self.streams.clone(),
            self.outputs.clone(),
            limits,
        ));
        let (addr, runtime) = (self.settings.srt_addr, tokio::runtime::Handle::current());
        let server = tokio::task::spawn_blocking(move || crate::media::srt::start(srt, addr, runtime))
            .await?
            .with_context(|| format!("binding SRT on {addr}"))?;
        self.endpoints.srt_bound(server.addr);
        *self.srt.lock().unwrap_or_else(|p| p.into_inner()) = Some(server);
        Ok(())
    }

    /// Starts RTSP playback on `SLUICE_RTSP_ADDR`.
    async fn start_rtsp(self: &Arc<Self>) -> anyhow::Result<()> {
        let (addr, taps) = (self.settings.rtsp_addr, self.outputs.taps.clone());
        let authorize = crate::playback::rtsp_authorize(self.origin.clone());
        let runtime = tokio::runtime::Handle::current();
        let server =
            tokio::task::spawn_blocking(move || crate::media::rtsp::start(addr, taps, authorize, runtime))
                .await?
                .map_err(|e| anyhow::anyhow!(e))
                .with_context(|| format!("binding RTSP on {addr}"))?;
        self.endpoints.rtsp_bound(server.addr);
        *self.rtsp.lock().unwrap_or_else(|p| p.into_inner()) = Some(server);
        Ok(())
    }
}
