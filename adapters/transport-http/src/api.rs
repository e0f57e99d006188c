//! Running a REST request: authenticate the bearer, encode the typed command, have a shard
//! execute it through the gateway, and take its typed answer. Errors come back as
//! Iggy's JSON error document with the HTTP status the SDK maps to its own errors.

use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rill_application::ports::Reply;
use rill_domain::answer::Answer;
use rill_domain::error::ErrorCode;
use rill_domain::identifier::Identifier;
use rill_domain::wire::command::{Command, TopicRef};
use serde_json::json;

use crate::HttpState;

/// A failed request: an Iggy error code, or a plain HTTP status for failures that have
/// no code (a body that is not the JSON the route expects).
#[derive(Debug)]
pub enum ApiError {
    Code(ErrorCode),
    BadRequest(String),
}

impl From<ErrorCode> for ApiError {
    fn from(code: ErrorCode) -> Self {
        Self::Code(code)
    }
}

/// `StreamIdNotFound` -> `stream_id_not_found`.
fn snake_case(code: ErrorCode) -> String {
    let mut out = String::new();
    for (index, ch) in format!("{code:?}").chars().enumerate() {
        if ch.is_ascii_uppercase() {
            if index > 0 {
                out.push('_');
            }
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

/// The status the 0.11 HTTP client turns back into the right error: 404 for anything not
/// found (it reads that as "absent"), 401 for a missing or bad token, 403 for missing
/// permissions, 400 for the rest (a wrong password included: the client keeps the body
/// of a 400, so the caller still learns the code, as with Iggy).
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::Unauthenticated | ErrorCode::InvalidPersonalAccessToken => StatusCode::UNAUTHORIZED,
        ErrorCode::Unauthorized => StatusCode::FORBIDDEN,
        ErrorCode::FeatureUnavailable => StatusCode::NOT_IMPLEMENTED,
        ErrorCode::IoError | ErrorCode::Error => StatusCode::INTERNAL_SERVER_ERROR,
        code if format!("{code:?}").ends_with("NotFound") => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Code(code) => {
                let document = json!({
                    "id": code.code(),
                    "code": snake_case(code),
                    "reason": code.to_string(),
                    "field": null,
                });
                let mut response = (status_of(code), Json(document)).into_response();
                if code == ErrorCode::Unauthenticated {
                    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
                }
                response
            }
            ApiError::BadRequest(reason) => {
                let document = json!({ "id": 400, "code": "bad_request", "reason": reason, "field": null });
                (StatusCode::BAD_REQUEST, Json(document)).into_response()
            }
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// A path segment naming a resource: numeric ids are ids, anything else is a name (as
/// the SDK renders `Identifier`s into paths).
pub fn identifier(segment: &str) -> ApiResult<Identifier> {
    match segment.parse::<u32>() {
        Ok(id) => Ok(Identifier::Numeric(id)),
        Err(_) if (1..=255).contains(&segment.len()) => Ok(Identifier::Name(segment.to_owned())),
        Err(_) => Err(ApiError::Code(ErrorCode::InvalidIdentifier)),
    }
}

pub fn topic_ref(stream: &str, topic: &str) -> ApiResult<TopicRef> {
    Ok(TopicRef { stream: identifier(stream)?, topic: identifier(topic)? })
}

impl HttpState {
    /// The user a bearer token (a JWT from login, or a personal access token) belongs to.
    pub fn authenticate(&self, headers: &HeaderMap) -> ApiResult<u32> {
        let token = crate::state::bearer(headers).ok_or(ApiError::Code(ErrorCode::Unauthenticated))?;
        self.jwt
            .verify(token)
            .filter(|&id| self.active(id))
            .or_else(|| self.pat_user(token))
            .ok_or(ApiError::Code(ErrorCode::Unauthenticated))
    }

    /// Runs `command` for the caller on a shard; its answer.
    pub async fn run(&self, headers: &HeaderMap, command: Command<'_>) -> ApiResult<Answer> {
        let user_id = self.authenticate(headers)?;
        self.run_as(user_id, command).await
    }

    pub async fn run_as(&self, user_id: u32, command: Command<'_>) -> ApiResult<Answer> {
        Ok(self.reply_as(user_id, command).await?.into_answer()?)
    }

    /// Runs `command` for the caller on a shard; its reply as it came (a poll's is the
    /// frame its batches were read into).
    pub async fn reply(&self, headers: &HeaderMap, command: Command<'_>) -> ApiResult<Reply> {
        let user_id = self.authenticate(headers)?;
        self.reply_as(user_id, command).await
    }

    async fn reply_as(&self, user_id: u32, command: Command<'_>) -> ApiResult<Reply> {
        let request = command.encode()?;
        Ok(self.gateway.execute(user_id, request).await?)
    }
}

/// 204: a write that has nothing to return.
pub fn no_content(result: ApiResult<Answer>) -> Response {
    match result {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => error.into_response(),
    }
}

/// A JSON document, or the error.
pub fn json<T: serde::Serialize>(result: ApiResult<T>) -> Response {
    match result {
        Ok(value) => Json(value).into_response(),
        Err(error) => error.into_response(),
    }
}

/// 200 with a JSON document already written out (poll replies, see `poll_json`).
pub fn json_bytes(result: ApiResult<Vec<u8>>) -> Response {
    match result {
        Ok(document) => ([(axum::http::header::CONTENT_TYPE, "application/json")], axum::body::Bytes::from(document))
            .into_response(),
        Err(error) => error.into_response(),
    }
}

/// 201 with a JSON document (creates).
pub fn created(result: ApiResult<serde_json::Value>) -> Response {
    match result {
        Ok(value) => (StatusCode::CREATED, Json(value)).into_response(),
        Err(error) => error.into_response(),
    }
}

/// Parses a JSON request body, refusing malformed JSON with a 400 that says why.
pub fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    serde_json::from_slice(bytes).map_err(|error| ApiError::BadRequest(format!("invalid JSON body: {error}")))
}
