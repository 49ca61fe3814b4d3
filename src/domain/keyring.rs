//! The server's HMAC-SHA256 keys for signed URLs (upload targets; playback tokens). The newest
//! key signs; every key verifies, so adding a key (rotation) breaks no URL already handed out.
//! A signature is `<kid>.<hex>`; checks run in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

#[derive(Clone)]
pub struct KeyRing {
    /// (kid, secret), newest first.
    keys: Vec<(String, Vec<u8>)>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets.
        f.debug_struct("KeyRing")
            .field("kids", &self.keys.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .finish()
    }
}

impl KeyRing {
    /// Keys newest first; at least one.
    pub fn new(keys: Vec<(String, Vec<u8>)>) -> Option<KeyRing> {
        (!keys.is_empty()).then_some(KeyRing { keys })
    }

    fn mac(secret: &[u8], message: &str) -> Vec<u8> {
        // HMAC takes keys of any length.
        let mut mac = HmacSha256::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
        mac.update(message.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// Whether a key of this ring has the id `kid`.
    pub fn knows(&self, kid: &str) -> bool {
        self.keys.iter().any(|(k, _)| k == kid)
    }

    /// The key id a signature (`<kid>.<hex>`) names.
    pub fn kid_of(signature: &str) -> Option<&str> {
        signature.split_once('.').map(|(kid, _)| kid)
    }

    pub fn sign(&self, message: &str) -> String {
        let (kid, secret) = &self.keys[0];
        format!("{kid}.{}", hex::encode(Self::mac(secret, message)))
    }

    /// Whether `signature` is a signature of `message` by one of the keys.
    pub fn verify(&self, message: &str, signature: &str) -> bool {
        let Some((kid, mac)) = signature.split_once('.') else { return false };
        let Ok(mac) = hex::decode(mac) else { return false };
        self.keys
            .iter()
            .find(|(k, _)| k == kid)
            .is_some_and(|(_, secret)| Self::mac(secret, message).ct_eq(&mac).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_with_the_newest_and_verifies_with_any() {
        let old = KeyRing::new(vec![("a".into(), b"one".to_vec())]).unwrap();
        let sig = old.sign("m");
        let rotated =
            KeyRing::new(vec![("b".into(), b"two".to_vec()), ("a".into(), b"one".to_vec())]).unwrap();
        assert!(rotated.verify("m", &sig), "an old signature survives rotation");
        assert!(rotated.sign("m").starts_with("b."));
        assert!(!rotated.verify("n", &sig));
        let mut tampered = sig.clone();
        tampered.pop();
        tampered.push(if sig.ends_with('0') { '1' } else { '0' });
        assert!(!rotated.verify("m", &tampered));
        assert!(!rotated.verify("m", "c.00"));
        assert!(!rotated.verify("m", "nodot"));
    }
}
