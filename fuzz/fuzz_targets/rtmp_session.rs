//! The whole RTMP ingest path a peer reaches before and after authentication: handshake,
//! chunk stream, AMF0, rml_rtmp's session, the deadlines and the push-credential parsers.
//! The first input byte picks whether a valid handshake comes first (to get past it quickly),
//! the second how the rest is cut into reads; every request the session raises is accepted, so
//! publishing and media paths are reached too. Nothing may panic, and the session's bounds hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rml_rtmp::handshake::{Handshake, HandshakeProcessResult, PeerType};
use sluice::media::ingest::rtmp::auth;
use sluice::media::ingest::rtmp::session::{Action, IngestSession};

fuzz_target!(|data: &[u8]| {
    let (Some(&mode), Some(&cut)) = (data.first(), data.get(1)) else { return };
    let rest = &data[2..];
    let mut server = IngestSession::new(0);
    let mut now = 0u64;
    if mode & 1 == 1 {
        let mut hs = Handshake::new(PeerType::Client);
        let Ok(c0c1) = hs.generate_outbound_p0_and_p1() else { return };
        let Ok(actions) = server.feed(now, &c0c1) else { return };
        let s: Vec<u8> = actions
            .iter()
            .filter_map(|a| if let Action::Send(b) = a { Some(b.clone()) } else { None })
            .flatten()
            .collect();
        if let Ok(HandshakeProcessResult::InProgress { response_bytes })
        | Ok(HandshakeProcessResult::Completed { response_bytes, .. }) = hs.process_bytes(&s)
        {
            if server.feed(now, &response_bytes).is_err() {
                return;
            }
        }
    }
    let step = usize::from(cut).max(1) * 7;
    for piece in rest.chunks(step) {
        now += 250_000;
        let actions = match server.feed(now, piece) {
            Ok(a) => a,
            Err(_) => return,
        };
        for action in actions {
            let id = match action {
                Action::ConnectRequested { request_id, app, .. } => {
                    let (_, query) = auth::split_query(&app);
                    let _ = auth::adobe_stage(&query);
                    request_id
                }
                Action::PublishRequested { request_id, stream_name } => {
                    let (_, query) = auth::split_query(&stream_name);
                    let _ = auth::get(&query, "pass");
                    request_id
                }
                _ => continue,
            };
            if (mode & 2 == 0 && server.accept(now, id).is_err())
                || (mode & 2 == 2 && server.reject(id, "NetStream.Publish.BadName", "no").is_err())
            {
                return;
            }
        }
        let _ = server.poll(now);
    }
});
