//! One RTMP ingest connection as a state machine without IO: bytes and time in, actions out
//! (STYLE: sans-IO; anchor rust-media-libs `rtmp/src/sessions/server/`). The tokio shell reads
//! the socket, feeds [`IngestSession::feed`] with the time, writes every [`Action::Send`] in
//! order, answers connect and publish requests later with [`IngestSession::accept`] /
//! [`IngestSession::reject`] (publishing is approved asynchronously), and asks
//! [`IngestSession::poll`] on a timer whether a deadline has passed.
//!
//! Time is microseconds on any monotonic clock the caller likes, so the deadlines of the
//! contract (Live media: no publish within 10 s, no media for 10 s, no keyframe for 30 s) are
//! tested on plain values.
//!
//! Every peer byte is bounded before rml_rtmp sees it (CONTRACT: Live media — a hostile client
//! cannot take the server down): [`ChunkReader`] splits the chunk stream with bounds on message
//! size, chunk streams and buffered bytes; AMF0 bodies are refused when they nest too deep
//! ([`amf::check_depth`]) and commands with fewer than three values (rml_rtmp's `drain(..3)`
//! panics on them) are refused; then each message is written again by rml_rtmp's own serializer,
//! one chunk per message, for rml_rtmp's `ServerSession`, which thus only ever reads bytes of
//! known shape. The approved publish's audio and video, nearly all the bytes, go around it (it
//! would only decode them again), so the acknowledgements it would send for them and the pings
//! are answered here (`control`, `acknowledge`).
//!
//! rml_rtmp's `ConnectionRequested` event carries only the app name, but telling ffmpeg (which
//! sends a bare `connect` and its credentials on the stream name) from OBS/librtmp (which needs a
//! bare `connect` refused to start Adobe authentication) takes the connect object's `flashVer`,
//! which the session reads from the `connect` command on its way through.

use std::collections::HashMap;
use std::fmt;

use bytes::Bytes;
use rml_amf0::Amf0Value;
use rml_rtmp::chunk_io::ChunkSerializer;
use rml_rtmp::handshake::{Handshake, HandshakeProcessResult, PeerType};
use rml_rtmp::messages::{MessagePayload, RtmpMessage, UserControlEventType};
use rml_rtmp::sessions::{
    ServerSession, ServerSessionConfig, ServerSessionEvent, ServerSessionResult, StreamMetadata,
};
use rml_rtmp::time::RtmpTimestamp;

use super::amf;
use super::chunks::{read_u32, ChunkError, ChunkReader, Message, AUDIO, MAX_VIDEO_MESSAGE, VIDEO};

/// From the first byte to an approved publish.
pub const START_DEADLINE_US: u64 = 10_000_000;
/// A live push with no audio or video for this long is ended (CONTRACT: Streams — auto-stop).
pub const NO_MEDIA_US: u64 = 10_000_000;
/// A push that sends video but no keyframe for this long is ended (CONTRACT: Live media): the
/// open segment of the untranscoded variant holds everything since the last keyframe.
pub const NO_KEYFRAME_US: u64 = 30_000_000;
/// Bytes a peer may send before its publish is approved. A handshake, connect and publish
/// take a few KiB.
pub const MAX_BYTES_BEFORE_PUBLISH: u64 = 1024 * 1024;
/// Video bytes allowed since the last keyframe: bounds the open segment of the untranscoded
/// variant whatever the publisher's bitrate (about 17 Mbit/s for the whole 30 s).
pub const MAX_BYTES_SINCE_KEYFRAME: u64 = 64 * 1024 * 1024;

const USER_CONTROL: u8 = 4;
const WINDOW_ACKNOWLEDGEMENT: u8 = 5;
/// The user control event type of a ping (§6.2).
const PING_REQUEST: [u8; 2] = [0, 6];
const AMF0_DATA: u8 = 18;
const AMF0_COMMAND: u8 = 20;
const AMF3_DATA: u8 = 15;
const AMF3_COMMAND: u8 = 17;

/// What the shell must do.
#[derive(Debug, PartialEq)]
pub enum Action {
    /// Write these bytes to the peer, in order.
    Send(Vec<u8>),
    /// Answer with `accept` or `reject`. `app` includes its query (`live?authmod=adobe&…`).
    ConnectRequested {
        request_id: u32,
        app: String,
        flash_ver: String,
    },
    /// Answer with `accept` or `reject`. `stream_name` includes its query (`key?user=…&pass=…`).
    PublishRequested {
        request_id: u32,
        stream_name: String,
    },
    Metadata(StreamMetadata),
    Video {
        data: Bytes,
        timestamp: u32,
    },
    Audio {
        data: Bytes,
        timestamp: u32,
    },
    /// The client ended its publish (`FCUnpublish`/`deleteStream`).
    PublishFinished,
}

/// A deadline that passed (see [`IngestSession::poll`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    NoPublish,
    NoMedia,
    NoKeyframe,
}

impl fmt::Display for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Deadline::NoPublish => "no publish within 10 s",
            Deadline::NoMedia => "no media for 10 s",
            Deadline::NoKeyframe => "no keyframe for 30 s",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("handshake: {0}")]
    Handshake(String),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("chunk stream: {0}")]
    Chunks(#[from] ChunkError),
    #[error("{0}")]
    Amf(#[from] amf::TooDeep),
    #[error("{0}")]
    Limit(&'static str),
}

enum Phase {
    Handshaking(Box<Handshake>),
    Session(Box<ServerSession>),
}

/// Where the publish stands, with the times the deadlines run from.
enum Publish {
    Waiting { since: u64 },
    Live { last_media: u64, last_keyframe: u64, since_keyframe: u64, video: bool },
}

pub struct IngestSession {
    phase: Phase,
    reader: ChunkReader,
    /// Writes the checked messages again for `ServerSession`, one chunk each.
    forward: ChunkSerializer,
    flash_ver: String,
    /// The time of the input being handled.
    now: u64,
    received: u64,
    publish: Publish,
    /// Publish requests not answered yet, with the message stream each asked for.
    publish_requests: HashMap<u32, u32>,
    /// The message stream of the last `publish` command checked.
    publish_stream: u32,
    /// The message stream of the approved publish: its audio and video go around rml_rtmp.
    media_stream: Option<u32>,
    /// The acknowledgement window the peer asked for (`WindowAcknowledgement`), and the byte
    /// count last acknowledged.
    ack_window: Option<u32>,
    acked: u64,
}

impl IngestSession {
    /// A session whose peer connected at `now` (µs).
    pub fn new(now: u64) -> Self {
        IngestSession {
            phase: Phase::Handshaking(Box::new(Handshake::new(PeerType::Server))),
            reader: ChunkReader::new(),
            forward: ChunkSerializer::new(),
            flash_ver: String::new(),
            now,
            received: 0,
            publish: Publish::Waiting { since: now },
            publish_requests: HashMap::new(),
            publish_stream: 0,
            media_stream: None,
            ack_window: None,
            acked: 0,
        }
    }

    /// Feeds bytes read from the peer at `now` (µs).
    pub fn feed(&mut self, now: u64, input: &[u8]) -> Result<Vec<Action>, SessionError> {
        self.now = now;
        self.received += input.len() as u64;
        if matches!(self.publish, Publish::Waiting { .. }) && self.received > MAX_BYTES_BEFORE_PUBLISH {
            return Err(SessionError::Limit("too much data before publishing"));
        }
        let mut actions = Vec::new();
        let rest = match &mut self.phase {
            Phase::Handshaking(h) => {
                match h.process_bytes(input).map_err(|e| SessionError::Handshake(format!("{e:?}")))? {
                    HandshakeProcessResult::InProgress { response_bytes } => {
                        push_send(&mut actions, response_bytes);
                        return Ok(actions);
                    }
                    HandshakeProcessResult::Completed { response_bytes, remaining_bytes } => {
                        push_send(&mut actions, response_bytes);
                        let (session, initial) = ServerSession::new(ServerSessionConfig::new())
                            .map_err(|e| SessionError::Protocol(format!("{e:?}")))?;
                        self.phase = Phase::Session(Box::new(session));
                        self.map_results(initial, &mut actions)?;
                        // One chunk per forwarded message from here on.
                        let size = self
                            .forward
                            .set_max_chunk_size(MAX_VIDEO_MESSAGE, RtmpTimestamp::new(0))
                            .map_err(|e| SessionError::Protocol(format!("{e:?}")))?;
                        self.deliver(&size.bytes, &mut actions)?;
                        std::borrow::Cow::Owned(remaining_bytes)
                    }
                }
            }
            // Media is read where it lies, not copied first.
            Phase::Session(_) => std::borrow::Cow::Borrowed(input),
        };
        let mut messages = Vec::new();
        self.reader.push(&rest, &mut messages)?;
        for message in messages {
            // The approved publish's audio and video, nearly all of a push's bytes, are read
            // here: rml_rtmp would only decode them again and raise the same event.
            if matches!(message.type_id, AUDIO | VIDEO) && self.media_stream == Some(message.stream_id) {
                self.media(message.type_id, message.data, message.timestamp, &mut actions)?;
                continue;
            }
            if self.control(&message, &mut actions)? {
                continue;
            }
            if self.check(&message)? {
                let payload = MessagePayload {
                    timestamp: RtmpTimestamp::new(message.timestamp),
                    type_id: message.type_id,
                    message_stream_id: message.stream_id,
                    data: message.data,
                };
                let packet = self
                    .forward
                    .serialize(&payload, true, false)
                    .map_err(|e| SessionError::Protocol(format!("{e:?}")))?;
                self.deliver(&packet.bytes, &mut actions)?;
            }
        }
        self.acknowledge(&mut actions)?;
        Ok(actions)
    }

    /// The protocol control messages answered here rather than by rml_rtmp, which no longer sees
    /// the media bytes it would count: the peer's acknowledgement window, and its pings (see
    /// [`control_message`]). True when the message was handled.
    fn control(&mut self, message: &Message, actions: &mut Vec<Action>) -> Result<bool, SessionError> {
        match message.type_id {
            WINDOW_ACKNOWLEDGEMENT => {
                let size = read_u32(&message.data)
                    .ok_or_else(|| SessionError::Protocol("short window size".into()))?;
                self.ack_window = (size > 0).then_some(size);
                Ok(true)
            }
            USER_CONTROL if message.data.get(..2) == Some(&PING_REQUEST[..]) => {
                let time = message
                    .data
                    .get(2..)
                    .and_then(read_u32)
                    .ok_or_else(|| SessionError::Protocol("short ping".into()))?;
                let answer = RtmpMessage::UserControl {
                    event_type: UserControlEventType::PingResponse,
                    stream_id: None,
                    buffer_length: None,
                    timestamp: Some(RtmpTimestamp::new(time)),
                };
                actions.push(Action::Send(control_message(answer)?));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Acknowledges the bytes received once a window of them has come since the last ack
    /// (RTMP 1.0 §5.4.3: the sequence number is the count received so far, modulo 2^32), from
    /// the approved publish on (see [`control_message`]); before it, at most
    /// [`MAX_BYTES_BEFORE_PUBLISH`] arrive.
    fn acknowledge(&mut self, actions: &mut Vec<Action>) -> Result<(), SessionError> {
        let (Some(window), Publish::Live { .. }) = (self.ack_window, &self.publish) else { return Ok(()) };
        if self.received - self.acked >= u64::from(window) {
            self.acked = self.received;
            // Truncation is the protocol's: the count wraps at 2^32.
            let sequence_number = (self.received & u64::from(u32::MAX)) as u32;
            actions.push(Action::Send(control_message(RtmpMessage::Acknowledgement { sequence_number })?));
        }
        Ok(())
    }

    /// Audio or video of the approved publish: the media clocks, then the action.
    fn media(
        &mut self,
        type_id: u8,
        data: Bytes,
        timestamp: u32,
        actions: &mut Vec<Action>,
    ) -> Result<(), SessionError> {
        if type_id == VIDEO {
            self.note_video(&data)?;
            actions.push(Action::Video { data, timestamp });
        } else {
            if let Publish::Live { last_media, .. } = &mut self.publish {
                *last_media = self.now;
            }
            actions.push(Action::Audio { data, timestamp });
        }
        Ok(())
    }

    /// Whether a deadline has passed at `now` (µs); the shell ends the connection if so.
    pub fn poll(&self, now: u64) -> Option<Deadline> {
        match self.publish {
            Publish::Waiting { since } => {
                (now.saturating_sub(since) >= START_DEADLINE_US).then_some(Deadline::NoPublish)
            }
            Publish::Live { last_media, last_keyframe, video, .. } => {
                if now.saturating_sub(last_media) >= NO_MEDIA_US {
                    Some(Deadline::NoMedia)
                } else if video && now.saturating_sub(last_keyframe) >= NO_KEYFRAME_US {
                    Some(Deadline::NoKeyframe)
                } else {
                    None
                }
            }
        }
    }

    /// The media read so far is due until `at` (µs): the connection holds its reads back
    /// while a push runs ahead of real time, so the no-media deadline runs from then, not from
    /// the read (a rushed push at a low bitrate may hold one read for over 10 s). The keyframe
    /// deadline is left as it is.
    pub fn media_due_until(&mut self, at: u64) {
        if let Publish::Live { last_media, .. } = &mut self.publish {
            *last_media = (*last_media).max(at);
        }
    }

    /// Whether a publish was approved.
    pub fn is_publishing(&self) -> bool {
        matches!(self.publish, Publish::Live { .. })
    }

    /// Approves a request at `now` (µs); an approved publish starts the media deadlines.
    pub fn accept(&mut self, now: u64, request_id: u32) -> Result<Vec<Action>, SessionError> {
        self.now = now;
        let results = self
            .session()?
            .accept_request(request_id)
            .map_err(|e| SessionError::Protocol(format!("{e:?}")))?;
        if let Some(stream) = self.publish_requests.remove(&request_id) {
            self.media_stream = Some(stream);
            self.publish =
                Publish::Live { last_media: now, last_keyframe: now, since_keyframe: 0, video: false };
        }
        let mut actions = Vec::new();
        self.map_results(results, &mut actions)?;
        Ok(actions)
    }

    /// Refuses a request; `description` reaches the client (Adobe authentication reads it).
    pub fn reject(
        &mut self,
        request_id: u32,
        code: &str,
        description: &str,
    ) -> Result<Vec<Action>, SessionError> {
        let results = self
            .session()?
            .reject_request(request_id, code, description)
            .map_err(|e| SessionError::Protocol(format!("{e:?}")))?;
        self.publish_requests.remove(&request_id);
        let mut actions = Vec::new();
        self.map_results(results, &mut actions)?;
        Ok(actions)
    }

    fn session(&mut self) -> Result<&mut ServerSession, SessionError> {
        match &mut self.phase {
            Phase::Session(s) => Ok(s),
            Phase::Handshaking(_) => Err(SessionError::Protocol("no session before the handshake".into())),
        }
    }

    fn deliver(&mut self, bytes: &[u8], actions: &mut Vec<Action>) -> Result<(), SessionError> {
        let results =
            self.session()?.handle_input(bytes).map_err(|e| SessionError::Protocol(format!("{e:?}")))?;
        self.map_results(results, actions)
    }

    /// Checks a message before rml_rtmp decodes it; false drops it.
    fn check(&mut self, message: &Message) -> Result<bool, SessionError> {
        let (command, body) = match message.type_id {
            AMF0_COMMAND => (true, &message.data[..]),
            // rml_rtmp reads AMF3-flagged messages as AMF0, less a leading 0 on commands.
            AMF3_COMMAND => match message.data.first() {
                Some(0) => (true, &message.data[1..]),
                _ => (true, &message.data[..]),
            },
            AMF0_DATA | AMF3_DATA => (false, &message.data[..]),
            _ => return Ok(true),
        };
        amf::check_depth(body)?;
        let values = rml_amf0::deserialize(&mut std::io::Cursor::new(body))
            .map_err(|e| SessionError::Protocol(format!("AMF0: {e:?}")))?;
        let first = match values.first() {
            Some(Amf0Value::Utf8String(s)) => s.as_str(),
            _ => "",
        };
        if command {
            if values.len() < 3 {
                return Err(SessionError::Protocol(
                    "a command needs a name, a transaction and an object".into(),
                ));
            }
            if first == "publish" {
                self.publish_stream = message.stream_id;
            }
            if first == "connect" && self.flash_ver.is_empty() {
                if let Amf0Value::Object(props) = &values[2] {
                    if let Some(Amf0Value::Utf8String(v)) = props.get("flashVer") {
                        self.flash_ver = v.clone();
                    }
                }
            }
            return Ok(true);
        }
        // `@setDataFrame` needs a name and a value after it, or rml_rtmp indexes past the end.
        Ok(first != "@setDataFrame" || values.len() >= 3)
    }

    fn map_results(
        &mut self,
        results: Vec<ServerSessionResult>,
        actions: &mut Vec<Action>,
    ) -> Result<(), SessionError> {
        for r in results {
            match r {
                ServerSessionResult::OutboundResponse(p) => push_send(actions, p.bytes),
                ServerSessionResult::RaisedEvent(e) => self.map_event(e, actions)?,
                ServerSessionResult::UnhandleableMessageReceived(_) => {}
            }
        }
        Ok(())
    }

    fn map_event(
        &mut self,
        event: ServerSessionEvent,
        actions: &mut Vec<Action>,
    ) -> Result<(), SessionError> {
        match event {
            ServerSessionEvent::ConnectionRequested { request_id, app_name } => {
                actions.push(Action::ConnectRequested {
                    request_id,
                    app: app_name,
                    flash_ver: self.flash_ver.clone(),
                })
            }
            // `releaseStream` needs no decision.
            ServerSessionEvent::ReleaseStreamRequested { request_id, .. } => {
                let accepted = self.accept(self.now, request_id)?;
                actions.extend(accepted);
            }
            ServerSessionEvent::PublishStreamRequested { request_id, stream_key, .. } => {
                self.publish_requests.insert(request_id, self.publish_stream);
                actions.push(Action::PublishRequested { request_id, stream_name: stream_key })
            }
            ServerSessionEvent::PlayStreamRequested { request_id, .. } => {
                let refused =
                    self.reject(request_id, "NetStream.Play.Failed", "playback is not offered over RTMP")?;
                actions.extend(refused);
            }
            ServerSessionEvent::PublishStreamFinished { .. } => {
                self.media_stream = None;
                actions.push(Action::PublishFinished)
            }
            ServerSessionEvent::StreamMetadataChanged { metadata, .. } => {
                actions.push(Action::Metadata(metadata))
            }
            ServerSessionEvent::VideoDataReceived { data, timestamp, .. } => {
                self.media(VIDEO, data, timestamp.value, actions)?
            }
            ServerSessionEvent::AudioDataReceived { data, timestamp, .. } => {
                self.media(AUDIO, data, timestamp.value, actions)?
            }
            _ => {}
        }
        Ok(())
    }

    /// Media clocks and the bound on video since the last keyframe.
    fn note_video(&mut self, data: &[u8]) -> Result<(), SessionError> {
        let Publish::Live { last_media, last_keyframe, since_keyframe, video } = &mut self.publish else {
            return Ok(());
        };
        *last_media = self.now;
        *video = true;
        if is_keyframe(data) {
            *last_keyframe = self.now;
            *since_keyframe = 0;
            return Ok(());
        }
        *since_keyframe += data.len() as u64;
        if *since_keyframe > MAX_BYTES_SINCE_KEYFRAME {
            return Err(SessionError::Limit("too much video since the last keyframe"));
        }
        Ok(())
    }
}

/// An FLV video tag body holding a keyframe (frame type 1), not a codec sequence header:
/// legacy AVC (codec 7, packet type 0) or enhanced RTMP (`IsExHeader`, packet type 0).
fn is_keyframe(data: &[u8]) -> bool {
    let Some(&first) = data.first() else { return false };
    if (first >> 4) & 0x07 != 1 {
        return false;
    }
    let sequence_header =
        if first & 0x80 != 0 { first & 0x0F == 0 } else { first & 0x0F == 7 && data.get(1) == Some(&0) };
    !sequence_header
}

/// A protocol control message of Sluice's own, in one chunk on chunk stream 2 with a whole
/// (type 0) header, message stream 0, time 0 (§5.4), written by a serializer of its own so that
/// nothing is compressed against another header (the message, at most 6 bytes, is under any
/// chunk size). rml_rtmp's session writes on chunk stream 2 too, compressing a header against
/// its own last one there, so the peer must never read one of its headers against one of ours.
/// Its messages there are the four it sends at the handshake and the `StreamBegin` that approves
/// the publish, the last on message stream 1 after the others on 0, so always with a whole
/// header; it sends neither an ack (it never learns the peer's window) nor a ping answer of its
/// own (both are answered here), and the acknowledgements start only after that `StreamBegin`.
fn control_message(message: RtmpMessage) -> Result<Vec<u8>, SessionError> {
    let protocol = |e: &dyn fmt::Debug| SessionError::Protocol(format!("{e:?}"));
    let payload = message.into_message_payload(RtmpTimestamp::new(0), 0).map_err(|e| protocol(&e))?;
    let packet = ChunkSerializer::new().serialize(&payload, true, false).map_err(|e| protocol(&e))?;
    Ok(packet.bytes)
}

fn push_send(actions: &mut Vec<Action>, bytes: Vec<u8>) {
    if !bytes.is_empty() {
        actions.push(Action::Send(bytes));
    }
}

#[cfg(test)]
mod tests;
