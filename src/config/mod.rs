//! Layered settings: command-line flags, then `SLUICE_*` environment variables (clap reads both),
//! then an optional `sluice.toml`, then the defaults of `shared/CONTRACT.md` ("The program").
//!
//! Nothing here that can carry a secret (the database URL may hold a password) is printed whole:
//! `Debug` goes through [`redact_url`].

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Deserialize;

use crate::client_ip::TrustedProxies;

/// Flags shared by every subcommand. Each one can also be set by its environment variable.
#[derive(Args, Debug, Default, Clone)]
pub struct ConfigArgs {
    /// Settings file (TOML, same names as the flags with `_`); optional.
    #[arg(long, global = true, env = "SLUICE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where the embedded defaults keep their files.
    #[arg(long, global = true, env = "SLUICE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// `sqlite://…` or `postgres://…`.
    #[arg(long, global = true, env = "SLUICE_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// `file://…` or `s3://bucket?endpoint=…&region=…`.
    #[arg(long, global = true, env = "SLUICE_STORAGE_URL", hide_env_values = true)]
    pub storage_url: Option<String>,
    /// REST API, docs, playback origin, upload target, WHIP/WHEP.
    #[arg(long, global = true, env = "SLUICE_HTTP_ADDR")]
    pub http_addr: Option<SocketAddr>,
    /// RTMP ingest.
    #[arg(long, global = true, env = "SLUICE_RTMP_ADDR")]
    pub rtmp_addr: Option<SocketAddr>,
    /// RTMPS ingest (served only with a TLS certificate).
    #[arg(long, global = true, env = "SLUICE_RTMPS_ADDR")]
    pub rtmps_addr: Option<SocketAddr>,
    /// TLS certificate chain (PEM): the HTTP address serves HTTPS and RTMPS listens. Reloaded
    /// when the file changes.
    #[arg(long, global = true, env = "SLUICE_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, global = true, env = "SLUICE_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Connections one client IP may hold open to RTMP ingest at once, publishing ones included.
    #[arg(long, global = true, env = "SLUICE_RTMP_MAX_PER_IP")]
    pub rtmp_max_per_ip: Option<u32>,
    /// Bytes of recording segments the spool may keep while the object store does not take
    /// them (in `<data dir>/spool`; default 2 GiB).
    #[arg(long, global = true, env = "SLUICE_SPOOL_BYTES")]
    pub spool_bytes: Option<u64>,
    /// RTSP egress.
    #[arg(long, global = true, env = "SLUICE_RTSP_ADDR")]
    pub rtsp_addr: Option<SocketAddr>,
    /// SRT ingest (UDP).
    #[arg(long, global = true, env = "SLUICE_SRT_ADDR")]
    pub srt_addr: Option<SocketAddr>,
    /// UDP ports for WebRTC media, `first-last` (default 40000-40999).
    #[arg(long, global = true, env = "SLUICE_WEBRTC_UDP_PORTS")]
    pub webrtc_udp_ports: Option<String>,
    /// Address announced in ICE candidates when behind NAT.
    #[arg(long, global = true, env = "SLUICE_WEBRTC_PUBLIC_IP")]
    pub webrtc_public_ip: Option<IpAddr>,
    /// Comma-separated `stun:host:port` / `turn:user:pass@host:port` URLs.
    #[arg(long, global = true, env = "SLUICE_ICE_SERVERS", hide_env_values = true)]
    pub ice_servers: Option<String>,
    /// WHEP viewers one client IP may hold at once (default 10).
    #[arg(long, global = true, env = "SLUICE_WEBRTC_MAX_PER_IP")]
    pub webrtc_max_per_ip: Option<u32>,
    /// `{base_url}`: the address clients use to reach the API.
    #[arg(long, global = true, env = "SLUICE_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// `{playback_base}`: the address playback files are served from.
    #[arg(long, global = true, env = "SLUICE_PLAYBACK_BASE")]
    pub playback_base: Option<String>,
    /// `production` or `development`.
    #[arg(long, global = true, env = "SLUICE_MODE")]
    pub mode: Option<Mode>,
    /// Multiplies webhook retry delays (tests use e.g. 0.01).
    #[arg(long, global = true, env = "SLUICE_WEBHOOK_RETRY_SCALE")]
    pub webhook_retry_scale: Option<f64>,
    /// `text` or `json`.
    #[arg(long, global = true, env = "SLUICE_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Sustained requests per second allowed per API key.
    #[arg(long, global = true, env = "SLUICE_RATE_LIMIT_PER_KEY")]
    pub rate_limit_per_key: Option<f64>,
    /// Burst of requests allowed per API key.
    #[arg(long, global = true, env = "SLUICE_RATE_LIMIT_BURST")]
    pub rate_limit_burst: Option<u32>,
    /// Failed authentications allowed per client IP and minute.
    #[arg(long, global = true, env = "SLUICE_AUTH_FAILURES_PER_MIN")]
    pub auth_failures_per_min: Option<u32>,
    /// Comma-separated IPs/CIDRs of reverse proxies whose `X-Forwarded-For` is believed.
    #[arg(long, global = true, env = "SLUICE_TRUSTED_PROXIES")]
    pub trusted_proxies: Option<String>,
    /// Seconds without a push after which a stream is disabled (`no_input`); 0 = never.
    #[arg(long, global = true, env = "SLUICE_STREAM_IDLE_DISABLE")]
    pub stream_idle_disable: Option<u64>,
    /// LL-HLS part duration in milliseconds (200–1000; parts are whole frames, at least seven).
    #[arg(long, global = true, env = "SLUICE_LLHLS_PART_MS")]
    pub llhls_part_ms: Option<u32>,
    /// LL-HLS segment duration in milliseconds (1000–6000, at least three parts).
    #[arg(long, global = true, env = "SLUICE_LLHLS_SEGMENT_MS")]
    pub llhls_segment_ms: Option<u32>,
    /// Folder whose pipeline descriptions replace the built-in ones of `pipelines/`.
    #[arg(long, global = true, env = "SLUICE_PIPELINES_DIR")]
    pub pipelines_dir: Option<PathBuf>,
    /// Largest VOD source file accepted, in bytes (default 20 GiB).
    #[arg(long, global = true, env = "SLUICE_MAX_UPLOAD_BYTES")]
    pub max_upload_bytes: Option<u64>,
    /// Transcode jobs this process runs at once (default 1; 0 = none, the API only).
    #[arg(long, global = true, env = "SLUICE_TRANSCODE_WORKERS")]
    pub transcode_workers: Option<u32>,
    /// `on` meters live time against each project's credits (`sluice admin credits`).
    #[arg(long, global = true, env = "SLUICE_BILLING")]
    pub billing: Option<Billing>,
    /// The master key that wraps content keys (`drmEnabled`): 64 hex characters. Default: the
    /// key in `<data dir>/master.key`, created on first use. Processes sharing a database must
    /// share it.
    #[arg(long, global = true, env = "SLUICE_MASTER_KEY", hide_env_values = true)]
    pub master_key: Option<String>,
    /// The base URL other nodes reach this one at (live relay, WHEP): default
    /// `http://127.0.0.1:<HTTP port>`, right for nodes on one machine (docs/scale-out.md).
    #[arg(long, global = true, env = "SLUICE_INTERNAL_URL")]
    pub internal_url: Option<String>,
    /// Seconds without a heartbeat after which the other nodes take a node's work over.
    #[arg(long, global = true, env = "SLUICE_NODE_TIMEOUT")]
    pub node_timeout: Option<u64>,
    /// The operator's bearer for `/v1/admin/*` (unset: those answer 403).
    #[arg(long, global = true, env = "SLUICE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Production,
    Development,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `SLUICE_BILLING` (CONTRACT: Recording and credits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum Billing {
    #[default]
    Off,
    On,
}

impl Billing {
    pub fn as_str(self) -> &'static str {
        match self {
            Billing::Off => "off",
            Billing::On => "on",
        }
    }
}

/// LL-HLS part and segment durations (CONTRACT: Live media; chosen by `benches/live_latency`).
pub const DEFAULT_PART_MS: u32 = 200;
pub const DEFAULT_SEGMENT_MS: u32 = 2000;

/// The optional `sluice.toml`. Same names as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    database_url: Option<String>,
    storage_url: Option<String>,
    http_addr: Option<SocketAddr>,
    rtmp_addr: Option<SocketAddr>,
    rtmp_max_per_ip: Option<u32>,
    spool_bytes: Option<u64>,
    rtmps_addr: Option<SocketAddr>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    rtsp_addr: Option<SocketAddr>,
    srt_addr: Option<SocketAddr>,
    webrtc_udp_ports: Option<String>,
    webrtc_public_ip: Option<IpAddr>,
    ice_servers: Option<String>,
    webrtc_max_per_ip: Option<u32>,
    public_url: Option<String>,
    playback_base: Option<String>,
    mode: Option<Mode>,
    webhook_retry_scale: Option<f64>,
    log_format: Option<LogFormat>,
    rate_limit_per_key: Option<f64>,
    rate_limit_burst: Option<u32>,
    auth_failures_per_min: Option<u32>,
    trusted_proxies: Option<String>,
    stream_idle_disable: Option<u64>,
    llhls_part_ms: Option<u32>,
    llhls_segment_ms: Option<u32>,
    pipelines_dir: Option<PathBuf>,
    max_upload_bytes: Option<u64>,
    transcode_workers: Option<u32>,
    billing: Option<Billing>,
    master_key: Option<String>,
    internal_url: Option<String>,
    node_timeout: Option<u64>,
    admin_token: Option<String>,
}

/// A setting that cannot be used, said so that the operator can fix it (start-up).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// The resolved settings every part of Sluice reads.
#[derive(Clone)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub database_url: String,
    pub storage_url: String,
    pub http_addr: SocketAddr,
    pub rtmp_addr: SocketAddr,
    /// RTMP connections one client IP may hold at once.
    pub rtmp_max_per_ip: u32,
    /// `SLUICE_SPOOL_BYTES`: what the spool may hold ([`crate::storage::spool`]).
    pub spool_bytes: u64,
    /// RTMPS ingest; listens only when TLS is configured.
    pub rtmps_addr: SocketAddr,
    /// `SLUICE_TLS_CERT` and `SLUICE_TLS_KEY` (both or neither).
    pub tls: Option<TlsFiles>,
    pub rtsp_addr: SocketAddr,
    /// SRT ingest (UDP).
    pub srt_addr: SocketAddr,
    /// UDP ports WebRTC media may use, inclusive.
    pub webrtc_udp_ports: (u16, u16),
    pub webrtc_public_ip: Option<IpAddr>,
    /// STUN and TURN servers (TURN ones carry credentials: never logged).
    pub ice_servers: Vec<String>,
    /// WHEP viewers one client IP may hold at once.
    pub webrtc_max_per_ip: u32,
    pub public_url: String,
    pub playback_base: String,
    pub mode: Mode,
    pub webhook_retry_scale: f64,
    pub log_format: LogFormat,
    pub rate_limit_per_key: f64,
    pub rate_limit_burst: u32,
    pub auth_failures_per_min: u32,
    /// Only from these peers is `X-Forwarded-For` believed.
    pub trusted_proxies: TrustedProxies,
    /// Seconds without a push before a stream is disabled with `no_input`; 0 = never.
    pub stream_idle_disable: u64,
    pub llhls_part_ms: u32,
    pub llhls_segment_ms: u32,
    pub pipelines_dir: Option<PathBuf>,
    pub max_upload_bytes: u64,
    pub transcode_workers: u32,
    pub billing: Billing,
    /// Hex; `None`: the key file in the data dir.
    pub master_key: Option<String>,
    /// `SLUICE_INTERNAL_URL`; `None`: `http(s)://127.0.0.1:<bound HTTP port>`.
    pub internal_url: Option<String>,
    /// `SLUICE_NODE_TIMEOUT` seconds.
    pub node_timeout: u64,
    /// `SLUICE_ADMIN_TOKEN`: the operator's bearer for `/v1/admin/*`.
    pub admin_token: Option<String>,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("data_dir", &self.data_dir)
            .field("database_url", &redact_url(&self.database_url))
            .field("storage_url", &redact_url(&self.storage_url))
            .field("http_addr", &self.http_addr)
            .field("rtmp_addr", &self.rtmp_addr)
            .field("rtmp_max_per_ip", &self.rtmp_max_per_ip)
            .field("spool_bytes", &self.spool_bytes)
            .field("rtmps_addr", &self.rtmps_addr)
            .field("tls", &self.tls)
            .field("rtsp_addr", &self.rtsp_addr)
            .field("srt_addr", &self.srt_addr)
            .field("webrtc_udp_ports", &self.webrtc_udp_ports)
            .field("webrtc_public_ip", &self.webrtc_public_ip)
            .field("webrtc_max_per_ip", &self.webrtc_max_per_ip)
            .field("ice_servers", &self.ice_servers.iter().map(|s| redact_ice(s)).collect::<Vec<_>>())
            .field("public_url", &self.public_url)
            .field("playback_base", &self.playback_base)
            .field("mode", &self.mode)
            .field("webhook_retry_scale", &self.webhook_retry_scale)
            .field("rate_limit_per_key", &self.rate_limit_per_key)
            .field("rate_limit_burst", &self.rate_limit_burst)
            .field("auth_failures_per_min", &self.auth_failures_per_min)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("stream_idle_disable", &self.stream_idle_disable)
            .field("llhls_part_ms", &self.llhls_part_ms)
            .field("llhls_segment_ms", &self.llhls_segment_ms)
            .field("pipelines_dir", &self.pipelines_dir)
            .field("max_upload_bytes", &self.max_upload_bytes)
            .field("transcode_workers", &self.transcode_workers)
            .field("billing", &self.billing)
            .field("master_key", &self.master_key.as_ref().map(|_| "<set>"))
            .field("internal_url", &self.internal_url)
            .field("node_timeout", &self.node_timeout)
            .field("admin_token", &self.admin_token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl Settings {
    /// Resolves flags/env (already merged by clap) over the settings file over the defaults.
    pub fn resolve(args: &ConfigArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None if Path::new("sluice.toml").exists() => read_file(Path::new("sluice.toml"))?,
            None => FileConfig::default(),
        };
        let data_dir = pick(args.data_dir.clone(), file.data_dir, PathBuf::from("./data"));
        let http_addr = pick(args.http_addr, file.http_addr, ([127, 0, 0, 1], 8080).into());
        let tls = match (args.tls_cert.clone().or(file.tls_cert), args.tls_key.clone().or(file.tls_key)) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            _ => return Err(ConfigError("TLS needs both SLUICE_TLS_CERT and SLUICE_TLS_KEY".into())),
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let public_url = pick(args.public_url.clone(), file.public_url, format!("{scheme}://{http_addr}"));
        let public_url = public_url.trim_end_matches('/').to_string();
        let playback_base =
            pick(args.playback_base.clone(), file.playback_base, format!("{public_url}/play"))
                .trim_end_matches('/')
                .to_string();
        let database_url = pick(
            args.database_url.clone(),
            file.database_url,
            format!("sqlite://{}/sluice.db", data_dir.display()),
        );
        let storage_url = pick(
            args.storage_url.clone(),
            file.storage_url,
            format!("file://{}/storage", data_dir.display()),
        );
        let settings = Settings {
            database_url,
            storage_url,
            http_addr,
            rtmp_addr: pick(args.rtmp_addr, file.rtmp_addr, ([127, 0, 0, 1], 1935).into()),
            rtmp_max_per_ip: pick(args.rtmp_max_per_ip, file.rtmp_max_per_ip, 16),
            spool_bytes: pick(args.spool_bytes, file.spool_bytes, 2 << 30),
            rtmps_addr: pick(args.rtmps_addr, file.rtmps_addr, ([127, 0, 0, 1], 1936).into()),
            tls,
            rtsp_addr: pick(args.rtsp_addr, file.rtsp_addr, ([127, 0, 0, 1], 8554).into()),
            srt_addr: pick(args.srt_addr, file.srt_addr, ([127, 0, 0, 1], 8890).into()),
            webrtc_udp_ports: parse_ports(
                &args
                    .webrtc_udp_ports
                    .clone()
                    .or(file.webrtc_udp_ports)
                    .unwrap_or_else(|| "40000-40999".into()),
            )?,
            webrtc_public_ip: args.webrtc_public_ip.or(file.webrtc_public_ip),
            ice_servers: parse_ice_servers(
                &args.ice_servers.clone().or(file.ice_servers).unwrap_or_default(),
            )?,
            webrtc_max_per_ip: pick(args.webrtc_max_per_ip, file.webrtc_max_per_ip, 10),
            public_url,
            playback_base,
            mode: pick(args.mode, file.mode, Mode::Production),
            webhook_retry_scale: pick(args.webhook_retry_scale, file.webhook_retry_scale, 1.0),
            log_format: pick(args.log_format, file.log_format, LogFormat::Text),
            rate_limit_per_key: pick(args.rate_limit_per_key, file.rate_limit_per_key, 50.0),
            rate_limit_burst: pick(args.rate_limit_burst, file.rate_limit_burst, 100),
            auth_failures_per_min: pick(args.auth_failures_per_min, file.auth_failures_per_min, 20),
            trusted_proxies: TrustedProxies::parse(
                &args.trusted_proxies.clone().or(file.trusted_proxies).unwrap_or_default(),
            )
            .map_err(|e| ConfigError(format!("trusted proxies: {e}")))?,
            stream_idle_disable: pick(args.stream_idle_disable, file.stream_idle_disable, 30 * 24 * 3600),
            llhls_part_ms: pick(args.llhls_part_ms, file.llhls_part_ms, DEFAULT_PART_MS),
            llhls_segment_ms: pick(args.llhls_segment_ms, file.llhls_segment_ms, DEFAULT_SEGMENT_MS),
            pipelines_dir: args.pipelines_dir.clone().or(file.pipelines_dir),
            max_upload_bytes: pick(args.max_upload_bytes, file.max_upload_bytes, 20 << 30),
            transcode_workers: pick(args.transcode_workers, file.transcode_workers, 1),
            billing: pick(args.billing, file.billing, Billing::Off),
            master_key: args.master_key.clone().or(file.master_key),
            internal_url: args
                .internal_url
                .clone()
                .or(file.internal_url)
                .map(|u| u.trim_end_matches('/').to_string()),
            node_timeout: pick(args.node_timeout, file.node_timeout, 10),
            admin_token: args.admin_token.clone().or(file.admin_token).filter(|t| !t.is_empty()),
            data_dir,
        };
        settings.check()?;
        Ok(settings)
    }

    fn check(&self) -> Result<(), ConfigError> {
        if !(self.database_url.starts_with("sqlite:") || self.database_url.starts_with("postgres")) {
            return Err(ConfigError("database URL must start with sqlite:// or postgres://".into()));
        }
        if !(self.webhook_retry_scale.is_finite() && self.webhook_retry_scale >= 0.0) {
            return Err(ConfigError("webhook retry scale must be a number >= 0".into()));
        }
        if !(self.rate_limit_per_key.is_finite() && self.rate_limit_per_key > 0.0) {
            return Err(ConfigError("rate limit per key must be a number > 0".into()));
        }
        if self.webrtc_max_per_ip == 0 {
            return Err(ConfigError("WebRTC viewers per IP must be at least 1".into()));
        }
        if self.rtmp_max_per_ip == 0 {
            return Err(ConfigError("RTMP connections per IP must be at least 1".into()));
        }
        if self.rate_limit_burst == 0 || self.auth_failures_per_min == 0 {
            return Err(ConfigError(
                "rate limit burst and auth failures per minute must be at least 1".into(),
            ));
        }
        if !(200..=1000).contains(&self.llhls_part_ms) {
            return Err(ConfigError("LL-HLS part duration must be 200 to 1000 ms".into()));
        }
        if !(1000..=6000).contains(&self.llhls_segment_ms) || self.llhls_segment_ms < 3 * self.llhls_part_ms {
            return Err(ConfigError(
                "LL-HLS segment duration must be 1000 to 6000 ms and at least three parts".into(),
            ));
        }
        if self.max_upload_bytes == 0 {
            return Err(ConfigError("max upload bytes must be at least 1".into()));
        }
        if let Some(k) = &self.master_key {
            if crate::domain::content_key::MasterKey::from_hex(k).is_none() {
                return Err(ConfigError("master key must be 64 hexadecimal characters (32 bytes)".into()));
            }
        }
        if !(2..=3600).contains(&self.node_timeout) {
            return Err(ConfigError("node timeout must be 2 to 3600 seconds".into()));
        }
        if self.admin_token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err(ConfigError("the admin token must be at least 16 characters".into()));
        }
        if let Some(url) = &self.internal_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError("internal URL must start with http:// or https://".into()));
            }
        }
        if self.transcode_workers > 64 {
            return Err(ConfigError("transcode workers must be 0 to 64".into()));
        }
        if !(self.storage_url.starts_with("file://") || self.storage_url.starts_with("s3://")) {
            return Err(ConfigError("storage URL must start with file:// or s3://".into()));
        }
        for (name, url) in [("public URL", &self.public_url), ("playback base", &self.playback_base)] {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError(format!("{name} must start with http:// or https://")));
            }
        }
        Ok(())
    }

    /// The host clients reach Sluice at (for the RTMP and RTSP addresses it hands out).
    pub fn public_host(&self) -> String {
        url::Url::parse(&self.public_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_else(|| "localhost".to_string())
    }

    /// Whether clients reach Sluice over TLS, here or at a proxy (an https public URL): then
    /// cookies carry `Secure`; without it production warns at start.
    pub fn clients_use_tls(&self) -> bool {
        self.tls.is_some() || self.public_url.starts_with("https://")
    }
}

/// The PEM files of the TLS certificate chain and its key.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `first-last`, both in 1..=65535, first <= last.
fn parse_ports(text: &str) -> Result<(u16, u16), ConfigError> {
    let bad = || ConfigError(format!("WebRTC UDP ports must be first-last (e.g. 40000-40999), not {text:?}"));
    let (first, last) = text.trim().split_once('-').ok_or_else(bad)?;
    let first: u16 = first.trim().parse().map_err(|_| bad())?;
    let last: u16 = last.trim().parse().map_err(|_| bad())?;
    if first == 0 || first > last {
        return Err(bad());
    }
    Ok((first, last))
}

/// Comma-separated `stun:`/`turn:`/`turns:` URLs.
fn parse_ice_servers(text: &str) -> Result<Vec<String>, ConfigError> {
    let servers: Vec<String> =
        text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
    for s in &servers {
        let ok =
            ["stun:", "turn:", "turns:"].iter().any(|p| s.starts_with(p)) && !s.contains(char::is_whitespace);
        if !ok {
            return Err(ConfigError(format!(
                "ICE servers must be stun:/turn: URLs, not {:?}",
                redact_ice(s)
            )));
        }
    }
    Ok(servers)
}

/// An ICE server URL without its credentials (`turn:user:pass@host` → `turn:***@host`).
fn redact_ice(url: &str) -> String {
    match (url.find(':'), url.rfind('@')) {
        (Some(colon), Some(at)) if at > colon => format!("{}***{}", &url[..=colon], &url[at..]),
        _ => url.to_string(),
    }
}

fn pick<T>(flag_or_env: Option<T>, file: Option<T>, default: T) -> T {
    flag_or_env.or(file).unwrap_or(default)
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("reading settings file {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| ConfigError(format!("parsing settings file {}: {e}", path.display())))
}

/// Hides the password part of a URL (`postgres://user:secret@host/db` → `postgres://user:***@host/db`)
/// and any query string (S3 URLs may carry credentials there).
pub fn redact_url(url: &str) -> String {
    let without_query = url.split('?').next().unwrap_or(url);
    let shown = match (without_query.find("://"), without_query.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &without_query[scheme_end + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &without_query[..scheme_end + 3],
                    &userinfo[..colon],
                    &without_query[at..]
                ),
                None => without_query.to_string(),
            }
        }
        _ => without_query.to_string(),
    };
    if shown.len() < url.len() && without_query.len() < url.len() {
        format!("{shown}?…")
    } else {
        shown
    }
}

#[cfg(test)]
mod tests;
