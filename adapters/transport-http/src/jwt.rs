//! Access tokens for the HTTP API: HS256 JWTs with issuer and audience, a lifetime, and a
//! per-token id that logout revokes. The signing secret comes from the config or is made
//! once and kept at `<data>/runtime/jwt_secret` (owner-only), so tokens survive a restart.
//! Only HS256 is accepted: a token whose header names another algorithm (`none` included)
//! is refused before its signature is even considered.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

const ISSUER: &str = "rill";
const AUDIENCE: &str = "rill";
/// Revoked token ids kept at once; past this the oldest expiries go first.
const MAX_REVOKED: usize = 100_000;

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    iss: String,
    aud: String,
    iat: u64,
    exp: u64,
    jti: String,
}

pub struct Jwt {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    lifetime_s: u64,
    revoked: Mutex<BTreeMap<String, u64>>,
}

fn now_s() -> u64 {
    crate::clock::now_us() / 1_000_000
}

/// The configured secret, else the persisted one, else a new one written owner-only.
pub fn load_secret(configured: &str, data_path: &Path) -> std::io::Result<String> {
    if !configured.is_empty() {
        return Ok(configured.to_owned());
    }
    let path = data_path.join("runtime").join("jwt_secret");
    if let Ok(secret) = std::fs::read_to_string(&path)
        && !secret.trim().is_empty()
    {
        return Ok(secret.trim().to_owned());
    }
    let secret = rill_application::credentials::generate_token();
    std::fs::create_dir_all(path.parent().expect("runtime dir"))?;
    std::fs::write(&path, &secret)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(secret)
}

impl Jwt {
    pub fn new(secret: &str, lifetime_s: u64, leeway_s: u64) -> Result<Self, String> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[ISSUER]);
        validation.set_audience(&[AUDIENCE]);
        validation.leeway = leeway_s;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let key_error = |error: jsonwebtoken::errors::Error| format!("jwt signing secret: {error}");
        Ok(Self {
            encoding: EncodingKey::from_secret(secret.as_bytes()).map_err(key_error)?,
            decoding: DecodingKey::from_secret(secret.as_bytes()).map_err(key_error)?,
            validation,
            lifetime_s: lifetime_s.max(1),
            revoked: Mutex::new(BTreeMap::new()),
        })
    }

    /// A new token for `user_id` and its expiry (seconds since the epoch).
    pub fn issue(&self, user_id: u32) -> Result<(String, u64), String> {
        let iat = now_s();
        let claims = Claims {
            sub: user_id.to_string(),
            iss: ISSUER.into(),
            aud: AUDIENCE.into(),
            iat,
            exp: iat + self.lifetime_s,
            jti: rill_application::credentials::generate_token(),
        };
        let token =
            jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding).map_err(|e| e.to_string())?;
        Ok((token, claims.exp))
    }

    fn decode(&self, token: &str) -> Option<Claims> {
        let header = jsonwebtoken::decode_header(token).ok()?;
        if header.alg != Algorithm::HS256 {
            return None;
        }
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation).ok()?.claims;
        let revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&claims.jti);
        (!revoked).then_some(claims)
    }

    /// The user a valid, unrevoked token belongs to.
    pub fn verify(&self, token: &str) -> Option<u32> {
        self.decode(token)?.sub.parse().ok()
    }

    /// Revokes a token until it would have expired anyway.
    pub fn revoke(&self, token: &str) -> bool {
        let Some(claims) = self.decode(token) else { return false };
        let mut revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        let now = now_s();
        revoked.retain(|_, exp| *exp + self.validation.leeway > now);
        if revoked.len() >= MAX_REVOKED {
            return false;
        }
        revoked.insert(claims.jti, claims.exp);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_tokens_verify_until_revoked() {
        let jwt = Jwt::new("secret", 60, 0).unwrap();
        let (token, exp) = jwt.issue(7).unwrap();
        assert!(exp > now_s());
        assert_eq!(jwt.verify(&token), Some(7));
        assert!(jwt.revoke(&token));
        assert_eq!(jwt.verify(&token), None);
    }

    #[test]
    fn forged_swapped_and_foreign_tokens_are_refused() {
        let jwt = Jwt::new("secret", 60, 0).unwrap();
        let (token, _) = jwt.issue(1).unwrap();
        let mut forged = token.clone();
        forged.pop();
        forged.push(if token.ends_with('A') { 'B' } else { 'A' });
        assert_eq!(jwt.verify(&forged), None);
        let other = Jwt::new("another secret", 60, 0).unwrap().issue(1).unwrap().0;
        assert_eq!(jwt.verify(&other), None);
        // alg: none, with the same claims and no signature.
        let parts: Vec<&str> = token.split('.').collect();
        let none_header = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0";
        assert_eq!(jwt.verify(&format!("{none_header}.{}.", parts[1])), None);
        assert_eq!(jwt.verify("not a token"), None);
    }

    #[test]
    fn expired_tokens_are_refused() {
        let jwt = Jwt::new("secret", 1, 0).unwrap();
        let claims =
            Claims { sub: "1".into(), iss: ISSUER.into(), aud: AUDIENCE.into(), iat: 1, exp: 2, jti: "x".into() };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &jwt.encoding).unwrap();
        assert_eq!(jwt.verify(&token), None);
    }
}
