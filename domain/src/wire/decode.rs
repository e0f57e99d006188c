//! Decoding client requests into the command model (`command.rs`): the operation byte, the
//! NonReplicated code and the body. Decoding never panics and never over-allocates.

use crate::constants::MAX_PARTITIONS_PER_REQUEST;
use crate::error::ErrorCode;
use crate::identifier::Identifier;
use crate::polling::PollingStrategy;
use crate::reader::Reader;
use crate::snapshot::{self, SnapshotCompression};
use crate::topic_options;
use crate::version::Dialect;
use crate::wire::codes::{code, operation as op};
use crate::wire::command::{
    Command, Consumer, Credentials, DecodeError, DeferredPoll, FetchRequest, FetchTarget, MetadataOp, Partitioning,
    PollRequest, ResourceTarget, TopicRef,
};
use crate::wire::{membership, users};

pub(crate) fn topic_ref(reader: &mut Reader<'_>) -> Result<TopicRef, ErrorCode> {
    Ok(TopicRef { stream: Identifier::decode(reader)?, topic: Identifier::decode(reader)? })
}

pub(crate) fn consumer(reader: &mut Reader<'_>) -> Result<Consumer, ErrorCode> {
    match reader.u8()? {
        1 => Ok(Consumer::Single(Identifier::decode(reader)?)),
        2 => Ok(Consumer::Group(Identifier::decode(reader)?)),
        _ => Err(ErrorCode::InvalidFormat),
    }
}

fn optional_partition(reader: &mut Reader<'_>) -> Result<Option<u32>, ErrorCode> {
    let flag = reader.u8()?;
    let value = reader.u32()?;
    Ok((flag == 1).then_some(value))
}

fn partitioning(reader: &mut Reader<'_>) -> Result<Partitioning, ErrorCode> {
    let kind = reader.u8()?;
    let len = reader.u8()? as usize;
    match (kind, len) {
        (1, 0) => Ok(Partitioning::Balanced),
        (2, 4) => Ok(Partitioning::PartitionId(reader.u32()?)),
        (3, 1..) => Ok(Partitioning::MessagesKey(reader.bytes(len)?.to_vec())),
        _ => Err(ErrorCode::InvalidFormat),
    }
}

impl<'a> Command<'a> {
    /// Decodes a protocol 0.11 request from its header fields and body (the HTTP API's
    /// requests are encoded this way too).
    pub fn decode(operation: u8, nr_code: u32, body: &'a [u8]) -> Result<Self, DecodeError> {
        Self::decode_in(Dialect::V11, operation, nr_code, body)
    }

    /// Decodes a request of a connection speaking `dialect`. A command the dialect retired
    /// or does not know is an unknown code (the client gets InvalidCommand).
    pub fn decode_in(dialect: Dialect, operation: u8, nr_code: u32, body: &'a [u8]) -> Result<Self, DecodeError> {
        if dialect == Dialect::V11 && operation == op::UPDATE_RESOURCE {
            return Err(DecodeError::UnknownOperation(operation));
        }
        if retired(dialect, operation, nr_code) {
            return Err(DecodeError::UnknownCode(if operation == op::NON_REPLICATED {
                nr_code
            } else {
                operation.into()
            }));
        }
        let mut reader = Reader::new(body);
        let command = match operation {
            op::REGISTER => decode_register(&mut reader)?,
            op::NON_REPLICATED => decode_non_replicated(dialect, nr_code, &mut reader)?,
            op::LOGOUT => Command::Logout,
            op::DELETE_SEGMENTS => Command::DeleteSegments {
                topic: topic_ref(&mut reader)?,
                partition_id: reader.u32()?,
                segments_count: reader.u32()?,
            },
            op::SEND_MESSAGES => decode_send(&mut reader)?,
            op::STORE_CONSUMER_OFFSET => Command::StoreConsumerOffset {
                consumer: consumer(&mut reader)?,
                topic: topic_ref(&mut reader)?,
                partition_id: optional_partition(&mut reader)?,
                offset: {
                    let offset = reader.u64()?;
                    reader.u8()?;
                    offset
                },
            },
            op::DELETE_CONSUMER_OFFSET => Command::DeleteConsumerOffset {
                consumer: consumer(&mut reader)?,
                topic: topic_ref(&mut reader)?,
                partition_id: {
                    let p = optional_partition(&mut reader)?;
                    reader.u8()?;
                    p
                },
            },
            other if users::is_user_command(other) => users::decode_command(other, &mut reader)?,
            other if op::is_metadata(other) => match MetadataOp::decode(other, &mut reader)? {
                Some(metadata) => Command::Metadata(metadata),
                None => return Ok(Command::Unsupported { code: other as u32 }),
            },
            other => return Err(DecodeError::UnknownOperation(other)),
        };
        reader.finish()?;
        Ok(command)
    }
}

/// Whether `dialect` retired a command 0.11 has: 0.12 clients never send these, and a
/// 0.12 connection gets InvalidCommand for them.
fn retired(dialect: Dialect, operation: u8, nr_code: u32) -> bool {
    match dialect {
        Dialect::V11 => false,
        Dialect::V12 => match operation {
            op::NON_REPLICATED => matches!(
                nr_code,
                code::ATTACH_CONSUMER_SESSION
                    | code::FLUSH_UNSAVED_BUFFER
                    | code::GET_POLL_ROUTING
                    | code::POLL_MESSAGES_ON_PRIMARY
                    | code::GET_CONSUMER_OFFSET_ROUTING
            ),
            op::UPDATE_STREAM | op::PURGE_STREAM | op::UPDATE_TOPIC | op::PURGE_TOPIC | op::UPDATE_USER => true,
            _ => false,
        },
    }
}

/// `[version u32][sdk name u8-len][sdk version u8-len]`, which opens every login and
/// session-binding body of both generations.
fn client_version(reader: &mut Reader<'_>) -> Result<u32, ErrorCode> {
    let protocol_version = reader.u32()?;
    let _sdk_name = reader.name()?;
    let _sdk_version = reader.name()?;
    Ok(protocol_version)
}

fn decode_register(reader: &mut Reader<'_>) -> Result<Command<'static>, ErrorCode> {
    let protocol_version = client_version(reader)?;
    // The version names the layout: 0.12 puts the session's bind secret before the
    // credentials. An unserved version is parsed as 0.11 and refused by the gate.
    let bind_secret = match crate::version::dialect_of(protocol_version) {
        Some(Dialect::V12) => Some(reader.bytes(32)?.try_into().expect("32 bytes")),
        _ => None,
    };
    let rest = reader.rest();
    // Codes 40 and 45 look the same on the wire: try username/password, then a token.
    let credentials = try_password(rest).or_else(|_| try_token(rest))?;
    Ok(Command::Register { protocol_version, credentials, bind_secret })
}

fn decode_bind_session(reader: &mut Reader<'_>) -> Result<Command<'static>, ErrorCode> {
    Ok(Command::BindSession {
        protocol_version: client_version(reader)?,
        client: reader.u128()?,
        session: reader.u64()?,
        metadata_watermark: reader.u64()?,
        bind_secret: reader.bytes(32)?.try_into().expect("32 bytes"),
    })
}

fn skip_context(reader: &mut Reader<'_>) -> Result<(), ErrorCode> {
    let len = reader.u32()? as usize;
    reader.bytes(len)?;
    reader.finish()
}

fn try_password(bytes: &[u8]) -> Result<Credentials, ErrorCode> {
    let mut reader = Reader::new(bytes);
    let username = reader.name()?;
    let password = reader.short_string()?;
    skip_context(&mut reader)?;
    Ok(Credentials::Password { username, password })
}

fn try_token(bytes: &[u8]) -> Result<Credentials, ErrorCode> {
    let mut reader = Reader::new(bytes);
    let token = reader.short_string()?;
    skip_context(&mut reader)?;
    Ok(Credentials::Token(token))
}

fn decode_send<'a>(reader: &mut Reader<'a>) -> Result<Command<'a>, ErrorCode> {
    let metadata_len = reader.u32()? as usize;
    let metadata = reader.bytes(metadata_len)?;
    let mut meta = Reader::new(metadata);
    let topic = topic_ref(&mut meta)?;
    let partitioning = partitioning(&mut meta)?;
    let messages_count = meta.u32()?;
    meta.finish()?;
    Ok(Command::SendMessages { topic, partitioning, messages_count, batch: reader.rest() })
}

/// `[compression u8][n u8][type u8 x n]`; an unknown compression or type is InvalidCommand.
fn decode_snapshot(reader: &mut Reader<'_>) -> Result<Command<'static>, ErrorCode> {
    let compression = SnapshotCompression::from_code(reader.u8()?).ok_or(ErrorCode::InvalidCommand)?;
    let count = reader.u8()? as usize;
    let types = snapshot::parse_types(reader.bytes(count)?).ok_or(ErrorCode::InvalidCommand)?;
    Ok(Command::GetSnapshot { compression, types })
}

fn decode_non_replicated<'a>(
    dialect: Dialect,
    nr_code: u32,
    reader: &mut Reader<'a>,
) -> Result<Command<'a>, DecodeError> {
    if dialect == Dialect::V12
        && let Some(command) = decode_v12_only(nr_code, reader)?
    {
        return Ok(command);
    }
    Ok(match nr_code {
        code::PING => Command::Ping,
        code::GET_STATS => Command::GetStats,
        code::GET_CLUSTER_METADATA => Command::GetClusterMetadata,
        code::DESCRIBE_OPTIONS => match reader.u8()? {
            scope @ topic_options::SCOPE_TOPIC..=topic_options::SCOPE_USER => Command::DescribeOptions { scope },
            _ => return Err(DecodeError::Body(ErrorCode::InvalidCommand)),
        },
        code::GET_SNAPSHOT_FILE => decode_snapshot(reader)?,
        code::GET_ME => Command::GetMe,
        code::GET_CLIENT => Command::GetClient { client_id: reader.u32()? },
        code::GET_CLIENTS => Command::GetClients,
        code::GET_STREAM => Command::GetStream { stream: Identifier::decode(reader)? },
        code::GET_STREAMS => Command::GetStreams,
        code::GET_TOPIC => Command::GetTopic(topic_ref(reader)?),
        code::GET_TOPICS => Command::GetTopics { stream: Identifier::decode(reader)? },
        code::POLL_MESSAGES => Command::PollMessages(poll_request(reader)?),
        code::GET_POLL_ROUTING => Command::GetPollRouting(poll_request(reader)?),
        code::POLL_MESSAGES_ON_PRIMARY => Command::PollMessagesOnPrimary(poll_request(reader)?),
        code::ATTACH_CONSUMER_SESSION => Command::AttachConsumerSession {
            client: u128::from_le_bytes(reader.bytes(16)?.try_into().expect("16 bytes")),
            session: reader.u64()?,
            metadata_watermark: reader.u64()?,
        },
        code::GET_USER => Command::GetUser { user: Identifier::decode(reader)? },
        code::GET_USERS => Command::GetUsers,
        code::GET_PERSONAL_ACCESS_TOKENS => Command::GetTokens,
        code::GET_CONSUMER_GROUP => {
            Command::GetConsumerGroup { topic: topic_ref(reader)?, group: Identifier::decode(reader)? }
        }
        code::GET_CONSUMER_GROUPS => Command::GetConsumerGroups { topic: topic_ref(reader)? },
        code::SYNC_CONSUMER_GROUP => {
            Command::SyncConsumerGroup { topic: topic_ref(reader)?, group: Identifier::decode(reader)? }
        }
        code::FLUSH_UNSAVED_BUFFER => Command::FlushUnsavedBuffer {
            topic: topic_ref(reader)?,
            partition_id: reader.u32()?,
            fsync: reader.u8()? != 0,
        },
        code::GET_CONSUMER_OFFSET => Command::GetConsumerOffset {
            consumer: consumer(reader)?,
            topic: topic_ref(reader)?,
            partition_id: optional_partition(reader)?,
        },
        code::GET_CONSUMER_OFFSET_ROUTING => Command::GetConsumerOffsetRouting {
            consumer: consumer(reader)?,
            topic: topic_ref(reader)?,
            partition_id: optional_partition(reader)?,
        },
        unknown => return Err(DecodeError::UnknownCode(unknown)),
    })
}

/// `[scope u8][identifiers][reset_count u8][reset key u8-len]*[options TLV to the end]`;
/// a key both set and reset, or reset twice, is malformed.
fn decode_update_resource<'a>(reader: &mut Reader<'a>) -> Result<MetadataOp<'a>, ErrorCode> {
    let target = match reader.u8()? {
        topic_options::SCOPE_TOPIC => ResourceTarget::Topic(topic_ref(reader)?),
        topic_options::SCOPE_STREAM => ResourceTarget::Stream(Identifier::decode(reader)?),
        topic_options::SCOPE_USER => ResourceTarget::User(Identifier::decode(reader)?),
        _ => return Err(ErrorCode::InvalidFormat),
    };
    let count = reader.u8()?;
    let mut reset: Vec<String> = Vec::with_capacity(count.into());
    for _ in 0..count {
        let key = reader.name()?;
        if reset.contains(&key) {
            return Err(ErrorCode::InvalidFormat);
        }
        reset.push(key);
    }
    let options = reader.rest();
    let entries = crate::wire::tlv::decode_options(options)?;
    if entries.iter().any(|entry| reset.iter().any(|key| key.as_bytes() == entry.key)) {
        return Err(ErrorCode::InvalidFormat);
    }
    Ok(MetadataOp::UpdateResource { target, reset, options })
}

/// The commands only protocol 0.12 has; `None` for a code both generations share.
fn decode_v12_only<'a>(nr_code: u32, reader: &mut Reader<'a>) -> Result<Option<Command<'a>>, ErrorCode> {
    Ok(Some(match nr_code {
        code::BIND_SESSION => decode_bind_session(reader)?,
        code::GET_PARTITION_ROUTE => {
            Command::GetPartitionRoute { topic: topic_ref(reader)?, partition_id: reader.u32()? }
        }
        code::POLL_MESSAGES_DEFERRED => {
            let mut request = poll_request(reader)?;
            request.deferred = Some(deferred_poll(reader, request.count)?);
            Command::PollMessages(request)
        }
        code::CANCEL_DEFERRED_REQUEST => Command::CancelDeferred,
        code::GET_METADATA_CHANGES => Command::GetMetadataChanges(crate::change_feed::ChangesQuery::decode(reader)?),
        code::FETCH_MESSAGES => Command::FetchMessages(decode_fetch(reader)?),
        _ => return Ok(None),
    }))
}

/// The bounds the 0.12 clients put on a deferred poll's or a fetch's terms before sending.
pub(crate) struct DeferredLimits {
    /// The longest wait, and the longest the client waits for the reply.
    max_wait_us: u64,
    max_timeout_us: u64,
    /// How much longer than its wait the client's timeout must be, so the reply reaches it.
    reply_margin_us: u64,
    /// The smallest reply budget: the 40-byte poll prefix, one batch header and one
    /// message header.
    pub(crate) min_max_bytes: u32,
}

impl DeferredLimits {
    pub(crate) const CLIENT: Self = Self {
        max_wait_us: 600_000_000,
        max_timeout_us: 630_000_000,
        reply_margin_us: 1_000_000,
        min_max_bytes: 40 + 256 + 48,
    };

    /// A wait and a timeout within bounds; a fetch (`margin_without_wait`) needs the reply
    /// margin even when it does not wait.
    pub(crate) fn timers_valid(&self, wait_us: u64, timeout_us: u64, margin_without_wait: bool) -> bool {
        let needs_margin = wait_us > 0 || margin_without_wait;
        let covers_wait = !needs_margin || timeout_us >= wait_us.saturating_add(self.reply_margin_us);
        wait_us <= self.max_wait_us && (1..=self.max_timeout_us).contains(&timeout_us) && covers_wait
    }
}

/// `[wait_us u64][min_count u32][max_bytes u32][request_timeout_us u64]` after the poll
/// body, checked as the client checks it before sending.
fn deferred_poll(reader: &mut Reader<'_>, count: u32) -> Result<DeferredPoll, ErrorCode> {
    let deferred = DeferredPoll {
        wait_us: reader.u64()?,
        min_count: reader.u32()?,
        max_bytes: reader.u32()?,
        request_timeout_us: reader.u64()?,
    };
    let DeferredPoll { wait_us, min_count, max_bytes, request_timeout_us } = deferred;
    let limits = DeferredLimits::CLIENT;
    let valid = limits.timers_valid(wait_us, request_timeout_us, false)
        && (1..=count).contains(&min_count)
        && max_bytes >= limits.min_max_bytes;
    if valid { Ok(deferred) } else { Err(ErrorCode::InvalidFormat) }
}

/// The wait a 0.12 deferred poll (106) or fetch (109) body asks for, read without decoding
/// the rest: a poll's terms end its body, a fetch's follow its consumer and topic. `None`
/// for another code or a body too short to say (its decoding refuses it).
pub fn requested_wait_us(nr_code: u32, body: &[u8]) -> Option<u64> {
    match nr_code {
        code::POLL_MESSAGES_DEFERRED => {
            let terms = body.len().checked_sub(24)?;
            Some(u64::from_le_bytes(body[terms..terms + 8].try_into().ok()?))
        }
        code::FETCH_MESSAGES => {
            let mut reader = Reader::new(body);
            consumer(&mut reader).ok()?;
            topic_ref(&mut reader).ok()?;
            reader.u64().ok()
        }
        _ => None,
    }
}

/// A fetch target: `[partition_id u32][strategy 9][max_bytes u32][incarnation u64]
/// [owner_generation u64]`.
const FETCH_TARGET_SIZE: usize = 4 + 9 + 4 + 8 + 8;

/// Decodes and checks a fetch as the 0.12 client checks it before sending: timers within
/// the deferred limits (a zero wait needs the reply margin too), `min_count` in 1..=`count`,
/// byte budgets of at least the smallest reply, 1 to 1,000 targets of distinct partitions,
/// each starting at an offset or at the next one.
pub(crate) fn decode_fetch(reader: &mut Reader<'_>) -> Result<FetchRequest, ErrorCode> {
    let consumer = consumer(reader)?;
    let topic = topic_ref(reader)?;
    let (wait_us, request_timeout_us) = (reader.u64()?, reader.u64()?);
    let (min_count, count, max_bytes) = (reader.u32()?, reader.u32()?, reader.u32()?);
    let auto_commit = reader.u8()? != 0;
    let targets_count = reader.u32()?;
    if targets_count == 0
        || targets_count > MAX_PARTITIONS_PER_REQUEST
        || reader.remaining() != targets_count as usize * FETCH_TARGET_SIZE
    {
        return Err(ErrorCode::InvalidFormat);
    }
    let limits = DeferredLimits::CLIENT;
    let valid = limits.timers_valid(wait_us, request_timeout_us, true)
        && (1..=count).contains(&min_count)
        && max_bytes >= limits.min_max_bytes;
    if !valid {
        return Err(ErrorCode::InvalidFormat);
    }
    let mut targets = Vec::with_capacity(targets_count as usize);
    for _ in 0..targets_count {
        let target = FetchTarget {
            partition_id: reader.u32()?,
            strategy: PollingStrategy::decode(reader)?,
            max_bytes: reader.u32()?,
            incarnation: reader.u64()?,
            owner_generation: reader.u64()?,
        };
        let start_ok = matches!(target.strategy, PollingStrategy::Offset(_) | PollingStrategy::Next);
        let bytes_ok = (limits.min_max_bytes..=max_bytes).contains(&target.max_bytes);
        if !start_ok || !bytes_ok || targets.iter().any(|t: &FetchTarget| t.partition_id == target.partition_id) {
            return Err(ErrorCode::InvalidFormat);
        }
        targets.push(target);
    }
    Ok(FetchRequest { consumer, topic, wait_us, request_timeout_us, min_count, count, max_bytes, auto_commit, targets })
}

/// The POLL_MESSAGES body, which the routing codes 103 and 104 carry as well.
fn poll_request(reader: &mut Reader<'_>) -> Result<PollRequest, ErrorCode> {
    Ok(PollRequest {
        consumer: consumer(reader)?,
        topic: topic_ref(reader)?,
        partition_id: optional_partition(reader)?,
        strategy: PollingStrategy::decode(reader)?,
        count: reader.u32()?,
        auto_commit: reader.u8()? != 0,
        deferred: None,
    })
}

impl<'a> MetadataOp<'a> {
    /// Decodes a metadata mutation; `None` for metadata operations not served yet.
    pub fn decode(operation: u8, reader: &mut Reader<'a>) -> Result<Option<Self>, ErrorCode> {
        Ok(Some(match operation {
            op::CREATE_STREAM => MetadataOp::CreateStream { name: reader.name()?, options: reader.rest() },
            op::UPDATE_STREAM => MetadataOp::UpdateStream { stream: Identifier::decode(reader)?, name: reader.name()? }
                .skip_options(reader)?,
            op::DELETE_STREAM => MetadataOp::DeleteStream { stream: Identifier::decode(reader)? },
            op::PURGE_STREAM => MetadataOp::PurgeStream { stream: Identifier::decode(reader)? },
            op::CREATE_TOPIC => MetadataOp::CreateTopic {
                stream: Identifier::decode(reader)?,
                partitions_count: reader.u32()?,
                name: reader.name()?,
                options: reader.rest(),
            },
            op::UPDATE_TOPIC => {
                MetadataOp::UpdateTopic { topic: topic_ref(reader)?, name: reader.name()?, options: reader.rest() }
            }
            op::DELETE_TOPIC => MetadataOp::DeleteTopic(topic_ref(reader)?),
            op::PURGE_TOPIC => MetadataOp::PurgeTopic(topic_ref(reader)?),
            op::CREATE_PARTITIONS => MetadataOp::CreatePartitions { topic: topic_ref(reader)?, count: reader.u32()? },
            op::DELETE_PARTITIONS => MetadataOp::DeletePartitions { topic: topic_ref(reader)?, count: reader.u32()? },
            op::CREATE_CONSUMER_GROUP => {
                MetadataOp::CreateConsumerGroup { topic: topic_ref(reader)?, name: reader.name()? }
            }
            op::DELETE_CONSUMER_GROUP => {
                MetadataOp::DeleteConsumerGroup { topic: topic_ref(reader)?, group: Identifier::decode(reader)? }
            }
            op::UPDATE_RESOURCE => decode_update_resource(reader)?,
            other if users::is_user_op(other) => users::decode_op(other, reader)?,
            other if membership::is_membership_op(other) => membership::decode_op(other, reader)?,
            _ => {
                reader.rest();
                return Ok(None);
            }
        }))
    }

    /// Streams take no options yet: an options block must be empty or it is refused.
    fn skip_options(self, reader: &mut Reader<'a>) -> Result<Self, ErrorCode> {
        let options = reader.rest();
        if crate::wire::tlv::decode_options(options)?.is_empty() {
            Ok(self)
        } else {
            Err(ErrorCode::UnsupportedOptionKey)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::command::ResourceTarget;

    fn login_body(tail: &[u8]) -> Vec<u8> {
        let mut body = vec![0x00, 0x2c, 0x00, 0x00, 8];
        body.extend_from_slice(b"rust-sdk");
        body.push(6);
        body.extend_from_slice(b"0.11.0");
        body.extend_from_slice(tail);
        body
    }

    #[test]
    fn decodes_password_and_token_logins() {
        let body = login_body(b"\x04iggy\x04iggy\x00\x00\x00\x00");
        let Command::Register { protocol_version, credentials, .. } = Command::decode(1, 0, &body).unwrap() else {
            panic!("not a register");
        };
        assert_eq!(protocol_version, 11264);
        assert_eq!(credentials, Credentials::Password { username: "iggy".into(), password: "iggy".into() });
        let body = login_body(b"\x05token\x00\x00\x00\x00");
        let Command::Register { credentials, .. } = Command::decode(1, 0, &body).unwrap() else {
            panic!("not a register");
        };
        assert_eq!(credentials, Credentials::Token("token".into()));
    }

    #[test]
    fn decodes_the_golden_send_metadata() {
        let mut body = vec![24, 0, 0, 0, 1, 4, 0, 0, 0, 0, 2, 6];
        body.extend_from_slice(b"orders");
        body.extend_from_slice(&[2, 4, 0, 0, 0, 0, 2, 0, 0, 0]);
        body.extend_from_slice(&[0xAA; 8]);
        let Command::SendMessages { topic, partitioning, messages_count, batch } =
            Command::decode(op::SEND_MESSAGES, 0, &body).unwrap()
        else {
            panic!("not a send");
        };
        assert_eq!(topic.stream, Identifier::Numeric(0));
        assert_eq!(topic.topic, Identifier::Name("orders".into()));
        assert_eq!(partitioning, Partitioning::PartitionId(0));
        assert_eq!((messages_count, batch.len()), (2, 8));
    }

    fn v12_version_info() -> Vec<u8> {
        let mut body = vec![0x02, 0x30, 0x00, 0x00, 8];
        body.extend_from_slice(b"rust-sdk");
        body.push(13);
        body.extend_from_slice(b"0.11.1-edge.9");
        body
    }

    #[test]
    fn decodes_the_0_12_login_session_binding_and_patch() {
        let login = [v12_version_info(), vec![9; 32], b"\x04iggy\x04iggy\x00\x00\x00\x00".to_vec()].concat();
        let Ok(Command::Register { credentials, bind_secret, .. }) = Command::decode_in(Dialect::V12, 1, 0, &login)
        else {
            panic!("not a register");
        };
        assert_eq!(credentials, Credentials::Password { username: "iggy".into(), password: "iggy".into() });
        assert_eq!(bind_secret, Some([9; 32]));
        // The same body read as 0.11 has no credentials where the secret is.
        let bind =
            [v12_version_info(), 7u128.to_le_bytes().to_vec(), vec![3, 0, 0, 0, 0, 0, 0, 0], vec![0; 8], vec![1; 32]]
                .concat();
        let Ok(Command::BindSession { client, session, .. }) = Command::decode_in(Dialect::V12, 2, 15, &bind) else {
            panic!("not a binding");
        };
        assert_eq!((client, session), (7, 3));
        assert_eq!(Command::decode(2, 15, &bind), Err(DecodeError::UnknownCode(15)), "0.11 has no binding");

        let mut patch = vec![2, 1, 4, 1, 0, 0, 0, 0];
        crate::wire::tlv::put(&mut patch, "name", crate::wire::tlv::KIND_STRING, b"renamed");
        let Ok(Command::Metadata(MetadataOp::UpdateResource { target, reset, .. })) =
            Command::decode_in(Dialect::V12, op::UPDATE_RESOURCE, 0, &patch)
        else {
            panic!("not a patch");
        };
        assert_eq!((target, reset.len()), (ResourceTarget::Stream(Identifier::Numeric(1)), 0));
        let mut both = vec![2, 1, 4, 1, 0, 0, 0, 1, 4];
        both.extend_from_slice(b"name");
        crate::wire::tlv::put(&mut both, "name", crate::wire::tlv::KIND_STRING, b"renamed");
        assert!(Command::decode_in(Dialect::V12, op::UPDATE_RESOURCE, 0, &both).is_err(), "set and reset at once");
    }

    #[test]
    fn retired_codes_are_unknown_to_0_12_and_deferred_terms_are_checked() {
        assert_eq!(
            Command::decode_in(Dialect::V12, 2, code::FLUSH_UNSAVED_BUFFER, &[]),
            Err(DecodeError::UnknownCode(102))
        );
        assert!(Command::decode_in(Dialect::V12, op::PURGE_TOPIC, 0, &[]).is_err());
        let poll = Command::PollMessages(PollRequest {
            consumer: Consumer::Single(Identifier::Numeric(7)),
            topic: TopicRef { stream: Identifier::Numeric(1), topic: Identifier::Numeric(2) },
            partition_id: Some(0),
            strategy: PollingStrategy::Next,
            count: 10,
            auto_commit: false,
            deferred: None,
        })
        .encode()
        .expect("a poll encodes")
        .body;
        let terms = |wait: u64, min: u32, bytes: u32, timeout: u64| {
            let terms = [wait.to_le_bytes().to_vec(), min.to_le_bytes().to_vec(), bytes.to_le_bytes().to_vec()];
            [poll.clone(), terms.concat(), timeout.to_le_bytes().to_vec()].concat()
        };
        fn decode(body: &[u8]) -> Result<Command<'_>, DecodeError> {
            Command::decode_in(Dialect::V12, 2, code::POLL_MESSAGES_DEFERRED, body)
        }
        assert!(
            matches!(decode(&terms(1_000_000, 1, 1 << 20, 2_000_000)), Ok(Command::PollMessages(p)) if p.deferred.is_some())
        );
        assert!(decode(&terms(1_000_000, 0, 1 << 20, 2_000_000)).is_err(), "min_count 0");
        assert!(decode(&terms(1_000_000, 11, 1 << 20, 2_000_000)).is_err(), "min_count above count");
        assert!(decode(&terms(1_000_000, 1, 1 << 20, 1_500_000)).is_err(), "timeout shorter than wait and margin");
        assert!(decode(&terms(0, 1, 100, 2_000_000)).is_err(), "byte budget under one message");
        let (waiting, not) = (terms(1_000_000, 1, 1 << 20, 2_000_000), terms(0, 1, 1 << 20, 2_000_000));
        assert_eq!(requested_wait_us(code::POLL_MESSAGES_DEFERRED, &waiting), Some(1_000_000));
        assert_eq!(requested_wait_us(code::POLL_MESSAGES_DEFERRED, &not), Some(0));
        assert_eq!(requested_wait_us(code::POLL_MESSAGES_DEFERRED, &[0; 8]), None);
        assert_eq!(requested_wait_us(code::POLL_MESSAGES, &waiting), None);
        let fetch = [&[1u8, 1, 4][..], &7u32.to_le_bytes(), &[1, 4, 1, 0, 0, 0, 1, 4, 2, 0, 0, 0], &5u64.to_le_bytes()]
            .concat();
        assert_eq!(requested_wait_us(code::FETCH_MESSAGES, &fetch), Some(5));
    }

    #[test]
    fn unknown_codes_and_operations_are_errors() {
        assert_eq!(Command::decode(2, 9999, &[]), Err(DecodeError::UnknownCode(9999)));
        assert_eq!(Command::decode(99, 0, &[]), Err(DecodeError::UnknownOperation(99)));
        assert!(matches!(Command::decode(2, code::GET_STREAM, &[1, 4, 0]), Err(DecodeError::Body(_))));
        assert!(matches!(Command::decode(2, code::PING, &[0]), Err(DecodeError::Body(_))));
    }
}
