//! Delivery signatures: `X-Service-Signature: sha256=<hex HMAC-SHA256 of the raw body>` keyed
//! with the webhook's secret (interface: Webhook signatures).

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// A new webhook secret: 32 hexadecimal characters (128 bits).
pub fn new_secret() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    hex::encode(bytes)
}

pub fn sign(secret: &str, body: &[u8]) -> String {
    // HMAC takes keys of any length; this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// What a receiver does: recompute over the exact bytes and compare in constant time.
pub fn verify(secret: &str, body: &[u8], header: &str) -> bool {
    sign(secret, body).as_bytes().ct_eq(header.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            sign("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn secrets_and_verification() {
        let s = new_secret();
        assert_eq!(s.len(), 32);
        assert!(s.bytes().all(|b| b.is_ascii_hexdigit()));
        let sig = sign(&s, b"{}");
        assert!(verify(&s, b"{}", &sig));
        assert!(!verify(&s, b"{ }", &sig));
        assert!(!verify(&new_secret(), b"{}", &sig));
    }
}
