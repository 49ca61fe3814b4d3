//! A stream's slate picture (CONTRACT: Continuity): `PUT /streams/<id>/slate` with a JPEG or PNG
//! body replaces the default card the stream shows while no input feeds it, `GET` says what it
//! is, `DELETE` restores the card. The upload is checked whole before anything is stored
//! (`media::ingest::slate::picture::check`: its type, its size, its header, one decode); a
//! picture set while the slate is on shows from the next time it comes on.

use std::sync::Arc;

use poem::web::Data;
use poem::{Request, RequestBody};
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::registry::{MetaMediaType, MetaRequest, MetaSchema, MetaSchemaRef, Registry};
use poem_openapi::{ApiExtractor, ApiExtractorType, ApiResponse, ExtractParamOptions, Object, OpenApi};

use super::{move_error, stream_not_found};
use crate::api::error::{ApiError, ApiResult};
use crate::api::security::{need, Authorized};
use crate::api::{ApiState, ApiTags};
use crate::domain::stream::{DisabledReason, MoveError};
use crate::domain::time::{iso, now_ms};
use crate::media::ingest::slate::picture::{self, Kind, Refused, MAX_BYTES, MAX_SIDE};
use crate::store::slates::SlateInfo;

/// What a stream's own slate picture is.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct Slate {
    /// `image/jpeg` or `image/png`.
    pub content_type: String,
    pub width: i64,
    pub height: i64,
    /// Bytes.
    pub size: i64,
    /// SHA-256 of the picture, hex.
    pub sha256: String,
    pub updated_at: String,
}

impl From<SlateInfo> for Slate {
    fn from(info: SlateInfo) -> Slate {
        Slate {
            content_type: info.content_type,
            width: info.width,
            height: info.height,
            size: info.size,
            sha256: info.digest,
            updated_at: iso(info.updated_at),
        }
    }
}

/// The uploaded picture: a JPEG or PNG body of at most 2 MiB, read with that bound.
pub struct SlateImage {
    kind: Kind,
    bytes: Vec<u8>,
}

fn binary() -> MetaSchemaRef {
    MetaSchemaRef::Inline(Box::new(MetaSchema { format: Some("binary"), ..MetaSchema::new("string") }))
}

impl<'a> ApiExtractor<'a> for SlateImage {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(_registry: &mut Registry) {}

    fn request_meta() -> Option<MetaRequest> {
        Some(MetaRequest {
            description: Some("A JPEG or PNG, at most 2 MiB and 4096 pixels a side."),
            content: [Kind::Jpeg, Kind::Png]
                .map(|k| MetaMediaType { content_type: k.content_type(), schema: binary() })
                .into(),
            required: true,
        })
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _options: ExtractParamOptions<()>,
    ) -> poem::Result<SlateImage> {
        use futures_util::StreamExt;
        let declared = request.content_type().and_then(|t| t.parse::<mime::Mime>().ok());
        let Some(kind) = declared.and_then(|m| Kind::parse(m.essence_str())) else {
            crate::api::body::discard(body).await;
            let sent = request.content_type().unwrap_or("none");
            return Err(ApiError::unsupported_media_type(format!(
                "the content type `{sent}` is not taken; send image/jpeg or image/png"
            ))
            .into());
        };
        let mut chunks = body.take()?.into_bytes_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = chunks.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::bad_request(vec![format!("body could not be read: {e}")]))?;
            if bytes.len() + chunk.len() > MAX_BYTES {
                crate::api::body::drain(chunks, bytes.len() + chunk.len()).await;
                return Err(too_large().into());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(SlateImage { kind, bytes })
    }
}

fn too_large() -> ApiError {
    ApiError::too_large(format!("the picture exceeds {MAX_BYTES} bytes (2 MiB)"))
}

#[derive(ApiResponse)]
enum Removed {
    /// The stream shows the default card again.
    #[oai(status = 204)]
    NoContent,
}

pub struct SlateApi;

#[OpenApi(tag = "ApiTags::Streams")]
impl SlateApi {
    /// Replace the stream's slate: the picture it shows while no input feeds it (JPEG or PNG)
    #[oai(path = "/v1/projects/:slug/streams/:id/slate", method = "put", operation_id = "putStreamSlate")]
    async fn put(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
        image: SlateImage,
    ) -> ApiResult<Json<Slate>> {
        let row = app.db.stream(&p.project.id, &id).await?.ok_or_else(stream_not_found)?;
        if row.state().reason == Some(DisabledReason::Deleted) {
            return Err(move_error(MoveError::Deleted));
        }
        let SlateImage { kind, bytes } = image;
        let checked = tokio::task::spawn_blocking(move || picture::check(kind, bytes))
            .await
            .map_err(ApiError::internal)?;
        let picture = checked.map_err(|refused| match refused {
            Refused::TooLarge => too_large(),
            Refused::NotAnImage(why) => ApiError::unsupported_media_type(why),
            Refused::Bad(why) => ApiError::bad_request(vec![why]),
        })?;
        let info = SlateInfo {
            content_type: picture.kind.content_type().to_string(),
            digest: picture.digest.clone(),
            width: i64::from(picture.width),
            height: i64::from(picture.height),
            size: picture.bytes.len() as i64,
            updated_at: now_ms(),
        };
        app.db.put_slate(&row.id, &info, &picture.bytes).await?;
        tracing::info!(project = %p.project.slug, stream = %row.id, width = info.width, height = info.height, "slate picture set");
        Ok(Json(info.into()))
    }

    /// The stream's own slate picture (404 while it shows the default card)
    #[oai(path = "/v1/projects/:slug/streams/:id/slate", method = "get", operation_id = "getStreamSlate")]
    async fn get(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsRead>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Json<Slate>> {
        let row = app.db.stream(&p.project.id, &id).await?.ok_or_else(stream_not_found)?;
        let info = app.db.slate_info(&row.id).await?.ok_or_else(default_card)?;
        Ok(Json(info.into()))
    }

    /// Restore the default slate card (204 also when the stream already shows it)
    #[oai(
        path = "/v1/projects/:slug/streams/:id/slate",
        method = "delete",
        operation_id = "deleteStreamSlate"
    )]
    async fn delete(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::StreamsWrite>,
        #[oai(name = "slug")] _slug: Path<String>,
        id: Path<String>,
    ) -> ApiResult<Removed> {
        let row = app.db.stream(&p.project.id, &id).await?.ok_or_else(stream_not_found)?;
        if app.db.delete_slate(&row.id).await? {
            tracing::info!(project = %p.project.slug, stream = %row.id, "slate picture removed");
        }
        Ok(Removed::NoContent)
    }
}

fn default_card() -> ApiError {
    ApiError::not_found(format!(
        "the stream shows the default slate card; PUT a JPEG or PNG (at most {MAX_SIDE} pixels a side) to replace it"
    ))
}
