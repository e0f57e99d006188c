//! Decoding client requests into the command model (`command.rs`): the operation byte, the
//! NonReplicated code and the body. Decoding never panics and never over-allocates.

use crate::error::ErrorCode;
use crate::identifier::Identifier;
use crate::polling::PollingStrategy;
use crate::reader::Reader;
use crate::snapshot::{self, SnapshotCompression};
use crate::topic_options;
use crate::wire::codes::{code, operation as op};
use crate::wire::command::{
    Command, Consumer, Credentials, DecodeError, MetadataOp, Partitioning, PollRequest, TopicRef,
};
use crate::wire::{membership, users};

fn topic_ref(reader: &mut Reader<'_>) -> Result<TopicRef, ErrorCode> {
    Ok(TopicRef { stream: Identifier::decode(reader)?, topic: Identifier::decode(reader)? })
}

fn consumer(reader: &mut Reader<'_>) -> Result<Consumer, ErrorCode> {
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
    /// Decodes a request from its header fields and body.
    pub fn decode(operation: u8, nr_code: u32, body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut reader = Reader::new(body);
        let command = match operation {
            op::REGISTER => decode_register(&mut reader)?,
            op::NON_REPLICATED => decode_non_replicated(nr_code, &mut reader)?,
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

fn decode_register(reader: &mut Reader<'_>) -> Result<Command<'static>, ErrorCode> {
    let protocol_version = reader.u32()?;
    let _sdk_name = reader.name()?;
    let _sdk_version = reader.name()?;
    let rest = reader.rest();
    // Codes 40 and 45 look the same on the wire: try username/password, then a token.
    let credentials = try_password(rest).or_else(|_| try_token(rest))?;
    Ok(Command::Register { protocol_version, credentials })
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

fn decode_non_replicated<'a>(nr_code: u32, reader: &mut Reader<'a>) -> Result<Command<'a>, DecodeError> {
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

/// The POLL_MESSAGES body, which the routing codes 103 and 104 carry as well.
fn poll_request(reader: &mut Reader<'_>) -> Result<PollRequest, ErrorCode> {
    Ok(PollRequest {
        consumer: consumer(reader)?,
        topic: topic_ref(reader)?,
        partition_id: optional_partition(reader)?,
        strategy: PollingStrategy::decode(reader)?,
        count: reader.u32()?,
        auto_commit: reader.u8()? != 0,
    })
}

impl<'a> MetadataOp<'a> {
    /// Decodes a metadata mutation; `None` for metadata operations not served yet.
    pub fn decode(operation: u8, reader: &mut Reader<'a>) -> Result<Option<Self>, ErrorCode> {
        Ok(Some(match operation {
            op::CREATE_STREAM => MetadataOp::CreateStream { name: reader.name()? }.skip_options(reader)?,
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
        let Command::Register { protocol_version, credentials } = Command::decode(1, 0, &body).unwrap() else {
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

    #[test]
    fn unknown_codes_and_operations_are_errors() {
        assert_eq!(Command::decode(2, 9999, &[]), Err(DecodeError::UnknownCode(9999)));
        assert_eq!(Command::decode(99, 0, &[]), Err(DecodeError::UnknownOperation(99)));
        assert!(matches!(Command::decode(2, code::GET_STREAM, &[1, 4, 0]), Err(DecodeError::Body(_))));
        assert!(matches!(Command::decode(2, code::PING, &[0]), Err(DecodeError::Body(_))));
    }
}
