//! Raw API keys (`svc_` + 43 URL-safe characters) and their stored SHA-256 hashes
//! (interface: API key, Authentication 3).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const PREFIX: &str = "svc_";
const BODY_LEN: usize = 43;
/// Characters of the key kept for identification.
pub const SHOWN_PREFIX_LEN: usize = 12;

/// A raw key as the client holds it. Never logged: `Debug` shows only the prefix.
pub struct RawApiKey(String);

impl std::fmt::Debug for RawApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawApiKey({}…)", self.prefix())
    }
}

impl RawApiKey {
    /// 32 random bytes, base64url without padding: exactly 43 characters.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        RawApiKey(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// Accepts only the exact shape; anything else is a malformed key.
    pub fn parse(s: &str) -> Option<Self> {
        let body = s.strip_prefix(PREFIX)?;
        let well_formed = body.len() == BODY_LEN
            && body.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        well_formed.then(|| RawApiKey(s.to_string()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn prefix(&self) -> &str {
        &self.0[..SHOWN_PREFIX_LEN]
    }

    pub fn hash(&self) -> ApiKeyHash {
        ApiKeyHash::of(&self.0)
    }
}

/// Lowercase hex SHA-256 of a secret token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyHash(pub String);

impl ApiKeyHash {
    pub fn of(secret: &str) -> Self {
        ApiKeyHash(hex::encode(Sha256::digest(secret.as_bytes())))
    }

    /// Constant-time comparison with a stored hash.
    pub fn matches(&self, stored: &str) -> bool {
        self.0.as_bytes().ct_eq(stored.as_bytes()).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_the_interface_shape() {
        let k = RawApiKey::generate();
        assert_eq!(k.expose().len(), 4 + 43);
        assert!(RawApiKey::parse(k.expose()).is_some());
        assert_eq!(k.prefix().len(), 12);
        assert!(k.expose().starts_with(k.prefix()));
        assert!(!format!("{k:?}").contains(&k.expose()[12..]));
    }

    #[test]
    fn malformed_keys_are_refused() {
        assert!(RawApiKey::parse("svc_short").is_none());
        assert!(RawApiKey::parse(&format!("key_{}", "a".repeat(43))).is_none());
        assert!(RawApiKey::parse(&format!("svc_{}", "a".repeat(44))).is_none());
        assert!(RawApiKey::parse(&format!("svc_{}!", "a".repeat(42))).is_none());
        assert!(RawApiKey::parse(&format!("svc_{}", "a".repeat(43))).is_some());
    }

    #[test]
    fn hash_matches_only_itself() {
        let k = RawApiKey::generate();
        let h = k.hash();
        assert_eq!(h.0.len(), 64);
        assert!(h.matches(&h.0));
        assert!(!h.matches(&RawApiKey::generate().hash().0));
    }
}
