//! What a playback request carries into the origin: the `token` query (checked, and signed
//! claims decoded), the LL-HLS blocking-reload query, `Range` headers, and the playlist rewrite
//! that puts session tokens on child URIs. Nothing may panic; a token is accepted only when its
//! claims name the resource asked for.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::domain::keyring::KeyRing;
use sluice::playback::{origin, ranges, rewrite, token};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Some(keys) = KeyRing::new(vec![("k1".into(), b"fuzz secret".to_vec())]) else { return };
    // The text as a token, and the text as claims under a valid signature.
    let _ = token::kid(text);
    let _ = token::verify(&keys, Some(text), "stream:abc", None, 0);
    let signed = format!("{text}.{}", keys.sign(&format!("playback\n{text}")));
    if let Ok(claims) = token::verify(&keys, Some(&signed), "stream:abc", None, 0) {
        assert_eq!(claims.resource, "stream:abc");
    }
    let _ = origin::query(text);
    let _ = ranges::parse(text).and_then(|r| r.within(data.len() as u64));
    let _ = rewrite::sign_playlist(text, "v1~stream:abc~9~-~-.k1.00");
    let _ = rewrite::with_token(text, "t");
});
