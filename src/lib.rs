//! Sluice: self-hostable live streaming and video on demand on GStreamer.

pub mod api;
pub mod app;
pub mod cli;
pub mod client_ip;
pub mod config;
pub mod domain;
pub mod events;
pub mod media;
pub mod metrics;
pub mod password_gate;
pub mod playback;
pub mod ratelimit;
pub mod services;
pub mod storage;
pub mod store;
pub mod tls;
pub mod upload;
