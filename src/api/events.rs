//! `GET /v1/projects/<slug>/events` (CONTRACT: Webhooks, event log): the project's events in
//! commit order, as JSON pages by cursor or, with `Accept: text/event-stream`, as server-sent
//! events that follow the log live (`Last-Event-ID` resumes).
//!
//! A follower is read by pull: the stream reads the next page only when the connection has
//! taken the last one, so a reader that stops reading holds one page and its connection, never
//! a growing buffer, until the HTTP layer drops a connection whose writes wait too long
//! (`app::WRITE_STALL`). Followers are capped per credential, per client address and in all; each
//! wakes when this node logs an event and reads again every [`POLL`] for other nodes' events.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{BoxStream, StreamExt};
use poem::web::sse::Event as SseEvent;
use poem::web::Data;
use poem::Request;
use poem_openapi::param::{Header, Path, Query};
use poem_openapi::payload::{EventStream, Json};
use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
use poem_openapi::types::{ParseFromParameter, ParseResult, Type};
use poem_openapi::{ApiResponse, Object, OpenApi, ResponseContent};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::error::{ApiError, ApiResult};
use super::pagination::{Limit, PageQuery};
use super::security::{need, Actor, Authorized};
use super::ApiTags;
use crate::api::ApiState;
use crate::domain::Scope;
use crate::events::catalog::KINDS;
use crate::events::EventName;
use crate::slots::{Slot, Slots};
use crate::store::events::{EventQuery, EventRow};
use crate::store::Db;

/// How often a follower reads again with nothing logged on this node (events of other nodes).
pub const POLL: Duration = Duration::from_secs(1);
/// Events read at a time by a follower.
const FOLLOW_PAGE: i64 = 100;
/// An SSE comment this often keeps proxies from closing a quiet follower.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Followers one credential (API key or signed-in user) may have open at once.
pub const PER_CREDENTIAL: usize = 8;
/// Followers one client address may have open at once.
pub const PER_ADDRESS: usize = 16;
/// Followers the node serves at once.
pub const IN_ALL: usize = 1024;

/// The places of the log's followers.
pub struct Followers {
    per_credential: Arc<Slots<String>>,
    per_address: Arc<Slots<IpAddr>>,
    all: Arc<Slots<()>>,
    /// Cancelled at shutdown: every follower ends, so draining connections does not wait.
    closing: CancellationToken,
}

impl Default for Followers {
    fn default() -> Self {
        Followers {
            per_credential: Slots::new(PER_CREDENTIAL),
            per_address: Slots::new(PER_ADDRESS),
            all: Slots::new(IN_ALL),
            closing: CancellationToken::new(),
        }
    }
}

impl Followers {
    /// Ends every follower (shutdown).
    pub fn close(&self) {
        self.closing.cancel();
    }
}

/// One follower's places, given back when its stream is dropped.
struct Places {
    _credential: Slot<String>,
    _address: Option<Slot<IpAddr>>,
    _all: Slot<()>,
}

/// One event of the log.
#[derive(Debug, Clone, Object)]
#[oai(rename_all = "camelCase")]
pub struct LoggedEvent {
    /// Opaque and increasing: pass it as `after` (or as `Last-Event-ID`) to read on from here.
    pub cursor: String,
    /// The event's id (each webhook delivery of it has an id of its own).
    pub id: String,
    pub event: EventName,
    pub created_at: String,
    /// The event's payload, as its webhook deliveries carry it (see `webhooks`).
    pub data: serde_json::Value,
}

impl LoggedEvent {
    fn of(row: EventRow) -> Option<LoggedEvent> {
        let envelope: serde_json::Value = serde_json::from_str(&row.body).ok()?;
        let text = |k: &str| envelope.get(k).and_then(|v| v.as_str()).map(str::to_string);
        Some(LoggedEvent {
            cursor: cursor(row.seq),
            id: text("id")?,
            event: EventName::parse(&row.event)?,
            created_at: text("createdAt")?,
            data: envelope.get("data").cloned().unwrap_or(serde_json::Value::Null),
        })
    }

    /// The SSE message: `id:` the cursor, `event:` the name, `data:` the envelope.
    fn to_sse(&self) -> SseEvent {
        let envelope = serde_json::json!({
            "id": self.id,
            "event": self.event.as_str(),
            "createdAt": self.created_at,
            "data": self.data,
        });
        SseEvent::message(envelope.to_string()).id(self.cursor.clone()).event_type(self.event.as_str())
    }
}

/// A page of the log.
#[derive(Debug, Object)]
pub struct EventPage {
    /// Oldest first.
    pub items: Vec<LoggedEvent>,
    /// Where to read on from: the last item's cursor, or `after` when there were none (`null`
    /// when neither).
    pub next: Option<String>,
}

/// The same log in either form, chosen by `Accept`.
#[derive(ResponseContent)]
pub enum EventsBody {
    Json(Json<EventPage>),
    Stream(EventStream<BoxStream<'static, LoggedEvent>>),
}

#[derive(ApiResponse)]
pub enum EventsResponse {
    /// A page of events (`application/json`), or, asked for with `Accept: text/event-stream`,
    /// the log followed live as server-sent events: `id:` the cursor, `event:` the event name,
    /// `data:` the envelope `{id, event, createdAt, data}`. A follower is refused with 429 past
    /// 8 per credential or 16 per client address.
    #[oai(status = 200)]
    Ok(EventsBody),
}

fn cursor(seq: i64) -> String {
    format!("{seq:012}")
}

/// A string parameter documented by its schema (a closed set, a pattern) but taken as written,
/// so that the operation reports every bad parameter at once (as `pagination::Limit` does).
pub struct Documented<S>(pub String, PhantomData<S>);

/// What a [`Documented`] parameter's schema says.
pub trait StringRule: Send + Sync {
    const NAME: &'static str;
    fn describe(schema: &mut MetaSchema);
}

/// A cursor: digits (what [`cursor`] writes).
pub struct CursorRule;
impl StringRule for CursorRule {
    const NAME: &'static str = "EventCursor";
    fn describe(schema: &mut MetaSchema) {
        schema.pattern = Some("^[0-9]{1,18}$".into());
    }
}

/// `type`: `*`, an event name, or a kind and `.*`.
pub struct TypeRule;
impl StringRule for TypeRule {
    const NAME: &'static str = "EventTypeFilter";
    fn describe(schema: &mut MetaSchema) {
        let kinds = KINDS.iter().map(|k| format!("{k}.*"));
        let names = EventName::ALL.iter().map(|e| e.as_str().to_string());
        schema.enum_items = std::iter::once("*".to_string())
            .chain(kinds)
            .chain(names)
            .map(serde_json::Value::String)
            .collect();
    }
}

impl<S: StringRule> Type for Documented<S> {
    const IS_REQUIRED: bool = true;
    type RawValueType = String;
    type RawElementValueType = String;

    fn name() -> Cow<'static, str> {
        S::NAME.into()
    }

    fn schema_ref() -> MetaSchemaRef {
        let mut schema = MetaSchema::new("string");
        S::describe(&mut schema);
        MetaSchemaRef::Inline(Box::new(schema))
    }

    fn as_raw_value(&self) -> Option<&String> {
        Some(&self.0)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a String> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl<S: StringRule> ParseFromParameter for Documented<S> {
    fn parse_from_parameter(value: &str) -> ParseResult<Self> {
        Ok(Documented(value.to_string(), PhantomData))
    }
}

/// A cursor back to its number: digits only (at most 18), as [`cursor`] writes them.
fn parse_cursor(field: &str, s: &str) -> ApiResult<i64> {
    if s.is_empty() || s.len() > 18 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::invalid(field, "must be a cursor of this log"));
    }
    s.parse().map_err(|_| ApiError::invalid(field, "must be a cursor of this log"))
}

/// `type`: `*`, an event name, or a kind and `.*` (`stream.*`).
fn parse_type(s: &str) -> ApiResult<(Option<String>, Option<&'static str>)> {
    if s == "*" {
        return Ok((None, None));
    }
    if let Some(kind) = s.strip_suffix(".*").and_then(|k| KINDS.iter().find(|known| **known == k)) {
        return Ok((None, Some(kind)));
    }
    match EventName::parse(s) {
        Some(name) => Ok((Some(name.as_str().to_string()), None)),
        None => Err(ApiError::invalid(
            "type",
            &format!(
                "must be *, an event name ({}) or one of {}",
                EventName::ALL.map(EventName::as_str).join(", "),
                KINDS.map(|k| format!("{k}.*")).join(", ")
            ),
        )),
    }
}

pub struct EventsApi;

#[OpenApi(tag = "ApiTags::Webhooks")]
impl EventsApi {
    /// Read the project's event log, or follow it live as server-sent events
    ///
    /// Every event of the project in the order it happened, kept 7 days: the webhook envelope
    /// plus a `cursor`. Events about streams need `streams:read`, about VODs `vod:read`; the
    /// others are left out.
    #[oai(path = "/v1/projects/:slug/events", method = "get", operation_id = "listEvents")]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        app: Data<&Arc<ApiState>>,
        p: Authorized<need::Member>,
        #[oai(name = "slug")] _slug: Path<String>,
        /// Read the events after this cursor (default: from the oldest kept).
        after: Query<Option<Documented<CursorRule>>>,
        /// How many at most (default 100, at most 500; a page of the JSON form).
        limit: Query<Option<Limit<500>>>,
        /// Only this event (`stream.live`) or kind (`stream.*`, `vod.*`); `*` for all.
        #[oai(name = "type")]
        kind: Query<Option<Documented<TypeRule>>>,
        /// What an SSE client sends when it reconnects: resumes after that cursor (over `after`).
        #[oai(name = "Last-Event-ID")]
        last_event_id: Header<Option<Documented<CursorRule>>>,
        req: &Request,
    ) -> ApiResult<EventsResponse> {
        // Every bad parameter is reported at once.
        let mut problems = Vec::new();
        let page = noted(PageQuery::parse(None, limit.0.map(|l| l.0), 100, 500), &mut problems);
        let last = noted(
            last_event_id.0.as_ref().map(|c| parse_cursor("Last-Event-ID", &c.0)).transpose(),
            &mut problems,
        );
        let after = noted(after.0.as_ref().map(|c| parse_cursor("after", &c.0)).transpose(), &mut problems);
        let filter = noted(kind.0.as_ref().map(|k| parse_type(&k.0)).transpose(), &mut problems);
        let (Some(page), Some(last), Some(after), Some(filter)) = (page, last, after, filter) else {
            return Err(ApiError::bad_request(problems));
        };
        // A reconnecting follower's `Last-Event-ID` wins over `after`.
        let after_seq = last.or(after);
        let filter = filter.unwrap_or((None, None));
        let kinds = [(Scope::StreamsRead, "stream"), (Scope::VodRead, "vod")]
            .into_iter()
            .filter(|(scope, _)| p.scopes.allows(*scope))
            .map(|(_, kind)| kind)
            .collect();
        let query = EventQuery { kinds, event: filter.0, kind: filter.1 };
        let wants_stream = req
            .header("accept")
            .is_some_and(|a| a.split(',').any(|t| t.trim().starts_with("text/event-stream")));
        if !wants_stream {
            let rows = app.db.events_after(&p.project.id, after_seq.unwrap_or(0), page.limit, &query).await?;
            let items: Vec<LoggedEvent> = rows.into_iter().filter_map(LoggedEvent::of).collect();
            let next = items.last().map(|e| e.cursor.clone()).or_else(|| after_seq.map(cursor));
            return Ok(EventsResponse::Ok(EventsBody::Json(Json(EventPage { items, next }))));
        }
        let credential = match &p.actor {
            Actor::Key { id } => format!("key:{id}"),
            Actor::User { id } => format!("user:{id}"),
        };
        let followers = &app.followers;
        let address = crate::client_ip::of_request(req).map(crate::client_ip::limit_key);
        let places = (|| {
            let credential = followers.per_credential.take(credential)?;
            let address = match address {
                Some(ip) => Some(followers.per_address.take(ip)?),
                None => None,
            };
            Some(Places { _credential: credential, _address: address, _all: followers.all.take(())? })
        })()
        .ok_or_else(|| {
            ApiError::too_many_because(
                POLL.as_secs(),
                format!(
                    "too many followers of the event log: at most {PER_CREDENTIAL} per credential and \
                     {PER_ADDRESS} per client address"
                ),
            )
        })?;
        let follow = Follow {
            db: app.db.clone(),
            project_id: p.project.id.clone(),
            query,
            after: after_seq.unwrap_or(0),
            pending: VecDeque::new(),
            logged: app.outbox.logged(),
            closing: followers.closing.clone(),
            _places: places,
        };
        let stream = follow.run().boxed();
        Ok(EventsResponse::Ok(EventsBody::Stream(
            EventStream::new(stream).keep_alive(KEEP_ALIVE).to_event(|e| e.to_sse()),
        )))
    }
}

/// The value of a check that passed, or `None` with the 400's messages (each names its field)
/// added to `problems`.
fn noted<T>(checked: ApiResult<T>, problems: &mut Vec<String>) -> Option<T> {
    match checked {
        Ok(v) => Some(v),
        Err(ApiError::BadRequest(body)) => {
            problems.extend(body.0.message);
            None
        }
        // The checks here answer only 400s.
        Err(_) => None,
    }
}

/// One SSE follower of the log.
struct Follow {
    db: Db,
    project_id: String,
    query: EventQuery,
    /// The last sequence number read.
    after: i64,
    pending: VecDeque<LoggedEvent>,
    logged: watch::Receiver<u64>,
    closing: CancellationToken,
    _places: Places,
}

impl Follow {
    fn run(self) -> impl futures_util::Stream<Item = LoggedEvent> + Send + 'static {
        futures_util::stream::unfold(self, |mut f| async move {
            loop {
                if f.closing.is_cancelled() {
                    return None;
                }
                if let Some(e) = f.pending.pop_front() {
                    return Some((e, f));
                }
                // Seen before reading: an event logged while the read runs wakes the wait below.
                f.logged.borrow_and_update();
                match f.db.events_after(&f.project_id, f.after, FOLLOW_PAGE, &f.query).await {
                    Ok(rows) if !rows.is_empty() => {
                        f.after = rows.last().map_or(f.after, |r| r.seq);
                        f.pending.extend(rows.into_iter().filter_map(LoggedEvent::of));
                        continue;
                    }
                    Ok(_) => {}
                    // The database is away: the follower stays and reads again.
                    Err(e) => tracing::warn!(error = %e, "event log: reading for a follower"),
                }
                tokio::select! {
                    changed = f.logged.changed() => if changed.is_err() { return None },
                    _ = tokio::time::sleep(POLL) => {}
                    _ = f.closing.cancelled() => return None,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_anything_else_is_refused() {
        for seq in [0, 1, 42, 999_999_999_999, 123_456_789_012_345] {
            assert_eq!(parse_cursor("after", &cursor(seq)).ok(), Some(seq));
        }
        assert!(cursor(9) < cursor(10), "cursors sort as text too");
        for bad in ["", "-1", "1e3", "abc", "0x10", "1234567890123456789", " 1"] {
            assert!(parse_cursor("after", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn types_are_all_a_name_or_a_kind() {
        assert_eq!(parse_type("*").ok(), Some((None, None)));
        assert_eq!(parse_type("stream.*").ok(), Some((None, Some("stream"))));
        assert_eq!(parse_type("vod.complete").ok(), Some((Some("vod.complete".into()), None)));
        for bad in ["stream", "webhook.*", "stream.livex", "", ".*"] {
            assert!(parse_type(bad).is_err(), "{bad:?}");
        }
    }
}
