//! Password hashes: Argon2id (a memory-hard KDF, RustCrypto's `argon2`, PHC string) to check
//! passwords sent in the clear over HTTP, and a PostgreSQL-style SCRAM-SHA-256 verifier
//! (salt, iterations, `StoredKey`, `ServerKey`; RFC 5802/7677) for the PostgreSQL wire
//! protocol, which never sends the password. Neither gives the password back.
//!
//! Argon2 costs tens of milliseconds per check by design, so [`PasswordCheck`] remembers
//! passwords it verified (keyed by a salted SHA-256 it holds only in memory) for a few minutes,
//! and HTTP clients sending Basic credentials with every request pay it once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use argon2::password_hash::rand_core::{OsRng, RngCore};
use argon2::password_hash::{PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::AccessError;

/// PBKDF2 iterations of SCRAM verifiers (PostgreSQL's default).
pub const SCRAM_ITERATIONS: u32 = 4096;

/// Longest password accepted (bytes).
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// A SCRAM-SHA-256 verifier.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramVerifier {
    /// Salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `SHA-256(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramVerifier").field("iterations", &self.iterations).finish()
    }
}

/// What is kept of a password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PasswordHash {
    /// Argon2id, as a PHC string.
    pub argon2: String,
    /// The SCRAM-SHA-256 verifier.
    pub scram: ScramVerifier,
}

impl std::fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PasswordHash(..)")
    }
}

fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(msg);
    m.finalize().into_bytes().to_vec()
}

impl PasswordHash {
    /// Hashes `password` (refused if empty or longer than [`MAX_PASSWORD_BYTES`]).
    pub fn new(password: &str) -> Result<PasswordHash, AccessError> {
        if password.is_empty() || password.len() > MAX_PASSWORD_BYTES {
            return Err(AccessError::Invalid(format!(
                "a password must have 1 to {MAX_PASSWORD_BYTES} bytes"
            )));
        }
        let salt = SaltString::generate(&mut OsRng);
        let argon2 = Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map_err(|e| AccessError::Invalid(format!("hashing the password: {e}")))?
            .to_string();
        let mut scram_salt = vec![0u8; 16];
        OsRng.fill_bytes(&mut scram_salt);
        let mut salted = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(
            password.as_bytes(),
            &scram_salt,
            SCRAM_ITERATIONS,
            &mut salted,
        );
        let client_key = hmac(&salted, b"Client Key");
        let scram = ScramVerifier {
            salt: scram_salt,
            iterations: SCRAM_ITERATIONS,
            stored_key: Sha256::digest(&client_key).to_vec(),
            server_key: hmac(&salted, b"Server Key"),
        };
        Ok(PasswordHash { argon2, scram })
    }

    /// True if `password` is the one hashed (Argon2id, slow by design).
    pub fn verify(&self, password: &str) -> bool {
        if password.len() > MAX_PASSWORD_BYTES {
            return false;
        }
        match argon2::PasswordHash::new(&self.argon2) {
            Ok(h) => Argon2::default().verify_password(password.as_bytes(), &h).is_ok(),
            Err(_) => false,
        }
    }
}

/// How long a verified password is remembered.
const REMEMBER: Duration = Duration::from_secs(300);

/// Most remembered logins.
const MAX_REMEMBERED: usize = 4096;

/// A remembered login: the user, a salted SHA-256 of the password, the hash it matched.
type Login = (String, [u8; 32], String);

/// Password checks with a memory of recent successes (see the module documentation).
pub struct PasswordCheck {
    key: [u8; 32],
    /// Remembered logins, with when they were verified.
    seen: Mutex<HashMap<Login, Instant>>,
}

impl std::fmt::Debug for PasswordCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PasswordCheck")
    }
}

impl Default for PasswordCheck {
    fn default() -> Self {
        let mut key = [0u8; 32];
        OsRng.fill_bytes(&mut key);
        PasswordCheck { key, seen: Mutex::new(HashMap::new()) }
    }
}

impl PasswordCheck {
    /// True if `password` is `user`'s, whose stored hash is `hash`. A changed password (a new
    /// hash) is verified again.
    pub fn verify(&self, user: &str, hash: &PasswordHash, password: &str) -> bool {
        let mut h = Sha256::new();
        h.update(self.key);
        h.update(password.as_bytes());
        let digest: [u8; 32] = h.finalize().into();
        let k = (user.to_string(), digest, hash.argon2.clone());
        {
            let seen = self.seen.lock();
            if seen.get(&k).is_some_and(|t| t.elapsed() < REMEMBER) {
                return true;
            }
        }
        if !hash.verify(password) {
            return false;
        }
        let mut seen = self.seen.lock();
        if seen.len() >= MAX_REMEMBERED {
            seen.retain(|_, t| t.elapsed() < REMEMBER);
            if seen.len() >= MAX_REMEMBERED {
                seen.clear();
            }
        }
        seen.insert(k, Instant::now());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_only_their_password() {
        let h = PasswordHash::new("s3cret").unwrap();
        assert!(h.verify("s3cret"));
        assert!(!h.verify("s3cret "));
        assert!(!h.argon2.contains("s3cret"));
        assert!(h.argon2.starts_with("$argon2id$"));
        let check = PasswordCheck::default();
        assert!(check.verify("a", &h, "s3cret"));
        assert!(check.verify("a", &h, "s3cret"), "remembered");
        assert!(!check.verify("a", &h, "other"));
        let h2 = PasswordHash::new("s3cret").unwrap();
        assert_ne!(h.scram.salt, h2.scram.salt);
        assert!(PasswordHash::new("").is_err());
    }

    #[test]
    fn scram_verifier_matches_rfc7677() {
        // RFC 7677's example: password "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ==, 4096 rounds.
        let salt = [
            0x5b, 0x6d, 0x99, 0x68, 0x9d, 0x12, 0x35, 0x8e, 0xec, 0xa0, 0x4b, 0x14, 0x12, 0x36,
            0xfa, 0x81,
        ];
        let mut salted = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(b"pencil", &salt, 4096, &mut salted);
        let server_key = hmac(&salted, b"Server Key");
        let client_key = hmac(&salted, b"Client Key");
        let stored_key = Sha256::digest(&client_key);
        // The server signature of the RFC's exchange is HMAC(ServerKey, AuthMessage).
        let auth = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let sig = hmac(&server_key, auth.as_bytes());
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        assert_eq!(b64.encode(sig), "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        // ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage).
        let csig = hmac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&csig).map(|(a, b)| a ^ b).collect();
        assert_eq!(b64.encode(proof), "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
    }
}
