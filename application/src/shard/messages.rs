//! Partition use cases as a connection's shard sees them: resolve identifiers against the
//! committed metadata, choose the partition, validate, then route to the owning shard.

use rill_domain::Namespace;
use rill_domain::answer::{Answer, PollHead};
use rill_domain::batch;
use rill_domain::error::ErrorCode;
use rill_domain::identifier::Identifier;
use rill_domain::wire::command::{Consumer, Partitioning, PollRequest, TopicRef};

use super::Shard;
use crate::memory_pool::PoolSlice;
use crate::partition::ConsumerKey;
use crate::ports::{BusReply, Env, MetadataRead, PartitionOp};

/// A string consumer id is keyed by XXH32 of its name, as upstream does.
fn consumer_id(identifier: &Identifier) -> u32 {
    match identifier {
        Identifier::Numeric(id) => *id,
        Identifier::Name(name) => xxhash_rust::xxh32::xxh32(name.as_bytes(), 0),
    }
}

/// The partition id a poll reply carries to tell a group member to re-sync.
pub(super) const RESYNC_PARTITION: u32 = u32::MAX;

impl<E: Env> Shard<E> {
    /// Whose offset: a consumer by id (names hashed), or a consumer group resolved by id
    /// or name in the topic.
    pub(super) fn consumer_key(&self, consumer: &Consumer, topic: &TopicRef) -> Result<ConsumerKey, ErrorCode> {
        match consumer {
            Consumer::Single(identifier) => Ok(ConsumerKey::Consumer(consumer_id(identifier))),
            Consumer::Group(group) => Ok(ConsumerKey::Group(self.resolve_group(topic, group)?.group_id)),
        }
    }

    /// `(stream_id, topic_id, partitions_count)` of a topic.
    pub(crate) fn resolve_topic(&self, topic: &TopicRef) -> Result<(u32, u32, u32), ErrorCode> {
        self.metadata.read(|metadata| {
            let (stream_id, topic_id) = metadata.topic_ids(topic)?;
            let count = metadata.topic_by_ids(stream_id, topic_id).map_or(0, |t| t.partitions.len() as u32);
            Ok((stream_id, topic_id, count))
        })
    }

    /// The namespace of an existing partition.
    pub(crate) fn resolve_partition(&self, topic: &TopicRef, partition_id: u32) -> Result<Namespace, ErrorCode> {
        let (stream_id, topic_id, count) = self.resolve_topic(topic)?;
        if partition_id >= count {
            return Err(ErrorCode::PartitionNotFound);
        }
        Namespace::new(stream_id, topic_id, partition_id).ok_or(ErrorCode::PartitionNotFound)
    }

    /// The shard owning an existing partition.
    pub(crate) fn partition_owner(&self, topic: &TopicRef, partition_id: u32) -> Option<u16> {
        self.resolve_partition(topic, partition_id).ok().map(|namespace| self.shared.partitions.owner(namespace))
    }

    /// The shard a send with `partitioning` goes to, when it is one shard: always for an
    /// explicit partition or a key, for a balanced send only when the topic has one partition.
    pub(crate) fn send_owner(&self, topic: &TopicRef, partitioning: &Partitioning) -> Option<u16> {
        let (stream_id, topic_id, count) = self.resolve_topic(topic).ok()?;
        let partition_id = match partitioning {
            Partitioning::PartitionId(partition_id) => *partition_id,
            Partitioning::MessagesKey(key) => key_partition(key, count.max(1)),
            Partitioning::Balanced if count == 1 => 0,
            Partitioning::Balanced => return None,
        };
        let namespace = Namespace::new(stream_id, topic_id, partition_id).filter(|_| partition_id < count)?;
        Some(self.shared.partitions.owner(namespace))
    }

    fn choose_partition(
        &self,
        stream_id: u32,
        topic_id: u32,
        count: u32,
        partitioning: &Partitioning,
    ) -> Result<u32, ErrorCode> {
        if count == 0 {
            return Err(ErrorCode::NoPartitions);
        }
        Ok(match partitioning {
            Partitioning::PartitionId(partition_id) => *partition_id,
            Partitioning::MessagesKey(key) => key_partition(key, count),
            Partitioning::Balanced => {
                let mut cursors = self.balanced.borrow_mut();
                let cursor = cursors.entry((stream_id, topic_id)).or_insert(0);
                let chosen = *cursor % count;
                *cursor = cursor.wrapping_add(1);
                chosen
            }
        })
    }

    /// Validates one batch and appends it on the owning shard; replies with the confirmation.
    /// The batch is the range of the request frame it arrived in, and moves on as it is: to
    /// the owner, into its journal, to the segment write.
    pub async fn send_messages(
        &self,
        topic: &TopicRef,
        partitioning: &Partitioning,
        messages_count: u32,
        batch: PoolSlice,
        direct: Option<crate::ports::DirectReply>,
    ) -> BusReply {
        let (stream_id, topic_id, count) = self.resolve_topic(topic)?;
        let partition_id = self.choose_partition(stream_id, topic_id, count, partitioning)?;
        if partition_id >= count {
            return Err(ErrorCode::PartitionNotFound);
        }
        let namespace = Namespace::new(stream_id, topic_id, partition_id).ok_or(ErrorCode::PartitionNotFound)?;
        batch::validate(&batch, messages_count)?;
        // A producer counts its sequence per partition, so it must name the partition.
        if batch::producer(&batch)?.is_some() && !matches!(partitioning, Partitioning::PartitionId(_)) {
            return Err(ErrorCode::ProducerPartitionRequired);
        }
        let op = PartitionOp::Send { messages_count, batch, stream_id, topic_id };
        self.route_partition(namespace, op, direct).await
    }

    /// Polls one partition. A consumer-group poll is served only from a partition the
    /// caller's session owns in the group; otherwise the reply asks the member to re-sync.
    pub async fn poll_messages(&self, client: u128, request: &PollRequest) -> BusReply {
        if let Consumer::Group(group) = &request.consumer {
            let partition = request.partition_id.ok_or(ErrorCode::PartitionNotFound)?;
            let key = self.resolve_group(&request.topic, group)?;
            if !self.owns_group_partition(key, client, partition) {
                return Ok(Answer::EmptyPoll(PollHead { partition_id: RESYNC_PARTITION, ..PollHead::default() }).into());
            }
        }
        let namespace = self.resolve_partition(&request.topic, request.partition_id.unwrap_or(0))?;
        let max_bytes = request.deferred.map_or(0, |deferred| deferred.max_bytes);
        let op = PartitionOp::Poll {
            key: self.consumer_key(&request.consumer, &request.topic)?,
            strategy: request.strategy,
            limit: crate::partition::PollLimit::within(request.count, max_bytes),
            auto_commit: request.auto_commit,
        };
        self.route_partition(namespace, op, None).await
    }

    /// Runs an offset operation for `consumer` on its partition (None means partition 0).
    async fn offset_op(
        &self,
        consumer: &Consumer,
        topic: &TopicRef,
        partition_id: Option<u32>,
        op: impl FnOnce(ConsumerKey) -> PartitionOp,
    ) -> BusReply {
        let namespace = self.resolve_partition(topic, partition_id.unwrap_or(0))?;
        let key = self.consumer_key(consumer, topic)?;
        self.route_partition(namespace, op(key), None).await
    }

    /// `[partition_id][current_offset][stored_offset]`, or empty when nothing is stored.
    pub async fn get_consumer_offset(
        &self,
        consumer: &Consumer,
        topic: &TopicRef,
        partition_id: Option<u32>,
    ) -> BusReply {
        self.offset_op(consumer, topic, partition_id, |key| PartitionOp::GetOffset { key }).await
    }

    pub async fn store_consumer_offset(
        &self,
        consumer: &Consumer,
        topic: &TopicRef,
        partition_id: Option<u32>,
        offset: u64,
    ) -> BusReply {
        self.offset_op(consumer, topic, partition_id, |key| PartitionOp::StoreOffset { key, offset }).await
    }

    pub async fn delete_consumer_offset(
        &self,
        consumer: &Consumer,
        topic: &TopicRef,
        partition_id: Option<u32>,
    ) -> BusReply {
        self.offset_op(consumer, topic, partition_id, |key| PartitionOp::DeleteOffset { key }).await
    }

    pub async fn flush_unsaved_buffer(&self, topic: &TopicRef, partition_id: u32, fsync: bool) -> BusReply {
        let namespace = self.resolve_partition(topic, partition_id)?;
        self.route_partition(namespace, PartitionOp::Flush { fsync }, None).await
    }

    /// Deletes the oldest sealed segments of one partition.
    pub async fn delete_segments(&self, topic: &TopicRef, partition_id: u32, segments_count: u32) -> BusReply {
        let namespace = self.resolve_partition(topic, partition_id)?;
        self.route_partition(namespace, PartitionOp::DeleteSegments { count: segments_count }, None).await
    }
}

/// The partition a message key maps to, among `count` (at least one).
fn key_partition(key: &[u8], count: u32) -> u32 {
    xxhash_rust::xxh32::xxh32(key, 0) % count
}
