//! Logging in over HTTP: username and password (Argon2 off the event loop, the shared
//! failed-login guard and failure delay), personal access token, token refresh and logout.
//! Every success answers `{user_id, access_token: {token, expiry}}` with a JWT.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use rill_application::login;
use serde::Deserialize;
use serde_json::json;

use crate::clock::now_us;
use crate::state::{HttpState, bearer};

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

fn identity(state: &HttpState, user_id: u32) -> Response {
    match state.jwt.issue(user_id) {
        Ok((token, expiry)) => {
            Json(json!({ "user_id": user_id, "access_token": { "token": token, "expiry": expiry } })).into_response()
        }
        Err(reason) => error(StatusCode::INTERNAL_SERVER_ERROR, 1, "error", &reason),
    }
}

pub async fn login(State(state): State<Arc<HttpState>>, Json(request): Json<LoginRequest>) -> Response {
    let check = state.read(|m| login::password_check(m, &request.username));
    let (hash, password) = (check.hash.clone(), request.password.clone());
    let delay = std::time::Duration::from_micros(state.context.login_failure_delay_us());
    let verified =
        tokio::task::spawn_blocking(move || login::verify_slowly(&hash, &password, delay)).await.unwrap_or(false);
    match login::conclude(state.context.login_guard(), &request.username, &check, verified, now_us()) {
        Ok(user_id) => identity(&state, user_id),
        Err(_) => error(StatusCode::BAD_REQUEST, 42, "invalid_credentials", "invalid credentials"),
    }
}

pub async fn login_with_token(State(state): State<Arc<HttpState>>, Json(request): Json<TokenRequest>) -> Response {
    match state.pat_user(&request.token) {
        Some(user_id) => identity(&state, user_id),
        None => error(StatusCode::UNAUTHORIZED, 53, "invalid_personal_access_token", "invalid personal access token"),
    }
}

pub async fn refresh(State(state): State<Arc<HttpState>>, Json(request): Json<TokenRequest>) -> Response {
    match state.jwt.verify(&request.token) {
        Some(user_id) if state.active(user_id) => {
            state.jwt.revoke(&request.token);
            identity(&state, user_id)
        }
        _ => error(StatusCode::UNAUTHORIZED, 78, "invalid_access_token", "invalid access token"),
    }
}

pub async fn logout(State(state): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    match bearer(&headers) {
        Some(token) if state.jwt.revoke(token) => StatusCode::NO_CONTENT.into_response(),
        _ => error(StatusCode::UNAUTHORIZED, 78, "invalid_access_token", "invalid access token"),
    }
}

impl HttpState {
    /// The active user a personal access token belongs to, unless it expired.
    pub(crate) fn pat_user(&self, token: &str) -> Option<u32> {
        self.read(|m| login::token_user(m, token, now_us()).ok())
    }

    pub(crate) fn active(&self, user_id: u32) -> bool {
        self.read(|m| m.user(user_id).is_some_and(|u| u.is_active()))
    }
}
