//! REST routes for streams, topics, partitions, segments and consumer groups. Each builds
//! the typed command, runs it on a shard, and renders the reply as the SDK expects.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use rill_domain::wire::command::{Command, MetadataOp};
use rill_domain::wire::tlv;
use serde::Deserialize;

use crate::HttpState;
use crate::api::{ApiResult, body, created, identifier, json, no_content, topic_ref};
use crate::replies;

type Http = State<Arc<HttpState>>;

#[derive(Deserialize)]
pub(crate) struct NameBody {
    name: String,
}

#[derive(Deserialize)]
pub(crate) struct CreateTopicBody {
    name: String,
    #[serde(default)]
    partitions_count: u32,
    #[serde(default)]
    compression_algorithm: Option<String>,
    #[serde(default)]
    message_expiry: Option<u64>,
    #[serde(default)]
    max_topic_size: Option<u64>,
    #[serde(default)]
    options: BTreeMap<String, String>,
}

#[derive(Deserialize)]
pub(crate) struct CountBody {
    partitions_count: u32,
}

#[derive(Deserialize)]
pub struct PartitionsQuery {
    partitions_count: u32,
}

#[derive(Deserialize)]
pub struct SegmentsQuery {
    segments_count: u32,
}

/// The options block of a topic request: the typed fields (0 means "server default", so
/// it is left out) and any extra `options` as strings. Keys come out sorted and unique.
/// A create- or update-topic body: name, partitions and the options block.
pub(crate) fn topic_body(bytes: &[u8]) -> ApiResult<(String, u32, Vec<u8>)> {
    let request: CreateTopicBody = body(bytes)?;
    let options = topic_options(&request);
    Ok((request.name, request.partitions_count, options))
}

fn topic_options(request: &CreateTopicBody) -> Vec<u8> {
    let mut entries: BTreeMap<&str, (u8, Vec<u8>)> = BTreeMap::new();
    for (key, value) in &request.options {
        entries.insert(key, (tlv::KIND_STRING, value.as_bytes().to_vec()));
    }
    if let Some(compression) = &request.compression_algorithm {
        entries.insert("compression_algorithm", (tlv::KIND_STRING, compression.as_bytes().to_vec()));
    }
    if let Some(expiry) = request.message_expiry.filter(|&v| v != 0) {
        entries.insert("message_expiry", (tlv::KIND_UINT64, expiry.to_le_bytes().to_vec()));
    }
    if let Some(size) = request.max_topic_size.filter(|&v| v != 0) {
        entries.insert("max_topic_size", (tlv::KIND_UINT64, size.to_le_bytes().to_vec()));
    }
    let mut out = Vec::new();
    for (key, (kind, value)) in entries {
        tlv::put(&mut out, key, kind, &value);
    }
    out
}

pub async fn get_streams(State(state): Http, headers: HeaderMap) -> Response {
    json(async { replies::routes::listed(state.run(&headers, Command::GetStreams).await?) }.await)
}

pub async fn get_stream(State(state): Http, headers: HeaderMap, Path(stream): Path<String>) -> Response {
    json(
        async {
            let reply = state.run(&headers, Command::GetStream { stream: identifier(&stream)? }).await?;
            replies::routes::stream_details(reply)
        }
        .await,
    )
}

pub async fn create_stream(State(state): Http, headers: HeaderMap, bytes: Bytes) -> Response {
    created(
        async {
            let request: NameBody = body(&bytes)?;
            let reply = state
                .run(&headers, Command::Metadata(MetadataOp::CreateStream { name: request.name, options: &[] }))
                .await?;
            replies::routes::stream_details(reply)
        }
        .await,
    )
}

pub async fn update_stream(
    State(state): Http,
    headers: HeaderMap,
    Path(stream): Path<String>,
    bytes: Bytes,
) -> Response {
    no_content(
        async {
            let request: NameBody = body(&bytes)?;
            let op = MetadataOp::UpdateStream { stream: identifier(&stream)?, name: request.name };
            state.run(&headers, Command::Metadata(op)).await
        }
        .await,
    )
}

pub async fn delete_stream(State(state): Http, headers: HeaderMap, Path(stream): Path<String>) -> Response {
    let op = |stream| MetadataOp::DeleteStream { stream };
    no_content(async { state.run(&headers, Command::Metadata(op(identifier(&stream)?))).await }.await)
}

pub async fn purge_stream(State(state): Http, headers: HeaderMap, Path(stream): Path<String>) -> Response {
    let op = |stream| MetadataOp::PurgeStream { stream };
    no_content(async { state.run(&headers, Command::Metadata(op(identifier(&stream)?))).await }.await)
}

pub async fn get_topics(State(state): Http, headers: HeaderMap, Path(stream): Path<String>) -> Response {
    json(
        async {
            let reply = state.run(&headers, Command::GetTopics { stream: identifier(&stream)? }).await?;
            replies::routes::listed(reply)
        }
        .await,
    )
}

pub async fn get_topic(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic)): Path<(String, String)>,
) -> Response {
    json(
        async {
            let reply = state.run(&headers, Command::GetTopic(topic_ref(&stream, &topic)?)).await?;
            replies::routes::topic_details(reply)
        }
        .await,
    )
}

pub async fn create_topic(
    State(state): Http,
    headers: HeaderMap,
    Path(stream): Path<String>,
    bytes: Bytes,
) -> Response {
    created(
        async {
            let (name, partitions_count, options) = topic_body(&bytes)?;
            let op =
                MetadataOp::CreateTopic { stream: identifier(&stream)?, partitions_count, name, options: &options };
            replies::routes::topic_details(state.run(&headers, Command::Metadata(op)).await?)
        }
        .await,
    )
}

pub async fn update_topic(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic)): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    no_content(
        async {
            let (name, _, options) = topic_body(&bytes)?;
            let op = MetadataOp::UpdateTopic { topic: topic_ref(&stream, &topic)?, name, options: &options };
            state.run(&headers, Command::Metadata(op)).await
        }
        .await,
    )
}

async fn topic_op(
    state: &HttpState,
    headers: &HeaderMap,
    (stream, topic): (String, String),
    op: impl FnOnce(rill_domain::wire::command::TopicRef) -> MetadataOp<'static>,
) -> ApiResult<rill_domain::answer::Answer> {
    state.run(headers, Command::Metadata(op(topic_ref(&stream, &topic)?))).await
}

pub async fn delete_topic(State(state): Http, headers: HeaderMap, Path(path): Path<(String, String)>) -> Response {
    no_content(topic_op(&state, &headers, path, MetadataOp::DeleteTopic).await)
}

pub async fn purge_topic(State(state): Http, headers: HeaderMap, Path(path): Path<(String, String)>) -> Response {
    no_content(topic_op(&state, &headers, path, MetadataOp::PurgeTopic).await)
}

pub async fn create_partitions(
    State(state): Http,
    headers: HeaderMap,
    Path(path): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    no_content(
        async {
            let request: CountBody = body(&bytes)?;
            let count = request.partitions_count;
            topic_op(&state, &headers, path, |topic| MetadataOp::CreatePartitions { topic, count }).await
        }
        .await,
    )
}

pub async fn delete_partitions(
    State(state): Http,
    headers: HeaderMap,
    Path(path): Path<(String, String)>,
    Query(query): Query<PartitionsQuery>,
) -> Response {
    let count = query.partitions_count;
    no_content(topic_op(&state, &headers, path, |topic| MetadataOp::DeletePartitions { topic, count }).await)
}

pub async fn delete_segments(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic, partition_id)): Path<(String, String, u32)>,
    Query(query): Query<SegmentsQuery>,
) -> Response {
    no_content(
        async {
            let topic = topic_ref(&stream, &topic)?;
            let command = Command::DeleteSegments { topic, partition_id, segments_count: query.segments_count };
            state.run(&headers, command).await
        }
        .await,
    )
}

pub async fn get_groups(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic)): Path<(String, String)>,
) -> Response {
    json(
        async {
            let reply = state.run(&headers, Command::GetConsumerGroups { topic: topic_ref(&stream, &topic)? }).await?;
            replies::routes::listed(reply)
        }
        .await,
    )
}

pub async fn get_group(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic, group)): Path<(String, String, String)>,
) -> Response {
    json(
        async {
            let command = Command::GetConsumerGroup { topic: topic_ref(&stream, &topic)?, group: identifier(&group)? };
            replies::routes::group_details(state.run(&headers, command).await?)
        }
        .await,
    )
}

pub async fn create_group(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic)): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    created(
        async {
            let request: NameBody = body(&bytes)?;
            let op = MetadataOp::CreateConsumerGroup { topic: topic_ref(&stream, &topic)?, name: request.name };
            replies::routes::group_details(state.run(&headers, Command::Metadata(op)).await?)
        }
        .await,
    )
}

pub async fn delete_group(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic, group)): Path<(String, String, String)>,
) -> Response {
    no_content(
        async {
            let op = MetadataOp::DeleteConsumerGroup { topic: topic_ref(&stream, &topic)?, group: identifier(&group)? };
            state.run(&headers, Command::Metadata(op)).await
        }
        .await,
    )
}
