//! Logging in, shared by every transport: the password check (with the decoy hash for an
//! unknown user, the failed-login guard and the failure delay) and personal access tokens.
//! The slow step, `verify_slowly`, is a plain blocking function so each caller runs it off
//! its event loop in its own way.

use std::time::Duration;

use rill_domain::error::ErrorCode;
use rill_domain::metadata::Metadata;

use crate::credentials::{decoy_hash, hash_token, verify_password};
use crate::login_guard::LoginGuard;

/// What a password login is checked against.
#[derive(Debug, Clone)]
pub struct PasswordCheck {
    /// The user's hash, or the decoy for an unknown user, so both cost the same.
    pub hash: String,
    /// `(user_id, active)` when the user exists.
    user: Option<(u32, bool)>,
}

pub fn password_check(metadata: &Metadata, username: &str) -> PasswordCheck {
    match metadata.user_by_name(username) {
        Some(user) => PasswordCheck { hash: user.password_hash.clone(), user: Some((user.id, user.is_active())) },
        None => PasswordCheck { hash: decoy_hash().to_owned(), user: None },
    }
}

/// Verifies a password; a failure also waits `delay`. Blocking: run it off the event loop.
pub fn verify_slowly(hash: &str, password: &str, delay: Duration) -> bool {
    let verified = verify_password(hash, password);
    if !verified {
        std::thread::sleep(delay);
    }
    verified
}

/// The user id for a verified password, unless the user is unknown, inactive or locked
/// out by too many failures; records a failure for a wrong password.
pub fn conclude(
    guard: &LoginGuard,
    username: &str,
    check: &PasswordCheck,
    verified: bool,
    now_us: u64,
) -> Result<u32, ErrorCode> {
    match check.user {
        Some((user_id, true)) if verified && !guard.is_locked(username, now_us) => {
            guard.clear(username);
            Ok(user_id)
        }
        _ => {
            if !verified {
                guard.record_failure(username, now_us);
            }
            Err(ErrorCode::InvalidCredentials)
        }
    }
}

/// The active user a raw personal access token belongs to, unless it expired.
pub fn token_user(metadata: &Metadata, token: &str, now_us: u64) -> Result<u32, ErrorCode> {
    let hash = hash_token(token.trim());
    match metadata.token_owner(&hash) {
        Some((_, _, t)) if t.expiry_at != 0 && t.expiry_at <= now_us => Err(ErrorCode::PersonalAccessTokenExpired),
        Some((user, _, _)) if user.is_active() => Ok(user.id),
        _ => Err(ErrorCode::InvalidPersonalAccessToken),
    }
}
