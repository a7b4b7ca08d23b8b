//! Bearer tokens: 32 random bytes, shown once as `ebb_` and 43 characters of URL-safe base64;
//! only their SHA-256 is stored (a token is as strong as a random key, so a fast hash suffices).

use argon2::password_hash::rand_core::{OsRng, RngCore};
use base64::Engine;
use sha2::{Digest, Sha256};

use super::Token;

/// What every token starts with.
pub const TOKEN_PREFIX: &str = "ebb_";

/// A token just made: the secret to show once, and the record to keep.
#[derive(Debug)]
pub struct NewToken {
    /// The secret.
    pub secret: String,
    /// The record (hash only).
    pub record: Token,
}

/// SHA-256 of a token secret, hex.
pub fn token_hash(secret: &str) -> String {
    let d = Sha256::digest(secret.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new token for `user`.
pub fn new_token(user: &str, now_ms: u64) -> NewToken {
    let mut raw = [0u8; 32];
    OsRng.fill_bytes(&mut raw);
    let secret =
        format!("{TOKEN_PREFIX}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw));
    let mut id = [0u8; 6];
    OsRng.fill_bytes(&mut id);
    let record = Token {
        id: id.iter().map(|b| format!("{b:02x}")).collect(),
        user: user.to_string(),
        hash: token_hash(&secret),
        created_ms: now_ms,
    };
    NewToken { secret, record }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_only_hashed() {
        let a = new_token("u", 1);
        let b = new_token("u", 1);
        assert_ne!(a.secret, b.secret);
        assert_ne!(a.record.id, b.record.id);
        assert!(a.secret.starts_with(TOKEN_PREFIX) && a.secret.len() == 4 + 43);
        assert_eq!(a.record.hash, token_hash(&a.secret));
        assert!(!a.record.hash.contains(&a.secret[4..]));
    }
}
