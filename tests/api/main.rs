//! Black-box tests of the HTTP API: the real server, a real database (SQLite and Postgres).

#[path = "../support/mod.rs"]
mod support;

mod api_keys;
mod auth;
mod client_ip;
mod cluster;
mod console;
mod credits;
mod errors;
mod events;
mod faults;
mod faults_store;
mod http_hostile;
mod lifecycle;
mod lifecycle_nodes;
mod live_hls;
mod live_ladder;
mod live_shutdown;
mod live_threads;
mod login_flood;
mod members;
mod ops;
mod order_of_checks;
mod projects;
mod recording;
mod rtmp;
mod rtmp_hostile;
mod rtmp_limits;
mod rtmp_memory;
mod secrets;
mod signed;
mod srt;
mod store;
mod streams;
mod tls;
mod viewers;
mod vod;
mod vod_lease;
mod vod_restart;
mod vod_s3;
mod webhook_guide;
mod webhooks;
mod webhooks_fair;
mod webhooks_restart;
mod webrtc;
