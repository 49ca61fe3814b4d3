//! The one error type of the REST API and the JSON body every error carries
//! (CONTRACT: Conventions — `{"statusCode", "error", "message"}`; 400 carries an array).

use poem::http::StatusCode;
use poem::{IntoResponse, Response};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object};

use crate::store::{DbError, Fault};

/// An error other than a validation failure.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct ErrorBody {
    pub status_code: u16,
    pub error: String,
    pub message: String,
}

/// A validation failure: one message per problem, each naming its field.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct ValidationErrorBody {
    pub status_code: u16,
    pub error: String,
    pub message: Vec<String>,
}

#[derive(Debug, ApiResponse)]
pub enum ApiError {
    /// Validation failed; `message` lists every problem.
    #[oai(status = 400)]
    BadRequest(Json<ValidationErrorBody>),
    /// Missing, malformed, unknown or revoked credentials.
    #[oai(status = 401)]
    Unauthorized(Json<ErrorBody>),
    /// Authenticated, but the scope or role does not allow the action.
    #[oai(status = 403)]
    Forbidden(Json<ErrorBody>),
    /// The project or resource does not exist for these credentials.
    #[oai(status = 404)]
    NotFound(Json<ErrorBody>),
    /// Conflict with the current state (a taken slug or name, a refused move).
    #[oai(status = 409)]
    Conflict(Json<ErrorBody>),
    /// The `Idempotency-Key` was used with another request.
    #[oai(status = 422)]
    UnprocessableEntity(Json<ErrorBody>),
    /// The request body is larger than allowed.
    #[oai(status = 413)]
    PayloadTooLarge(Json<ErrorBody>),
    /// The request body is not of a content type the operation takes (`application/json` but where it says otherwise).
    #[oai(status = 415)]
    UnsupportedMediaType(Json<ErrorBody>),
    /// Rate limited; retry after the given number of seconds.
    #[oai(status = 429)]
    TooManyRequests(Json<ErrorBody>, #[oai(header = "Retry-After")] u64),
    /// A fault on the service side; details are in the service log.
    #[oai(status = 500)]
    Internal(Json<ErrorBody>),
    /// Something the service stands on (its database) is not answering; retry after the
    /// given number of seconds. Nothing was changed.
    #[oai(status = 503)]
    ServiceUnavailable(Json<ErrorBody>, #[oai(header = "Retry-After")] u64),
    /// The service has no room to store the change (its disk is full). Nothing was changed.
    #[oai(status = 507)]
    InsufficientStorage(Json<ErrorBody>),
}

/// What a 503 asks the client to wait before it tries again, in seconds.
pub const RETRY_AFTER_UNAVAILABLE: u64 = 5;

pub type ApiResult<T> = Result<T, ApiError>;

fn body(status: StatusCode, message: impl Into<String>) -> Json<ErrorBody> {
    Json(ErrorBody {
        status_code: status.as_u16(),
        error: status.canonical_reason().unwrap_or("Error").to_string(),
        message: message.into(),
    })
}

impl ApiError {
    pub fn bad_request(messages: Vec<String>) -> Self {
        ApiError::BadRequest(Json(ValidationErrorBody {
            status_code: 400,
            error: "Bad Request".into(),
            message: messages,
        }))
    }
    pub fn invalid(field: &str, problem: &str) -> Self {
        Self::bad_request(vec![format!("{field} {problem}")])
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::Unauthorized(body(StatusCode::UNAUTHORIZED, message))
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::Forbidden(body(StatusCode::FORBIDDEN, message))
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::NotFound(body(StatusCode::NOT_FOUND, message))
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError::Conflict(body(StatusCode::CONFLICT, message))
    }
    pub fn unprocessable(message: impl Into<String>) -> Self {
        ApiError::UnprocessableEntity(body(StatusCode::UNPROCESSABLE_ENTITY, message))
    }
    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError::PayloadTooLarge(body(StatusCode::PAYLOAD_TOO_LARGE, message))
    }
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        ApiError::UnsupportedMediaType(body(StatusCode::UNSUPPORTED_MEDIA_TYPE, message))
    }
    pub fn too_many(retry_after_secs: u64) -> Self {
        ApiError::TooManyRequests(
            body(StatusCode::TOO_MANY_REQUESTS, "rate limit exceeded; retry later"),
            retry_after_secs.max(1),
        )
    }
    /// 429 for a cap other than the request rate (`message` says which).
    pub fn too_many_because(retry_after_secs: u64, message: impl Into<String>) -> Self {
        ApiError::TooManyRequests(body(StatusCode::TOO_MANY_REQUESTS, message), retry_after_secs.max(1))
    }
    /// 503 with `Retry-After` ([`RETRY_AFTER_UNAVAILABLE`]): `message` says what is away.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::ServiceUnavailable(body(StatusCode::SERVICE_UNAVAILABLE, message), RETRY_AFTER_UNAVAILABLE)
    }
    pub fn insufficient_storage(message: impl Into<String>) -> Self {
        ApiError::InsufficientStorage(body(StatusCode::INSUFFICIENT_STORAGE, message))
    }
    /// Logs the detail and answers a plain 500.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error");
        ApiError::Internal(body(StatusCode::INTERNAL_SERVER_ERROR, "internal error"))
    }
}

impl From<DbError> for ApiError {
    fn from(err: DbError) -> Self {
        match crate::store::fault(&err) {
            Fault::Unavailable => {
                tracing::warn!(error = %err, "database unavailable");
                ApiError::unavailable("the database is not answering; nothing was changed, retry later")
            }
            Fault::Full => {
                tracing::error!(error = %err, "database: no room to write");
                ApiError::insufficient_storage("the service has no room to store this; nothing was changed")
            }
            Fault::Other => ApiError::internal(format_args!("database: {err}")),
        }
    }
}

/// Turns every error that reaches the edge (unknown route, bad query parameter, missing
/// credentials, wrong content type…) into the contract's JSON shape. Errors that already are
/// [`ApiError`] responses pass through unchanged.
pub fn to_json_error(err: poem::Error) -> Response {
    use poem_openapi::error::{
        AuthorizationError, ContentTypeError, ParseParamError, ParsePathError, ParseRequestPayloadError,
    };
    if err.is_from_response() {
        return err.into_response();
    }
    let status = err.status();
    let api_error = if let Some(e) = err.downcast_ref::<ParseParamError>() {
        ApiError::bad_request(vec![param_problem(e.name, &e.reason)])
    } else if let Some(e) = err.downcast_ref::<ParsePathError>() {
        ApiError::bad_request(vec![format!("{} {}", e.name, e.reason)])
    } else if let Some(e) = err.downcast_ref::<ParseRequestPayloadError>() {
        ApiError::bad_request(vec![format!("body {}", e.reason)])
    } else if err.is::<AuthorizationError>() {
        ApiError::unauthorized("missing credentials: send `Authorization: Bearer svc_…` or sign in")
    } else if let Some(e) = err.downcast_ref::<ContentTypeError>() {
        ApiError::unsupported_media_type(format!("{e}; send application/json"))
    } else if status == StatusCode::NOT_FOUND {
        ApiError::not_found("route not found")
    } else if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large("request body too large")
    } else if status.is_server_error() {
        ApiError::internal(&err)
    } else {
        let mut resp = body(status, err.to_string()).into_response();
        resp.set_status(status);
        return resp;
    };
    api_error.into_response()
}

/// Words a query-parameter parse failure for people: `limit must be an integer`.
fn param_problem(name: &str, reason: &str) -> String {
    if reason.contains("integer") {
        format!("{name} must be an integer")
    } else if reason.contains("boolean") {
        format!("{name} must be a boolean")
    } else {
        format!("{name} is invalid: {reason}")
    }
}
