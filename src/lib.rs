//! Sluice: self-hostable live streaming and video on demand on GStreamer.
//!
//! Read these docs with `cargo doc --document-private-items`: Sluice is a program, not a library,
//! and a module's docs name the private items that do its work.
#![allow(rustdoc::private_intra_doc_links)]

pub mod api;
pub mod app;
pub mod cli;
pub mod client_ip;
pub mod config;
pub mod console;
pub mod domain;
pub mod events;
pub mod media;
pub mod metrics;
pub mod password_gate;
pub mod playback;
pub mod ratelimit;
pub mod services;
pub mod slots;
pub mod storage;
pub mod store;
pub mod tls;
pub mod upload;
