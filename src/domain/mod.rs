//! Types that parse and validate at the edge; the core never sees a raw string where one of these
//! is meant.

pub mod api_key;
pub mod clip;
mod closed_set;
pub mod content_key;
pub mod credits;
pub mod delivery;
pub mod keyring;
pub mod password;
pub mod project;
pub mod scope;
pub mod simulcast;
pub mod stream;
pub mod time;
mod url_grammar;
pub mod vod;

pub use api_key::{ApiKeyHash, RawApiKey};
pub(crate) use closed_set::closed_string_set;
pub use project::{Email, ProjectSlug};
pub use scope::{Role, Scope, ScopeSet};
pub(crate) use url_grammar::{host_pattern, port_pattern};

use rand::distributions::Alphanumeric;
use rand::Rng;

/// A new opaque, URL-safe identifier (lowercase letters and digits, ~103 bits of randomness).
pub fn new_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    (0..20).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char).collect()
}

/// A random token of `len` alphanumeric characters from the OS-seeded CSPRNG.
pub fn random_token(len: usize) -> String {
    rand::thread_rng().sample_iter(&Alphanumeric).take(len).map(char::from).collect()
}
