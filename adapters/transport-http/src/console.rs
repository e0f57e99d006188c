//! The web console at `/ui` (`[http] web_ui`): static assets compiled into the binary, so a
//! fresh build serves it with no Node toolchain, and the one read the REST API lacks for
//! it, every stored consumer and group offset of a topic with its lag. The console itself
//! only calls the REST API with the user's JWT; the server's permission checks are the
//! console's (docs/console.md).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use rill_application::partition::ConsumerKey;
use rill_domain::Namespace;
use rill_domain::error::ErrorCode;
use rill_domain::permissions::Access;
use serde_json::{Value, json};

use crate::HttpState;
use crate::api::{ApiError, ApiResult, json, topic_ref};

/// `(path under /ui/, content type, bytes)`. Paths are fixed: nothing from a request is
/// ever joined to a file name.
const ASSETS: &[(&str, &str, &[u8])] = &[
    ("", "text/html; charset=utf-8", include_bytes!("../console/index.html")),
    ("console.css", "text/css; charset=utf-8", include_bytes!("../console/console.css")),
    ("app.js", "text/javascript; charset=utf-8", include_bytes!("../console/app.js")),
    ("api.js", "text/javascript; charset=utf-8", include_bytes!("../console/api.js")),
    ("dom.js", "text/javascript; charset=utf-8", include_bytes!("../console/dom.js")),
    ("chart.js", "text/javascript; charset=utf-8", include_bytes!("../console/chart.js")),
    ("overview.js", "text/javascript; charset=utf-8", include_bytes!("../console/overview.js")),
    ("streams.js", "text/javascript; charset=utf-8", include_bytes!("../console/streams.js")),
    ("topic.js", "text/javascript; charset=utf-8", include_bytes!("../console/topic.js")),
    ("messages.js", "text/javascript; charset=utf-8", include_bytes!("../console/messages.js")),
    ("groups.js", "text/javascript; charset=utf-8", include_bytes!("../console/groups.js")),
    ("users.js", "text/javascript; charset=utf-8", include_bytes!("../console/users.js")),
    ("system.js", "text/javascript; charset=utf-8", include_bytes!("../console/system.js")),
    ("favicon.svg", "image/svg+xml", include_bytes!("../console/favicon.svg")),
];

/// Scripts, styles and requests only from this origin, no framing: a console holding an
/// administrator's token must not run anything it did not ship.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; \
     script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset(path: &str) -> Response {
    let Some((_, content_type, bytes)) = ASSETS.iter().find(|(name, _, _)| *name == path) else {
        return (StatusCode::NOT_FOUND, "no such console file").into_response();
    };
    let mut response = (*bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Small files: revalidating on every load keeps a browser from mixing two versions
    // of the console after an upgrade.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

async fn index() -> Response {
    asset("")
}

async fn file(Path(path): Path<String>) -> Response {
    asset(&path)
}

/// The console's routes: `/ui` (redirected to `/ui/`), `/ui/` and its files.
pub fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(index))
        .route("/ui/{*path}", get(file))
}

/// `GET /streams/{stream}/topics/{topic}/stored-offsets` (read_topic): per partition its
/// offsets, and every consumer's and group's stored offset with the lag behind the end.
pub async fn stored_offsets(
    State(state): State<Arc<HttpState>>,
    headers: HeaderMap,
    Path((stream, topic)): Path<(String, String)>,
) -> Response {
    json(stored_offsets_document(&state, &headers, &stream, &topic))
}

fn stored_offsets_document(state: &HttpState, headers: &HeaderMap, stream: &str, topic: &str) -> ApiResult<Value> {
    let user_id = state.authenticate(headers)?;
    let topic = topic_ref(stream, topic)?;
    let (stream_id, topic_id, partitions_count, allowed) = state.read(|m| {
        let (stream_id, topic_id) = m.topic_ids(&topic)?;
        let partitions = m.topic_by_ids(stream_id, topic_id).map_or(0, |t| t.partitions.len() as u32);
        Ok::<_, ErrorCode>((
            stream_id,
            topic_id,
            partitions,
            m.user_allows(user_id, Access::ReadTopic(stream_id, topic_id)),
        ))
    })?;
    if !allowed {
        return Err(ApiError::Code(ErrorCode::Unauthorized));
    }
    let mut partitions = Vec::new();
    let mut offsets = Vec::new();
    for partition_id in 0..partitions_count {
        let Some(counters) =
            Namespace::new(stream_id, topic_id, partition_id).and_then(|ns| state.context.partition(ns))
        else {
            continue;
        };
        let (first, current) = (counters.first_offset(), counters.current_offset());
        let messages = counters.usage().messages_count;
        partitions.push(
            json!({ "id": partition_id, "first_offset": first, "current_offset": current, "messages_count": messages }),
        );
        for (key, stored) in counters.stored_offsets() {
            let (kind, id) = match key {
                ConsumerKey::Consumer(id) => ("consumer", id),
                ConsumerKey::Group(id) => ("consumer_group", id),
            };
            // An empty partition has nothing to lag behind; otherwise the end is `current`.
            let lag = if messages == 0 { 0 } else { current.saturating_sub(stored) };
            offsets.push(json!({
                "kind": kind, "consumer_id": id, "partition_id": partition_id, "stored_offset": stored, "lag": lag,
            }));
        }
    }
    Ok(json!({ "stream_id": stream_id, "topic_id": topic_id, "partitions": partitions, "offsets": offsets }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_served_with_its_type_and_the_policy() {
        for (name, content_type, bytes) in ASSETS {
            assert!(!bytes.is_empty(), "{name} is empty");
            let response = asset(name);
            assert_eq!(response.status(), StatusCode::OK, "{name}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], *content_type, "{name}");
            assert!(response.headers().contains_key(header::CONTENT_SECURITY_POLICY), "{name}");
        }
    }

    #[test]
    fn unknown_and_traversing_paths_are_not_found() {
        for path in ["nope.js", "../Cargo.toml", "/etc/passwd", "app.js/", "APP.JS"] {
            assert_eq!(asset(path).status(), StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[test]
    fn every_script_the_page_loads_is_an_asset() {
        // index.html and the modules import each other by relative file name; a missing
        // entry here would be a blank console.
        let names: Vec<&str> = ASSETS.iter().map(|(name, _, _)| *name).collect();
        for (name, _, bytes) in ASSETS {
            let text = String::from_utf8_lossy(bytes);
            for quoted in text.split(['"', '\'']).filter(|s| s.starts_with("./") && s.ends_with(".js")) {
                assert!(names.contains(&&quoted[2..]), "{name} imports {quoted}, which is not embedded");
            }
        }
    }
}
