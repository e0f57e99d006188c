//! REST routes for the server itself: stats, connected clients, cluster metadata and the
//! option catalogs of the create commands.
//! Stats carry the memory pool's figures beside the SDK's fields (clients ignore them).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use rill_domain::error::ErrorCode;
use rill_domain::topic_options;
use rill_domain::wire::command::Command;
use serde_json::Value;

use crate::HttpState;
use crate::api::{ApiError, json};
use crate::replies;

type Shared = State<Arc<HttpState>>;

pub async fn stats(State(state): Shared, headers: HeaderMap) -> Response {
    json(
        async {
            let mut document = replies::stats(&state.run(&headers, Command::GetStats).await?)?;
            let extra = state.read(|m| crate::metrics::stats(m, &state.shared));
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

pub async fn clients(State(state): Shared, headers: HeaderMap) -> Response {
    json(async { replies::clients(&state.run(&headers, Command::GetClients).await?) }.await)
}

pub async fn client(State(state): Shared, headers: HeaderMap, Path(client_id): Path<u32>) -> Response {
    json(async { replies::client_details(&state.run(&headers, Command::GetClient { client_id }).await?) }.await)
}

/// `GET /options/{topic|stream|user}`: what that resource's create command accepts.
pub async fn options(State(state): Shared, headers: HeaderMap, Path(scope): Path<String>) -> Response {
    let scope = match scope.as_str() {
        "topic" => topic_options::SCOPE_TOPIC,
        "stream" => topic_options::SCOPE_STREAM,
        "user" => topic_options::SCOPE_USER,
        _ => return json::<Value>(Err(ApiError::Code(ErrorCode::InvalidCommand))),
    };
    json(async { replies::option_catalog(&state.run(&headers, Command::DescribeOptions { scope }).await?) }.await)
}

pub async fn cluster(State(state): Shared, headers: HeaderMap) -> Response {
    json(async { replies::cluster(&state.run(&headers, Command::GetClusterMetadata).await?) }.await)
}
