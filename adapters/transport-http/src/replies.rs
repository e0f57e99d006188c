//! Binary reply bodies (reference section 4) rendered as the JSON documents the 0.11 HTTP
//! client deserializes: the same field names as its `Stream`, `Topic`, `Partition`,
//! `PolledMessages`, `UserInfoDetails`, ... types.

use rill_domain::error::ErrorCode;
use rill_domain::permissions::Permissions;
use rill_domain::reader::Reader;
use rill_domain::wire::tlv;
use serde_json::{Map, Value, json};

use crate::api::{ApiError, ApiResult};
use crate::permissions;

/// Our own shard produced these bytes: a short read is a server bug, reported as such.
/// The JSON names of header (and option) value kinds, in wire-code order from 1.
pub(crate) const HEADER_KINDS: [&str; 15] = [
    "raw", "string", "bool", "int8", "int16", "int32", "int64", "int128", "uint8", "uint16", "uint32", "uint64",
    "uint128", "float32", "float64",
];

fn broken(_: ErrorCode) -> ApiError {
    ApiError::Code(ErrorCode::Error)
}

fn name(reader: &mut Reader<'_>) -> ApiResult<String> {
    reader.name().map_err(broken)
}

fn long_string(reader: &mut Reader<'_>) -> ApiResult<String> {
    let len = reader.u32().map_err(broken)? as usize;
    let bytes = reader.bytes(len).map_err(broken)?;
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

fn block<'a>(reader: &mut Reader<'a>) -> ApiResult<&'a [u8]> {
    let len = reader.u32().map_err(broken)? as usize;
    reader.bytes(len).map_err(broken)
}

fn option_text(kind: u8, value: &[u8]) -> String {
    match (kind, value.len()) {
        (tlv::KIND_UINT64, 8) => u64::from_le_bytes(value.try_into().unwrap_or([0; 8])).to_string(),
        (tlv::KIND_UINT32, 4) => u32::from_le_bytes(value.try_into().unwrap_or([0; 4])).to_string(),
        (tlv::KIND_BOOL, 1) => (value[0] != 0).to_string(),
        _ => String::from_utf8_lossy(value).into_owned(),
    }
}

/// Options as `{key: {value, explicit}}`: the derived block lists every effective
/// setting; `explicit` marks the ones the creator set.
fn options(explicit: &[u8], derived: &[u8]) -> Value {
    let explicit_keys: Vec<&[u8]> = tlv::decode(explicit).unwrap_or_default().iter().map(|e| e.key).collect();
    let mut out = Map::new();
    for entry in tlv::decode(derived).unwrap_or_default() {
        let key = String::from_utf8_lossy(entry.key).into_owned();
        let value = option_text(entry.value_kind, entry.value);
        out.insert(key, json!({ "value": value, "explicit": explicit_keys.contains(&entry.key) }));
    }
    Value::Object(out)
}

fn stream(reader: &mut Reader<'_>) -> ApiResult<Map<String, Value>> {
    let (id, created_at, topics_count) = (reader.u32(), reader.u64(), reader.u32());
    let (size, messages_count) = (reader.u64(), reader.u64());
    let name = name(reader)?;
    block(reader)?;
    let mut out = Map::new();
    out.insert("id".into(), json!(id.map_err(broken)?));
    out.insert("created_at".into(), json!(created_at.map_err(broken)?));
    out.insert("name".into(), json!(name));
    out.insert("size".into(), json!(size.map_err(broken)?));
    out.insert("messages_count".into(), json!(messages_count.map_err(broken)?));
    out.insert("topics_count".into(), json!(topics_count.map_err(broken)?));
    out.insert("options".into(), json!({}));
    Ok(out)
}

/// GET_STREAMS: stream records back to back.
pub fn streams(body: &[u8]) -> ApiResult<Value> {
    let mut reader = Reader::new(body);
    let mut out = Vec::new();
    while reader.remaining() > 0 {
        out.push(Value::Object(stream(&mut reader)?));
    }
    Ok(Value::Array(out))
}

/// StreamDetails: the stream, then its topic headers; an empty body is "not found".
pub fn stream_details(body: &[u8]) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::Code(ErrorCode::StreamIdNotFound));
    }
    let mut reader = Reader::new(body);
    let mut out = stream(&mut reader)?;
    let mut topics = Vec::new();
    while reader.remaining() > 0 {
        topics.push(Value::Object(topic_header(&mut reader)?));
    }
    out.insert("topics".into(), Value::Array(topics));
    Ok(Value::Object(out))
}

fn topic_header(reader: &mut Reader<'_>) -> ApiResult<Map<String, Value>> {
    let id = reader.u32().map_err(broken)?;
    let created_at = reader.u64().map_err(broken)?;
    let partitions_count = reader.u32().map_err(broken)?;
    let message_expiry = reader.u64().map_err(broken)?;
    let compression = reader.u8().map_err(broken)?;
    let max_topic_size = reader.u64().map_err(broken)?;
    let size = reader.u64().map_err(broken)?;
    let messages_count = reader.u64().map_err(broken)?;
    let name = name(reader)?;
    let explicit = block(reader)?;
    let derived = block(reader)?;
    let mut out = Map::new();
    out.insert("id".into(), json!(id));
    out.insert("created_at".into(), json!(created_at));
    out.insert("name".into(), json!(name));
    out.insert("size".into(), json!(size));
    // 0 is "server default", as over the binary protocol: the client reads it so.
    out.insert("message_expiry".into(), json!(message_expiry));
    out.insert("compression_algorithm".into(), json!(if compression == 2 { "gzip" } else { "none" }));
    out.insert("max_topic_size".into(), json!(max_topic_size));
    out.insert("messages_count".into(), json!(messages_count));
    out.insert("partitions_count".into(), json!(partitions_count));
    out.insert("options".into(), options(explicit, derived));
    Ok(out)
}

/// GET_TOPICS: `[count]`, then the headers.
pub fn topics(body: &[u8]) -> ApiResult<Value> {
    let mut reader = Reader::new(body);
    let count = reader.u32().map_err(broken)?;
    let mut out = Vec::new();
    for _ in 0..count {
        out.push(Value::Object(topic_header(&mut reader)?));
    }
    Ok(Value::Array(out))
}

/// TopicDetails: the header, then 40-byte partitions; an empty body is "not found".
pub fn topic_details(body: &[u8]) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::Code(ErrorCode::TopicIdNotFound));
    }
    let mut reader = Reader::new(body);
    let mut out = topic_header(&mut reader)?;
    let mut partitions = Vec::new();
    while reader.remaining() > 0 {
        partitions.push(json!({
            "id": reader.u32().map_err(broken)?,
            "created_at": reader.u64().map_err(broken)?,
            "segments_count": reader.u32().map_err(broken)?,
            "current_offset": reader.u64().map_err(broken)?,
            "size": reader.u64().map_err(broken)?,
            "messages_count": reader.u64().map_err(broken)?,
        }));
    }
    out.insert("partitions".into(), Value::Array(partitions));
    Ok(Value::Object(out))
}

/// GET_CONSUMER_OFFSET: `[partition][current][stored]`; an empty body is "not found".
pub fn consumer_offset(body: &[u8]) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::Code(ErrorCode::ConsumerOffsetNotFound));
    }
    let mut reader = Reader::new(body);
    Ok(json!({
        "partition_id": reader.u32().map_err(broken)?,
        "current_offset": reader.u64().map_err(broken)?,
        "stored_offset": reader.u64().map_err(broken)?,
    }))
}

fn user(reader: &mut Reader<'_>) -> ApiResult<Map<String, Value>> {
    let id = reader.u32().map_err(broken)?;
    let created_at = reader.u64().map_err(broken)?;
    let status = reader.u8().map_err(broken)?;
    let username = name(reader)?;
    block(reader)?;
    let mut out = Map::new();
    out.insert("id".into(), json!(id));
    out.insert("created_at".into(), json!(created_at));
    out.insert("status".into(), json!(if status == 2 { "inactive" } else { "active" }));
    out.insert("username".into(), json!(username));
    out.insert("options".into(), json!({}));
    Ok(out)
}

pub fn users(body: &[u8]) -> ApiResult<Value> {
    let mut reader = Reader::new(body);
    let mut out = Vec::new();
    while reader.remaining() > 0 {
        out.push(Value::Object(user(&mut reader)?));
    }
    Ok(Value::Array(out))
}

/// UserDetails: the user, then `00 00 00 00` (no permissions) or `[1][len][blob]`.
pub fn user_details(body: &[u8]) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::Code(ErrorCode::ResourceNotFound));
    }
    let mut reader = Reader::new(body);
    let mut out = user(&mut reader)?;
    let permissions = match reader.u8().map_err(broken)? {
        0 => None,
        _ => {
            let blob = block(&mut reader)?;
            Some(Permissions::decode(&mut Reader::new(blob)).map_err(broken)?)
        }
    };
    out.insert("permissions".into(), permissions.as_ref().map_or(Value::Null, permissions::to_json));
    Ok(Value::Object(out))
}

/// GET_PERSONAL_ACCESS_TOKENS: `[name][expiry_at]` records; 0 means "never expires".
pub fn tokens(body: &[u8]) -> ApiResult<Value> {
    let mut reader = Reader::new(body);
    let mut out = Vec::new();
    while reader.remaining() > 0 {
        let name = name(&mut reader)?;
        let expiry_at = reader.u64().map_err(broken)?;
        out.push(json!({ "name": name, "expiry_at": (expiry_at != 0).then_some(expiry_at) }));
    }
    Ok(Value::Array(out))
}

/// CREATE_PERSONAL_ACCESS_TOKEN: the raw token, shown once.
pub fn raw_token(body: &[u8]) -> ApiResult<Value> {
    Ok(json!({ "token": name(&mut Reader::new(body))? }))
}

fn group(reader: &mut Reader<'_>) -> ApiResult<Map<String, Value>> {
    let mut out = Map::new();
    out.insert("id".into(), json!(reader.u32().map_err(broken)?));
    out.insert("partitions_count".into(), json!(reader.u32().map_err(broken)?));
    out.insert("members_count".into(), json!(reader.u32().map_err(broken)?));
    out.insert("name".into(), json!(name(reader)?));
    Ok(out)
}

pub fn groups(body: &[u8]) -> ApiResult<Value> {
    let mut reader = Reader::new(body);
    let mut out = Vec::new();
    while reader.remaining() > 0 {
        out.push(Value::Object(group(&mut reader)?));
    }
    Ok(Value::Array(out))
}

/// ConsumerGroupDetails; an empty body is "not found".
pub fn group_details(body: &[u8]) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::Code(ErrorCode::ConsumerGroupIdNotFound));
    }
    let mut reader = Reader::new(body);
    let mut out = group(&mut reader)?;
    let mut members = Vec::new();
    while reader.remaining() > 0 {
        let id = reader.u32().map_err(broken)?;
        let count = reader.u32().map_err(broken)?;
        let partitions = (0..count).map(|_| reader.u32().map_err(broken)).collect::<ApiResult<Vec<u32>>>()?;
        members.push(json!({ "id": id, "partitions_count": count, "partitions": partitions }));
    }
    out.insert("members".into(), Value::Array(members));
    Ok(Value::Object(out))
}

fn transport_name(transport: u8) -> &'static str {
    match transport {
        2 => "quic",
        3 => "http",
        4 => "websocket",
        _ => "tcp",
    }
}

fn client(reader: &mut Reader<'_>) -> ApiResult<Map<String, Value>> {
    let client_id = reader.u32().map_err(broken)?;
    let user_id = reader.u32().map_err(broken)?;
    let transport = reader.u8().map_err(broken)?;
    let address = long_string(reader)?;
    let groups_count = reader.u32().map_err(broken)?;
    let mut out = Map::new();
    out.insert("client_id".into(), json!(client_id));
    out.insert("user_id".into(), json!((user_id != u32::MAX).then_some(user_id)));
    out.insert("address".into(), json!(address));
    out.insert("transport".into(), json!(transport_name(transport)));
    out.insert("consumer_groups_count".into(), json!(groups_count));
    Ok(out)
}

pub fn clients(body: &[u8]) -> ApiResult<Value> {
    let mut reader = Reader::new(body);
    let mut out = Vec::new();
    while reader.remaining() > 0 {
        out.push(Value::Object(client(&mut reader)?));
    }
    Ok(Value::Array(out))
}

/// ClientDetails; an empty body is "not found".
pub fn client_details(body: &[u8]) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::Code(ErrorCode::ClientNotFound));
    }
    let mut reader = Reader::new(body);
    let mut out = client(&mut reader)?;
    let count = out["consumer_groups_count"].as_u64().unwrap_or(0);
    let mut groups = Vec::new();
    for _ in 0..count {
        groups.push(json!({
            "stream_id": reader.u32().map_err(broken)?,
            "topic_id": reader.u32().map_err(broken)?,
            "group_id": reader.u32().map_err(broken)?,
        }));
    }
    out.insert("consumer_groups".into(), Value::Array(groups));
    Ok(Value::Object(out))
}

/// DESCRIBE_OPTIONS as the client's `Vec<OptionSpec>`: kinds by name, defaults as bytes.
pub fn option_catalog(body: &[u8]) -> ApiResult<Value> {
    let mut reader = Reader::new(body);
    let count = reader.u32().map_err(broken)?;
    let mut specs = Vec::new();
    for _ in 0..count {
        let key = reader.name().map_err(broken)?;
        let kind = reader.u8().map_err(broken)?;
        let kind = HEADER_KINDS.get(usize::from(kind).wrapping_sub(1)).ok_or(broken(ErrorCode::Error))?;
        let default_len = reader.u32().map_err(broken)? as usize;
        let default_value = reader.bytes(default_len).map_err(broken)?;
        let description = long_string(&mut reader)?;
        specs.push(json!({ "key": key, "kind": kind, "default_value": default_value, "description": description }));
    }
    Ok(Value::Array(specs))
}

/// Cluster metadata: the name, then each node with its ports, role and status.
pub fn cluster(body: &[u8]) -> ApiResult<Value> {
    let mut reader = Reader::new(body);
    let cluster_name = long_string(&mut reader)?;
    let count = reader.u32().map_err(broken)?;
    let mut nodes = Vec::new();
    for _ in 0..count {
        let node_name = long_string(&mut reader)?;
        let ip = long_string(&mut reader)?;
        let ports: Vec<u16> = (0..4)
            .map(|_| reader.bytes(2).map(|b| u16::from_le_bytes([b[0], b[1]])).map_err(broken))
            .collect::<ApiResult<_>>()?;
        let role = if reader.u8().map_err(broken)? == 0 { "leader" } else { "follower" };
        let status = match reader.u8().map_err(broken)? {
            0 => "healthy",
            1 => "starting",
            2 => "stopping",
            3 => "unreachable",
            _ => "maintenance",
        };
        nodes.push(json!({
            "name": node_name,
            "ip": ip,
            "endpoints": { "tcp": ports[0], "quic": ports[1], "http": ports[2], "websocket": ports[3] },
            "role": role,
            "status": status,
        }));
    }
    Ok(json!({ "name": cluster_name, "nodes": nodes }))
}

/// GET_STATS in the client's `Stats` shape (byte sizes as exact numbers, which its
/// size type accepts).
pub fn stats(body: &[u8]) -> ApiResult<Map<String, Value>> {
    let mut reader = Reader::new(body);
    let mut out = Map::new();
    out.insert("process_id".into(), json!(reader.u32().map_err(broken)?));
    for key in ["cpu_usage", "total_cpu_usage"] {
        let bytes = reader.bytes(4).map_err(broken)?;
        out.insert(key.into(), json!(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])));
    }
    for key in [
        "memory_usage",
        "total_memory",
        "available_memory",
        "run_time",
        "start_time",
        "read_bytes",
        "written_bytes",
        "messages_size_bytes",
    ] {
        out.insert(key.into(), json!(reader.u64().map_err(broken)?));
    }
    for key in ["streams_count", "topics_count", "partitions_count", "segments_count"] {
        out.insert(key.into(), json!(reader.u32().map_err(broken)?));
    }
    out.insert("messages_count".into(), json!(reader.u64().map_err(broken)?));
    out.insert("clients_count".into(), json!(reader.u32().map_err(broken)?));
    out.insert("consumer_groups_count".into(), json!(reader.u32().map_err(broken)?));
    for key in ["hostname", "os_name", "os_version", "kernel_version", "iggy_server_version"] {
        out.insert(key.into(), json!(long_string(&mut reader)?));
    }
    out.insert("iggy_server_semver".into(), json!(reader.u32().map_err(broken)?));
    reader.u32().map_err(broken)?;
    out.insert("cache_metrics".into(), json!({}));
    out.insert("threads_count".into(), json!(reader.u32().map_err(broken)?));
    out.insert("free_disk_space".into(), json!(reader.u64().map_err(broken)?));
    out.insert("total_disk_space".into(), json!(reader.u64().map_err(broken)?));
    Ok(out)
}
