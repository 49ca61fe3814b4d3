//! Where this process is reached: the URLs handed out in answers, events and ingest URLs. They
//! come from the settings, with the bound port filled in when a listener was asked for port 0
//! (tests), which is known only once the listener is up.

use std::net::SocketAddr;
use std::sync::OnceLock;

use crate::config::Settings;

pub struct Endpoints {
    public_url: String,
    playback_base: String,
    http_addr: SocketAddr,
    rtmp_addr: SocketAddr,
    http_bound: OnceLock<SocketAddr>,
    rtmp_bound: OnceLock<SocketAddr>,
    /// Set when RTMPS listens (TLS configured).
    rtmps_bound: OnceLock<SocketAddr>,
    rtsp_addr: SocketAddr,
    rtsp_bound: OnceLock<SocketAddr>,
    srt_addr: SocketAddr,
    srt_bound: OnceLock<SocketAddr>,
}

impl Endpoints {
    pub fn new(settings: &Settings) -> Endpoints {
        Endpoints {
            public_url: settings.public_url.clone(),
            playback_base: settings.playback_base.clone(),
            http_addr: settings.http_addr,
            rtmp_addr: settings.rtmp_addr,
            http_bound: OnceLock::new(),
            rtmp_bound: OnceLock::new(),
            rtmps_bound: OnceLock::new(),
            rtsp_addr: settings.rtsp_addr,
            rtsp_bound: OnceLock::new(),
            srt_addr: settings.srt_addr,
            srt_bound: OnceLock::new(),
        }
    }

    /// Records where HTTP listens (once).
    pub fn http_bound(&self, addr: SocketAddr) {
        let _ = self.http_bound.set(addr);
    }

    /// Records where RTMP ingest listens (once).
    pub fn rtmp_bound(&self, addr: SocketAddr) {
        let _ = self.rtmp_bound.set(addr);
    }

    /// Records where RTMPS ingest listens (once).
    pub fn rtmps_bound(&self, addr: SocketAddr) {
        let _ = self.rtmps_bound.set(addr);
    }

    /// Where RTMPS ingest listens, when it does.
    pub fn rtmps_addr(&self) -> Option<SocketAddr> {
        self.rtmps_bound.get().copied()
    }

    /// The ingest URL's scheme and port: `rtmps` and the RTMPS port when RTMPS listens (TLS is
    /// configured), else `rtmp` and the RTMP port (CONTRACT: Live media, RTMPS).
    pub fn ingest_scheme_port(&self) -> (&'static str, u16) {
        match self.rtmps_addr() {
            Some(a) => ("rtmps", a.port()),
            None => ("rtmp", self.rtmp_port()),
        }
    }

    /// Records where RTSP playback listens (once).
    pub fn rtsp_bound(&self, addr: SocketAddr) {
        let _ = self.rtsp_bound.set(addr);
    }

    /// The RTSP port handed out in playback URLs: the bound one once started.
    pub fn rtsp_port(&self) -> u16 {
        self.rtsp_bound.get().map_or(self.rtsp_addr.port(), |a| a.port())
    }

    /// Records where SRT ingest listens (once).
    pub fn srt_bound(&self, addr: SocketAddr) {
        let _ = self.srt_bound.set(addr);
    }

    /// Where SRT ingest listens (after it started).
    pub fn srt_addr(&self) -> Option<SocketAddr> {
        self.srt_bound.get().copied()
    }

    /// The SRT port handed out in `srtUrl`: the bound one once started.
    pub fn srt_port(&self) -> u16 {
        self.srt_addr().map_or(self.srt_addr.port(), |a| a.port())
    }

    /// Where RTMP ingest listens (after it started).
    pub fn rtmp_addr(&self) -> Option<SocketAddr> {
        self.rtmp_bound.get().copied()
    }

    /// The RTMP port handed out in ingest URLs: the bound one once started (port 0 picks one).
    pub fn rtmp_port(&self) -> u16 {
        self.rtmp_addr().map_or(self.rtmp_addr.port(), |a| a.port())
    }

    /// `{base_url}`, with the bound port when HTTP was asked to bind port 0 (tests).
    pub fn public_url(&self) -> String {
        self.with_bound_port(&self.public_url)
    }

    /// `{playback_base}`, with the bound port when HTTP was asked to bind port 0 (tests).
    pub fn playback_base(&self) -> String {
        self.with_bound_port(&self.playback_base)
    }

    fn with_bound_port(&self, url: &str) -> String {
        match self.http_bound.get() {
            Some(bound) if self.http_addr.port() == 0 => {
                url.replacen(&self.http_addr.to_string(), &bound.to_string(), 1)
            }
            _ => url.to_string(),
        }
    }
}
