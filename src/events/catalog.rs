//! The event catalog and each event's payload: the one typed place that emitters, the OpenAPI
//! document (its `webhooks` section) and the docs all read (interface: Events; Resources).

use poem_openapi::types::ToJSON;
use poem_openapi::{Enum, Object};

use crate::domain::simulcast::TargetStatus;
use crate::domain::stream::{DisabledReason, InputRole, StreamStatus};
use crate::domain::vod::{OutputFormat, VodStatus};

/// Every event a webhook can subscribe to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Enum)]
pub enum EventName {
    /// A stream was created.
    #[oai(rename = "stream.created")]
    StreamCreated,
    /// The first push opened a session.
    #[oai(rename = "stream.live")]
    StreamLive,
    /// The push disconnected, or the stream was killed.
    #[oai(rename = "stream.ended")]
    StreamEnded,
    /// The stream was disabled (manually, deleted, credit kill or no input); carries `reason`.
    #[oai(rename = "stream.disabled")]
    StreamDisabled,
    /// The input that feeds a live stream changed between its primary and its backup publisher;
    /// carries `from` and `to`.
    #[oai(rename = "stream.input_switched")]
    StreamInputSwitched,
    /// A simulcast target of a live stream connected and is being sent to; carries `target`.
    #[oai(rename = "stream.simulcast.live")]
    StreamSimulcastLive,
    /// A simulcast target failed (once per streak of failures); carries `target` with its
    /// `lastError`.
    #[oai(rename = "stream.simulcast.error")]
    StreamSimulcastError,
    /// The source file landed in storage and passed validation.
    #[oai(rename = "vod.uploaded")]
    VodUploaded,
    /// Transcoding started.
    #[oai(rename = "vod.processing")]
    VodProcessing,
    /// Renditions, master playlist and thumbnail are in storage; `playbackUrl` is ready.
    #[oai(rename = "vod.complete")]
    VodComplete,
    /// Transcoding failed; `error` holds the message.
    #[oai(rename = "vod.failed")]
    VodFailed,
    /// The VOD was cancelled.
    #[oai(rename = "vod.cancelled")]
    VodCancelled,
}

/// What a webhook subscribes to: `*` (every event) or one event's name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventFilter(String);

impl EventFilter {
    pub fn parse(s: &str) -> Result<EventFilter, String> {
        if s == "*" || EventName::parse(s).is_some() {
            Ok(EventFilter(s.to_string()))
        } else {
            Err(format!("must be * or one of {}", EventName::ALL.map(EventName::as_str).join(", ")))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Every filter there is: `*`, then the catalog.
    pub fn all() -> Vec<String> {
        std::iter::once("*").chain(EventName::ALL.map(EventName::as_str)).map(str::to_string).collect()
    }
}

crate::domain::closed_string_set!(
    EventFilter,
    "EventFilter",
    "`*` (every event) or an event name.",
    EventFilter::all(),
    |e: &EventFilter| e.0.clone(),
    EventFilter::parse
);

impl EventName {
    pub const ALL: [EventName; 12] = [
        EventName::StreamCreated,
        EventName::StreamLive,
        EventName::StreamEnded,
        EventName::StreamDisabled,
        EventName::StreamInputSwitched,
        EventName::StreamSimulcastLive,
        EventName::StreamSimulcastError,
        EventName::VodUploaded,
        EventName::VodProcessing,
        EventName::VodComplete,
        EventName::VodFailed,
        EventName::VodCancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventName::StreamCreated => "stream.created",
            EventName::StreamLive => "stream.live",
            EventName::StreamEnded => "stream.ended",
            EventName::StreamDisabled => "stream.disabled",
            EventName::StreamInputSwitched => "stream.input_switched",
            EventName::StreamSimulcastLive => "stream.simulcast.live",
            EventName::StreamSimulcastError => "stream.simulcast.error",
            EventName::VodUploaded => "vod.uploaded",
            EventName::VodProcessing => "vod.processing",
            EventName::VodComplete => "vod.complete",
            EventName::VodFailed => "vod.failed",
            EventName::VodCancelled => "vod.cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<EventName> {
        EventName::ALL.into_iter().find(|e| e.as_str() == s)
    }

    /// What the event is about, one of [`KINDS`]: the part of its name before the dot.
    pub fn kind(self) -> &'static str {
        let name = self.as_str();
        name.split_once('.').map_or(name, |(kind, _)| kind)
    }
}

/// What events are about: their names begin with one of these and a dot.
pub const KINDS: [&str; 2] = ["stream", "vod"];

/// The name of the signed ping sent by `POST /webhooks/<id>/test`. Not in the catalog: it is
/// sent only on request, to that one webhook.
pub const TEST_EVENT: &str = "webhook.test";

/// `data` of the stream events.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct StreamEventData {
    pub id: String,
    pub name: String,
    pub stream_key: String,
    pub status: StreamStatus,
    pub project_id: String,
    pub vod_enabled: bool,
    pub created_at: String,
    /// Why the stream was disabled (`stream.disabled` only).
    #[oai(skip_serializing_if_is_none)]
    pub reason: Option<DisabledReason>,
}

/// `data` of `stream.input_switched`: the stream, and the inputs before and after.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct StreamInputSwitchedData {
    pub id: String,
    pub name: String,
    pub stream_key: String,
    pub status: StreamStatus,
    pub project_id: String,
    pub vod_enabled: bool,
    pub created_at: String,
    /// The input that fed the stream before.
    pub from: InputRole,
    /// The input that feeds it now.
    pub to: InputRole,
}

/// A simulcast target as its events carry it.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct SimulcastTargetData {
    #[oai(rename = "_id")]
    pub id: String,
    pub name: String,
    pub status: TargetStatus,
    pub last_error: Option<String>,
}

/// `data` of `stream.simulcast.live` and `stream.simulcast.error`: the stream, and the target.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct StreamSimulcastData {
    pub id: String,
    pub name: String,
    pub stream_key: String,
    pub status: StreamStatus,
    pub project_id: String,
    pub vod_enabled: bool,
    pub created_at: String,
    pub target: SimulcastTargetData,
}

/// `data` of the VOD events.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct VodEventData {
    pub id: String,
    pub name: String,
    pub status: VodStatus,
    pub project_id: String,
    pub output_format: OutputFormat,
    /// `{playback_base}/vod/<id>/master.m3u8`
    pub playback_url: String,
    /// `{playback_base}/vod/<id>/thumb.jpg`
    pub thumbnail_url: String,
    /// Bytes of the source file.
    pub source_size: Option<i64>,
    pub completed_at: Option<String>,
    /// The failure message (`vod.failed` only).
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
}

/// `data` of the test ping.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct TestEventData {
    pub webhook_id: String,
    pub project_id: String,
    pub message: String,
}

/// An event with its typed payload.
#[derive(Debug, Clone)]
pub enum Event {
    StreamCreated(StreamEventData),
    StreamLive(StreamEventData),
    StreamEnded(StreamEventData),
    StreamDisabled(StreamEventData),
    StreamInputSwitched(StreamInputSwitchedData),
    StreamSimulcastLive(StreamSimulcastData),
    StreamSimulcastError(StreamSimulcastData),
    VodUploaded(VodEventData),
    VodProcessing(VodEventData),
    VodComplete(VodEventData),
    VodFailed(VodEventData),
    VodCancelled(VodEventData),
}

impl Event {
    pub fn name(&self) -> EventName {
        match self {
            Event::StreamCreated(_) => EventName::StreamCreated,
            Event::StreamLive(_) => EventName::StreamLive,
            Event::StreamEnded(_) => EventName::StreamEnded,
            Event::StreamDisabled(_) => EventName::StreamDisabled,
            Event::StreamInputSwitched(_) => EventName::StreamInputSwitched,
            Event::StreamSimulcastLive(_) => EventName::StreamSimulcastLive,
            Event::StreamSimulcastError(_) => EventName::StreamSimulcastError,
            Event::VodUploaded(_) => EventName::VodUploaded,
            Event::VodProcessing(_) => EventName::VodProcessing,
            Event::VodComplete(_) => EventName::VodComplete,
            Event::VodFailed(_) => EventName::VodFailed,
            Event::VodCancelled(_) => EventName::VodCancelled,
        }
    }

    /// The `data` member of the envelope.
    pub fn data(&self) -> serde_json::Value {
        let json = match self {
            Event::StreamCreated(d)
            | Event::StreamLive(d)
            | Event::StreamEnded(d)
            | Event::StreamDisabled(d) => d.to_json(),
            Event::StreamInputSwitched(d) => d.to_json(),
            Event::StreamSimulcastLive(d) | Event::StreamSimulcastError(d) => d.to_json(),
            Event::VodUploaded(d)
            | Event::VodProcessing(d)
            | Event::VodComplete(d)
            | Event::VodFailed(d)
            | Event::VodCancelled(d) => d.to_json(),
        };
        json.unwrap_or(serde_json::Value::Null)
    }
}

/// Whether a webhook's stored subscription (space-separated names or `*`) takes `event`.
pub fn subscribed(events: &str, event: &str) -> bool {
    events.split_whitespace().any(|e| e == "*" || e == event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_subscriptions_match() {
        for e in EventName::ALL {
            assert_eq!(EventName::parse(e.as_str()), Some(e));
        }
        assert!(subscribed("stream.live vod.failed", "vod.failed"));
        assert!(!subscribed("stream.live", "stream.ended"));
        assert!(subscribed("*", "vod.complete"));
        for e in EventName::ALL {
            assert!(KINDS.contains(&e.kind()), "{} is about a known kind", e.as_str());
        }
        assert_eq!(EventName::VodFailed.kind(), "vod");
    }

    #[test]
    fn reason_appears_only_when_set() {
        let d = StreamEventData {
            id: "s".into(),
            name: "n".into(),
            stream_key: "k".into(),
            status: StreamStatus::Idle,
            project_id: "p".into(),
            vod_enabled: false,
            created_at: "t".into(),
            reason: None,
        };
        assert!(Event::StreamEnded(d.clone()).data().get("reason").is_none());
        let v = Event::StreamDisabled(StreamEventData { reason: Some(DisabledReason::Manual), ..d }).data();
        assert_eq!(v["reason"], "manual");
        assert_eq!(v["streamKey"], "k");
    }
}
