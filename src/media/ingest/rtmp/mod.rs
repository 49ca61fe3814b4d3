//! RTMP ingest. `auth` decides push credentials without IO; the session and its tokio shell
//! follow (issue 4).

pub mod amf;
pub mod auth;
pub mod challenges;
pub mod chunks;
pub mod pace;
pub mod server;
pub mod session;
