//! Content keys of `drmEnabled` (CONTRACT: Live media): one random AES-128 key per stream or
//! VOD, kept in the database only wrapped (AES-256-GCM) by the server's master key, which lives
//! outside the database (`SLUICE_MASTER_KEY` or `<data dir>/master.key`). A copy of the
//! database alone opens no media.
//!
//! Media is encrypted as HLS `METHOD=AES-128` wants it (RFC 8216bis 5.2): each segment, and
//! each LL-HLS part on its own, AES-128-CBC with PKCS7 padding, the IV being the media sequence
//! number of the segment as a 128-bit big-endian integer (the playlists carry no IV attribute).

use aes::cipher::{block_padding::Pkcs7, BlockEncryptMut, KeyIvInit};
use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use rand::RngCore;
use sha2::{Digest, Sha256};

type Aes128CbcEnc = cbc::Encryptor<aes::Aes128>;
type Aes128CbcDec = cbc::Decryptor<aes::Aes128>;

/// A content key (16 bytes). Its `Debug` never shows it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ContentKey(pub [u8; 16]);

impl std::fmt::Debug for ContentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ContentKey(…)")
    }
}

impl ContentKey {
    pub fn random() -> ContentKey {
        let mut k = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut k);
        ContentKey(k)
    }

    /// `data` encrypted as the media of segment `msn` (AES-128-CBC, PKCS7, IV = `msn`).
    pub fn encrypt(&self, msn: u64, data: &[u8]) -> Vec<u8> {
        let iv = u128::from(msn).to_be_bytes();
        let len = data.len();
        let mut buf = vec![0u8; len + 16];
        buf[..len].copy_from_slice(data);
        let out_len = Aes128CbcEnc::new(&self.0.into(), &iv.into())
            .encrypt_padded_mut::<Pkcs7>(&mut buf, len)
            .map(|out| out.len())
            // A buffer one block longer than the data always has room for the padding.
            .unwrap_or_else(|_| unreachable!());
        buf.truncate(out_len);
        buf
    }

    /// The clear media of segment `msn` that [`ContentKey::encrypt`] encrypted; `None` when it
    /// does not decrypt (another key, damaged bytes).
    pub fn decrypt(&self, msn: u64, data: &[u8]) -> Option<Vec<u8>> {
        use aes::cipher::BlockDecryptMut;
        let iv = u128::from(msn).to_be_bytes();
        let mut buf = data.to_vec();
        let len =
            Aes128CbcDec::new(&self.0.into(), &iv.into()).decrypt_padded_mut::<Pkcs7>(&mut buf).ok()?.len();
        buf.truncate(len);
        Some(buf)
    }
}

/// The server's master key: wraps and unwraps content keys.
#[derive(Clone)]
pub struct MasterKey {
    key: [u8; 32],
    /// First bytes of its hash, written beside each wrapped key so a wrong master key is named.
    id: String,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterKey").field("id", &self.id).finish()
    }
}

/// Why a wrapped key could not be opened.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnwrapError {
    #[error("the content key was wrapped by another master key ({0})")]
    OtherMaster(String),
    #[error("the wrapped content key is damaged")]
    Damaged,
}

impl MasterKey {
    /// From 64 hex characters.
    pub fn from_hex(text: &str) -> Option<MasterKey> {
        let bytes: [u8; 32] = hex::decode(text.trim()).ok()?.try_into().ok()?;
        Some(MasterKey::from_bytes(bytes))
    }

    pub fn from_bytes(key: [u8; 32]) -> MasterKey {
        let id = hex::encode(&Sha256::digest(key)[..4]);
        MasterKey { key, id }
    }

    pub fn random() -> MasterKey {
        let mut k = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut k);
        MasterKey::from_bytes(k)
    }

    /// The first bytes of the key's hash, in hex: names it in errors without revealing it.
    /// A secret for `context` derived from the master key (HMAC-SHA-256): nodes sharing the
    /// master key share it (the live relay's node-to-node credential) without storing it.
    pub fn derive(&self, context: &str) -> [u8; 32] {
        use hmac::Mac;
        let mut mac = <hmac::Hmac<Sha256> as hmac::Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(context.as_bytes());
        mac.finalize().into_bytes().into()
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.key)
    }

    /// `v1.<master id>.<nonce hex>.<ciphertext hex>`; `context` (the resource) is bound in, so a
    /// wrapped key copied to another row does not open.
    pub fn wrap(&self, key: &ContentKey, context: &str) -> String {
        self.seal(&key.0, context)
    }

    pub fn unwrap(&self, wrapped: &str, context: &str) -> Result<ContentKey, UnwrapError> {
        let key = self.open(wrapped, context)?;
        Ok(ContentKey(key.try_into().map_err(|_| UnwrapError::Damaged)?))
    }

    /// Encrypts a secret kept in the database (AES-256-GCM, `context` bound in), in the form of
    /// [`MasterKey::wrap`]: a copy of the database alone reveals none of them.
    pub fn seal(&self, secret: &[u8], context: &str) -> String {
        let mut nonce = [0u8; 12];
        rand::thread_rng().fill_bytes(&mut nonce);
        let cipher = Aes256Gcm::new(&self.key.into());
        let payload = aes_gcm::aead::Payload { msg: secret, aad: context.as_bytes() };
        let sealed = cipher.encrypt(Nonce::from_slice(&nonce), payload).unwrap_or_else(|_| unreachable!());
        format!("v1.{}.{}.{}", self.id, hex::encode(nonce), hex::encode(sealed))
    }

    /// Opens what [`MasterKey::seal`] made for the same `context`.
    pub fn open(&self, sealed: &str, context: &str) -> Result<Vec<u8>, UnwrapError> {
        let parts: Vec<&str> = sealed.split('.').collect();
        let [version, id, nonce, sealed] = parts[..] else { return Err(UnwrapError::Damaged) };
        if version != "v1" {
            return Err(UnwrapError::Damaged);
        }
        if id != self.id {
            return Err(UnwrapError::OtherMaster(id.to_string()));
        }
        let nonce: [u8; 12] =
            hex::decode(nonce).ok().and_then(|n| n.try_into().ok()).ok_or(UnwrapError::Damaged)?;
        let sealed = hex::decode(sealed).map_err(|_| UnwrapError::Damaged)?;
        let cipher = Aes256Gcm::new(&self.key.into());
        let payload = aes_gcm::aead::Payload { msg: &sealed, aad: context.as_bytes() };
        cipher.decrypt(Nonce::from_slice(&nonce), payload).map_err(|_| UnwrapError::Damaged)
    }

    /// A sealed text secret, opened as UTF-8.
    pub fn open_text(&self, sealed: &str, context: &str) -> Result<String, UnwrapError> {
        String::from_utf8(self.open(sealed, context)?).map_err(|_| UnwrapError::Damaged)
    }
}

/// Whether a stored secret is sealed ([`MasterKey::seal`]) rather than in the clear as databases
/// written before sealing kept it (signing keys, webhook secrets and push verifiers have no dot).
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with("v1.") && stored.split('.').count() == 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes::cipher::BlockDecryptMut;

    #[test]
    fn decrypt_undoes_encrypt_and_refuses_another_key() {
        let key = ContentKey([9; 16]);
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        assert_eq!(key.decrypt(5, &key.encrypt(5, &data)).as_deref(), Some(&data[..]));
        assert_ne!(ContentKey([1; 16]).decrypt(5, &key.encrypt(5, &data)).as_deref(), Some(&data[..]));
    }

    #[test]
    fn media_is_cbc_with_the_sequence_number_as_iv() {
        let key = ContentKey([7; 16]);
        for len in [0usize, 1, 15, 16, 17, 1000] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut enc = key.encrypt(42, &data);
            assert_eq!(enc.len(), (len / 16 + 1) * 16, "PKCS7 always pads");
            let iv = u128::from(42u64).to_be_bytes();
            let plain = Aes128CbcDec::new(&key.0.into(), &iv.into())
                .decrypt_padded_mut::<Pkcs7>(&mut enc)
                .expect("decrypts");
            assert_eq!(plain, &data[..]);
        }
        assert_ne!(key.encrypt(1, b"same"), key.encrypt(2, b"same"), "the IV differs per segment");
    }

    #[test]
    fn wrapped_keys_open_only_with_their_master_and_context() {
        let master = MasterKey::random();
        let key = ContentKey::random();
        let wrapped = master.wrap(&key, "vod:a");
        assert!(!wrapped.contains(&hex::encode(key.0)), "the key is not readable in the wrapped form");
        assert_eq!(master.unwrap(&wrapped, "vod:a"), Ok(key));
        assert_eq!(master.unwrap(&wrapped, "vod:b"), Err(UnwrapError::Damaged));
        let other = MasterKey::random();
        assert!(matches!(other.unwrap(&wrapped, "vod:a"), Err(UnwrapError::OtherMaster(_))));
        assert_eq!(master.unwrap("v1.x", "vod:a"), Err(UnwrapError::Damaged));
        let again = MasterKey::from_hex(&master.to_hex()).expect("hex");
        assert_eq!(again.unwrap(&wrapped, "vod:a"), Ok(key));
        assert!(MasterKey::from_hex("abcd").is_none());
    }

    #[test]
    fn sealed_secrets_open_only_with_their_master_and_context() {
        let master = MasterKey::random();
        let sealed = master.seal(b"whsec-0123", "webhook:w1");
        assert!(is_sealed(&sealed) && !sealed.contains("whsec"));
        assert_eq!(master.open_text(&sealed, "webhook:w1").as_deref(), Ok("whsec-0123"));
        assert_eq!(master.open(&sealed, "webhook:w2"), Err(UnwrapError::Damaged));
        assert!(matches!(MasterKey::random().open(&sealed, "webhook:w1"), Err(UnwrapError::OtherMaster(_))));
        assert!(!is_sealed("0123456789abcdef0123456789abcdef"));
        assert!(!is_sealed("1B2M2Y8AsgTpgAmY7PhCfg=="));
    }
}
