//! Push authentication on RTMP, without IO: the `?user=&pass=` query that `ingestUrl` carries,
//! and the Adobe `authmod=adobe` challenge that OBS's "Use authentication" fields, librtmp and
//! GStreamer's rtmp2sink speak (CONTRACT: Live media).
//!
//! Adobe's exchange happens at `connect`, in three rounds on three connections:
//! 1. `connect(app="live")` → refused with `code=403 need auth; authmod=adobe`;
//! 2. `connect(app="live?authmod=adobe&user=U")` → refused with
//!    `?reason=needauth&user=U&salt=S&challenge=C&opaque=O`;
//! 3. `connect(app="live?authmod=adobe&user=U&challenge=C2&response=R&opaque=O")`, where
//!    `R = base64(md5(base64(md5(U + S + password)) + O + C2))` → accepted.
//!
//! The stored verifier is `base64(md5(U + S + password))`, so the password is never needed.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use md5::{Digest, Md5};
use subtle::ConstantTimeEq;

/// Query parameters of an RTMP app name or stream name (`name?k=v&k2=v2`).
pub fn split_query(s: &str) -> (&str, Vec<(String, String)>) {
    match s.split_once('?') {
        None => (s, Vec::new()),
        Some((name, query)) => {
            // Some clients append a second `?` (e.g. `live?x=1?authmod=adobe`): treat it as `&`.
            let pairs = query
                .split(['&', '?'])
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k.to_string(), percent_decode(v)),
                    None => (p.to_string(), String::new()),
                })
                .collect();
            (name, pairs)
        }
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex)) => {
                match std::str::from_utf8(hex).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// What a `connect` carries for Adobe authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdobeStage {
    /// No `authmod=adobe`: either plain credentials come later (query on the stream name) or
    /// the client must be told to authenticate.
    None,
    /// Round 2: the user asks for a challenge.
    Challenge { user: String },
    /// Round 3: the user answers the challenge.
    Response { user: String, client_challenge: String, response: String, opaque: String },
}

pub fn adobe_stage(app_query: &[(String, String)]) -> AdobeStage {
    if get(app_query, "authmod") != Some("adobe") {
        return AdobeStage::None;
    }
    let Some(user) = get(app_query, "user").filter(|u| !u.is_empty()) else {
        return AdobeStage::None;
    };
    match (get(app_query, "challenge"), get(app_query, "response")) {
        (Some(c), Some(r)) => AdobeStage::Response {
            user: user.to_string(),
            client_challenge: c.to_string(),
            response: r.to_string(),
            opaque: get(app_query, "opaque").unwrap_or_default().to_string(),
        },
        _ => AdobeStage::Challenge { user: user.to_string() },
    }
}

/// Round 1's refusal: tells the client to use Adobe authentication.
pub const NEED_AUTH: &str = "[ AccessManager.Reject ] : [ code=403 need auth; authmod=adobe ] : ";

/// Round 2's refusal, carrying the salt and a challenge (sent as both `challenge` and `opaque`).
pub fn challenge_description(user: &str, salt: &str, challenge: &str) -> String {
    format!(
        "[ AccessManager.Reject ] : [ authmod=adobe ] : ?reason=needauth&user={user}&salt={salt}&challenge={challenge}&opaque={challenge}"
    )
}

/// A failed round 3.
pub const AUTH_FAILED: &str = "[ AccessManager.Reject ] : [ authmod=adobe ] : ?reason=authfailed&opaque=-";

/// Checks round 3's response against the stored verifier, in constant time.
pub fn adobe_response_matches(verifier: &str, opaque: &str, client_challenge: &str, response: &str) -> bool {
    let mut h = Md5::new();
    h.update(verifier.as_bytes());
    h.update(opaque.as_bytes());
    h.update(client_challenge.as_bytes());
    let expected = STANDARD.encode(h.finalize());
    expected.as_bytes().ct_eq(response.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::stream::push_verifier;

    /// What a client (librtmp, rtmp2sink) computes from the password.
    fn client_response(user: &str, password: &str, salt: &str, opaque: &str, challenge2: &str) -> String {
        let hash1 = STANDARD.encode(Md5::digest(format!("{user}{salt}{password}").as_bytes()));
        STANDARD.encode(Md5::digest(format!("{hash1}{opaque}{challenge2}").as_bytes()))
    }

    #[test]
    fn queries_split_and_decode() {
        let (name, q) = split_query("key123?user=alice&pass=p%40ss");
        assert_eq!(name, "key123");
        assert_eq!(get(&q, "user"), Some("alice"));
        assert_eq!(get(&q, "pass"), Some("p@ss"));
        let (app, q) = split_query("live?x=1?authmod=adobe&user=bob");
        assert_eq!((app, get(&q, "authmod"), get(&q, "user")), ("live", Some("adobe"), Some("bob")));
        assert_eq!(split_query("live"), ("live", vec![]));
    }

    #[test]
    fn adobe_rounds() {
        assert_eq!(adobe_stage(&split_query("live").1), AdobeStage::None);
        assert_eq!(
            adobe_stage(&split_query("live?authmod=adobe&user=u1").1),
            AdobeStage::Challenge { user: "u1".into() }
        );
        let stage =
            adobe_stage(&split_query("live?authmod=adobe&user=u1&challenge=abcd1234&response=R&opaque=O").1);
        assert_eq!(
            stage,
            AdobeStage::Response {
                user: "u1".into(),
                client_challenge: "abcd1234".into(),
                response: "R".into(),
                opaque: "O".into()
            }
        );
    }

    #[test]
    fn a_client_with_the_password_passes_and_others_fail() {
        let verifier = push_verifier("u1", "salt9", "secret");
        let good = client_response("u1", "secret", "salt9", "opq", "0badcafe");
        assert!(adobe_response_matches(&verifier, "opq", "0badcafe", &good));
        let wrong = client_response("u1", "Secret", "salt9", "opq", "0badcafe");
        assert!(!adobe_response_matches(&verifier, "opq", "0badcafe", &wrong));
        assert!(!adobe_response_matches(&verifier, "other", "0badcafe", &good), "bound to the opaque");
        let d = challenge_description("u1", "salt9", "chal");
        assert!(d.contains("?reason=needauth&user=u1&salt=salt9&challenge=chal&opaque=chal"));
        assert!(NEED_AUTH.contains("code=403 need auth; authmod=adobe"));
    }
}
