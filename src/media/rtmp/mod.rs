//! RTMP ingest. `auth` decides push credentials without IO; the session and its tokio shell
//! follow (issue 4).

pub mod auth;
pub mod server;
pub mod session;
