//! Logging in over HTTP: username and password (Argon2 off the event loop, the shared
//! failed-login guard and failure delay), personal access token, token refresh and logout.
//! Every success answers `{user_id, access_token: {token, expiry}}` with a JWT.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use rill_application::credentials::{decoy_hash, hash_token, verify_password};
use rill_application::ports::MetadataRead;
use serde::Deserialize;
use serde_json::json;

use crate::{HttpState, bearer};

#[derive(Deserialize)]
pub struct LoginRequest {
    username: String,
    password: String,
}

#[derive(Deserialize)]
pub struct TokenRequest {
    token: String,
}

/// An Iggy-style error document.
pub fn error(status: StatusCode, id: u32, code: &str, reason: &str) -> Response {
    (status, Json(json!({ "id": id, "code": code, "reason": reason, "field": null }))).into_response()
}

fn identity<M>(state: &HttpState<M>, user_id: u32) -> Response {
    match state.jwt.issue(user_id) {
        Ok((token, expiry)) => {
            Json(json!({ "user_id": user_id, "access_token": { "token": token, "expiry": expiry } })).into_response()
        }
        Err(reason) => error(StatusCode::INTERNAL_SERVER_ERROR, 1, "error", &reason),
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

pub async fn login<M: MetadataRead + Send + 'static>(
    State(state): State<Arc<HttpState<M>>>,
    Json(request): Json<LoginRequest>,
) -> Response {
    let user =
        state.read(|m| m.user_by_name(&request.username).map(|u| (u.id, u.password_hash.clone(), u.is_active())));
    let hash = user.as_ref().map_or_else(|| decoy_hash().to_owned(), |(_, hash, _)| hash.clone());
    let delay = std::time::Duration::from_micros(state.shared.config.security.login_failure_delay_us);
    let password = request.password.clone();
    let verified = tokio::task::spawn_blocking(move || {
        let verified = verify_password(&hash, &password);
        if !verified {
            std::thread::sleep(delay);
        }
        verified
    })
    .await
    .unwrap_or(false);
    let guard = &state.shared.login_guard;
    let now = now_us();
    match user {
        Some((user_id, _, true)) if verified && !guard.is_locked(&request.username, now) => {
            guard.clear(&request.username);
            identity(&state, user_id)
        }
        _ => {
            if !verified {
                guard.record_failure(&request.username, now);
            }
            error(StatusCode::UNAUTHORIZED, 42, "invalid_credentials", "invalid credentials")
        }
    }
}

pub async fn login_with_token<M: MetadataRead + Send + 'static>(
    State(state): State<Arc<HttpState<M>>>,
    Json(request): Json<TokenRequest>,
) -> Response {
    match state.pat_user(&request.token) {
        Some(user_id) => identity(&state, user_id),
        None => error(StatusCode::UNAUTHORIZED, 53, "invalid_personal_access_token", "invalid personal access token"),
    }
}

pub async fn refresh<M: MetadataRead + Send + 'static>(
    State(state): State<Arc<HttpState<M>>>,
    Json(request): Json<TokenRequest>,
) -> Response {
    match state.jwt.verify(&request.token) {
        Some(user_id) if state.active(user_id) => {
            state.jwt.revoke(&request.token);
            identity(&state, user_id)
        }
        _ => error(StatusCode::UNAUTHORIZED, 78, "invalid_access_token", "invalid access token"),
    }
}

pub async fn logout<M: MetadataRead + Send + 'static>(
    State(state): State<Arc<HttpState<M>>>,
    headers: HeaderMap,
) -> Response {
    match bearer(&headers) {
        Some(token) if state.jwt.revoke(token) => StatusCode::NO_CONTENT.into_response(),
        _ => error(StatusCode::UNAUTHORIZED, 78, "invalid_access_token", "invalid access token"),
    }
}

impl<M: MetadataRead> HttpState<M> {
    /// The active user a personal access token belongs to, unless it expired.
    pub(crate) fn pat_user(&self, token: &str) -> Option<u32> {
        let hash = hash_token(token.trim());
        let now = now_us();
        self.read(|m| {
            m.token_owner(&hash)
                .filter(|(user, _, t)| user.is_active() && (t.expiry_at == 0 || t.expiry_at > now))
                .map(|(user, _, _)| user.id)
        })
    }

    pub(crate) fn active(&self, user_id: u32) -> bool {
        self.read(|m| m.user(user_id).is_some_and(|u| u.is_active()))
    }
}
