//! The REST API (poem-openapi). Every operation lives under `/v1` and documents its summary,
//! tag, security scheme and error statuses; the OpenAPI document is generated from this code.

pub mod admin;
pub mod allow;
pub mod api_keys;
pub mod auth;
pub mod body;
pub mod document;
pub mod error;
pub mod events;
mod examples;
pub mod idempotency;
pub mod outgoing;
pub mod pagination;
pub mod params;
pub mod passwords;
pub mod playback;
pub mod projects;
pub mod rules;
pub mod security;
mod state;
pub mod streams;
pub mod viewers;
pub mod vod;
pub mod webhooks;
pub mod whip;

use poem_openapi::{OpenApiService, Tags};

pub use state::ApiState;

#[derive(Tags)]
pub enum ApiTags {
    /// Sign-in sessions for people (cookies).
    Auth,
    /// Projects and their members.
    Projects,
    /// Project-scoped bearer credentials.
    #[oai(rename = "API keys")]
    ApiKeys,
    /// Live streams: push credentials, status and playback addresses.
    Streams,
    /// Video on demand: upload a file, get an HLS ladder and a thumbnail.
    #[oai(rename = "VOD")]
    Vod,
    /// Signed HTTP callbacks for stream and VOD events, and their delivery log.
    Webhooks,
    /// The operator's view of the service: its nodes (`SLUICE_ADMIN_TOKEN`).
    Admin,
}

pub type Apis = (
    auth::AuthApi,
    passwords::PasswordsApi,
    projects::ProjectsApi,
    api_keys::ApiKeysApi,
    streams::StreamsApi,
    streams::slate::SlateApi,
    streams::simulcast::SimulcastApi,
    vod::VodApi,
    playback::PlaybackApi,
    webhooks::WebhooksApi,
    events::EventsApi,
    admin::AdminApi,
);
pub type Service = OpenApiService<Apis, outgoing::OutgoingWebhooks>;

const DESCRIPTION: &str = "Sluice: self-hostable live streaming and video on demand. \
Every project endpoint takes `Authorization: Bearer svc_…` (an API key of that project) or the \
session cookie of a signed-in member. Errors are `{statusCode, error, message}`; for 400, \
`message` is an array with one entry per problem.";

/// The API service. The document does not depend on settings, so `sluice openapi`, the committed
/// `openapi/openapi.json` and `GET /v1/openapi.json` are the same bytes.
pub fn service() -> Service {
    OpenApiService::new(
        (
            auth::AuthApi,
            passwords::PasswordsApi,
            projects::ProjectsApi,
            api_keys::ApiKeysApi,
            streams::StreamsApi,
            streams::slate::SlateApi,
            streams::simulcast::SimulcastApi,
            vod::VodApi,
            playback::PlaybackApi,
            webhooks::WebhooksApi,
            events::EventsApi,
            admin::AdminApi,
        ),
        "Sluice",
        env!("CARGO_PKG_VERSION"),
    )
    .description(DESCRIPTION)
    .webhooks::<outgoing::OutgoingWebhooks>()
}

/// The OpenAPI document as served and committed (3.1, with a final newline).
///
/// # Panics
/// When poem-openapi's document breaks a rule of [`document`]: a programming error, which every
/// test run meets first.
pub fn spec_json(service: &Service) -> String {
    match document::publish(&service.spec()) {
        Ok(spec) => spec,
        Err(e) => panic!("the OpenAPI document cannot be published: {e}"),
    }
}
