//! REST routes for messages (send, poll, flush) and consumer offsets. JSON messages become
//! the canonical binary batch on the way in, and poll replies are written out as JSON frame
//! by frame (`poll_json`: payloads and user headers in base64).

use std::borrow::Cow;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use rill_application::ports::Reply;
use rill_domain::answer::Answer;
use rill_domain::batch;
use rill_domain::error::ErrorCode;
use rill_domain::identifier::Identifier;
use rill_domain::polling::PollingStrategy;
use rill_domain::wire::command::{Command, Consumer, Partitioning, PollRequest, TopicRef};
use serde::Deserialize;

use crate::HttpState;
use crate::api::{ApiError, ApiResult, body, identifier, json, json_bytes, no_content, topic_ref};
use crate::replies;

type Http = State<Arc<HttpState>>;

#[derive(Deserialize)]
struct PartitioningBody {
    kind: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
struct HeaderFieldBody {
    kind: String,
    value: String,
}

#[derive(Deserialize)]
struct HeaderEntryBody {
    key: HeaderFieldBody,
    value: HeaderFieldBody,
}

/// User headers as the client sends them: a list of typed entries, or the raw block in
/// base64 when it could not parse them itself.
#[derive(Deserialize)]
#[serde(untagged)]
enum UserHeadersBody {
    Entries(Vec<HeaderEntryBody>),
    Raw(String),
}

/// A message of a send; its base64 payload is borrowed from the request body (it never
/// needs unescaping) and decoded straight into the batch.
#[derive(Deserialize)]
struct MessageBody<'a> {
    #[serde(default)]
    id: u128,
    #[serde(borrow)]
    payload: Cow<'a, str>,
    #[serde(default)]
    user_headers: Option<UserHeadersBody>,
}

#[derive(Deserialize)]
pub(crate) struct SendBody<'a> {
    partitioning: PartitioningBody,
    #[serde(borrow)]
    messages: Vec<MessageBody<'a>>,
}

#[derive(Deserialize)]
pub struct PollQuery {
    consumer_id: Option<String>,
    partition_id: Option<u32>,
    kind: Option<String>,
    #[serde(default)]
    value: u64,
    #[serde(default)]
    count: u32,
    #[serde(default)]
    auto_commit: bool,
}

#[derive(Deserialize)]
pub struct OffsetQuery {
    consumer_id: Option<String>,
    partition_id: Option<u32>,
}

#[derive(Deserialize)]
pub(crate) struct StoreOffsetBody {
    consumer_id: String,
    #[serde(default)]
    partition_id: Option<u32>,
    offset: u64,
}

fn decode_base64(text: &str, what: &str) -> ApiResult<Vec<u8>> {
    BASE64.decode(text).map_err(|_| ApiError::BadRequest(format!("{what} is not valid base64")))
}

fn header_kind(name: &str) -> ApiResult<u8> {
    crate::replies::HEADER_KINDS
        .iter()
        .position(|kind| *kind == name)
        .map(|index| index as u8 + 1)
        .ok_or(ApiError::Code(ErrorCode::InvalidHeaderKind))
}

/// The wire block of user headers: `[kind][len u32][key][kind][len u32][value]` per entry.
fn user_headers(headers: &Option<UserHeadersBody>) -> ApiResult<Vec<u8>> {
    let entries = match headers {
        None => return Ok(Vec::new()),
        Some(UserHeadersBody::Raw(text)) => return decode_base64(text, "user_headers"),
        Some(UserHeadersBody::Entries(entries)) => entries,
    };
    let mut out = Vec::new();
    for entry in entries {
        for field in [&entry.key, &entry.value] {
            let bytes = decode_base64(&field.value, "a user header")?;
            out.push(header_kind(&field.kind)?);
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
    }
    Ok(out)
}

fn partitioning(body: &PartitioningBody) -> ApiResult<Partitioning> {
    let value = decode_base64(&body.value, "partitioning value")?;
    match body.kind.as_str() {
        "balanced" => Ok(Partitioning::Balanced),
        "partition_id" => {
            let bytes: [u8; 4] = value.try_into().map_err(|_| ApiError::Code(ErrorCode::InvalidFormat))?;
            Ok(Partitioning::PartitionId(u32::from_le_bytes(bytes)))
        }
        "messages_key" => Ok(Partitioning::MessagesKey(value)),
        other => Err(ApiError::BadRequest(format!("unknown partitioning kind `{other}`"))),
    }
}

fn consumer(consumer_id: Option<&str>) -> ApiResult<Consumer> {
    Ok(Consumer::Single(match consumer_id {
        Some(id) => identifier(id)?,
        None => Identifier::Numeric(0),
    }))
}

fn strategy(kind: Option<&str>, value: u64) -> ApiResult<PollingStrategy> {
    Ok(match kind.unwrap_or("offset") {
        "offset" => PollingStrategy::Offset(value),
        "timestamp" => PollingStrategy::Timestamp(value),
        "first" => PollingStrategy::First,
        "last" => PollingStrategy::Last,
        "next" => PollingStrategy::Next,
        other => return Err(ApiError::BadRequest(format!("unknown polling kind `{other}`"))),
    })
}

/// A send's JSON body as what the binary send carries: partitioning, message count and
/// the batch the server builds.
pub(crate) fn send_body(bytes: &[u8]) -> ApiResult<(Partitioning, u32, Vec<u8>)> {
    let request: SendBody<'_> =
        serde_json::from_slice(bytes).map_err(|error| ApiError::BadRequest(format!("invalid JSON body: {error}")))?;
    let partitioning = partitioning(&request.partitioning)?;
    // Room for about what the JSON carries: base64 takes 4/3 of each payload, which leaves
    // space for the 48-byte message headers unless the messages are tiny.
    let mut builder = batch::BatchBuilder::with_capacity(bytes.len());
    for message in &request.messages {
        // The binary SDK gives an id-less message a random id before it checksums the
        // frame; over JSON the server builds the frame, so it does the same.
        let id = if message.id == 0 { rand::random::<u128>() } else { message.id };
        let text = message.payload.as_bytes();
        builder.push_with(
            id,
            base64::decoded_len_estimate(text.len()),
            &user_headers(&message.user_headers)?,
            |slot| {
                BASE64
                    .decode_slice(text, slot)
                    .map_err(|_| ApiError::BadRequest("payload is not valid base64".to_owned()))
            },
        )?;
    }
    let count = builder.count();
    Ok((partitioning, count, builder.finish(crate::clock::now_us())))
}

/// A store-offset body as the command it asks for.
pub(crate) fn store_offset_command(topic: TopicRef, bytes: &[u8]) -> ApiResult<Command<'static>> {
    let request: StoreOffsetBody = body(bytes)?;
    Ok(Command::StoreConsumerOffset {
        consumer: consumer(Some(&request.consumer_id))?,
        topic,
        partition_id: request.partition_id,
        offset: request.offset,
    })
}

pub async fn send(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic)): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    let topic = match topic_ref(&stream, &topic) {
        Ok(topic) => topic,
        Err(error) => return error.into_response(),
    };
    let result = async {
        let (partitioning, messages_count, batch) = send_body(&bytes)?;
        let command = Command::SendMessages { topic: topic.clone(), partitioning, messages_count, batch: &batch };
        replies::routes::listed(state.run(&headers, command).await?)
    }
    .await;
    match result {
        Ok(document) => {
            let persisted = state.read(|m| m.topic(&topic).is_ok_and(|t| t.settings.enforce_fsync));
            let durability = if persisted { "persisted" } else { "replicated" };
            let mut response = (StatusCode::CREATED, Json(document)).into_response();
            response.headers_mut().insert("iggy-durability", HeaderValue::from_static(durability));
            response
        }
        Err(error) => error.into_response(),
    }
}

pub async fn poll(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic)): Path<(String, String)>,
    Query(query): Query<PollQuery>,
) -> Response {
    json_bytes(
        async {
            let request = PollRequest {
                consumer: consumer(query.consumer_id.as_deref())?,
                topic: topic_ref(&stream, &topic)?,
                partition_id: query.partition_id,
                strategy: strategy(query.kind.as_deref(), query.value)?,
                count: query.count,
                auto_commit: query.auto_commit,
                deferred: None,
            };
            let reply = state.reply(&headers, Command::PollMessages(request)).await?;
            // The frame the batches were read into, as they are stored, after the prefix
            // that says what they are; an empty poll is that prefix alone.
            let dialect = rill_domain::version::Dialect::V11;
            let (mut empty, frame);
            let body = match reply {
                Reply::Frame(polled) => {
                    frame = rill_application::partition::poll_frame_for(polled, dialect);
                    Reply::frame_body(&frame)
                }
                Reply::Answer(answer @ Answer::EmptyPoll(_)) => {
                    empty = Vec::new();
                    rill_domain::wire::response::encode(dialect, &answer, &mut empty);
                    &empty[..]
                }
                _ => return Err(ApiError::Code(ErrorCode::Error)),
            };
            crate::poll_json::polled(body).ok_or(ApiError::Code(ErrorCode::Error))
        }
        .await,
    )
}

/// The 0.11 client's flush path: `.../messages/flush/{partition}/fsync={bool}`.
pub async fn flush(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic, partition_id, fsync)): Path<(String, String, u32, String)>,
) -> Response {
    no_content(
        async {
            let fsync = match fsync.strip_prefix("fsync=").unwrap_or(&fsync) {
                "true" => true,
                "false" => false,
                other => return Err(ApiError::BadRequest(format!("fsync must be true or false, not `{other}`"))),
            };
            let command = Command::FlushUnsavedBuffer { topic: topic_ref(&stream, &topic)?, partition_id, fsync };
            state.run(&headers, command).await
        }
        .await,
    )
}

pub async fn get_offset(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic)): Path<(String, String)>,
    Query(query): Query<OffsetQuery>,
) -> Response {
    json(
        async {
            let command = Command::GetConsumerOffset {
                consumer: consumer(query.consumer_id.as_deref())?,
                topic: topic_ref(&stream, &topic)?,
                partition_id: query.partition_id,
            };
            replies::routes::consumer_offset(state.run(&headers, command).await?)
        }
        .await,
    )
}

pub async fn store_offset(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic)): Path<(String, String)>,
    bytes: Bytes,
) -> Response {
    no_content(
        async {
            let command = store_offset_command(topic_ref(&stream, &topic)?, &bytes)?;
            state.run(&headers, command).await
        }
        .await,
    )
}

pub async fn delete_offset(
    State(state): Http,
    headers: HeaderMap,
    Path((stream, topic, consumer_id)): Path<(String, String, String)>,
    Query(query): Query<OffsetQuery>,
) -> Response {
    no_content(
        async {
            let command = Command::DeleteConsumerOffset {
                consumer: consumer(Some(&consumer_id))?,
                topic: topic_ref(&stream, &topic)?,
                partition_id: query.partition_id,
            };
            state.run(&headers, command).await
        }
        .await,
    )
}
