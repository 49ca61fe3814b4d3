//! The outgoing webhooks, declared in the OpenAPI document's `webhooks` section from the same
//! payload types the emitters use (interface: Events; Delivery).

use poem_openapi::param::Header;
use poem_openapi::payload::Json;
use poem_openapi::{Object, Webhook};

use super::ApiTags;
use crate::events::catalog::{
    StreamEventData, StreamInputSwitchedData, StreamSimulcastData, TestEventData, VodEventData,
};
use crate::events::EventName;

/// The body of a stream event delivery.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct StreamEventEnvelope {
    /// The delivery identifier (also `X-Service-Delivery`); the same on every retry.
    pub id: String,
    pub event: EventName,
    pub created_at: String,
    pub data: StreamEventData,
}

/// The body of a `stream.input_switched` delivery.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct StreamInputSwitchedEnvelope {
    /// The delivery identifier (also `X-Service-Delivery`); the same on every retry.
    pub id: String,
    pub event: EventName,
    pub created_at: String,
    pub data: StreamInputSwitchedData,
}

/// The body of a `stream.simulcast.live` or `stream.simulcast.error` delivery.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct StreamSimulcastEnvelope {
    /// The delivery identifier (also `X-Service-Delivery`); the same on every retry.
    pub id: String,
    pub event: EventName,
    pub created_at: String,
    pub data: StreamSimulcastData,
}

/// The body of a VOD event delivery.
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct VodEventEnvelope {
    /// The delivery identifier (also `X-Service-Delivery`); the same on every retry.
    pub id: String,
    pub event: EventName,
    pub created_at: String,
    pub data: VodEventData,
}

/// The body of the test ping (`event` is `webhook.test`).
#[derive(Debug, Object)]
#[oai(rename_all = "camelCase")]
pub struct TestEventEnvelope {
    pub id: String,
    pub event: String,
    pub created_at: String,
    pub data: TestEventData,
}

/// Declares one webhook operation per event. poem-openapi's `#[Webhook]` derive keys the
/// operations of one trait by HTTP method, so each event gets a single-operation trait, and
/// [`OutgoingWebhooks`] lists them all.
macro_rules! outgoing_webhooks {
    ($($trait_name:ident => $name:tt, $operation_id:tt, $envelope:ty, $summary:tt;)*) => {
        $(
            #[Webhook(tag = "ApiTags::Webhooks")]
            pub trait $trait_name {
                #[doc = $summary]
                ///
                /// `POST` to the webhook's url with `Content-Type: application/json` and
                /// `User-Agent: service-webhook/1.0`. `X-Service-Signature` is `sha256=` + hex
                /// HMAC-SHA256 of the raw body keyed with the webhook's secret. Answer 2xx within
                /// 10 s; anything else is retried after 5 s, 30 s, 2 min and 10 min, with the same
                /// delivery id and bytes.
                #[oai(name = $name, method = "post", operation_id = $operation_id)]
                fn deliver(
                    &self,
                    body: Json<$envelope>,
                    /// The event name.
                    #[oai(name = "X-Service-Event")] event: Header<String>,
                    /// The delivery id; equal to the body's `id`, the same on every retry.
                    #[oai(name = "X-Service-Delivery")] delivery: Header<String>,
                    /// `sha256=<64 hex characters>`.
                    #[oai(name = "X-Service-Signature")] signature: Header<String>,
                );
            }
        )*

        /// Every outgoing webhook of the catalog, plus the test ping.
        pub struct OutgoingWebhooks;

        impl poem_openapi::Webhook for OutgoingWebhooks {
            fn meta() -> Vec<poem_openapi::registry::MetaWebhook> {
                let mut all = Vec::new();
                $( all.extend(<&dyn $trait_name as poem_openapi::Webhook>::meta()); )*
                all
            }

            fn register(registry: &mut poem_openapi::registry::Registry) {
                $( <&dyn $trait_name as poem_openapi::Webhook>::register(registry); )*
            }
        }
    };
}

outgoing_webhooks! {
    OnStreamCreated => "stream.created", "onStreamCreated", StreamEventEnvelope, "stream.created: a stream was created";
    OnStreamLive => "stream.live", "onStreamLive", StreamEventEnvelope, "stream.live: the first push opened a session";
    OnStreamEnded => "stream.ended", "onStreamEnded", StreamEventEnvelope, "stream.ended: the push disconnected, or the stream was killed";
    OnStreamDisabled => "stream.disabled", "onStreamDisabled", StreamEventEnvelope, "stream.disabled: the stream was disabled; data.reason says why";
    OnStreamInputSwitched => "stream.input_switched", "onStreamInputSwitched", StreamInputSwitchedEnvelope, "stream.input_switched: the input feeding a live stream changed between its primary and its backup publisher; data.from and data.to say which";
    OnStreamSimulcastLive => "stream.simulcast.live", "onStreamSimulcastLive", StreamSimulcastEnvelope, "stream.simulcast.live: a simulcast target connected and receives the push; data.target says which";
    OnStreamSimulcastError => "stream.simulcast.error", "onStreamSimulcastError", StreamSimulcastEnvelope, "stream.simulcast.error: a simulcast target failed (once per streak of failures); data.target.lastError says why";
    OnVodUploaded => "vod.uploaded", "onVodUploaded", VodEventEnvelope, "vod.uploaded: the source landed in storage and passed validation";
    OnVodProcessing => "vod.processing", "onVodProcessing", VodEventEnvelope, "vod.processing: transcoding started";
    OnVodComplete => "vod.complete", "onVodComplete", VodEventEnvelope, "vod.complete: renditions, master playlist and thumbnail are published";
    OnVodFailed => "vod.failed", "onVodFailed", VodEventEnvelope, "vod.failed: transcoding failed; data.error holds the message";
    OnVodCancelled => "vod.cancelled", "onVodCancelled", VodEventEnvelope, "vod.cancelled: the VOD was cancelled";
    OnWebhookTest => "webhook.test", "onWebhookTest", TestEventEnvelope, "webhook.test: the ping sent by POST /webhooks/{id}/test";
}
