//! Where a stream is published: the fields that tell an encoder, the primary's and the backup's.

use poem_openapi::Object;

/// OBS's two fields: Settings → Stream → Server and Stream Key.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct ObsSettings {
    pub server: String,
    pub stream_key: String,
}

/// Where a backup encoder publishes the same stream (CONTRACT: Continuity): it stands by while
/// the primary is live and takes over within a second when the primary goes quiet or away.
/// Shown only when created or rotated.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct BackupIngest {
    /// RTMP(S) publish URL with credentials, application `backup`.
    pub ingest_url: String,
    /// SRT ingest with `streamid=backup:<streamKey>`.
    pub srt_url: String,
    pub obs: ObsSettings,
}
