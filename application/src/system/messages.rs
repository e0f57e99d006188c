//! Partition use cases: send, poll, consumer offsets, flush and segment deletion.

use rill_domain::batch;
use rill_domain::error::ErrorCode;
use rill_domain::identifier::Identifier;
use rill_domain::polling::{self, PartitionCursor, PollingStrategy};
use rill_domain::wire::command::{Consumer, Partitioning, PollRequest, TopicRef};
use rill_domain::wire::response;

use super::{System, fatal};
use crate::partition::ConsumerKey;
use crate::ports::Env;

/// A string consumer id is keyed by XXH32 of its name, as upstream does.
fn consumer_key(consumer: &Consumer) -> ConsumerKey {
    let id = |identifier: &Identifier| match identifier {
        Identifier::Numeric(id) => *id,
        Identifier::Name(name) => xxhash_rust::xxh32::xxh32(name.as_bytes(), 0),
    };
    match consumer {
        Consumer::Single(identifier) => ConsumerKey::Consumer(id(identifier)),
        Consumer::Group(identifier) => ConsumerKey::Group(id(identifier)),
    }
}

impl<E: Env> System<E> {
    fn partitions_count(&self, topic: &TopicRef) -> Result<(u32, u32, u32), ErrorCode> {
        let metadata = self.metadata.borrow();
        let (stream_id, topic_id) = metadata.topic_ids(topic)?;
        let count = metadata.topic_by_ids(stream_id, topic_id).map_or(0, |t| t.partitions.len() as u32);
        Ok((stream_id, topic_id, count))
    }

    fn choose_partition(&self, topic: &TopicRef, partitioning: &Partitioning) -> Result<u32, ErrorCode> {
        let (stream_id, topic_id, count) = self.partitions_count(topic)?;
        if count == 0 {
            return Err(ErrorCode::NoPartitions);
        }
        Ok(match partitioning {
            Partitioning::PartitionId(partition_id) => *partition_id,
            Partitioning::MessagesKey(key) => xxhash_rust::xxh32::xxh32(key, 0) % count,
            Partitioning::Balanced => {
                let mut cursors = self.balanced.borrow_mut();
                let cursor = cursors.entry((stream_id, topic_id)).or_insert(0);
                let chosen = *cursor % count;
                *cursor = cursor.wrapping_add(1);
                chosen
            }
        })
    }

    /// Validates, stamps and appends one batch; replies with the send confirmation.
    pub async fn send_messages(
        &self,
        topic: &TopicRef,
        partitioning: &Partitioning,
        messages_count: u32,
        bytes: &[u8],
    ) -> Result<Vec<u8>, ErrorCode> {
        let partition_id = self.choose_partition(topic, partitioning)?;
        let (stream_id, topic_id, partition) = self.partition(topic, partition_id)?;
        batch::validate(bytes, messages_count)?;
        let mut log = partition.log.lock().await;
        if partition.deleted.get() {
            return Err(ErrorCode::PartitionNotFound);
        }
        let base_offset = match log.append(&self.storage, bytes.to_vec(), self.now_us()).await {
            Ok(base_offset) => base_offset,
            Err(error) => fatal(&format!("cannot write partition {stream_id}/{topic_id}/{partition_id}: {error}")),
        };
        partition.refresh(&log);
        let mut out = Vec::new();
        response::send_confirmation(&mut out, stream_id, topic_id, partition_id, base_offset);
        Ok(out)
    }

    pub async fn poll_messages(&self, request: &PollRequest) -> Result<Vec<u8>, ErrorCode> {
        let partition_id = request.partition_id.unwrap_or(0);
        let (_, _, partition) = self.partition(&request.topic, partition_id)?;
        let key = consumer_key(&request.consumer);
        let log = partition.log.lock().await;
        let cursor = PartitionCursor {
            first_offset: log.first_offset(),
            next_offset: log.next_offset(),
            stored_offset: log.offsets.get(key),
        };
        let start = match request.strategy {
            PollingStrategy::Timestamp(timestamp) if request.count > 0 => log.offset_at_timestamp(timestamp),
            strategy => polling::start_offset(strategy, request.count, cursor),
        };
        let mut out = Vec::new();
        response::poll_prefix(&mut out, partition_id, log.current_offset(), 0);
        let Some(start) = start else { return Ok(out) };
        let read = log.read(start, request.count, &mut out).await.map_err(|error| {
            tracing::error!(%error, "poll read failed");
            ErrorCode::IoError
        })?;
        out[12..16].copy_from_slice(&read.to_le_bytes());
        let fsync = log.settings.consumer_offset_fsync;
        drop(log);
        if request.auto_commit && read > 0 {
            self.store_offset(&partition, key, start + read as u64 - 1, fsync).await?;
        }
        Ok(out)
    }

    async fn store_offset(
        &self,
        partition: &super::Partition<E::Storage>,
        key: ConsumerKey,
        offset: u64,
        fsync: bool,
    ) -> Result<(), ErrorCode> {
        let mut log = partition.log.lock().await;
        log.offsets.store(&self.storage, key, offset, fsync).await.map_err(|error| {
            tracing::error!(%error, "storing a consumer offset failed");
            ErrorCode::IoError
        })
    }

    /// `[partition_id][current_offset][stored_offset]`, or empty when nothing is stored.
    pub async fn get_consumer_offset(
        &self,
        consumer: &Consumer,
        topic: &TopicRef,
        partition_id: Option<u32>,
    ) -> Result<Vec<u8>, ErrorCode> {
        let partition_id = partition_id.unwrap_or(0);
        let (_, _, partition) = self.partition(topic, partition_id)?;
        let log = partition.log.lock().await;
        let mut out = Vec::new();
        if let Some(stored) = log.offsets.get(consumer_key(consumer)) {
            out.extend_from_slice(&partition_id.to_le_bytes());
            out.extend_from_slice(&log.current_offset().to_le_bytes());
            out.extend_from_slice(&stored.to_le_bytes());
        }
        Ok(out)
    }

    pub async fn store_consumer_offset(
        &self,
        consumer: &Consumer,
        topic: &TopicRef,
        partition_id: Option<u32>,
        offset: u64,
    ) -> Result<Vec<u8>, ErrorCode> {
        let (_, _, partition) = self.partition(topic, partition_id.unwrap_or(0))?;
        let fsync = partition.log.lock().await.settings.consumer_offset_fsync;
        self.store_offset(&partition, consumer_key(consumer), offset, fsync).await?;
        Ok(0u32.to_le_bytes().to_vec())
    }

    pub async fn delete_consumer_offset(
        &self,
        consumer: &Consumer,
        topic: &TopicRef,
        partition_id: Option<u32>,
    ) -> Result<Vec<u8>, ErrorCode> {
        let (_, _, partition) = self.partition(topic, partition_id.unwrap_or(0))?;
        let mut log = partition.log.lock().await;
        match log.offsets.delete(&self.storage, consumer_key(consumer)).await {
            Ok(true) => Ok(0u32.to_le_bytes().to_vec()),
            Ok(false) => Err(ErrorCode::ConsumerOffsetNotFound),
            Err(error) => {
                tracing::error!(%error, "deleting a consumer offset failed");
                Err(ErrorCode::IoError)
            }
        }
    }

    pub async fn flush_unsaved_buffer(
        &self,
        topic: &TopicRef,
        partition_id: u32,
        fsync: bool,
    ) -> Result<Vec<u8>, ErrorCode> {
        let (stream_id, topic_id, partition) = self.partition(topic, partition_id)?;
        let mut log = partition.log.lock().await;
        if let Err(error) = log.flush(&self.storage, fsync).await {
            fatal(&format!("cannot flush partition {stream_id}/{topic_id}/{partition_id}: {error}"));
        }
        partition.refresh(&log);
        Ok(Vec::new())
    }

    /// Deletes the oldest sealed segments of one partition.
    pub async fn delete_segments(
        &self,
        topic: &TopicRef,
        partition_id: u32,
        segments_count: u32,
    ) -> Result<Vec<u8>, ErrorCode> {
        let (_, _, partition) = self.partition(topic, partition_id)?;
        let mut log = partition.log.lock().await;
        log.delete_segments(&self.storage, segments_count).await.map_err(|error| {
            tracing::error!(%error, "deleting segments failed");
            ErrorCode::IoError
        })?;
        partition.refresh(&log);
        Ok(Vec::new())
    }
}
