//! REST routes for the server itself: stats, connected clients, cluster metadata and the
//! option catalogs of the create commands, and snapshots.
//! Stats carry the memory pool's figures beside the SDK's fields (clients ignore them).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use rill_domain::answer::Answer;
use rill_domain::error::ErrorCode;
use rill_domain::snapshot::{self, SnapshotCompression};
use rill_domain::topic_options;
use rill_domain::wire::command::Command;
use serde_json::Value;

use crate::HttpState;
use crate::api::{ApiError, ApiResult, body, json};
use crate::replies;

type Http = State<Arc<HttpState>>;

pub async fn stats(State(state): Http, headers: HeaderMap) -> Response {
    json(
        async {
            let mut document = replies::routes::stats(state.run(&headers, Command::GetStats).await?)?;
            let extra = state.read(|m| crate::metrics::stats(m, &state.context));
            if let Ok(Value::Object(extra)) = serde_json::to_value(extra) {
                for (key, value) in extra {
                    document.entry(key).or_insert(value);
                }
            }
            Ok(Value::Object(document))
        }
        .await,
    )
}

pub async fn clients(State(state): Http, headers: HeaderMap) -> Response {
    json(async { replies::routes::listed(state.run(&headers, Command::GetClients).await?) }.await)
}

pub async fn client(State(state): Http, headers: HeaderMap, Path(client_id): Path<u32>) -> Response {
    json(async { replies::routes::client_details(state.run(&headers, Command::GetClient { client_id }).await?) }.await)
}

/// `GET /options/{topic|stream|user}`: what that resource's create command accepts.
pub async fn options(State(state): Http, headers: HeaderMap, Path(scope): Path<String>) -> Response {
    let scope = match scope.as_str() {
        "topic" => topic_options::SCOPE_TOPIC,
        "stream" => topic_options::SCOPE_STREAM,
        "user" => topic_options::SCOPE_USER,
        _ => return json::<Value>(Err(ApiError::Code(ErrorCode::InvalidCommand))),
    };
    json(
        async {
            // Like a 0.11 client's, the HTTP API's stream create carries no options: its
            // stream catalog names no key.
            let answer = match state.run(&headers, Command::DescribeOptions { scope }).await? {
                Answer::Options(catalog) => Answer::Options(
                    catalog
                        .into_iter()
                        .filter(|spec| spec.key != rill_domain::stream_options::ENCRYPTION_KEY)
                        .collect(),
                ),
                other => other,
            };
            replies::routes::listed(answer)
        }
        .await,
    )
}

/// The body of `POST /snapshot`, with the client's enum names.
#[derive(serde::Deserialize)]
pub struct SnapshotBody {
    compression: String,
    snapshot_types: Vec<String>,
}

const COMPRESSIONS: [&str; 6] = ["Stored", "Deflated", "Bzip2", "Zstd", "Lzma", "Xz"];
const SNAPSHOT_TYPES: [&str; 6] =
    ["FilesystemOverview", "ProcessList", "ResourceUsage", "Test", "ServerLogs", "ServerConfig"];

/// The GET_SNAPSHOT_FILE request a body names; an unknown name is a 400 that says which.
pub(crate) fn snapshot_command(request: &SnapshotBody) -> ApiResult<Command<'static>> {
    let unknown = |what: &str, name: &str| ApiError::BadRequest(format!("unknown {what}: {name}"));
    let position = |names: &[&str], name: &str| names.iter().position(|n| *n == name).map(|i| i as u8 + 1);
    let compression = position(&COMPRESSIONS, &request.compression)
        .and_then(SnapshotCompression::from_code)
        .ok_or_else(|| unknown("compression", &request.compression))?;
    let mut codes = Vec::new();
    for name in &request.snapshot_types {
        let code = if name == "All" { snapshot::ALL_TYPES } else { position(&SNAPSHOT_TYPES, name).unwrap_or(0) };
        codes.push(code);
        if code == 0 {
            return Err(unknown("snapshot type", name));
        }
    }
    let types = snapshot::parse_types(&codes).ok_or_else(|| ApiError::BadRequest("no snapshot types".into()))?;
    Ok(Command::GetSnapshot { compression, types })
}

/// `POST /snapshot`: the zip archive itself, as the SDK saves it.
pub async fn snapshot(State(state): Http, headers: HeaderMap, bytes: Bytes) -> Response {
    let archive =
        async { replies::routes::snapshot(state.run(&headers, snapshot_command(&body(&bytes)?)?).await?) }.await;
    match archive {
        Ok(archive) => ([(header::CONTENT_TYPE, "application/zip")], archive).into_response(),
        Err(error) => error.into_response(),
    }
}

pub async fn cluster(State(state): Http, headers: HeaderMap) -> Response {
    json(async { replies::routes::listed(state.run(&headers, Command::GetClusterMetadata).await?) }.await)
}
