//! Playback tokens (CONTRACT: Signed playback), checked by [`super::authorize`].
//!
//! A token is `<claims>.<signature>`. `claims` is `v1~<resource>~<expires>~<session>~<ip>`, with
//! the resource written `stream:<id>` or `vod:<id>`, `expires` in unix seconds, `session` in
//! seconds (`-` on a session token) and `-` for no IP. The signature is the server key ring's
//! (`<kid>.<hex HMAC-SHA256>`), so it survives key rotation. Everything is URL-safe, so a token
//! goes in a `?token=` query as it is.
//!
//! A ticket gives its URLs a token whose `expires` bounds when playback may start
//! (`expiresInSec`) and whose `session` is `streamExpireSec`. When a playlist is fetched with it,
//! the origin rewrites the child URIs with a session token: the same resource and IP, expiring
//! `session` seconds from then, and no `session` of its own, so it can never mint a longer one.

use std::net::IpAddr;

use super::Deny;
use crate::domain::keyring::KeyRing;

/// What a token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// `stream:<id>` or `vod:<id>`.
    pub resource: String,
    /// Unix seconds after which the token is refused.
    pub expires: i64,
    /// Seconds a session started with this (ticket) token lasts; `None` on a session token.
    pub session: Option<i64>,
    /// The only client address it is good for.
    pub ip: Option<IpAddr>,
}

const VERSION: &str = "v1";
/// What the key ring signs: this, then the claims (a playback signature is never an upload's).
const SIGNED_AS: &[u8] = b"playback\n";

impl Claims {
    fn encode(&self) -> String {
        let ip = self.ip.map_or_else(|| "-".to_string(), |ip| ip.to_string());
        let session = self.session.map_or_else(|| "-".to_string(), |s| s.to_string());
        format!("{VERSION}~{}~{}~{session}~{ip}", self.resource, self.expires)
    }

    fn decode(text: &str) -> Option<Claims> {
        let mut parts = text.split('~');
        if parts.next()? != VERSION {
            return None;
        }
        let resource = parts.next()?.to_string();
        let expires = parts.next()?.parse().ok()?;
        let session = match parts.next()? {
            "-" => None,
            s => Some(s.parse().ok()?),
        };
        let ip = match parts.next()? {
            "-" => None,
            ip => Some(ip.parse().ok()?),
        };
        if parts.next().is_some() || !(resource.starts_with("stream:") || resource.starts_with("vod:")) {
            return None;
        }
        Some(Claims { resource, expires, session, ip })
    }

    /// The token for these claims.
    pub fn sign(&self, keys: &KeyRing) -> String {
        let claims = self.encode();
        format!("{claims}.{}", keys.sign_pieces(&[SIGNED_AS, claims.as_bytes()]))
    }

    /// The token a session started with these (ticket) claims at `now` hands its child URIs;
    /// `None` for a session token, whose children carry it unchanged.
    pub fn session_token(&self, keys: &KeyRing, now: i64) -> Option<String> {
        let session = self.session?;
        Some(Claims { expires: now.saturating_add(session), session: None, ..self.clone() }.sign(keys))
    }
}

/// A token's claims and its signature (`<kid>.<hex>`): the claims end at the second dot from
/// the right.
fn split(token: &str) -> Option<(&str, &str)> {
    let mac_dot = token.rfind('.')?;
    let kid_dot = token[..mac_dot].rfind('.')?;
    Some((&token[..kid_dot], &token[kid_dot + 1..]))
}

/// The signing key id a token names (to find its key), if it has the shape of a token.
pub fn kid(token: &str) -> Option<&str> {
    split(token).and_then(|(_, signature)| KeyRing::kid_of(signature))
}

/// Checks `token` for `resource`, from `client` at `now` (unix seconds). The order of the checks
/// fixes which reason a request with several faults gets: a forged token is `bad_signature`
/// whatever it claims.
pub fn verify(
    keys: &KeyRing,
    token: Option<&str>,
    resource: &str,
    client: Option<IpAddr>,
    now: i64,
) -> Result<Claims, Deny> {
    let token = token.filter(|t| !t.is_empty()).ok_or(Deny::MissingToken)?;
    let (claims, signature) = split(token).ok_or(Deny::BadSignature)?;
    if !keys.verify_pieces(&[SIGNED_AS, claims.as_bytes()], signature) {
        return Err(Deny::BadSignature);
    }
    let claims = Claims::decode(claims).ok_or(Deny::BadSignature)?;
    if claims.resource != resource {
        return Err(Deny::WrongResource);
    }
    if now > claims.expires {
        return Err(Deny::Expired);
    }
    if let Some(ip) = claims.ip {
        if client != Some(ip) {
            return Err(Deny::IpMismatch);
        }
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> KeyRing {
        KeyRing::new(vec![("k1".into(), b"secret".to_vec())]).expect("a key")
    }

    fn claims(ip: Option<&str>) -> Claims {
        Claims {
            resource: "stream:abc".into(),
            expires: 1_000,
            session: Some(4_000),
            ip: ip.map(|i| i.parse().expect("ip")),
        }
    }

    #[test]
    fn a_signed_token_verifies_for_its_resource_until_it_expires() {
        let token = claims(None).sign(&keys());
        assert!(token.chars().all(|c| c.is_ascii_alphanumeric() || "~.:-".contains(c)), "URL-safe: {token}");
        assert_eq!(verify(&keys(), Some(&token), "stream:abc", None, 1_000), Ok(claims(None)));
        assert_eq!(verify(&keys(), Some(&token), "stream:abc", None, 1_001), Err(Deny::Expired));
        assert_eq!(verify(&keys(), Some(&token), "stream:other", None, 0), Err(Deny::WrongResource));
        assert_eq!(verify(&keys(), Some(&token), "vod:abc", None, 0), Err(Deny::WrongResource));
        assert_eq!(verify(&keys(), None, "stream:abc", None, 0), Err(Deny::MissingToken));
        assert_eq!(verify(&keys(), Some(""), "stream:abc", None, 0), Err(Deny::MissingToken));
    }

    #[test]
    fn session_tokens_last_as_long_as_the_session() {
        // Started at 900, just before the ticket expires: the session lasts until 4_900.
        let session = claims(None).session_token(&keys(), 900).expect("a ticket starts sessions");
        let checked = verify(&keys(), Some(&session), "stream:abc", None, 4_900).expect("valid");
        assert_eq!(checked.session, None);
        assert_eq!(verify(&keys(), Some(&session), "stream:abc", None, 4_901), Err(Deny::Expired));
        // A session token starts nothing longer.
        assert_eq!(checked.session_token(&keys(), 4_900), None);
    }

    #[test]
    fn pinned_tokens_need_their_address() {
        let token = claims(Some("192.0.2.7")).sign(&keys());
        let ok: IpAddr = "192.0.2.7".parse().expect("ip");
        let other: IpAddr = "192.0.2.8".parse().expect("ip");
        assert!(verify(&keys(), Some(&token), "stream:abc", Some(ok), 0).is_ok());
        assert_eq!(verify(&keys(), Some(&token), "stream:abc", Some(other), 0), Err(Deny::IpMismatch));
        assert_eq!(verify(&keys(), Some(&token), "stream:abc", None, 0), Err(Deny::IpMismatch));
        let v6 = claims(Some("2001:db8::1")).sign(&keys());
        assert!(verify(&keys(), Some(&v6), "stream:abc", Some("2001:db8::1".parse().expect("ip")), 0).is_ok());
    }

    #[test]
    fn the_key_id_is_read_off_the_token() {
        assert_eq!(kid(&claims(None).sign(&keys())), Some("k1"));
        assert_eq!(kid("a.b"), None);
        assert_eq!(kid("garbage"), None);
    }

    #[test]
    fn tampering_and_other_keys_are_bad_signatures() {
        let token = claims(None).sign(&keys());
        let longer = token.replacen("~1000~", "~9999~", 1);
        assert_eq!(verify(&keys(), Some(&longer), "stream:abc", None, 0), Err(Deny::BadSignature));
        let other = KeyRing::new(vec![("k1".into(), b"another".to_vec())]).expect("a key");
        assert_eq!(verify(&other, Some(&token), "stream:abc", None, 0), Err(Deny::BadSignature));
        for junk in ["x", "a.b", "v1~stream:abc~1~1~-", "v1~stream:abc~1~1~-.k1.zz"] {
            assert_eq!(verify(&keys(), Some(junk), "stream:abc", None, 0), Err(Deny::BadSignature), "{junk}");
        }
        // A rotated ring (new key first) still verifies the old token.
        let rotated = KeyRing::new(vec![("k2".into(), b"new".to_vec()), ("k1".into(), b"secret".to_vec())])
            .expect("keys");
        assert!(verify(&rotated, Some(&token), "stream:abc", None, 0).is_ok());
    }
}
