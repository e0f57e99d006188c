//! REST routes for users and personal access tokens.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use rill_domain::identifier::Identifier;
use rill_domain::wire::command::{Command, MetadataOp};
use serde::Deserialize;

use crate::HttpState;
use crate::api::{ApiError, ApiResult, body, created, identifier, json, no_content};
use crate::permissions::PermissionsJson;
use crate::replies;

type Http = State<Arc<HttpState>>;

#[derive(Deserialize)]
pub(crate) struct CreateUserBody {
    username: String,
    password: String,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    permissions: Option<PermissionsJson>,
}

#[derive(Deserialize)]
pub(crate) struct UpdateUserBody {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct PasswordBody {
    current_password: String,
    new_password: String,
}

#[derive(Deserialize)]
pub(crate) struct PermissionsBody {
    #[serde(default)]
    permissions: Option<PermissionsJson>,
}

#[derive(Deserialize)]
pub(crate) struct CreateTokenBody {
    name: String,
    #[serde(default)]
    expiry: u64,
}

/// A create-user body as the command it asks for.
pub(crate) fn create_user_command(bytes: &[u8]) -> ApiResult<Command<'static>> {
    let request: CreateUserBody = body(bytes)?;
    Ok(Command::CreateUser {
        username: request.username,
        password: request.password,
        status: status(request.status.as_deref())?.unwrap_or(1),
        permissions: request.permissions.map(PermissionsJson::into_domain),
    })
}

/// An update-user body as the metadata operation it asks for.
pub(crate) fn update_user_op(user: Identifier, bytes: &[u8]) -> ApiResult<MetadataOp<'static>> {
    let request: UpdateUserBody = body(bytes)?;
    Ok(MetadataOp::UpdateUser { user, username: request.username, status: status(request.status.as_deref())? })
}

/// A permissions body as the metadata operation it asks for.
pub(crate) fn permissions_op(user: Identifier, bytes: &[u8]) -> ApiResult<MetadataOp<'static>> {
    let request: PermissionsBody = body(bytes)?;
    Ok(MetadataOp::UpdatePermissions { user, permissions: request.permissions.map(PermissionsJson::into_domain) })
}

/// `active` is 1 and `inactive` 2 on the wire.
fn status(text: Option<&str>) -> ApiResult<Option<u8>> {
    match text {
        None => Ok(None),
        Some("active") => Ok(Some(1)),
        Some("inactive") => Ok(Some(2)),
        Some(other) => Err(ApiError::BadRequest(format!("unknown user status `{other}`"))),
    }
}

pub async fn get_users(State(state): Http, headers: HeaderMap) -> Response {
    json(async { replies::routes::listed(state.run(&headers, Command::GetUsers).await?) }.await)
}

pub async fn get_user(State(state): Http, headers: HeaderMap, Path(user): Path<String>) -> Response {
    json(
        async {
            let reply = state.run(&headers, Command::GetUser { user: identifier(&user)? }).await?;
            replies::routes::user_details(reply)
        }
        .await,
    )
}

pub async fn create_user(State(state): Http, headers: HeaderMap, bytes: Bytes) -> Response {
    created(
        async {
            let command = create_user_command(&bytes)?;
            replies::routes::user_details(state.run(&headers, command).await?)
        }
        .await,
    )
}

pub async fn update_user(State(state): Http, headers: HeaderMap, Path(user): Path<String>, bytes: Bytes) -> Response {
    no_content(
        async {
            let op = update_user_op(identifier(&user)?, &bytes)?;
            state.run(&headers, Command::Metadata(op)).await
        }
        .await,
    )
}

pub async fn delete_user(State(state): Http, headers: HeaderMap, Path(user): Path<String>) -> Response {
    no_content(
        async { state.run(&headers, Command::Metadata(MetadataOp::DeleteUser { user: identifier(&user)? })).await }
            .await,
    )
}

pub async fn change_password(
    State(state): Http,
    headers: HeaderMap,
    Path(user): Path<String>,
    bytes: Bytes,
) -> Response {
    no_content(
        async {
            let request: PasswordBody = body(&bytes)?;
            let command = Command::ChangePassword {
                user: identifier(&user)?,
                current: request.current_password,
                new: request.new_password,
            };
            state.run(&headers, command).await
        }
        .await,
    )
}

pub async fn update_permissions(
    State(state): Http,
    headers: HeaderMap,
    Path(user): Path<String>,
    bytes: Bytes,
) -> Response {
    no_content(
        async {
            let op = permissions_op(identifier(&user)?, &bytes)?;
            state.run(&headers, Command::Metadata(op)).await
        }
        .await,
    )
}

pub async fn get_tokens(State(state): Http, headers: HeaderMap) -> Response {
    json(async { replies::routes::listed(state.run(&headers, Command::GetTokens).await?) }.await)
}

pub async fn create_token(State(state): Http, headers: HeaderMap, bytes: Bytes) -> Response {
    created(
        async {
            let request: CreateTokenBody = body(&bytes)?;
            let command = Command::CreateToken { name: request.name, expiry_us: request.expiry };
            replies::routes::listed(state.run(&headers, command).await?)
        }
        .await,
    )
}

pub async fn delete_token(State(state): Http, headers: HeaderMap, Path(name): Path<String>) -> Response {
    no_content(async { state.run(&headers, Command::DeleteToken { name }).await }.await)
}
