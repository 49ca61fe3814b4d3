//! `/v1/projects/<slug>/streams` (interface: Streams; CONTRACT: Streams).

use std::sync::Arc;

use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::body::{Fields, FromJsonBody, JsonBody};
use super::error::{ApiError, ApiResult};
use super::pagination::{Limit, PageQuery, Paginated, Skip};
use super::params::TimeParam;
use super::security::{need, Authorized};
use super::viewers::{fill_streams, ViewerCounts};
use super::ApiTags;
use crate::api::ApiState;
use crate::domain::content_key::MasterKey;
use crate::domain::stream::{
    push_verifier, DisabledReason, InputInfo, MoveError, Protocol, Quality, StreamMove, StreamStatus,
};
use crate::domain::{new_id, random_token, time::iso, time::now_ms};
use crate::services::streams::StreamError;
use crate::store::streams::{StreamFilter, StreamRow};
use crate::store::{is_unique_violation, Db};

mod ingest;
pub mod simulcast;
pub mod slate;
pub use ingest::{BackupIngest, ObsSettings};

/// A stream in a list.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct StreamListItem {
    #[oai(rename = "_id")]
    pub id: String,
    pub name: String,
    pub status: StreamStatus,
    pub stream_key: String,
    pub vod_enabled: bool,
    pub created_at: String,
    /// Viewers now, all protocols (CONTRACT: Viewers).
    pub viewers: i64,
    pub viewer_counts: ViewerCounts,
    /// The most viewers at once of the current or last live session.
    pub peak_viewers: i64,
}

/// Playback addresses, each present only when the stream offers that protocol.
#[derive(Debug, Object)]
pub struct PlaybackUrls {
    /// The LL-HLS master playlist.
    #[oai(skip_serializing_if_is_none)]
    pub hls: Option<String>,
    /// WHEP endpoint: `POST` an SDP offer (`application/sdp`) while the stream is live; 201 with
    /// the answer and the session's `Location`.
    #[oai(skip_serializing_if_is_none)]
    pub webrtc: Option<String>,
    /// RTSP address (RTP over UDP or TCP), playing while the stream is live.
    #[oai(skip_serializing_if_is_none)]
    pub rtsp: Option<String>,
}

/// The full stream record.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase", example)]
pub struct Stream {
    #[oai(rename = "_id")]
    pub id: String,
    pub name: String,
    pub status: StreamStatus,
    /// Why the stream is disabled (status `disabled` only).
    pub disabled_reason: Option<DisabledReason>,
    pub stream_key: String,
    /// Highest first.
    pub qualities: Vec<Quality>,
    pub protocols: Vec<Protocol>,
    /// Record each push session (from the LL-HLS ladder) as a VOD: it appears `complete` once
    /// the session ends, and `GET /vod?streamId=` lists them.
    pub vod_enabled: bool,
    pub dvr_enabled: bool,
    /// DVR window in seconds.
    pub dvr_duration: i64,
    /// Seconds the stream stays `live`, showing a slate, after its publisher goes away.
    pub reconnect_window: i64,
    pub drm_enabled: bool,
    /// Whether playback needs a signed URL from a playback ticket.
    pub signed_playback: bool,
    pub push_username: String,
    /// The port of `ingestUrl` and `obs.server`: the RTMPS port when TLS is configured (plain
    /// RTMP keeps listening on its own port), else the RTMP port.
    pub rtmp_port: u16,
    pub obs: ObsSettings,
    /// WHIP ingest (RFC 9725): `POST` an SDP offer with H.264 and Opus here, with
    /// `Authorization: Bearer <pushPassword>`.
    pub whip_url: String,
    pub playback_urls: PlaybackUrls,
    pub created_at: String,
    pub updated_at: String,
    pub last_push_at: Option<String>,
    /// What the live push sends; null when not live.
    pub input: Option<InputInfo>,
    /// Viewers now, all protocols, summed over the nodes (each reports every 2 s; an HLS viewer
    /// is a playback session that fetched a playlist in the last 10 s).
    pub viewers: i64,
    pub viewer_counts: ViewerCounts,
    /// The most viewers at once of the current or last live session.
    pub peak_viewers: i64,
}

/// A created stream, or new push credentials: the password appears only in these responses.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase", example)]
pub struct StreamWithCredentials {
    #[oai(flatten)]
    pub stream: Stream,
    /// The complete publish URL with credentials (ffmpeg takes it as is).
    pub ingest_url: String,
    /// SRT ingest (caller mode, MPEG-TS with H.264 and AAC): the stream key as
    /// `streamid=publish:<streamKey>` and the push password as the AES passphrase (OBS and
    /// ffmpeg take the URL as is). Shown only when created or rotated.
    pub srt_url: String,
    /// Shown only when created or rotated.
    pub push_password: String,
    pub backup: BackupIngest,
}

/// Body of `POST /streams`.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase", example)]
pub struct CreateStream {
    /// 1–100 characters, unique in the project.
    pub name: String,
    /// Default `["720p", "480p"]`.
    pub qualities: Option<Vec<Quality>>,
    /// Default `["llhls"]`.
    pub protocols: Option<Vec<Protocol>>,
    /// Record each push session (from the LL-HLS ladder) as a VOD: it appears `complete` once
    /// the session ends, and `GET /vod?streamId=` lists them.
    pub vod_enabled: Option<bool>,
    pub dvr_enabled: Option<bool>,
    /// Seconds, 60–43200 (default 3600).
    pub dvr_duration: Option<i64>,
    /// Seconds, 0–1800 (default 10), the stream stays `live`, showing a slate, without publisher.
    pub reconnect_window: Option<i64>,
    pub drm_enabled: Option<bool>,
}

/// How a stream's qualities are stored: their names, space-separated.
fn quality_names(f: &mut Fields, name: &str) -> Option<Vec<Quality>> {
    f.opt_list(name, 1..=Quality::HEIGHTS.len(), Quality::parse).map(|mut q| {
        q.sort_by(|a, b| b.cmp(a));
        q.dedup();
        q
    })
}

fn protocols(f: &mut Fields, name: &str) -> Option<Vec<Protocol>> {
    f.opt_list(name, 1..=3, Protocol::parse).map(|mut p| {
        p.sort();
        p.dedup();
        p
    })
}

impl FromJsonBody for CreateStream {
    fn from_fields(f: &mut Fields) -> Self {
        CreateStream {
            name: f.string("name", 1..=100),
            qualities: quality_names(f, "qualities"),
            protocols: protocols(f, "protocols"),
            vod_enabled: f.opt_bool("vodEnabled"),
            dvr_enabled: f.opt_bool("dvrEnabled"),
            dvr_duration: f.opt_int("dvrDuration", 60..=43_200),
            reconnect_window: f.opt_int("reconnectWindow", 0..=1800),
            drm_enabled: f.opt_bool("drmEnabled"),
        }
    }
}

/// Body of `PATCH /streams/<id>`: any of the fields. Media options apply from the next push.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct UpdateStream {
    pub name: Option<String>,
    pub qualities: Option<Vec<Quality>>,
    pub protocols: Option<Vec<Protocol>>,
    /// Record each push session (from the LL-HLS ladder) as a VOD: it appears `complete` once
    /// the session ends, and `GET /vod?streamId=` lists them.
    pub vod_enabled: Option<bool>,
    pub dvr_enabled: Option<bool>,
    pub dvr_duration: Option<i64>,
    /// Seconds, 0–1800; applies from the next time the publisher goes away.
    pub reconnect_window: Option<i64>,
    pub drm_enabled: Option<bool>,
    /// `false` disables the stream (reason `manual`); `true` re-enables it (not a deleted one;
    /// with billing on, only while the project's credit balance is positive: 409 otherwise).
    pub enabled: Option<bool>,
}

impl FromJsonBody for UpdateStream {
    fn from_fields(f: &mut Fields) -> Self {
        UpdateStream {
            name: f.opt_string("name", 1..=100),
            qualities: quality_names(f, "qualities"),
            protocols: protocols(f, "protocols"),
            vod_enabled: f.opt_bool("vodEnabled"),
            dvr_enabled: f.opt_bool("dvrEnabled"),
            dvr_duration: f.opt_int("dvrDuration", 60..=43_200),
            reconnect_window: f.opt_int("reconnectWindow", 0..=1800),
            drm_enabled: f.opt_bool("drmEnabled"),
            enabled: f.opt_bool("enabled"),
        }
    }
}

#[derive(ApiResponse)]
pub enum CreateStreamResponse {
    /// The stream was created; `pushPassword` is shown only here and on rotation.
    #[oai(status = 201)]
    Created(Json<StreamWithCredentials>),
}

fn flag(b: bool) -> i64 {
    i64::from(b)
}
/// `rtmp://<public host>:<rtmp port>`, or `rtmps://…:<rtmps port>` when TLS is configured.
fn rtmp_base(app: &ApiState) -> String {
    let (scheme, port) = app.endpoints.ingest_scheme_port();
    format!("{scheme}://{}:{port}", app.settings.public_host())
}

impl Stream {
    pub fn from_row(row: &StreamRow, app: &ApiState) -> Stream {
        let settings = &app.settings;
        let protocols = row.protocols();
        let play = format!("{}/live/{}", app.endpoints.playback_base(), row.id);
        let state = row.state();
        Stream {
            id: row.id.clone(),
            name: row.name.clone(),
            status: state.status,
            disabled_reason: state.reason,
            stream_key: row.stream_key.clone(),
            qualities: row.qualities(),
            vod_enabled: row.vod_enabled == 1,
            dvr_enabled: row.dvr_enabled == 1,
            dvr_duration: row.dvr_duration,
            reconnect_window: row.reconnect_window,
            drm_enabled: row.drm_enabled == 1,
            signed_playback: row.signed_playback == 1,
            push_username: row.push_username.clone(),
            rtmp_port: app.endpoints.ingest_scheme_port().1,
            obs: ObsSettings {
                server: format!("{}/live", rtmp_base(app)),
                stream_key: row.stream_key.clone(),
            },
            whip_url: format!("{}/v1/whip/{}", app.endpoints.public_url(), row.stream_key),
            playback_urls: PlaybackUrls {
                hls: protocols.contains(&Protocol::Llhls).then(|| format!("{play}/master.m3u8")),
                webrtc: protocols.contains(&Protocol::Webrtc).then(|| format!("{play}/whep")),
                rtsp: protocols.contains(&Protocol::Rtsp).then(|| {
                    format!("rtsp://{}:{}/live/{}", settings.public_host(), app.endpoints.rtsp_port(), row.id)
                }),
            },
            protocols,
            created_at: iso(row.created_at),
            updated_at: iso(row.updated_at),
            last_push_at: row.last_push_at.map(iso),
            input: row.input_info.as_deref().and_then(|j| serde_json::from_str(j).ok()),
            viewers: 0,
            viewer_counts: ViewerCounts::default(),
            peak_viewers: 0,
        }
    }

    fn with_credentials(row: &StreamRow, app: &ApiState, password: String) -> StreamWithCredentials {
        let (base, key, user) = (rtmp_base(app), &row.stream_key, &row.push_username);
        let srt = |mode: &str| {
            let (host, port) = (app.settings.public_host(), app.endpoints.srt_port());
            format!("srt://{host}:{port}?streamid={mode}:{key}&passphrase={password}")
        };
        StreamWithCredentials {
            stream: Stream::from_row(row, app),
            ingest_url: format!("{base}/live/{key}?user={user}&pass={password}"),
            srt_url: srt("publish"),
            backup: BackupIngest {
                ingest_url: format!("{base}/backup/{key}?user={user}&pass={password}"),
                srt_url: srt("backup"),
                obs: ObsSettings { server: format!("{base}/backup"), stream_key: key.clone() },
            },
            push_password: password,
        }
    }
}

impl From<StreamRow> for StreamListItem {
    fn from(r: StreamRow) -> Self {
        let status = r.state().status;
        StreamListItem {
            id: r.id,
            name: r.name,
            status,
            stream_key: r.stream_key,
            vod_enabled: r.vod_enabled == 1,
            created_at: iso(r.created_at),
            viewers: 0,
            viewer_counts: ViewerCounts::default(),
            peak_viewers: 0,
        }
    }
}

/// The `data` of a stream event.
/// New push credentials of a stream.
struct PushCredentials {
    username: String,
    salt: String,
    /// The Adobe verifier, sealed under the master key.
    verifier: String,
    /// The password, sealed under the master key (SRT's passphrase).
    secret: String,
    password: String,
}

impl PushCredentials {
    fn new(master: &MasterKey, id: &str) -> PushCredentials {
        let username = random_token(12).to_lowercase();
        let salt = random_token(16);
        let password = random_token(32);
        let verifier = push_verifier(&username, &salt, &password);
        let verifier = master.seal(verifier.as_bytes(), &crate::store::secrets::push_context(id));
        let secret = master.seal(password.as_bytes(), &crate::store::secrets::push_secret_context(id));
        PushCredentials { username, salt, verifier, secret, password }
    }

    /// Puts them on the row; returns the password, shown once.
    fn set_on(self, row: &mut StreamRow) -> String {
        row.push_username = self.username;
        row.push_salt = self.salt;
        row.push_verifier = self.verifier;
        row.push_secret = Some(self.secret);
        self.password
    }
}

pub(super) fn move_error(e: MoveError) -> ApiError {
    ApiError::conflict(e.to_string())
}

/// A refused move is 409 (a re-enable without credits too); a stream that vanished meanwhile
/// 404; the rest is internal.
fn stream_error(e: StreamError) -> ApiError {
    match e {
        StreamError::Refused(e) => move_error(e),
        StreamError::NotFound => stream_not_found(),
        StreamError::LiveAlready | StreamError::NoCredits => ApiError::conflict(e.to_string()),
        StreamError::Db(e) => e.into(),
    }
}

pub struct StreamsApi;

#[OpenApi(tag = "ApiTags::Streams")]
impl StreamsApi {
    /// List streams, newest first
    #[oai(path = "/v1/projects/:slug/streams", method = "get", operation_id = "listStreams")]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        /// Items to skip (default 0).
        skip: Query<Option<Skip>>,
        /// Page size (default 20, at most 100).
        limit: Query<Option<Limit<100>>>,
        /// Case-insensitive substring of the name.
        q: Query<Option<String>>,
        /// Only streams with this status.
        status: Query<Option<StreamStatus>>,
        /// Created at or after this ISO 8601 date-time (or from the start of this ISO 8601 date:
        /// `2024-05-01`, `2024-05`, `2024-W18`…). A time without an offset is UTC.
        from: Query<Option<TimeParam>>,
        /// Created at or before this ISO 8601 date-time (or by the end of this ISO 8601 date).
        to: Query<Option<TimeParam>>,
    ) -> ApiResult<Json<Paginated<StreamListItem>>> {
        let page = PageQuery::list(skip.0, limit.0)?;
        let mut problems = Vec::new();
        let filter = StreamFilter {
            q: q.0.filter(|s| !s.is_empty()),
            status: status.0.map(|s| s.as_str().to_string()),
            from: from.0.and_then(|t| t.span("from", &mut problems)).map(|s| s.first_ms),
            to: to.0.and_then(|t| t.span("to", &mut problems)).map(|s| s.last_ms),
        };
        if !problems.is_empty() {
            return Err(ApiError::bad_request(problems));
        }
        let rows = app.db.list_streams(&p.project.id, &filter, page.skip, page.limit).await?;
        let mut list = Paginated::from_rows(rows, page);
        fill_streams(&app, &mut list.items).await?;
        Ok(Json(list))
    }

    /// Create a stream; returns its push credentials (the password only here)
    #[oai(path = "/v1/projects/:slug/streams", method = "post", operation_id = "createStream")]
    async fn create(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        body: JsonBody<CreateStream>,
    ) -> ApiResult<CreateStreamResponse> {
        let b = body.0;
        let id = new_id();
        let credentials = PushCredentials::new(&app.master_key, &id);
        let now = now_ms();
        // No media resources need preparing before a push yet, so a new stream is ready at once
        // (`create` moves it on from pending).
        let mut row = StreamRow {
            id,
            project_id: p.project.id.clone(),
            name: b.name,
            stream_key: random_token(24),
            push_username: String::new(),
            push_salt: String::new(),
            push_verifier: String::new(),
            push_secret: None,
            qualities: String::new(),
            protocols: String::new(),
            vod_enabled: flag(b.vod_enabled.unwrap_or(false)),
            dvr_enabled: flag(b.dvr_enabled.unwrap_or(false)),
            dvr_duration: b.dvr_duration.unwrap_or(3600),
            reconnect_window: b.reconnect_window.unwrap_or(crate::domain::stream::DEFAULT_RECONNECT_WINDOW),
            drm_enabled: flag(b.drm_enabled.unwrap_or(false)),
            signed_playback: 0,
            status: StreamStatus::Pending.as_str().to_string(),
            disabled_reason: None,
            created_at: now,
            updated_at: now,
            last_push_at: None,
            input_info: None,
        };
        let password = credentials.set_on(&mut row);
        row.set_qualities(&b.qualities.unwrap_or_else(|| vec![Quality(720), Quality(480)]));
        row.set_protocols(&b.protocols.unwrap_or_else(|| vec![Protocol::Llhls]));
        match app.streams.create(&mut row).await {
            Ok(()) => {}
            Err(StreamError::Db(e)) if is_unique_violation(&e) => {
                return Err(ApiError::conflict("a stream with this name exists"))
            }
            Err(e) => return Err(stream_error(e)),
        }
        tracing::info!(project = %p.project.slug, stream = %row.id, "stream created");
        Ok(CreateStreamResponse::Created(Json(Stream::with_credentials(&row, &app, password))))
    }

    /// Get a stream
    #[oai(path = "/v1/projects/:slug/streams/:id", method = "get", operation_id = "getStream")]
    async fn get(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<Stream>> {
        let row = app.db.stream(&p.project.id, &id).await?.ok_or_else(stream_not_found)?;
        Ok(Json(super::viewers::stream_record(&app, &row).await?))
    }

    /// Change a stream's settings, or disable / re-enable it
    #[oai(path = "/v1/projects/:slug/streams/:id", method = "patch", operation_id = "updateStream")]
    async fn update(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
        body: JsonBody<UpdateStream>,
    ) -> ApiResult<Json<Stream>> {
        let b = body.0;
        let mut tx = app.db.begin_write().await?;
        let mut row = Db::stream_in(&mut tx, &p.project.id, &id).await?.ok_or_else(stream_not_found)?;
        let before = row.state();
        // A deleted stream refuses every change, even one that changes nothing else.
        if before.reason == Some(DisabledReason::Deleted) {
            return Err(move_error(MoveError::Deleted));
        }
        let mv = match b.enabled {
            Some(true) => Some(StreamMove::Enable),
            // Disabling a disabled stream keeps its reason (and fires nothing).
            Some(false) if before.status != StreamStatus::Disabled => {
                Some(StreamMove::Disable(DisabledReason::Manual))
            }
            _ => None,
        };
        if let Some(name) = b.name {
            row.name = name;
        }
        if let Some(q) = b.qualities {
            row.set_qualities(&q);
        }
        if let Some(ps) = b.protocols {
            row.set_protocols(&ps);
        }
        if let Some(v) = b.vod_enabled {
            row.vod_enabled = flag(v);
        }
        if let Some(v) = b.dvr_enabled {
            row.dvr_enabled = flag(v);
        }
        if let Some(v) = b.dvr_duration {
            row.dvr_duration = v;
        }
        if let Some(v) = b.reconnect_window {
            row.reconnect_window = v;
        }
        if let Some(v) = b.drm_enabled {
            row.drm_enabled = flag(v);
        }
        let written = match mv {
            Some(mv) => app.streams.apply(tx, &mut row, mv).await,
            // Settings only: no status change, no event.
            None => async {
                row.updated_at = now_ms();
                Db::update_stream(&mut tx, &row).await?;
                tx.commit().await?;
                Ok(())
            }
            .await
            .map_err(StreamError::Db),
        };
        match written {
            Ok(()) => {}
            Err(StreamError::Db(e)) if is_unique_violation(&e) => {
                return Err(ApiError::conflict("a stream with this name exists"))
            }
            Err(e) => return Err(stream_error(e)),
        }
        Ok(Json(super::viewers::stream_record(&app, &row).await?))
    }

    /// Delete a stream: it is disabled for good (reason `deleted`) and its media released
    #[oai(path = "/v1/projects/:slug/streams/:id", method = "delete", operation_id = "deleteStream")]
    async fn delete(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<Stream>> {
        let mut tx = app.db.begin_write().await?;
        let mut row = Db::stream_in(&mut tx, &p.project.id, &id).await?.ok_or_else(stream_not_found)?;
        app.streams
            .apply(tx, &mut row, StreamMove::Disable(DisabledReason::Deleted))
            .await
            .map_err(stream_error)?;
        // Its playlists and media go with it (a DVR folder too, once the push has stopped), and
        // its simulcast targets (their connections end with the push).
        app.channels.remove(&row.id);
        if let Err(e) = app.db.delete_targets_of(&row.id).await {
            tracing::warn!(stream = %row.id, error = %e, "removing a deleted stream's simulcast targets");
        }
        tracing::info!(project = %p.project.slug, stream = %row.id, "stream deleted");
        Ok(Json(super::viewers::stream_record(&app, &row).await?))
    }

    /// Replace the push credentials; the old ones stop working at the next connect
    #[oai(
        path = "/v1/projects/:slug/streams/:id/rotate-push",
        method = "post",
        operation_id = "rotateStreamPush"
    )]
    async fn rotate_push(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<StreamWithCredentials>> {
        let mut tx = app.db.begin_write().await?;
        let mut row = Db::stream_in(&mut tx, &p.project.id, &id).await?.ok_or_else(stream_not_found)?;
        if row.state().reason == Some(DisabledReason::Deleted) {
            return Err(move_error(MoveError::Deleted));
        }
        let password = PushCredentials::new(&app.master_key, &row.id).set_on(&mut row);
        row.updated_at = now_ms();
        Db::update_stream(&mut tx, &row).await?;
        tx.commit().await?;
        tracing::info!(project = %p.project.slug, stream = %row.id, "push credentials rotated");
        Ok(Json(Stream::with_credentials(&row, &app, password)))
    }
}

pub(super) fn stream_not_found() -> ApiError {
    ApiError::not_found("stream not found")
}
