//! The media listeners of `App::start`: RTMP (and RTMPS with TLS), SRT and RTSP, each bound
//! on its configured address with the bound one recorded in the endpoints.

use std::sync::Arc;

use anyhow::Context;

use super::App;
use crate::media::ingest::rtmp::server::Ingest;

impl App {
    /// Binds RTMP (RTMPS too when `tls` is given), SRT and RTSP. RTMP, RTMPS and SRT share one
    /// set of connection caps.
    pub(super) async fn start_media_listeners(
        self: &Arc<Self>,
        tls: Option<crate::tls::Tls>,
    ) -> anyhow::Result<()> {
        let limits =
            Arc::new(crate::media::ingest::limits::Limits::new(self.settings.rtmp_max_per_ip as usize));
        let ingest = Arc::new(Ingest {
            limits: limits.clone(),
            db: self.db.clone(),
            master_key: self.master_key.clone(),
            streams: self.streams.clone(),
            outputs: self.outputs.clone(),
            challenges: Default::default(),
        });
        let rtmp = crate::media::ingest::rtmp::server::start(ingest.clone(), self.settings.rtmp_addr, None)
            .await
            .with_context(|| format!("binding RTMP on {}", self.settings.rtmp_addr))?;
        self.endpoints.rtmp_bound(rtmp);
        if let Some(tls) = tls {
            let addr = self.settings.rtmps_addr;
            let rtmps = crate::media::ingest::rtmp::server::start(ingest, addr, Some(tls))
                .await
                .with_context(|| format!("binding RTMPS on {addr}"))?;
            self.endpoints.rtmps_bound(rtmps);
        }
        self.start_srt(limits).await?;
        self.start_rtsp().await?;
        Ok(())
    }

    /// Starts SRT ingest on `SLUICE_SRT_ADDR`, under the same connection caps as RTMP.
    async fn start_srt(
        self: &Arc<Self>,
        limits: Arc<crate::media::ingest::limits::Limits>,
    ) -> anyhow::Result<()> {
        let srt = Arc::new(crate::media::ingest::srt::Srt::new(
            self.db.clone(),
            self.master_key.clone(),
            self.streams.clone(),
            self.outputs.clone(),
            limits,
        ));
        let (addr, runtime) = (self.settings.srt_addr, tokio::runtime::Handle::current());
        let server =
            tokio::task::spawn_blocking(move || crate::media::ingest::srt::start(srt, addr, runtime))
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
        let viewers = self.origin.viewers.clone();
        let server = tokio::task::spawn_blocking(move || {
            crate::media::egress::rtsp::start(addr, taps, authorize, viewers, runtime)
        })
        .await?
        .map_err(|e| anyhow::anyhow!(e))
        .with_context(|| format!("binding RTSP on {addr}"))?;
        self.endpoints.rtsp_bound(server.addr);
        *self.rtsp.lock().unwrap_or_else(|p| p.into_inner()) = Some(server);
        Ok(())
    }
}
