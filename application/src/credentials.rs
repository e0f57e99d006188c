//! Secrets: Argon2id password hashes (at the OWASP minimum: 19 MiB, 2 iterations, 1 lane)
//! and personal access tokens, which are random and stored only as BLAKE3 hashes. Hashing
//! a password takes tens of milliseconds, so callers run it through the `Offload` port,
//! off the shard's event loop.

use std::sync::OnceLock;

use argon2::password_hash::rand_core::{OsRng, RngCore};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};

fn hasher() -> Argon2<'static> {
    Argon2::new(
        Algorithm::Argon2id,
        Version::V0x13,
        Params::new(19 * 1024, 2, 1, None).expect("valid argon2 parameters"),
    )
}

/// Where the root password comes from on first start.
#[derive(Debug, Clone)]
pub struct RootSeed {
    pub username: String,
    pub password: String,
    /// Whether the password was generated (and so must be shown to the operator once).
    pub generated: bool,
}

/// A PHC-format Argon2id hash of `password` with a random salt.
pub fn hash_password(password: &str) -> String {
    let salt = SaltString::generate(&mut OsRng);
    hasher().hash_password(password.as_bytes(), &salt).expect("argon2 accepts any password").to_string()
}

/// Checks a password against a stored hash.
pub fn verify_password(hash: &str, password: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| hasher().verify_password(password.as_bytes(), &parsed).is_ok())
}

/// A hash no password matches, so an unknown user costs the same time as a wrong password.
pub fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| hash_password("an account that does not exist"))
}

/// A new raw token: 32 random bytes as 64 hex characters.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The stored form of a token. Tokens carry 256 random bits, so a fast hash suffices.
pub fn hash_token(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_verify_only_against_their_hash() {
        let hash = hash_password("s3cret");
        assert!(hash.starts_with("$argon2id$") && !hash.contains("s3cret"));
        assert!(verify_password(&hash, "s3cret"));
        assert!(!verify_password(&hash, "s3cret!"));
        assert!(!verify_password(decoy_hash(), "an account that does not exist!"));
        assert!(!verify_password("not a hash", "x"));
    }

    #[test]
    fn tokens_are_random_and_hashed() {
        let (a, b) = (generate_token(), generate_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert_ne!(hash_token(&a), a);
        assert_eq!(hash_token(&a), hash_token(&a));
    }
}
