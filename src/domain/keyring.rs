//! The server's HMAC-SHA256 keys for signed URLs (upload targets; playback tokens). The newest
//! key signs; every key verifies, so adding a key (rotation) breaks no URL already handed out.
//! A signature is `<kid>.<hex>`; checks run in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

#[derive(Clone)]
pub struct KeyRing {
    /// Newest first.
    keys: Vec<Key>,
}

/// One key: its id, and the HMAC state with the secret already absorbed (the two key blocks
/// are hashed once here, not on every signature; the secret itself is not kept).
#[derive(Clone)]
struct Key {
    kid: String,
    keyed: HmacSha256,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets.
        f.debug_struct("KeyRing")
            .field("kids", &self.keys.iter().map(|k| &k.kid).collect::<Vec<_>>())
            .finish()
    }
}

impl KeyRing {
    /// Keys (id, secret) newest first; at least one.
    pub fn new(keys: Vec<(String, Vec<u8>)>) -> Option<KeyRing> {
        let keys: Vec<Key> = keys
            .into_iter()
            // HMAC takes keys of any length.
            .map(|(kid, secret)| Key {
                kid,
                keyed: HmacSha256::new_from_slice(&secret).unwrap_or_else(|_| unreachable!()),
            })
            .collect();
        (!keys.is_empty()).then_some(KeyRing { keys })
    }

    /// The MAC of the concatenation of `message`'s pieces.
    fn mac(key: &Key, message: &[&[u8]]) -> [u8; 32] {
        let mut mac = key.keyed.clone();
        for piece in message {
            mac.update(piece);
        }
        mac.finalize().into_bytes().into()
    }

    /// Whether a key of this ring has the id `kid`.
    pub fn knows(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid == kid)
    }

    /// The key id a signature (`<kid>.<hex>`) names.
    pub fn kid_of(signature: &str) -> Option<&str> {
        signature.split_once('.').map(|(kid, _)| kid)
    }

    pub fn sign(&self, message: &str) -> String {
        self.sign_pieces(&[message.as_bytes()])
    }

    /// [`KeyRing::sign`] of the concatenation of `message`'s pieces (no copy joins them).
    pub fn sign_pieces(&self, message: &[&[u8]]) -> String {
        let key = &self.keys[0];
        format!("{}.{}", key.kid, hex::encode(Self::mac(key, message)))
    }

    /// Whether `signature` is a signature of `message` by one of the keys.
    pub fn verify(&self, message: &str, signature: &str) -> bool {
        self.verify_pieces(&[message.as_bytes()], signature)
    }

    /// [`KeyRing::verify`] of the concatenation of `message`'s pieces.
    pub fn verify_pieces(&self, message: &[&[u8]], signature: &str) -> bool {
        let Some((kid, hex_mac)) = signature.split_once('.') else { return false };
        let mut mac = [0u8; 32];
        if hex::decode_to_slice(hex_mac, &mut mac).is_err() {
            return false;
        }
        self.keys.iter().find(|k| k.kid == kid).is_some_and(|key| Self::mac(key, message).ct_eq(&mac).into())
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
        // A MAC of the wrong length is no MAC (hex of 31 and of 33 bytes).
        let (kid, hex) = sig.split_once('.').unwrap();
        assert!(!rotated.verify("m", &format!("{kid}.{}", &hex[2..])));
        assert!(!rotated.verify("m", &format!("{kid}.{hex}00")));
        // Pieces sign as their concatenation.
        assert!(rotated.verify_pieces(&[b"playback\n", b"claims"], &rotated.sign("playback\nclaims")));
        assert_eq!(rotated.sign_pieces(&[b"m"]), rotated.sign("m"));
    }
}
