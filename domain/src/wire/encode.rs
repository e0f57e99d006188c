//! Commands back to bytes: the inverse of `Command::decode`. Transports that do not speak
//! the binary protocol (HTTP) build a typed `Command` and encode it, so every request
//! reaches the use cases through the same decoder, authorization and journal.

use crate::error::ErrorCode;
use crate::identifier::Identifier;
use crate::permissions::{Permissions, put_present};
use crate::polling::PollingStrategy;
use crate::reader::Put;
use crate::wire::codes::{code, operation as op};
use crate::wire::command::{Command, Consumer, MetadataOp, Partitioning, PollRequest, TopicRef};

/// An encoded request: operation byte, NonReplicated code (0 for other operations), body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedRequest {
    pub operation: u8,
    pub code: u32,
    pub body: Vec<u8>,
}

/// Writes checked values: a name that the wire cannot carry is an error, never a
/// silently truncated name.
struct Body(Vec<u8>);

impl Body {
    fn name(&mut self, value: &str) -> Result<&mut Self, ErrorCode> {
        if value.is_empty() || value.len() > 255 {
            return Err(ErrorCode::InvalidFormat);
        }
        self.0.put_name(value);
        Ok(self)
    }

    fn short_string(&mut self, value: &str) -> Result<&mut Self, ErrorCode> {
        if value.len() > 255 {
            return Err(ErrorCode::InvalidFormat);
        }
        self.0.put_u8(value.len() as u8);
        self.0.extend_from_slice(value.as_bytes());
        Ok(self)
    }

    fn identifier(&mut self, id: &Identifier) -> Result<&mut Self, ErrorCode> {
        if let Identifier::Name(name) = id
            && (name.is_empty() || name.len() > 255)
        {
            return Err(ErrorCode::InvalidIdentifier);
        }
        id.encode(&mut self.0);
        Ok(self)
    }

    fn topic(&mut self, topic: &TopicRef) -> Result<&mut Self, ErrorCode> {
        self.identifier(&topic.stream)?.identifier(&topic.topic)
    }

    fn consumer(&mut self, consumer: &Consumer) -> Result<&mut Self, ErrorCode> {
        let (kind, id) = match consumer {
            Consumer::Single(id) => (1, id),
            Consumer::Group(id) => (2, id),
        };
        self.0.put_u8(kind);
        self.identifier(id)
    }

    fn optional_partition(&mut self, partition_id: Option<u32>) -> &mut Self {
        self.0.put_u8(partition_id.is_some() as u8);
        self.0.put_u32(partition_id.unwrap_or(0));
        self
    }

    fn permissions(&mut self, permissions: &Option<Permissions>) -> &mut Self {
        match permissions {
            None => self.0.put_u8(0),
            Some(permissions) => put_present(&mut self.0, permissions),
        }
        self
    }

    fn u8(&mut self, value: u8) -> &mut Self {
        self.0.put_u8(value);
        self
    }

    fn u32(&mut self, value: u32) -> &mut Self {
        self.0.put_u32(value);
        self
    }

    fn u64(&mut self, value: u64) -> &mut Self {
        self.0.put_u64(value);
        self
    }

    fn bytes(&mut self, value: &[u8]) -> &mut Self {
        self.0.extend_from_slice(value);
        self
    }
}

fn strategy_bytes(strategy: PollingStrategy) -> (u8, u64) {
    match strategy {
        PollingStrategy::Offset(value) => (1, value),
        PollingStrategy::Timestamp(value) => (2, value),
        PollingStrategy::First => (3, 0),
        PollingStrategy::Last => (4, 0),
        PollingStrategy::Next => (5, 0),
    }
}

fn poll(body: &mut Body, request: &PollRequest) -> Result<(), ErrorCode> {
    let (kind, value) = strategy_bytes(request.strategy);
    body.consumer(&request.consumer)?.topic(&request.topic)?;
    body.optional_partition(request.partition_id).u8(kind).u64(value).u32(request.count).u8(request.auto_commit as u8);
    Ok(())
}

fn send(
    body: &mut Body,
    topic: &TopicRef,
    partitioning: &Partitioning,
    count: u32,
    batch: &[u8],
) -> Result<(), ErrorCode> {
    let mut metadata = Body(Vec::new());
    metadata.topic(topic)?;
    match partitioning {
        Partitioning::Balanced => metadata.u8(1).u8(0),
        Partitioning::PartitionId(id) => metadata.u8(2).u8(4).u32(*id),
        Partitioning::MessagesKey(key) if (1..=255).contains(&key.len()) => {
            metadata.u8(3).u8(key.len() as u8).bytes(key)
        }
        Partitioning::MessagesKey(_) => return Err(ErrorCode::InvalidFormat),
    };
    metadata.u32(count);
    body.u32(metadata.0.len() as u32).bytes(&metadata.0).bytes(batch);
    Ok(())
}

impl Command<'_> {
    /// The request that decodes back to `self`. Register, Ping and Logout are session
    /// plumbing, not commands a gateway forwards, so they have no encoding here.
    pub fn encode(&self) -> Result<EncodedRequest, ErrorCode> {
        let mut body = Body(Vec::new());
        let nr = |code: u32| (op::NON_REPLICATED, code);
        let (operation, nr_code) = match self {
            Command::GetStats => nr(code::GET_STATS),
            Command::GetClusterMetadata => nr(code::GET_CLUSTER_METADATA),
            Command::GetSnapshot { compression, types } => {
                body.u8(*compression as u8).u8(types.len() as u8);
                for kind in types {
                    body.u8(kind.code());
                }
                nr(code::GET_SNAPSHOT_FILE)
            }
            Command::DescribeOptions { scope } => {
                body.u8(*scope);
                nr(code::DESCRIBE_OPTIONS)
            }
            Command::GetMe => nr(code::GET_ME),
            Command::GetClient { client_id } => {
                body.u32(*client_id);
                nr(code::GET_CLIENT)
            }
            Command::GetClients => nr(code::GET_CLIENTS),
            Command::GetStream { stream } => {
                body.identifier(stream)?;
                nr(code::GET_STREAM)
            }
            Command::GetStreams => nr(code::GET_STREAMS),
            Command::GetTopic(topic) => {
                body.topic(topic)?;
                nr(code::GET_TOPIC)
            }
            Command::GetTopics { stream } => {
                body.identifier(stream)?;
                nr(code::GET_TOPICS)
            }
            Command::Metadata(metadata) => (metadata.encode_into(&mut body)?, 0),
            Command::DeleteSegments { topic, partition_id, segments_count } => {
                body.topic(topic)?.u32(*partition_id).u32(*segments_count);
                (op::DELETE_SEGMENTS, 0)
            }
            Command::SendMessages { topic, partitioning, messages_count, batch } => {
                send(&mut body, topic, partitioning, *messages_count, batch)?;
                (op::SEND_MESSAGES, 0)
            }
            Command::PollMessages(request) => {
                poll(&mut body, request)?;
                nr(code::POLL_MESSAGES)
            }
            Command::FlushUnsavedBuffer { topic, partition_id, fsync } => {
                body.topic(topic)?.u32(*partition_id).u8(*fsync as u8);
                nr(code::FLUSH_UNSAVED_BUFFER)
            }
            Command::GetConsumerOffset { consumer, topic, partition_id } => {
                body.consumer(consumer)?.topic(topic)?.optional_partition(*partition_id);
                nr(code::GET_CONSUMER_OFFSET)
            }
            Command::StoreConsumerOffset { consumer, topic, partition_id, offset } => {
                body.consumer(consumer)?.topic(topic)?.optional_partition(*partition_id).u64(*offset).u8(0);
                (op::STORE_CONSUMER_OFFSET, 0)
            }
            Command::DeleteConsumerOffset { consumer, topic, partition_id } => {
                body.consumer(consumer)?.topic(topic)?.optional_partition(*partition_id).u8(0);
                (op::DELETE_CONSUMER_OFFSET, 0)
            }
            _ => return self.encode_users(body),
        };
        Ok(EncodedRequest { operation, code: nr_code, body: body.0 })
    }

    fn encode_users(&self, mut body: Body) -> Result<EncodedRequest, ErrorCode> {
        let nr = |code: u32| (op::NON_REPLICATED, code);
        let (operation, nr_code) = match self {
            Command::GetUser { user } => {
                body.identifier(user)?;
                nr(code::GET_USER)
            }
            Command::GetUsers => nr(code::GET_USERS),
            Command::CreateUser { username, password, status, permissions } => {
                body.name(username)?.short_string(password)?.u8(*status).permissions(permissions);
                (op::CREATE_USER, 0)
            }
            Command::ChangePassword { user, current, new } => {
                body.identifier(user)?.short_string(current)?.short_string(new)?;
                (op::CHANGE_PASSWORD, 0)
            }
            Command::GetTokens => nr(code::GET_PERSONAL_ACCESS_TOKENS),
            Command::CreateToken { name, expiry_us } => {
                body.name(name)?.u64(*expiry_us);
                (op::CREATE_PERSONAL_ACCESS_TOKEN, 0)
            }
            Command::DeleteToken { name } => {
                body.name(name)?;
                (op::DELETE_PERSONAL_ACCESS_TOKEN, 0)
            }
            Command::GetConsumerGroup { topic, group } => {
                body.topic(topic)?.identifier(group)?;
                nr(code::GET_CONSUMER_GROUP)
            }
            Command::GetConsumerGroups { topic } => {
                body.topic(topic)?;
                nr(code::GET_CONSUMER_GROUPS)
            }
            Command::JoinConsumerGroup { topic, group } => {
                body.topic(topic)?.identifier(group)?;
                (op::JOIN_CONSUMER_GROUP, 0)
            }
            Command::LeaveConsumerGroup { topic, group } => {
                body.topic(topic)?.identifier(group)?;
                (op::LEAVE_CONSUMER_GROUP, 0)
            }
            Command::SyncConsumerGroup { topic, group } => {
                body.topic(topic)?.identifier(group)?;
                nr(code::SYNC_CONSUMER_GROUP)
            }
            _ => return Err(ErrorCode::InvalidCommand),
        };
        Ok(EncodedRequest { operation, code: nr_code, body: body.0 })
    }
}

impl MetadataOp<'_> {
    /// Writes the client form of a metadata mutation and returns its operation byte.
    /// Journal-only operations have no client form.
    fn encode_into(&self, body: &mut Body) -> Result<u8, ErrorCode> {
        Ok(match self {
            MetadataOp::CreateStream { name, options } => {
                body.name(name)?.bytes(options);
                op::CREATE_STREAM
            }
            MetadataOp::UpdateStream { stream, name } => {
                body.identifier(stream)?.name(name)?;
                op::UPDATE_STREAM
            }
            MetadataOp::DeleteStream { stream } => {
                body.identifier(stream)?;
                op::DELETE_STREAM
            }
            MetadataOp::PurgeStream { stream } => {
                body.identifier(stream)?;
                op::PURGE_STREAM
            }
            MetadataOp::CreateTopic { stream, partitions_count, name, options } => {
                body.identifier(stream)?.u32(*partitions_count).name(name)?.bytes(options);
                op::CREATE_TOPIC
            }
            MetadataOp::UpdateTopic { topic, name, options } => {
                body.topic(topic)?.name(name)?.bytes(options);
                op::UPDATE_TOPIC
            }
            MetadataOp::DeleteTopic(topic) => {
                body.topic(topic)?;
                op::DELETE_TOPIC
            }
            MetadataOp::PurgeTopic(topic) => {
                body.topic(topic)?;
                op::PURGE_TOPIC
            }
            MetadataOp::CreatePartitions { topic, count } => {
                body.topic(topic)?.u32(*count);
                op::CREATE_PARTITIONS
            }
            MetadataOp::DeletePartitions { topic, count } => {
                body.topic(topic)?.u32(*count);
                op::DELETE_PARTITIONS
            }
            MetadataOp::CreateConsumerGroup { topic, name } => {
                body.topic(topic)?.name(name)?;
                op::CREATE_CONSUMER_GROUP
            }
            MetadataOp::DeleteConsumerGroup { topic, group } => {
                body.topic(topic)?.identifier(group)?;
                op::DELETE_CONSUMER_GROUP
            }
            MetadataOp::UpdateUser { user, username, status } => {
                body.identifier(user)?;
                match username {
                    Some(name) => body.u8(1).name(name)?,
                    None => body.u8(0),
                };
                match status {
                    Some(status) => body.u8(1).u8(*status),
                    None => body.u8(0),
                };
                op::UPDATE_USER
            }
            MetadataOp::DeleteUser { user } => {
                body.identifier(user)?;
                op::DELETE_USER
            }
            MetadataOp::UpdatePermissions { user, permissions } => {
                body.identifier(user)?.permissions(permissions);
                op::UPDATE_PERMISSIONS
            }
            _ => return Err(ErrorCode::InvalidCommand),
        })
    }
}

#[cfg(test)]
mod tests;
