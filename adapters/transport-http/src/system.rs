//! REST routes for the server itself: stats, connected clients and cluster metadata.
//! Stats carry the memory pool's figures beside the SDK's fields (clients ignore them).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use rill_domain::wire::command::Command;
use serde_json::Value;

use crate::HttpState;
use crate::api::json;
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

pub async fn cluster(State(state): Shared, headers: HeaderMap) -> Response {
    json(async { replies::cluster(&state.run(&headers, Command::GetClusterMetadata).await?) }.await)
}
