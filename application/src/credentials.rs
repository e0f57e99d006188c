//! Secrets: Argon2id password hashes (at the OWASP minimum: 19 MiB, 2 iterations, 1 lane)
//! and personal access tokens, which are random and stored only as BLAKE3 hashes. Hashing
//! a password takes tens of milliseconds, so callers run it through the `Offload` port,
//! off the shard's event loop. Checks reuse Argon2's working memory (a few arenas kept
//! process-wide): 19 MiB allocated afresh per login are fresh pages, faulted in one by one,
//! which cost about a fifth of each check. A password that verified is remembered for a
//! while as a keyed hash, so a client that reconnects does not pay Argon2id again.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use argon2::password_hash::rand_core::{OsRng, RngCore};
use argon2::password_hash::{Output, PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};

/// Working memories kept for reuse at most (each `m_cost` KiB: 19 MiB at Rill's parameters).
const ARENAS_KEPT: usize = 4;
/// Larger memory costs than this (64 MiB) are checked in fresh memory, never kept.
const ARENA_BLOCKS_MAX: usize = 64 * 1024;

static ARENAS: Mutex<Vec<Vec<Block>>> = Mutex::new(Vec::new());

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

/// Checks a password against a stored hash: a pair that verified within
/// `VERIFIED_FOR` is answered from the cache of verified logins, anything else by Argon2.
pub fn verify_password(hash: &str, password: &str) -> bool {
    static VERIFIED: OnceLock<Mutex<VerifiedLogins>> = OnceLock::new();
    let verified = VERIFIED.get_or_init(|| Mutex::new(VerifiedLogins::new()));
    let now = Instant::now();
    if verified.lock().is_ok_and(|mut cache| cache.contains(hash, password, now)) {
        return true;
    }
    let Ok(parsed) = PasswordHash::new(hash) else { return false };
    let right = verify_in_kept_memory(&parsed, password.as_bytes())
        .unwrap_or_else(|| hasher().verify_password(password.as_bytes(), &parsed).is_ok());
    if right && let Ok(mut cache) = verified.lock() {
        cache.insert(hash, password, now);
    }
    right
}

/// How long a verified (hash, password) pair is remembered.
const VERIFIED_FOR: Duration = Duration::from_secs(600);
/// Pairs remembered at most; past that the one closest to expiry goes.
const VERIFIED_KEPT: usize = 256;

/// Pairs of stored hash and password that verified recently, each kept only as BLAKE3
/// keyed by a random per-process key, with its expiry. Only successes enter, so a wrong
/// guess always costs the full Argon2id check and the failure delay; the stored hash is
/// part of the key, so a changed password or a recreated user never matches an old entry.
struct VerifiedLogins {
    key: [u8; 32],
    entries: Vec<([u8; 32], Instant)>,
}

impl VerifiedLogins {
    fn new() -> Self {
        let mut key = [0u8; 32];
        OsRng.fill_bytes(&mut key);
        Self { key, entries: Vec::new() }
    }

    fn digest(&self, hash: &str, password: &str) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        hasher.update(&(hash.len() as u64).to_le_bytes()).update(hash.as_bytes()).update(password.as_bytes());
        *hasher.finalize().as_bytes()
    }

    fn contains(&mut self, hash: &str, password: &str, now: Instant) -> bool {
        self.entries.retain(|(_, expiry)| *expiry > now);
        let digest = self.digest(hash, password);
        // `blake3::Hash` compares in constant time.
        self.entries.iter().any(|(kept, _)| blake3::Hash::from_bytes(*kept) == blake3::Hash::from_bytes(digest))
    }

    fn insert(&mut self, hash: &str, password: &str, now: Instant) {
        let digest = self.digest(hash, password);
        self.entries.retain(|(kept, expiry)| *expiry > now && *kept != digest);
        if self.entries.len() >= VERIFIED_KEPT
            && let Some(oldest) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].1)
        {
            self.entries.swap_remove(oldest);
        }
        self.entries.push((digest, now + VERIFIED_FOR));
    }
}

/// The check of `verify_password` in a kept arena; `None` for a hash it does not take
/// (another algorithm's, malformed, or too large a memory cost), which the library checks.
fn verify_in_kept_memory(parsed: &PasswordHash, password: &[u8]) -> Option<bool> {
    let algorithm = Algorithm::try_from(parsed.algorithm).ok()?;
    let version = parsed.version.map(Version::try_from).transpose().ok()?.unwrap_or_default();
    let params = Params::try_from(parsed).ok()?;
    let expected = parsed.hash?;
    let mut salt = [0u8; 64];
    let salt = parsed.salt?.decode_b64(&mut salt).ok()?;
    let blocks = params.block_count();
    if blocks > ARENA_BLOCKS_MAX {
        return None;
    }
    let mut arena = ARENAS.lock().ok()?.pop().unwrap_or_default();
    arena.resize(blocks, Block::default());
    let mut computed = vec![0u8; expected.len()];
    let hashed = Argon2::new(algorithm, version, params).hash_password_into_with_memory(
        password,
        salt,
        &mut computed,
        &mut arena[..],
    );
    if let Ok(mut kept) = ARENAS.lock()
        && kept.len() < ARENAS_KEPT
    {
        kept.push(arena);
    }
    hashed.ok()?;
    // `Output` compares in constant time.
    Some(Output::new(&computed).ok()? == expected)
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
    fn checks_in_kept_memory_agree_with_the_library_on_any_argon2_hash() {
        let salt = SaltString::generate(&mut OsRng);
        for (algorithm, m_cost) in
            [(Algorithm::Argon2id, 19 * 1024), (Algorithm::Argon2i, 8 * 1024), (Algorithm::Argon2d, 64)]
        {
            let argon = Argon2::new(algorithm, Version::V0x13, Params::new(m_cost, 1, 1, None).unwrap());
            let hash = argon.hash_password(b"pw", &salt).unwrap().to_string();
            let parsed = PasswordHash::new(&hash).unwrap();
            for (password, right) in [("pw", true), ("pW", false), ("", false)] {
                assert_eq!(verify_in_kept_memory(&parsed, password.as_bytes()), Some(right), "{hash} {password:?}");
                assert_eq!(verify_password(&hash, password), right);
            }
        }
        // A memory cost past what is kept goes to the library, with the same answer.
        let large = Argon2::new(Algorithm::Argon2id, Version::V0x13, Params::new(65 * 1024, 1, 1, None).unwrap());
        let hash = large.hash_password(b"pw", &salt).unwrap().to_string();
        assert_eq!(verify_in_kept_memory(&PasswordHash::new(&hash).unwrap(), b"pw"), None);
        assert!(verify_password(&hash, "pw") && !verify_password(&hash, "px"));
        assert!(ARENAS.lock().unwrap().len() <= ARENAS_KEPT);
    }

    #[test]
    fn verified_logins_are_remembered_only_for_their_hash_password_and_while() {
        let mut cache = VerifiedLogins::new();
        let now = Instant::now();
        assert!(!cache.contains("$h1", "pw", now));
        cache.insert("$h1", "pw", now);
        assert!(cache.contains("$h1", "pw", now + Duration::from_secs(1)));
        assert!(!cache.contains("$h1", "pW", now), "another password");
        assert!(!cache.contains("$h2", "pw", now), "another stored hash (a changed password)");
        // The length prefix keeps the split between hash and password unambiguous.
        assert!(!cache.contains("$h", "1pw", now));
        assert!(!cache.contains("$h1", "pw", now + VERIFIED_FOR), "expired");
        assert!(cache.entries.is_empty(), "expired entries are dropped");
        for i in 0..VERIFIED_KEPT + 10 {
            cache.insert(&format!("$h{i}"), "pw", now + Duration::from_millis(i as u64));
        }
        assert_eq!(cache.entries.len(), VERIFIED_KEPT);
        let later = now + Duration::from_secs(1);
        assert!(!cache.contains("$h0", "pw", later), "the oldest went first");
        assert!(cache.contains(&format!("$h{}", VERIFIED_KEPT + 9), "pw", later));
        // Another process's key gives other digests.
        assert_ne!(VerifiedLogins::new().digest("$h1", "pw"), cache.digest("$h1", "pw"));
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
