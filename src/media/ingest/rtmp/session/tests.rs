//! The session driven by a real RTMP client (rml_rtmp's) on plain bytes and microseconds: the
//! handshake, connect, publish and media, rejections, deadlines and hostile input.

use super::*;
use rml_rtmp::chunk_io::ChunkSerializer;
use rml_rtmp::messages::MessagePayload;
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
        let s_out = server.feed(0, &c0c1).unwrap();
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
        let actions = server.feed(0, &to_server).unwrap();
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
                let actions = server.feed(0, &back).unwrap();
                to_client = sends(&actions);
                seen.extend(requests(actions));
            }
        }
        seen
    }

    fn send(&mut self, server: &mut IngestSession, r: ClientSessionResult) -> Vec<Action> {
        let ClientSessionResult::OutboundResponse(p) = r else { panic!("expected a packet") };
        let actions = server.feed(0, &p.bytes).unwrap();
        self.pump(server, actions)
    }

    fn answer(&mut self, server: &mut IngestSession, actions: Vec<Action>) -> Vec<Action> {
        self.pump(server, actions)
    }
}

/// The client asks to publish `name`; returns the server's request id.
fn request_publish(server: &mut IngestSession, client: &mut Client, name: &str) -> u32 {
    let r = client.session.request_publishing(name.into(), PublishRequestType::Live).unwrap();
    client
        .send(server, r)
        .iter()
        .find_map(|a| match a {
            Action::PublishRequested { request_id, .. } => Some(*request_id),
            _ => None,
        })
        .expect("publish request")
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
    let mut server = IngestSession::new(0);
    let (mut client, _) = Client::handshake(&mut server, "FMLE/3.0 (compatible; Lavf59.27.100)");
    let (request_id, flash_ver) = connect(&mut server, &mut client, "live");
    assert_eq!(flash_ver, "FMLE/3.0 (compatible; Lavf59.27.100)", "flashVer read from the connect object");
    let accepted = server.accept(0, request_id).unwrap();
    client.answer(&mut server, accepted);
    assert!(client.events.contains(&ClientSessionEvent::ConnectionRequestAccepted));

    let r =
        client.session.request_publishing("key123?user=u&pass=p".into(), PublishRequestType::Live).unwrap();
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
    let accepted = server.accept(0, publish_id).unwrap();
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
    let mut server = IngestSession::new(0);
    let (mut client, _) = Client::handshake(&mut server, "FMLE/3.0 (compatible; Lavf59.27.100)");
    let (request_id, _) = connect(&mut server, &mut client, "live");
    let accepted = server.accept(0, request_id).unwrap();
    client.answer(&mut server, accepted);
    let publish_id = request_publish(&mut server, &mut client, "key?user=u&pass=wrong");
    let refused = server.reject(publish_id, "NetStream.Publish.BadName", "wrong push credentials").unwrap();
    let bytes = sends(&refused);
    let contains = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(
        contains("NetStream.Publish.BadName") && contains("wrong push credentials"),
        "an error status reaches the client"
    );
    client.answer(&mut server, refused);
    assert!(!client.events.contains(&ClientSessionEvent::PublishRequestAccepted));
    // The session stays usable: an unknown request id is an error, not a panic.
    assert!(server.accept(0, publish_id).is_err());
}

#[test]
fn a_rejected_connect_reaches_the_client_with_its_description() {
    let mut server = IngestSession::new(0);
    let (mut client, _) = Client::handshake(&mut server, "FMLE/3.0 (compatible; FMSc/1.0)");
    let (request_id, flash_ver) = connect(&mut server, &mut client, "live");
    assert!(flash_ver.contains("FMSc"));
    let refused =
        server.reject(request_id, "NetConnection.Connect.Rejected", super::super::auth::NEED_AUTH).unwrap();
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
    let mut server = IngestSession::new(0);
    let mut hs = Handshake::new(PeerType::Client);
    let c0c1 = hs.generate_outbound_p0_and_p1().unwrap();
    let mut out = Vec::new();
    for b in &c0c1 {
        out.extend(sends(&server.feed(0, std::slice::from_ref(b)).unwrap()));
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
        let mut server = IngestSession::new(0);
        if handshake_first {
            let mut hs = Handshake::new(PeerType::Client);
            let c0c1 = hs.generate_outbound_p0_and_p1().unwrap();
            let s = sends(&server.feed(0, &c0c1).unwrap());
            let (HandshakeProcessResult::InProgress { response_bytes }
            | HandshakeProcessResult::Completed { response_bytes, .. }) = hs.process_bytes(&s).unwrap();
            server.feed(0, &response_bytes).unwrap();
        }
        for chunk in chunks {
            if server.feed(0, &chunk).is_err() {
                break;
            }
        }
    }
}

/// A session at `t0` whose client is connected and publishing; also a raw writer of
/// messages in the client's chunk size.
fn publishing(t0: u64) -> (IngestSession, Client, ChunkSerializer) {
    let mut server = IngestSession::new(t0);
    let (mut client, _) = Client::handshake(&mut server, "FMLE/3.0 (compatible; Lavf59.27.100)");
    let (request_id, _) = connect(&mut server, &mut client, "live");
    let accepted = server.accept(t0, request_id).unwrap();
    client.answer(&mut server, accepted);
    let publish_id = request_publish(&mut server, &mut client, "k");
    assert_eq!(server.poll(t0 + START_DEADLINE_US - 1), None);
    let accepted = server.accept(t0, publish_id).unwrap();
    client.answer(&mut server, accepted);
    let mut raw = ChunkSerializer::new();
    raw.set_max_chunk_size(ClientSessionConfig::new().chunk_size, RtmpTimestamp::new(0)).unwrap();
    (server, client, raw)
}

fn raw(w: &mut ChunkSerializer, type_id: u8, timestamp: u32, data: Vec<u8>) -> Vec<u8> {
    raw_on(w, 1, type_id, timestamp, data)
}

/// A message on message stream `stream`.
fn raw_on(raw: &mut ChunkSerializer, stream: u32, type_id: u8, timestamp: u32, data: Vec<u8>) -> Vec<u8> {
    let p = MessagePayload {
        timestamp: RtmpTimestamp::new(timestamp),
        message_stream_id: stream,
        type_id,
        data: Bytes::from(data),
    };
    raw.serialize(&p, true, false).unwrap().bytes
}

#[test]
fn a_peer_that_does_not_publish_within_10_s_is_due_to_close() {
    let t0 = 5_000_000;
    let mut server = IngestSession::new(t0);
    assert_eq!(server.poll(t0 + START_DEADLINE_US - 1), None);
    assert_eq!(server.poll(t0 + START_DEADLINE_US), Some(Deadline::NoPublish));
    // Handshaking and connecting do not move the deadline.
    let (mut client, _) = Client::handshake(&mut server, "FMLE/3.0 (compatible; Lavf59.27.100)");
    let (request_id, _) = connect(&mut server, &mut client, "live");
    let accepted = server.accept(t0 + 9_000_000, request_id).unwrap();
    client.answer(&mut server, accepted);
    assert_eq!(server.poll(t0 + START_DEADLINE_US), Some(Deadline::NoPublish));
    assert!(!server.is_publishing());
}

#[test]
fn media_held_back_moves_the_no_media_deadline_and_not_the_keyframe_one() {
    let t0 = 1_000;
    let (mut server, _client, mut w) = publishing(t0);
    server.feed(t0, &raw(&mut w, 9, 0, vec![0x17, 0x01, 0, 0, 0, 9, 9])).unwrap();
    // The read held 14 s of media: it is due until 12 s from now (less the pacer's lead).
    server.media_due_until(t0 + 12_000_000);
    assert_eq!(server.poll(t0 + 12_000_000 + NO_MEDIA_US - 1), None);
    assert_eq!(server.poll(t0 + 12_000_000 + NO_MEDIA_US), Some(Deadline::NoMedia));
    // An earlier time does not move it back.
    server.media_due_until(t0);
    assert_eq!(server.poll(t0 + 12_000_000 + NO_MEDIA_US - 1), None);
    // A push without keyframes is still due to end 30 s after its last one.
    server.media_due_until(t0 + 60_000_000);
    assert_eq!(server.poll(t0 + NO_KEYFRAME_US), Some(Deadline::NoKeyframe));
}

#[test]
fn media_and_keyframe_deadlines_run_from_the_last_media_and_keyframe() {
    let t0 = 1_000;
    let (mut server, _client, mut w) = publishing(t0);
    assert!(server.is_publishing());
    assert_eq!(server.poll(t0 + NO_MEDIA_US - 1), None);
    assert_eq!(server.poll(t0 + NO_MEDIA_US), Some(Deadline::NoMedia));
    // A keyframe at 5 s, then inter frames every second: media flows, keyframes do not.
    let key = vec![0x17, 0x01, 0, 0, 0, 9, 9];
    server.feed(t0 + 5_000_000, &raw(&mut w, 9, 5_000, key)).unwrap();
    for s in 6..=35u64 {
        let inter = vec![0x27, 0x01, 0, 0, 0, 8];
        server.feed(t0 + s * 1_000_000, &raw(&mut w, 9, s as u32 * 1000, inter)).unwrap();
        let expected = (s >= 35).then_some(Deadline::NoKeyframe);
        assert_eq!(server.poll(t0 + s * 1_000_000), expected, "at {s} s");
    }
    // A sequence header is no keyframe; a keyframe restarts the clock.
    let header = vec![0x17, 0x00, 0, 0, 0, 1, 2];
    server.feed(t0 + 36_000_000, &raw(&mut w, 9, 36_000, header)).unwrap();
    assert_eq!(server.poll(t0 + 36_000_000), Some(Deadline::NoKeyframe));
    server.feed(t0 + 37_000_000, &raw(&mut w, 9, 37_000, vec![0x17, 0x01, 0, 0, 0, 7])).unwrap();
    assert_eq!(server.poll(t0 + 37_000_000), None);
}

#[test]
fn video_without_keyframes_is_bounded_in_bytes() {
    let (mut server, _client, mut w) = publishing(0);
    let inter = vec![0x27u8; 1024 * 1024];
    let mut refused = None;
    for i in 0..80u32 {
        if let Err(e) = server.feed(u64::from(i) * 1000, &raw(&mut w, 9, i, inter.clone())) {
            refused = Some((i, e));
            break;
        }
    }
    let (at, e) = refused.expect("refused");
    assert_eq!(at, 64, "refused at the first MiB past 64");
    assert!(matches!(e, SessionError::Limit(_)), "{e}");
}

#[test]
fn a_deeply_nested_connect_is_refused_before_it_is_decoded() {
    let mut server = IngestSession::new(0);
    let (_client, _) = Client::handshake(&mut server, "FMLE/3.0");
    let mut w = ChunkSerializer::new();
    let mut body =
        rml_amf0::serialize(&vec![Amf0Value::Utf8String("connect".into()), Amf0Value::Number(1.0)]).unwrap();
    body.push(3);
    for _ in 0..100_000 {
        body.extend([0, 1, b'a', 3]);
    }
    // Too big for a command first; a smaller one that nests too deep is refused for that.
    assert!(matches!(server.feed(0, &raw(&mut w, 20, 0, body.clone())), Err(SessionError::Chunks(_))));
    let mut server = IngestSession::new(0);
    let (_client, _) = Client::handshake(&mut server, "FMLE/3.0");
    body.truncate(20 + 4 * 1000);
    let r = server.feed(0, &raw(&mut w, 20, 0, body));
    assert!(matches!(r, Err(SessionError::Amf(_))));
}

#[test]
fn short_commands_and_data_do_not_reach_rml_rtmp() {
    let mut server = IngestSession::new(0);
    let (_client, _) = Client::handshake(&mut server, "FMLE/3.0");
    let mut w = ChunkSerializer::new();
    // `@setDataFrame` alone made rml_rtmp index an empty list: dropped.
    let data = rml_amf0::serialize(&vec![Amf0Value::Utf8String("@setDataFrame".into())]).unwrap();
    assert_eq!(server.feed(0, &raw(&mut w, 18, 0, data)).unwrap(), vec![]);
    // A command of two values made its `drain(..3)` panic: refused.
    let command =
        rml_amf0::serialize(&vec![Amf0Value::Utf8String("connect".into()), Amf0Value::Number(1.0)]).unwrap();
    assert!(matches!(server.feed(0, &raw(&mut w, 20, 0, command)), Err(SessionError::Protocol(_))));
}

#[test]
fn more_than_a_mib_before_publishing_is_refused() {
    let mut server = IngestSession::new(0);
    let (_client, _) = Client::handshake(&mut server, "FMLE/3.0");
    let mut w = ChunkSerializer::new();
    let mut result = Ok(vec![]);
    for i in 0..20 {
        result = server.feed(0, &raw(&mut w, 8, i, vec![0xAF; 100_000]));
        if result.is_err() {
            break;
        }
    }
    assert!(matches!(result, Err(SessionError::Limit(_))));
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let mut server = IngestSession::new(0);
    let result = server.feed(0, &[0x42; 4000]);
    assert!(result.is_err(), "a wrong RTMP version is refused");
}

/// The approved publish's media goes around rml_rtmp, so its acknowledgements are the session's
/// own: one each time a window of bytes (the 2,500,000 rml_rtmp's client asks for at connect)
/// has come, counting every byte received, read by the client as whole, valid messages.
#[test]
fn media_goes_around_rml_rtmp_and_each_window_of_bytes_is_acknowledged() {
    let (mut server, mut client, _) = publishing(0);
    let frame = |i: u8| {
        let mut v = vec![0x17, 0x01, 0, 0, 0];
        v.resize(1024 * 1024, i);
        Bytes::from(v)
    };
    let mut acks = Vec::new();
    let mut sent = 0u64;
    for i in 0..6u8 {
        let r = client
            .session
            .publish_video_data(frame(i), RtmpTimestamp::new(u32::from(i) * 33), false)
            .unwrap();
        let ClientSessionResult::OutboundResponse(p) = r else { panic!("a packet") };
        sent += p.bytes.len() as u64;
        let actions = server.feed(0, &p.bytes).unwrap();
        let to_client = sends(&actions);
        assert_eq!(requests(actions), vec![Action::Video { data: frame(i), timestamp: u32::from(i) * 33 }]);
        let before = client.events.len();
        client.receive(&to_client);
        for e in &client.events[before..] {
            if let ClientSessionEvent::AcknowledgementReceived { bytes_received } = e {
                acks.push((i, u64::from(*bytes_received)));
            }
        }
    }
    // The handshake and commands took a few KiB before the first frame.
    // 1 MiB frames: the first window ends in the third frame, the second (2,500,000 bytes on)
    // in the sixth.
    let [(2, first), (5, second)] = acks[..] else { panic!("acks after frames 3 and 6: {acks:?}") };
    assert!(first > 3 * 1024 * 1024 && first < 3 * 1024 * 1024 + 16 * 1024, "{first}");
    assert!(
        second - first >= 2_500_000 && second - first < 2_500_000 + 1024 * 1024 + 1024,
        "{first} → {second}"
    );
    assert!(second <= sent + 16 * 1024, "{second} of {sent} + the handshake");
}

/// A ping is answered with its own time, and media on a message stream that did not publish
/// gives nothing.
#[test]
fn pings_are_answered_and_media_on_another_stream_is_ignored() {
    let (mut server, mut client, mut w) = publishing(0);
    let actions = server.feed(0, &raw_on(&mut w, 0, 4, 0, vec![0, 6, 0, 0, 0, 42])).unwrap();
    client.receive(&sends(&actions));
    assert!(client
        .events
        .contains(&ClientSessionEvent::PingResponseReceived { timestamp: RtmpTimestamp::new(42) }));
    let video = vec![0x17, 0x01, 0, 0, 0, 1];
    assert_eq!(server.feed(0, &raw_on(&mut w, 7, 9, 0, video.clone())).unwrap(), vec![]);
    assert_eq!(
        server.feed(0, &raw(&mut w, 9, 40, video.clone())).unwrap(),
        vec![Action::Video { data: Bytes::from(video), timestamp: 40 }]
    );
    // A short ping or window size is an error, not a panic.
    assert!(server.feed(0, &raw_on(&mut w, 0, 4, 0, vec![0, 6, 0])).is_err());
    let (mut server, _client, mut w) = publishing(0);
    assert!(server.feed(0, &raw_on(&mut w, 0, 5, 0, vec![0, 0])).is_err());
}
