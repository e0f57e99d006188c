//! The use cases' answers rendered as the JSON documents the 0.11 HTTP client deserializes:
//! the same field names as its `Stream`, `Topic`, `Partition`, `UserInfoDetails`, ...
//! types. Straight from the typed answer, as the binary codec encodes the same answer.

use rill_domain::answer::{
    Answer, ClientDetails, ClientInfo, ClusterNode, ConsumerOffset, Created, GroupDetails, GroupInfo, PartitionInfo,
    SendConfirmation, Stats, StreamDetails, StreamInfo, TopicDetails, TopicInfo, UserDetails, UserInfo,
};
use rill_domain::constants::SERVER_VERSION;
use rill_domain::error::ErrorCode;
use rill_domain::topic_options::OptionSpec;
use rill_domain::wire::tlv;
use serde_json::{Map, Value, json};

use crate::api::{ApiError, ApiResult};
use crate::permissions;

/// The JSON names of header (and option) value kinds, in wire-code order from 1.
pub(crate) const HEADER_KINDS: [&str; 15] = [
    "raw", "string", "bool", "int8", "int16", "int32", "int64", "int128", "uint8", "uint16", "uint32", "uint64",
    "uint128", "float32", "float64",
];

/// An answer of another kind than the route's command gives: a server bug, reported so.
fn unexpected(_: Answer) -> ApiError {
    ApiError::Code(ErrorCode::Error)
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

fn stream(info: &StreamInfo) -> Map<String, Value> {
    let document = json!({
        "id": info.id,
        "created_at": info.created_at,
        "name": info.name,
        "size": info.usage.size_bytes,
        "messages_count": info.usage.messages_count,
        "topics_count": info.topics_count,
        "options": {},
    });
    let Value::Object(map) = document else { unreachable!("a JSON object") };
    map
}

fn stream_details(details: &StreamDetails) -> Value {
    let mut out = stream(&details.stream);
    out.insert("topics".into(), details.topics.iter().map(|t| Value::Object(topic(t))).collect());
    Value::Object(out)
}

fn topic(info: &TopicInfo) -> Map<String, Value> {
    let document = json!({
        "id": info.id,
        "created_at": info.created_at,
        "name": info.name,
        "size": info.usage.size_bytes,
        // 0 is "server default", as over the binary protocol: the client reads it so.
        "message_expiry": info.message_expiry_us,
        "compression_algorithm": if info.compression == 2 { "gzip" } else { "none" },
        "max_topic_size": info.max_topic_size_bytes,
        "messages_count": info.usage.messages_count,
        "partitions_count": info.partitions_count,
        "options": options(&info.explicit_options, &info.derived_options),
    });
    let Value::Object(map) = document else { unreachable!("a JSON object") };
    map
}

fn partition(info: &PartitionInfo) -> Value {
    json!({
        "id": info.id,
        "created_at": info.created_at,
        "segments_count": info.segments_count,
        "current_offset": info.current_offset,
        "size": info.usage.size_bytes,
        "messages_count": info.usage.messages_count,
    })
}

fn topic_details(details: &TopicDetails) -> Value {
    let mut out = topic(&details.topic);
    out.insert("partitions".into(), details.partitions.iter().map(partition).collect());
    Value::Object(out)
}

fn user(info: &UserInfo) -> Map<String, Value> {
    let document = json!({
        "id": info.id,
        "created_at": info.created_at,
        "status": if info.status == 2 { "inactive" } else { "active" },
        "username": info.username,
        "options": {},
    });
    let Value::Object(map) = document else { unreachable!("a JSON object") };
    map
}

fn user_details(details: &UserDetails) -> Value {
    let mut out = user(&details.user);
    out.insert("permissions".into(), details.permissions.as_ref().map_or(Value::Null, permissions::to_json));
    Value::Object(out)
}

fn group(info: &GroupInfo) -> Map<String, Value> {
    let document = json!({
        "id": info.id,
        "partitions_count": info.partitions_count,
        "members_count": info.members_count,
        "name": info.name,
    });
    let Value::Object(map) = document else { unreachable!("a JSON object") };
    map
}

fn group_details(details: &GroupDetails) -> Value {
    let mut out = group(&details.group);
    let members = details
        .members
        .iter()
        .map(|(id, partitions)| json!({ "id": id, "partitions_count": partitions.len(), "partitions": partitions }));
    out.insert("members".into(), members.collect());
    Value::Object(out)
}

fn transport_name(transport: u8) -> &'static str {
    match transport {
        2 => "quic",
        3 => "http",
        4 => "websocket",
        _ => "tcp",
    }
}

fn client(info: &ClientInfo, groups_count: usize) -> Map<String, Value> {
    let document = json!({
        "client_id": info.client_id,
        "user_id": info.user_id,
        "address": info.address,
        "transport": transport_name(info.transport),
        "protocol": info.protocol.label(),
        "consumer_groups_count": groups_count,
    });
    let Value::Object(map) = document else { unreachable!("a JSON object") };
    map
}

fn client_details(details: &ClientDetails) -> Value {
    let mut out = client(&details.client, details.groups.len());
    let groups = details
        .groups
        .iter()
        .map(|group| json!({ "stream_id": group.stream_id, "topic_id": group.topic_id, "group_id": group.group_id }));
    out.insert("consumer_groups".into(), groups.collect());
    Value::Object(out)
}

fn node(node: &ClusterNode) -> Value {
    let status = match node.status {
        0 => "healthy",
        1 => "starting",
        2 => "stopping",
        3 => "unreachable",
        _ => "maintenance",
    };
    let ports = node.ports;
    json!({
        "name": node.name,
        "ip": node.ip,
        "endpoints": { "tcp": ports.tcp, "quic": ports.quic, "http": ports.http, "websocket": ports.websocket },
        "role": if node.role == 0 { "leader" } else { "follower" },
        "status": status,
    })
}

/// DESCRIBE_OPTIONS as the client's `Vec<OptionSpec>`: kinds by name, defaults as bytes.
fn option_catalog(catalog: &[OptionSpec]) -> Value {
    let specs = catalog.iter().map(|spec| {
        let kind = HEADER_KINDS.get(usize::from(spec.kind).wrapping_sub(1)).copied().unwrap_or("raw");
        json!({ "key": spec.key, "kind": kind, "default_value": spec.default, "description": spec.description })
    });
    specs.collect()
}

/// GET_STATS in the client's `Stats` shape (byte sizes as exact numbers, which its size
/// type accepts).
pub fn stats(stats: &Stats) -> Map<String, Value> {
    let document = json!({
        "process_id": stats.process_id,
        "cpu_usage": stats.cpu_usage,
        "total_cpu_usage": stats.total_cpu_usage,
        "memory_usage": stats.memory_usage,
        "total_memory": stats.total_memory,
        "available_memory": stats.available_memory,
        "run_time": stats.run_time_us,
        "start_time": stats.start_time_us,
        "read_bytes": stats.read_bytes,
        "written_bytes": stats.written_bytes,
        "messages_size_bytes": stats.messages_size_bytes,
        "streams_count": stats.streams_count,
        "topics_count": stats.topics_count,
        "partitions_count": stats.partitions_count,
        "segments_count": stats.segments_count,
        "messages_count": stats.messages_count,
        "clients_count": stats.clients_count,
        "consumer_groups_count": stats.consumer_groups_count,
        "hostname": stats.hostname,
        "os_name": stats.os_name,
        "os_version": stats.os_version,
        "kernel_version": stats.kernel_version,
        "iggy_server_version": SERVER_VERSION,
        "iggy_server_semver": 9 << 10,
        "cache_metrics": {},
        "threads_count": stats.threads_count,
        "free_disk_space": stats.free_disk_space,
        "total_disk_space": stats.total_disk_space,
    });
    let Value::Object(map) = document else { unreachable!("a JSON object") };
    map
}

fn consumer_offset(offset: &ConsumerOffset) -> Value {
    json!({
        "partition_id": offset.partition_id,
        "current_offset": offset.current_offset,
        "stored_offset": offset.stored_offset,
    })
}

fn confirmations(sent: &SendConfirmation) -> Value {
    json!({ "confirmations": [{
        "stream_id": sent.stream_id,
        "topic_id": sent.topic_id,
        "partition_id": sent.partition_id,
        "base_offset": sent.base_offset,
    }] })
}

/// An answer as its JSON document; what is absent answers `missing`'s code (a route for one
/// resource has a "not found" of its own).
pub fn document(answer: Answer, missing: ErrorCode) -> ApiResult<Value> {
    let absent = || ApiError::Code(missing);
    Ok(match answer {
        Answer::Stream(details) => stream_details(&details.ok_or_else(absent)?),
        Answer::Streams(streams) => streams.iter().map(|s| Value::Object(stream(s))).collect(),
        Answer::Topic(details) => topic_details(&details.ok_or_else(absent)?),
        Answer::Topics(topics) => topics.iter().map(|t| Value::Object(topic(t))).collect(),
        Answer::Group(details) => group_details(&details.ok_or_else(absent)?),
        Answer::Groups(groups) => groups.iter().map(|g| Value::Object(group(g))).collect(),
        Answer::User(details) => user_details(&details.ok_or_else(absent)?),
        Answer::Users(users) => users.iter().map(|u| Value::Object(user(u))).collect(),
        Answer::Tokens(tokens) => tokens
            .iter()
            .map(|token| json!({ "name": token.name, "expiry_at": (token.expiry_at != 0).then_some(token.expiry_at) }))
            .collect(),
        Answer::RawToken(token) => json!({ "token": token }),
        Answer::Client(details) => client_details(&details.ok_or_else(absent)?),
        Answer::Clients(clients) => clients.iter().map(|(info, n)| Value::Object(client(info, *n as usize))).collect(),
        Answer::Stats(figures) => Value::Object(stats(&figures)),
        Answer::Cluster { name, nodes } => json!({ "name": name, "nodes": nodes.iter().map(node).collect::<Vec<_>>() }),
        Answer::Options(catalog) => option_catalog(&catalog),
        Answer::Offset(offset) => consumer_offset(&offset.ok_or_else(absent)?),
        Answer::Sent(sent) => confirmations(&sent),
        Answer::Created(Created::Stream(details)) => stream_details(&details),
        Answer::Created(Created::Topic(details)) => topic_details(&details),
        Answer::Created(Created::Group(details)) => group_details(&details),
        Answer::Created(Created::User(details)) => user_details(&details),
        other => return Err(unexpected(other)),
    })
}

/// What each route renders, with its own "not found".
pub mod routes {
    use super::*;

    pub fn listed(answer: Answer) -> ApiResult<Value> {
        document(answer, ErrorCode::Error)
    }

    pub fn stream_details(answer: Answer) -> ApiResult<Value> {
        document(answer, ErrorCode::StreamIdNotFound)
    }

    pub fn topic_details(answer: Answer) -> ApiResult<Value> {
        document(answer, ErrorCode::TopicIdNotFound)
    }

    pub fn group_details(answer: Answer) -> ApiResult<Value> {
        document(answer, ErrorCode::ConsumerGroupIdNotFound)
    }

    pub fn user_details(answer: Answer) -> ApiResult<Value> {
        document(answer, ErrorCode::ResourceNotFound)
    }

    pub fn client_details(answer: Answer) -> ApiResult<Value> {
        document(answer, ErrorCode::ClientNotFound)
    }

    pub fn consumer_offset(answer: Answer) -> ApiResult<Value> {
        document(answer, ErrorCode::ConsumerOffsetNotFound)
    }

    /// GET_STATS as a JSON object, which the route adds the server's own figures to.
    pub fn stats(answer: Answer) -> ApiResult<Map<String, Value>> {
        match answer {
            Answer::Stats(figures) => Ok(super::stats(&figures)),
            other => Err(unexpected(other)),
        }
    }

    /// A snapshot's archive bytes.
    pub fn snapshot(answer: Answer) -> ApiResult<Vec<u8>> {
        match answer {
            Answer::Snapshot(archive) => Ok(archive),
            other => Err(unexpected(other)),
        }
    }
}
