//! The root account: created once on first start, its password stored only as an Argon2id
//! hash in `metadata/users`. Later issues extend this into full user management.

use std::io;
use std::path::Path;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString, rand_core::OsRng};
use argon2::{Algorithm, Argon2, Params, Version};

use crate::ports::{Storage, StorageFile};

/// OWASP's minimum for Argon2id: 19 MiB, 2 iterations, 1 lane.
fn hasher() -> Argon2<'static> {
    Argon2::new(
        Algorithm::Argon2id,
        Version::V0x13,
        Params::new(19 * 1024, 2, 1, None).expect("valid argon2 parameters"),
    )
}

#[derive(Debug, Clone)]
pub struct RootUser {
    pub username: String,
    password_hash: String,
}

/// Where the root password comes from on first start.
#[derive(Debug, Clone)]
pub struct RootSeed {
    pub username: String,
    pub password: String,
    /// Whether the password was generated (and so must be shown to the operator once).
    pub generated: bool,
}

impl RootUser {
    pub fn verify(&self, username: &str, password: &str) -> bool {
        let Ok(parsed) = PasswordHash::new(&self.password_hash) else { return false };
        // Hash even when the username is wrong, so both failures cost the same time.
        let password_ok = hasher().verify_password(password.as_bytes(), &parsed).is_ok();
        password_ok && username == self.username
    }

    /// Loads the root user, creating it from `seed` when none exists yet. Returns whether
    /// it was created now.
    pub async fn load_or_create<S: Storage>(
        storage: &S,
        metadata_dir: &Path,
        seed: &RootSeed,
    ) -> io::Result<(Self, bool)> {
        let path = metadata_dir.join("users");
        let file = storage.open(&path).await?;
        let len = file.len().await?;
        if len > 0 {
            let (result, bytes) = file.read_exact_at(vec![0u8; len as usize], 0).await;
            result?;
            let text = String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let (username, hash) = text
                .trim_end()
                .split_once('\t')
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "metadata/users is malformed"))?;
            return Ok((Self { username: username.to_owned(), password_hash: hash.to_owned() }, false));
        }
        let salt = SaltString::generate(&mut OsRng);
        let hash = hasher()
            .hash_password(seed.password.as_bytes(), &salt)
            .map_err(|e| io::Error::other(e.to_string()))?
            .to_string();
        let (result, _) = file.write_at(vec![format!("{}\t{}\n", seed.username, hash).into_bytes()], 0).await;
        result?;
        file.sync().await?;
        Ok((Self { username: seed.username.clone(), password_hash: hash }, true))
    }
}
