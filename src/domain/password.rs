//! Password hashing with Argon2id (CONTRACT: Users and sessions). One hash takes tens of
//! milliseconds of CPU and about 19 MiB by design: callers run it on the blocking pool through
//! the server's bounded gate (`crate::password_gate`).
//!
//! The 19 MiB of Argon2 memory come from a small pool of buffers that are reused, not from a
//! fresh allocation per hash: with the allocator's per-thread arenas, freed 19 MiB blocks stayed
//! resident on each of the blocking pool's threads, and a login flood left the process hundreds
//! of MiB larger even with only a few hashes at a time. The pool holds at most as many buffers
//! as hashes ever ran at once.

use std::sync::{Mutex, OnceLock};

use argon2::password_hash::{rand_core::OsRng, Output, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use subtle::ConstantTimeEq;

/// Argon2 working memory, reused between hashes.
static BUFFERS: Mutex<Vec<Vec<Block>>> = Mutex::new(Vec::new());

/// Runs `f` with a buffer of `blocks` Argon2 blocks from the pool.
fn with_buffer<T>(blocks: usize, f: impl FnOnce(&mut [Block]) -> T) -> T {
    let mut buffer = BUFFERS.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_default();
    if buffer.len() != blocks {
        buffer.resize(blocks, Block::default());
        buffer.shrink_to_fit();
    }
    let out = f(&mut buffer);
    BUFFERS.lock().unwrap_or_else(|p| p.into_inner()).push(buffer);
    out
}

/// A password could not be hashed (the hasher's own failure; never the password's fault).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HashError(String);

/// Argon2id with the crate's default parameters (m = 19 MiB, t = 2, p = 1), as a PHC string.
pub fn hash(password: &str) -> Result<String, HashError> {
    let params = Params::default();
    let salt = SaltString::generate(&mut OsRng);
    let mut salt_bytes = [0u8; 64];
    let salt_raw = salt.decode_b64(&mut salt_bytes).map_err(|e| HashError(format!("salt: {e}")))?;
    let mut out = [0u8; 32];
    let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone());
    with_buffer(params.block_count(), |blocks| {
        argon.hash_password_into_with_memory(password.as_bytes(), salt_raw, &mut out, blocks)
    })
    .map_err(|e| HashError(format!("hashing password: {e}")))?;
    let out = Output::new(&out).map_err(|e| HashError(format!("hash output: {e}")))?;
    Ok(format!(
        "$argon2id$v=19$m={},t={},p={}${}${}",
        params.m_cost(),
        params.t_cost(),
        params.p_cost(),
        salt.as_str(),
        out
    ))
}

/// Whether `password` matches the PHC string `stored` (compared in constant time).
pub fn verify(password: &str, stored: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(stored) else { return false };
    let (Ok(algorithm), Ok(params)) = (Algorithm::try_from(parsed.algorithm), Params::try_from(&parsed))
    else {
        return false;
    };
    let version = parsed.version.map_or(Ok(Version::V0x13), Version::try_from);
    let (Ok(version), Some(expected), Some(salt)) = (version, parsed.hash, parsed.salt) else { return false };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else { return false };
    let mut out = vec![0u8; expected.len()];
    let argon = Argon2::new(algorithm, version, params.clone());
    with_buffer(params.block_count(), |blocks| {
        argon.hash_password_into_with_memory(password.as_bytes(), salt, &mut out, blocks)
    })
    .is_ok()
        && bool::from(out.as_slice().ct_eq(expected.as_bytes()))
}

/// Spends the same time as a real check when the user does not exist, so sign-in timing does
/// not reveal which e-mail addresses have accounts.
pub fn verify_dummy(password: &str) {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let stored = DUMMY.get_or_init(|| hash("not a password anyone has").unwrap_or_default());
    let _ = verify(password, stored);
}

/// Checks `password` against `stored`; with nothing usable stored (no such user, or one who has
/// not set a password yet) checks a dummy hash instead, so both cost the same, and says no.
pub fn verify_or_dummy(password: &str, stored: Option<&str>) -> bool {
    match stored.filter(|s| PasswordHash::new(s).is_ok()) {
        Some(stored) => verify(password, stored),
        None => {
            verify_dummy(password);
            false
        }
    }
}

pub async fn hash_async(password: String) -> Result<String, HashError> {
    tokio::task::spawn_blocking(move || hash(&password))
        .await
        .map_err(|e| HashError(format!("hashing task: {e}")))?
}

#[cfg(test)]
mod tests {
    use argon2::password_hash::{PasswordHasher, PasswordVerifier};

    #[test]
    fn round_trip() {
        let h = super::hash("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{h}");
        assert!(super::verify("correct horse", &h));
        assert!(!super::verify("wrong", &h));
        assert!(!super::verify("x", "not a hash"));
        assert!(!super::verify_or_dummy("x", Some("")));
    }

    #[test]
    fn interoperates_with_the_argon2_crate() {
        // Hashes made before the buffer pool (by the crate's own hasher) still verify, and ours
        // verify with the crate's verifier.
        let salt = argon2::password_hash::SaltString::generate(&mut argon2::password_hash::rand_core::OsRng);
        let theirs = argon2::Argon2::default().hash_password(b"old secret", &salt).unwrap().to_string();
        assert!(super::verify("old secret", &theirs));
        assert!(!super::verify("other", &theirs));
        let ours = super::hash("new secret").unwrap();
        let parsed = argon2::password_hash::PasswordHash::new(&ours).unwrap();
        assert!(argon2::Argon2::default().verify_password(b"new secret", &parsed).is_ok());
    }
}
