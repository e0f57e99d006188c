//! Partition operations on the owning shard, and the routing that gets them there: a
//! partition is served only by its owner (the Murmur3 rule); other shards forward over the
//! bus and wait for the reply.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rill_domain::Namespace;
use rill_domain::error::ErrorCode;
use rill_domain::polling::{self, PartitionCursor, PollingStrategy};
use rill_domain::wire::response;

use super::{Partition, System, fatal};
use crate::partition::{ConsumerKey, PartitionLog, PartitionSettings};
use crate::ports::{Env, PartitionOp, ShardBus, ShardReply, ShardRequest, Storage};
use crate::shared::PartitionStats;

fn io_failure(what: &str) -> impl FnOnce(std::io::Error) -> ErrorCode + '_ {
    move |error| {
        tracing::error!(%error, "{what} failed");
        ErrorCode::IoError
    }
}

impl<E: Env> System<E> {
    /// Runs `op` on the partition's owner: here, or over the bus.
    pub(super) async fn route_partition(&self, namespace: Namespace, op: PartitionOp) -> ShardReply {
        let owner = self.shared.owner(namespace);
        if owner == self.shard_id {
            return self.execute_partition(namespace, op).await;
        }
        self.shared.bus.forwarded.fetch_add(1, Ordering::Relaxed);
        self.bus.call(owner, ShardRequest::Partition { namespace, op }).await
    }

    pub(super) async fn open_partition(
        &self,
        namespace: Namespace,
        settings: PartitionSettings,
        fresh: bool,
    ) -> std::io::Result<()> {
        let dir = self.partition_dir(namespace);
        if fresh {
            // A new partition must not inherit files of a deleted one with the same ids.
            self.storage.remove_dir_all(&dir).await?;
        }
        let log = PartitionLog::open(&self.storage, &dir, namespace.partition_id(), settings).await?;
        let stats = Arc::new(PartitionStats::new(self.shard_id));
        let partition =
            Rc::new(Partition { log: async_lock::Mutex::new(log), stats: stats.clone(), closed: Default::default() });
        partition.refresh(&partition.log.try_lock().expect("a new partition is unlocked"));
        self.partitions.borrow_mut().insert(namespace, partition);
        self.shared.partitions.pin().insert(namespace, stats);
        Ok(())
    }

    fn owned(&self, namespace: Namespace) -> Result<Rc<Partition<E::Storage>>, ErrorCode> {
        self.partitions.borrow().get(&namespace).cloned().ok_or(ErrorCode::PartitionNotFound)
    }

    /// Executes one operation on a partition this shard owns.
    pub(super) async fn execute_partition(&self, namespace: Namespace, op: PartitionOp) -> ShardReply {
        match op {
            PartitionOp::Open { settings, fresh } => {
                return self
                    .open_partition(namespace, settings, fresh)
                    .await
                    .map(|()| Vec::new())
                    .map_err(io_failure("opening a partition"));
            }
            PartitionOp::Remove => return Ok(self.remove_partition(namespace).await),
            _ => {}
        }
        let partition = self.owned(namespace)?;
        let mut log = partition.log.lock().await;
        if partition.closed.get() {
            return Err(ErrorCode::PartitionNotFound);
        }
        let reply = self.execute_locked(namespace, &mut log, op).await;
        partition.refresh(&log);
        for buffer in log.take_spent() {
            self.shared.pool.release(buffer);
        }
        reply
    }

    async fn remove_partition(&self, namespace: Namespace) -> Vec<u8> {
        let removed = self.partitions.borrow_mut().remove(&namespace);
        self.shared.partitions.pin().remove(&namespace);
        if let Some(partition) = removed {
            partition.closed.set(true);
            // Wait for operations in flight on it to finish before its files go.
            drop(partition.log.lock().await);
        }
        Vec::new()
    }

    async fn execute_locked(
        &self,
        namespace: Namespace,
        log: &mut PartitionLog<E::Storage>,
        op: PartitionOp,
    ) -> ShardReply {
        let partition_id = namespace.partition_id();
        match op {
            PartitionOp::Send { messages_count: _, batch, stream_id, topic_id } => {
                let base_offset = match log.append(&self.storage, batch, self.now_us()).await {
                    Ok(base_offset) => base_offset,
                    Err(error) => {
                        fatal(&format!("cannot write partition {stream_id}/{topic_id}/{partition_id}: {error}"))
                    }
                };
                let mut out = Vec::new();
                response::send_confirmation(&mut out, stream_id, topic_id, partition_id, base_offset);
                Ok(out)
            }
            PartitionOp::Poll { key, strategy, count, auto_commit } => {
                self.poll(log, partition_id, key, strategy, count, auto_commit).await
            }
            PartitionOp::GetOffset { key } => {
                let mut out = Vec::new();
                if let Some(stored) = log.offsets.get(key) {
                    out.extend_from_slice(&partition_id.to_le_bytes());
                    out.extend_from_slice(&log.current_offset().to_le_bytes());
                    out.extend_from_slice(&stored.to_le_bytes());
                }
                Ok(out)
            }
            PartitionOp::StoreOffset { key, offset } => {
                let fsync = log.settings.consumer_offset_fsync;
                log.offsets.store(&self.storage, key, offset, fsync).await.map_err(io_failure("storing an offset"))?;
                Ok(0u32.to_le_bytes().to_vec())
            }
            PartitionOp::DeleteOffset { key } => match log.offsets.delete(&self.storage, key).await {
                Ok(true) => Ok(0u32.to_le_bytes().to_vec()),
                Ok(false) => Err(ErrorCode::ConsumerOffsetNotFound),
                Err(error) => Err(io_failure("deleting an offset")(error)),
            },
            PartitionOp::Flush { fsync } => match log.flush(&self.storage, fsync).await {
                Ok(()) => Ok(Vec::new()),
                Err(error) => fatal(&format!("cannot flush partition {partition_id}: {error}")),
            },
            PartitionOp::DeleteSegments { count } => {
                log.delete_segments(&self.storage, count).await.map_err(io_failure("deleting segments"))?;
                Ok(Vec::new())
            }
            PartitionOp::Purge => {
                log.purge(&self.storage).await.map_err(io_failure("purging a partition"))?;
                Ok(Vec::new())
            }
            PartitionOp::Open { .. } | PartitionOp::Remove => {
                unreachable!("lifecycle operations are handled before locking")
            }
        }
    }

    async fn poll(
        &self,
        log: &mut PartitionLog<E::Storage>,
        partition_id: u32,
        key: ConsumerKey,
        strategy: PollingStrategy,
        count: u32,
        auto_commit: bool,
    ) -> ShardReply {
        let cursor = PartitionCursor {
            first_offset: log.first_offset(),
            next_offset: log.next_offset(),
            stored_offset: log.offsets.get(key),
        };
        let start = match strategy {
            PollingStrategy::Timestamp(timestamp) if count > 0 => log.offset_at_timestamp(timestamp),
            strategy => polling::start_offset(strategy, count, cursor),
        };
        let mut out = Vec::new();
        response::poll_prefix(&mut out, partition_id, log.current_offset(), 0);
        let Some(start) = start else { return Ok(out) };
        let read = log.read(start, count, &mut out).await.map_err(io_failure("a poll read"))?;
        out[12..16].copy_from_slice(&read.to_le_bytes());
        if auto_commit && read > 0 {
            let fsync = log.settings.consumer_offset_fsync;
            log.offsets
                .store(&self.storage, key, start + read as u64 - 1, fsync)
                .await
                .map_err(io_failure("auto-commit"))?;
        }
        Ok(out)
    }
}
