//! The metadata state machine: streams, topics and partitions. It is applied only from
//! journaled operations with the timestamp the journal recorded, so replay rebuilds the
//! exact same state (ids, names, creation times).

use std::collections::BTreeMap;

use crate::constants::{MAX_PARTITIONS_PER_REQUEST, MAX_PARTITIONS_PER_TOPIC, MAX_STREAMS, MAX_TOPICS_PER_STREAM};
use crate::consumer_group::ConsumerGroup;
use crate::error::ErrorCode;
use crate::identifier::Identifier;
use crate::topic_options::TopicSettings;
use crate::wire::command::{MetadataOp, TopicRef};

mod groups;
mod resource;
mod snapshot;
mod user;
mod users;
pub use user::{MAX_TOKENS_PER_USER, STATUS_ACTIVE, STATUS_INACTIVE, Token, User};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stream {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    /// The metadata op that created the stream: with the id, it names this stream apart
    /// from an earlier one that had the same id (0 when restored from a version 2 snapshot).
    pub created_op: u64,
    /// Its committed options block: empty, or its key's envelope (`stream_options`).
    pub options: Vec<u8>,
    pub topics: BTreeMap<u32, Topic>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    /// The metadata op that created the topic (0 when restored from a version 2 snapshot).
    pub created_op: u64,
    pub settings: TopicSettings,
    /// Creation time of each partition; partition ids are the dense indexes `0..len`.
    pub partitions: Vec<u64>,
    /// Consumer groups by id; ids start at 0 per topic and are never reused.
    pub consumer_groups: BTreeMap<u32, String>,
    pub next_group_id: u32,
    /// Each consumer group's membership and assignment, by group id.
    pub memberships: BTreeMap<u32, ConsumerGroup>,
}

/// What an applied operation changed, so the caller can mirror it in storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    StreamCreated {
        stream_id: u32,
    },
    StreamUpdated {
        stream_id: u32,
    },
    StreamDeleted {
        stream_id: u32,
    },
    StreamPurged {
        stream_id: u32,
    },
    TopicCreated {
        stream_id: u32,
        topic_id: u32,
    },
    TopicUpdated {
        stream_id: u32,
        topic_id: u32,
    },
    TopicDeleted {
        stream_id: u32,
        topic_id: u32,
    },
    TopicPurged {
        stream_id: u32,
        topic_id: u32,
    },
    PartitionsCreated {
        stream_id: u32,
        topic_id: u32,
        first: u32,
        count: u32,
    },
    PartitionsDeleted {
        stream_id: u32,
        topic_id: u32,
        first: u32,
        count: u32,
    },
    UserChanged {
        user_id: u32,
    },
    GroupCreated {
        stream_id: u32,
        topic_id: u32,
        group_id: u32,
    },
    GroupDeleted {
        stream_id: u32,
        topic_id: u32,
        group_id: u32,
    },
    /// A consumer group's membership or assignment changed.
    MembershipChanged,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    streams: BTreeMap<u32, Stream>,
    users: BTreeMap<u32, User>,
}

/// The lowest id in `0..limit` not used as a key.
pub(crate) fn lowest_free<V>(map: &BTreeMap<u32, V>, limit: u32) -> Option<u32> {
    let mut candidate = 0;
    for &id in map.keys() {
        if id != candidate {
            break;
        }
        candidate += 1;
    }
    (candidate < limit).then_some(candidate)
}

impl Metadata {
    pub fn streams(&self) -> impl Iterator<Item = &Stream> {
        self.streams.values()
    }

    pub fn stream_id(&self, stream: &Identifier) -> Result<u32, ErrorCode> {
        match stream {
            Identifier::Numeric(id) => self.streams.contains_key(id).then_some(*id),
            Identifier::Name(name) => self.streams.values().find(|s| &s.name == name).map(|s| s.id),
        }
        .ok_or(ErrorCode::StreamIdNotFound)
    }

    pub fn stream_by_id(&self, stream_id: u32) -> Option<&Stream> {
        self.streams.get(&stream_id)
    }

    pub fn stream(&self, stream: &Identifier) -> Result<&Stream, ErrorCode> {
        Ok(&self.streams[&self.stream_id(stream)?])
    }

    /// Resolves both identifiers to `(stream_id, topic_id)`.
    pub fn topic_ids(&self, topic: &TopicRef) -> Result<(u32, u32), ErrorCode> {
        let stream = self.stream(&topic.stream)?;
        let topic_id = match &topic.topic {
            Identifier::Numeric(id) => stream.topics.contains_key(id).then_some(*id),
            Identifier::Name(name) => stream.topics.values().find(|t| &t.name == name).map(|t| t.id),
        }
        .ok_or(ErrorCode::TopicIdNotFound)?;
        Ok((stream.id, topic_id))
    }

    pub fn topic(&self, topic: &TopicRef) -> Result<&Topic, ErrorCode> {
        let (stream_id, topic_id) = self.topic_ids(topic)?;
        Ok(&self.streams[&stream_id].topics[&topic_id])
    }

    pub fn topic_by_ids(&self, stream_id: u32, topic_id: u32) -> Option<&Topic> {
        self.streams.get(&stream_id)?.topics.get(&topic_id)
    }

    fn topic_mut(&mut self, topic: &TopicRef) -> Result<&mut Topic, ErrorCode> {
        let (stream_id, topic_id) = self.topic_ids(topic)?;
        Ok(self.streams.get_mut(&stream_id).unwrap().topics.get_mut(&topic_id).unwrap())
    }

    /// Applies one operation, journaled as op number `op_number` at `timestamp`. Every
    /// check happens before the first mutation, so a refused operation leaves the state
    /// untouched.
    pub fn apply(&mut self, op: &MetadataOp<'_>, op_number: u64, timestamp: u64) -> Result<Applied, ErrorCode> {
        match op {
            MetadataOp::CreateStream { name, options } => self.create_stream(name, options, (op_number, timestamp)),
            MetadataOp::UpdateStream { stream, name } => {
                let stream_id = self.stream_id(stream)?;
                if self.streams.values().any(|s| &s.name == name && s.id != stream_id) {
                    return Err(ErrorCode::StreamNameAlreadyExists);
                }
                self.streams.get_mut(&stream_id).unwrap().name = name.clone();
                Ok(Applied::StreamUpdated { stream_id })
            }
            MetadataOp::DeleteStream { stream } => {
                let stream_id = self.stream_id(stream)?;
                self.streams.remove(&stream_id);
                Ok(Applied::StreamDeleted { stream_id })
            }
            MetadataOp::PurgeStream { stream } => Ok(Applied::StreamPurged { stream_id: self.stream_id(stream)? }),
            MetadataOp::CreateTopic { stream, partitions_count, name, options } => {
                self.create_topic(stream, *partitions_count, name, options, (op_number, timestamp))
            }
            MetadataOp::UpdateTopic { topic, name, options } => self.update_topic(topic, name, options),
            MetadataOp::DeleteTopic(topic) => {
                let (stream_id, topic_id) = self.topic_ids(topic)?;
                self.streams.get_mut(&stream_id).unwrap().topics.remove(&topic_id);
                Ok(Applied::TopicDeleted { stream_id, topic_id })
            }
            MetadataOp::PurgeTopic(topic) => {
                let (stream_id, topic_id) = self.topic_ids(topic)?;
                Ok(Applied::TopicPurged { stream_id, topic_id })
            }
            MetadataOp::CreatePartitions { topic, count } => self.create_partitions(topic, *count, timestamp),
            MetadataOp::DeletePartitions { topic, count } => self.delete_partitions(topic, *count, timestamp),
            MetadataOp::CreateConsumerGroup { topic, name } => self.create_group(topic, name),
            MetadataOp::DeleteConsumerGroup { topic, group } => self.delete_group(topic, group),
            MetadataOp::UpdateUser { user, username, status } => self.update_user(user, username, *status),
            MetadataOp::UpdateResource { target, reset, options } => self.update_resource(target, reset, options),
            MetadataOp::DeleteUser { user } => self.delete_user(user),
            MetadataOp::UpdatePermissions { user, permissions } => self.update_permissions(user, permissions),
            MetadataOp::InsertUser { username, password_hash, status, permissions } => {
                self.insert_user(username, password_hash, *status, permissions, timestamp)
            }
            MetadataOp::SetPassword { user_id, password_hash } => self.set_password(*user_id, password_hash),
            MetadataOp::InsertToken { user_id, name, token_hash, expiry_at } => {
                self.insert_token(*user_id, name, token_hash, *expiry_at)
            }
            MetadataOp::RemoveToken { user_id, name } => self.remove_token(*user_id, name),
            MetadataOp::JoinGroup { group, member } => self.join_group(*group, *member, timestamp),
            MetadataOp::LeaveGroup { group, client } => self.leave_group(*group, *client, timestamp),
            MetadataOp::DropMembers { node, boot, connection } => {
                Ok(self.drop_members(*node, *boot, *connection, timestamp))
            }
            MetadataOp::SettleGroup { group, synced, timeout_us } => {
                self.settle_group(*group, *synced, *timeout_us, timestamp)
            }
        }
    }

    fn create_stream(
        &mut self,
        name: &str,
        options: &[u8],
        (op_number, timestamp): (u64, u64),
    ) -> Result<Applied, ErrorCode> {
        if self.streams.values().any(|s| s.name == name) {
            return Err(ErrorCode::StreamNameAlreadyExists);
        }
        crate::stream_options::stored_envelope(options)?;
        let stream_id = lowest_free(&self.streams, MAX_STREAMS).ok_or(ErrorCode::TooManyStreams)?;
        let stream = Stream {
            id: stream_id,
            name: name.to_owned(),
            created_at: timestamp,
            created_op: op_number,
            options: options.to_vec(),
            topics: BTreeMap::new(),
        };
        self.streams.insert(stream_id, stream);
        Ok(Applied::StreamCreated { stream_id })
    }

    fn create_topic(
        &mut self,
        stream: &Identifier,
        partitions_count: u32,
        name: &str,
        options: &[u8],
        (op_number, timestamp): (u64, u64),
    ) -> Result<Applied, ErrorCode> {
        let stream_id = self.stream_id(stream)?;
        let topics = &self.streams[&stream_id].topics;
        if topics.values().any(|t| t.name == name) {
            return Err(ErrorCode::TopicNameAlreadyExists);
        }
        if partitions_count > MAX_PARTITIONS_PER_REQUEST {
            return Err(ErrorCode::InvalidPartitionsCount);
        }
        let topic_id = lowest_free(topics, MAX_TOPICS_PER_STREAM).ok_or(ErrorCode::TooManyTopics)?;
        let mut settings = TopicSettings::default();
        settings.apply_options(options, false)?;
        let topic = Topic {
            id: topic_id,
            name: name.to_owned(),
            created_at: timestamp,
            created_op: op_number,
            settings,
            partitions: vec![timestamp; partitions_count as usize],
            consumer_groups: BTreeMap::new(),
            next_group_id: 0,
            memberships: BTreeMap::new(),
        };
        self.streams.get_mut(&stream_id).unwrap().topics.insert(topic_id, topic);
        Ok(Applied::TopicCreated { stream_id, topic_id })
    }

    fn update_topic(&mut self, topic: &TopicRef, name: &str, options: &[u8]) -> Result<Applied, ErrorCode> {
        let (stream_id, topic_id) = self.topic_ids(topic)?;
        let stream = &self.streams[&stream_id];
        if stream.topics.values().any(|t| t.name == name && t.id != topic_id) {
            return Err(ErrorCode::TopicNameAlreadyExists);
        }
        let mut settings = stream.topics[&topic_id].settings.clone();
        settings.apply_options(options, true)?;
        let topic = self.topic_mut(topic)?;
        topic.name = name.to_owned();
        topic.settings = settings;
        Ok(Applied::TopicUpdated { stream_id, topic_id })
    }

    fn create_partitions(&mut self, topic_ref: &TopicRef, count: u32, timestamp: u64) -> Result<Applied, ErrorCode> {
        let (stream_id, topic_id) = self.topic_ids(topic_ref)?;
        if count == 0 || count > MAX_PARTITIONS_PER_REQUEST {
            return Err(ErrorCode::InvalidPartitionsCount);
        }
        let topic = self.topic_mut(topic_ref)?;
        let first = topic.partitions.len() as u32;
        if first + count > MAX_PARTITIONS_PER_TOPIC {
            return Err(ErrorCode::TooManyPartitions);
        }
        topic.partitions.extend(std::iter::repeat_n(timestamp, count as usize));
        self.rebalance_groups(stream_id, topic_id, timestamp);
        Ok(Applied::PartitionsCreated { stream_id, topic_id, first, count })
    }

    fn delete_partitions(&mut self, topic_ref: &TopicRef, count: u32, timestamp: u64) -> Result<Applied, ErrorCode> {
        let (stream_id, topic_id) = self.topic_ids(topic_ref)?;
        let topic = self.topic_mut(topic_ref)?;
        let existing = topic.partitions.len() as u32;
        if count == 0 || count > MAX_PARTITIONS_PER_REQUEST || count > existing {
            return Err(ErrorCode::InvalidPartitionsCount);
        }
        topic.partitions.truncate((existing - count) as usize);
        self.rebalance_groups(stream_id, topic_id, timestamp);
        Ok(Applied::PartitionsDeleted { stream_id, topic_id, first: existing - count, count })
    }
}

#[cfg(test)]
mod tests;
