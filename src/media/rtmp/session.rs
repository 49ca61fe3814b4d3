//! One RTMP ingest connection as a state machine without IO: bytes in, actions out
//! (STYLE: sans-IO; anchor rust-media-libs `rtmp/src/sessions/server/`). The tokio shell reads
//! the socket, feeds [`IngestSession::feed`], writes every [`Action::Send`] in order, and answers
//! connect and publish requests later with [`IngestSession::accept`] / [`IngestSession::reject`]
//! (publishing is approved asynchronously).
//!
//! rml_rtmp's `ConnectionRequested` event carries only the app name, but telling ffmpeg (which
//! sends a bare `connect` and its credentials on the stream name) from OBS/librtmp (which needs a
//! bare `connect` refused to start Adobe authentication) takes the connect object's `flashVer`;
//! so the session reads the first `connect` command itself from a copy of the input.

use bytes::Bytes;
use rml_amf0::Amf0Value;
use rml_rtmp::chunk_io::ChunkDeserializer;
use rml_rtmp::handshake::{Handshake, HandshakeProcessResult, PeerType};
use rml_rtmp::messages::RtmpMessage;
use rml_rtmp::sessions::{
    ServerSession, ServerSessionConfig, ServerSessionEvent, ServerSessionResult, StreamMetadata,
};

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

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("handshake: {0}")]
    Handshake(String),
    #[error("protocol: {0}")]
    Protocol(String),
}

enum Phase {
    Handshaking(Box<Handshake>),
    Session(Box<ServerSession>),
}

pub struct IngestSession {
    phase: Phase,
    /// Reads the client's messages until its `connect` is seen.
    peek: Option<ChunkDeserializer>,
    flash_ver: String,
}

impl Default for IngestSession {
    fn default() -> Self {
        Self::new()
    }
}

impl IngestSession {
    pub fn new() -> Self {
        IngestSession {
            phase: Phase::Handshaking(Box::new(Handshake::new(PeerType::Server))),
            peek: Some(ChunkDeserializer::new()),
            flash_ver: String::new(),
        }
    }

    /// Feeds bytes read from the peer.
    pub fn feed(&mut self, input: &[u8]) -> Result<Vec<Action>, SessionError> {
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
                        remaining_bytes
                    }
                }
            }
            Phase::Session(_) => input.to_vec(),
        };
        if !rest.is_empty() {
            self.peek_connect(&rest)?;
            let Phase::Session(session) = &mut self.phase else { unreachable!("set above") };
            let results =
                session.handle_input(&rest).map_err(|e| SessionError::Protocol(format!("{e:?}")))?;
            self.map_results(results, &mut actions)?;
        }
        Ok(actions)
    }

    pub fn accept(&mut self, request_id: u32) -> Result<Vec<Action>, SessionError> {
        let results = self
            .session()?
            .accept_request(request_id)
            .map_err(|e| SessionError::Protocol(format!("{e:?}")))?;
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

    fn peek_connect(&mut self, bytes: &[u8]) -> Result<(), SessionError> {
        let Some(peek) = self.peek.as_mut() else { return Ok(()) };
        let mut input = bytes;
        loop {
            let payload =
                peek.get_next_message(input).map_err(|e| SessionError::Protocol(format!("{e:?}")))?;
            input = &[];
            let Some(payload) = payload else { return Ok(()) };
            match payload.to_rtmp_message() {
                Ok(RtmpMessage::SetChunkSize { size }) => {
                    peek.set_max_chunk_size(size as usize)
                        .map_err(|e| SessionError::Protocol(format!("{e:?}")))?;
                }
                Ok(RtmpMessage::Amf0Command { command_name, command_object, .. })
                    if command_name == "connect" =>
                {
                    if let Amf0Value::Object(props) = command_object {
                        if let Some(Amf0Value::Utf8String(v)) = props.get("flashVer") {
                            self.flash_ver = v.clone();
                        }
                    }
                    self.peek = None;
                    return Ok(());
                }
                _ => {}
            }
        }
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
                let accepted = self.accept(request_id)?;
                actions.extend(accepted);
            }
            ServerSessionEvent::PublishStreamRequested { request_id, stream_key, .. } => {
                actions.push(Action::PublishRequested { request_id, stream_name: stream_key })
            }
            ServerSessionEvent::PlayStreamRequested { request_id, .. } => {
                let refused =
                    self.reject(request_id, "NetStream.Play.Failed", "playback is not offered over RTMP")?;
                actions.extend(refused);
            }
            ServerSessionEvent::PublishStreamFinished { .. } => actions.push(Action::PublishFinished),
            ServerSessionEvent::StreamMetadataChanged { metadata, .. } => {
                actions.push(Action::Metadata(metadata))
            }
            ServerSessionEvent::VideoDataReceived { data, timestamp, .. } => {
                actions.push(Action::Video { data, timestamp: timestamp.value })
            }
            ServerSessionEvent::AudioDataReceived { data, timestamp, .. } => {
                actions.push(Action::Audio { data, timestamp: timestamp.value })
            }
            _ => {}
        }
        Ok(())
    }
}

fn push_send(actions: &mut Vec<Action>, bytes: Vec<u8>) {
    if !bytes.is_empty() {
        actions.push(Action::Send(bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rml_rtmp::sessions::{
        ClientSession, ClientSessionConfig, ClientSessionEvent, ClientSessionResult, PublishRequestType,
    };

    /// A client on the other end of an in-memory pipe.
    struct Client {
        handshake: Option<Handshake>,
        session: ClientSession,
        events: Vec<ClientSessionEvent>,
    }

    fn sends(actions: &[Action]) -> Vec<u8> {
        actions
            .iter()
            .filter_map(|a| if let Action::Send(b) = a { Some(b.clone()) } else { None })
            .flatten()
            .collect()
    }

    fn requests(actions: Vec<Action>) -> Vec<Action> {
        actions.into_iter().filter(|a| !matches!(a, Action::Send(_))).collect()
    }

    impl Client {
        /// Connects to `server` through the handshake; returns the client and the server's actions.
        fn handshake(server: &mut IngestSession, flash_version: &str) -> (Client, Vec<Action>) {
            let mut hs = Handshake::new(PeerType::Client);
            let c0c1 = hs.generate_outbound_p0_and_p1().unwrap();
            let s_out = server.feed(&c0c1).unwrap();
            let mut config = ClientSessionConfig::new();
            config.flash_version = flash_version.to_string();
            let (session, initial) = ClientSession::new(config).unwrap();
            let mut client = Client { handshake: Some(hs), session, events: Vec::new() };
            let mut to_server = Vec::new();
            match client.handshake.as_mut().unwrap().process_bytes(&sends(&s_out)).unwrap() {
                HandshakeProcessResult::Completed { response_bytes, .. } => to_server.extend(response_bytes),
                HandshakeProcessResult::InProgress { response_bytes } => to_server.extend(response_bytes),
            }
            client.handshake = None;
            for r in initial {
                if let ClientSessionResult::OutboundResponse(p) = r {
                    to_server.extend(p.bytes);
                }
            }
            let actions = server.feed(&to_server).unwrap();
            let back = client.receive(&sends(&actions));
            assert!(back.is_empty());
            (client, actions)
        }

        /// Takes the server's bytes; returns what the client sends back.
        fn receive(&mut self, bytes: &[u8]) -> Vec<u8> {
            let mut back = Vec::new();
            if bytes.is_empty() {
                return back;
            }
            for r in self.session.handle_input(bytes).unwrap() {
                match r {
                    ClientSessionResult::RaisedEvent(e) => self.events.push(e),
                    ClientSessionResult::OutboundResponse(p) => back.extend(p.bytes),
                    _ => {}
                }
            }
            back
        }

        /// Delivers server actions to the client and pumps both ways until nothing moves;
        /// returns the server's non-send actions seen on the way.
        fn pump(&mut self, server: &mut IngestSession, actions: Vec<Action>) -> Vec<Action> {
            let mut seen = Vec::new();
            let mut to_client = sends(&actions);
            seen.extend(requests(actions));
            while !to_client.is_empty() {
                let back = self.receive(&to_client);
                to_client.clear();
                if !back.is_empty() {
                    let actions = server.feed(&back).unwrap();
                    to_client = sends(&actions);
                    seen.extend(requests(actions));
                }
            }
            seen
        }

        fn send(&mut self, server: &mut IngestSession, r: ClientSessionResult) -> Vec<Action> {
            let ClientSessionResult::OutboundResponse(p) = r else { panic!("expected a packet") };
            let actions = server.feed(&p.bytes).unwrap();
            self.pump(server, actions)
        }

        fn answer(&mut self, server: &mut IngestSession, actions: Vec<Action>) -> Vec<Action> {
            self.pump(server, actions)
        }
    }

    fn connect(server: &mut IngestSession, client: &mut Client, app: &str) -> (u32, String) {
        let r = client.session.request_connection(app.to_string()).unwrap();
        match client.send(server, r).as_slice() {
            [Action::ConnectRequested { request_id, app: seen, flash_ver }] => {
                assert_eq!(seen, app);
                (*request_id, flash_ver.clone())
            }
            other => panic!("expected a connect request, got {other:?}"),
        }
    }

    #[test]
    fn handshake_connect_publish_and_media() {
        let mut server = IngestSession::new();
        let (mut client, _) = Client::handshake(&mut server, "FMLE/3.0 (compatible; Lavf59.27.100)");
        let (request_id, flash_ver) = connect(&mut server, &mut client, "live");
        assert_eq!(
            flash_ver, "FMLE/3.0 (compatible; Lavf59.27.100)",
            "flashVer read from the connect object"
        );
        let accepted = server.accept(request_id).unwrap();
        client.answer(&mut server, accepted);
        assert!(client.events.contains(&ClientSessionEvent::ConnectionRequestAccepted));

        let r = client
            .session
            .request_publishing("key123?user=u&pass=p".into(), PublishRequestType::Live)
            .unwrap();
        let acts = client.send(&mut server, r);
        let publish_id = acts
            .iter()
            .find_map(|a| match a {
                Action::PublishRequested { request_id, stream_name } => {
                    assert_eq!(stream_name, "key123?user=u&pass=p");
                    Some(*request_id)
                }
                _ => None,
            })
            .expect("publish request");
        let accepted = server.accept(publish_id).unwrap();
        client.answer(&mut server, accepted);
        assert!(client.events.contains(&ClientSessionEvent::PublishRequestAccepted));

        let video = Bytes::from_static(&[0x17, 0x01, 0, 0, 0, 1, 2, 3]);
        let r = client
            .session
            .publish_video_data(video.clone(), rml_rtmp::time::RtmpTimestamp::new(40), false)
            .unwrap();
        let acts = client.send(&mut server, r);
        assert_eq!(acts, vec![Action::Video { data: video, timestamp: 40 }]);
    }

    #[test]
    fn a_rejected_publish_is_a_clean_rtmp_error() {
        let mut server = IngestSession::new();
        let (mut client, _) = Client::handshake(&mut server, "FMLE/3.0 (compatible; Lavf59.27.100)");
        let (request_id, _) = connect(&mut server, &mut client, "live");
        let accepted = server.accept(request_id).unwrap();
        client.answer(&mut server, accepted);
        let r = client
            .session
            .request_publishing("key?user=u&pass=wrong".into(), PublishRequestType::Live)
            .unwrap();
        let publish_id = client
            .send(&mut server, r)
            .iter()
            .find_map(|a| match a {
                Action::PublishRequested { request_id, .. } => Some(*request_id),
                _ => None,
            })
            .expect("publish request");
        let refused =
            server.reject(publish_id, "NetStream.Publish.BadName", "wrong push credentials").unwrap();
        let bytes = sends(&refused);
        let contains = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
        assert!(
            contains("NetStream.Publish.BadName") && contains("wrong push credentials"),
            "an error status reaches the client"
        );
        client.answer(&mut server, refused);
        assert!(!client.events.contains(&ClientSessionEvent::PublishRequestAccepted));
        // The session stays usable: an unknown request id is an error, not a panic.
        assert!(server.accept(publish_id).is_err());
    }

    #[test]
    fn a_rejected_connect_reaches_the_client_with_its_description() {
        let mut server = IngestSession::new();
        let (mut client, _) = Client::handshake(&mut server, "FMLE/3.0 (compatible; FMSc/1.0)");
        let (request_id, flash_ver) = connect(&mut server, &mut client, "live");
        assert!(flash_ver.contains("FMSc"));
        let refused = server
            .reject(request_id, "NetConnection.Connect.Rejected", super::super::auth::NEED_AUTH)
            .unwrap();
        client.answer(&mut server, refused);
        let description = client.events.iter().find_map(|e| match e {
            ClientSessionEvent::ConnectionRequestRejected { description } => Some(description.clone()),
            _ => None,
        });
        assert_eq!(description.as_deref(), Some(super::super::auth::NEED_AUTH));
    }

    #[test]
    fn bytes_split_anywhere_give_the_same_actions() {
        // Chunking: the same input fed one byte at a time.
        let mut server = IngestSession::new();
        let mut hs = Handshake::new(PeerType::Client);
        let c0c1 = hs.generate_outbound_p0_and_p1().unwrap();
        let mut out = Vec::new();
        for b in &c0c1 {
            out.extend(sends(&server.feed(std::slice::from_ref(b)).unwrap()));
        }
        assert_eq!(out.len(), 1 + 1536 + 1536, "S0, S1 and S2 once the whole C0+C1 arrived");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Random input, cut anywhere, before or after a valid handshake: errors, never panics.
        #[test]
        fn random_input_never_panics(
            handshake_first in proptest::bool::ANY,
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..600), 0..12),
        ) {
            let mut server = IngestSession::new();
            if handshake_first {
                let mut hs = Handshake::new(PeerType::Client);
                let c0c1 = hs.generate_outbound_p0_and_p1().unwrap();
                let s = sends(&server.feed(&c0c1).unwrap());
                let (HandshakeProcessResult::InProgress { response_bytes }
                | HandshakeProcessResult::Completed { response_bytes, .. }) = hs.process_bytes(&s).unwrap();
                server.feed(&response_bytes).unwrap();
            }
            for chunk in chunks {
                if server.feed(&chunk).is_err() {
                    break;
                }
            }
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut server = IngestSession::new();
        let result = server.feed(&[0x42; 4000]);
        assert!(result.is_err(), "a wrong RTMP version is refused");
    }
}
