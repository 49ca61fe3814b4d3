//! LL-HLS packaging of live sessions (issue 5). The playlist model is plain data and is
//! unit-tested without GStreamer; the origin and the packaging pipeline build on it.

pub mod playlist;
