//! Partition operations run on the node itself: appends, polls, stored offsets, flushes,
//! segment deletions and purges, each under the partition's lock (a poll only to plan, and
//! again to report damage or auto-commit; its disk reads run without it). The single-node
//! owner runs every operation here; the replicated owner runs here what needs no commit
//! (polls, offset reads, flushes) and, through its group, the rest.

use std::sync::atomic::Ordering;

use rill_domain::Namespace;
use rill_domain::answer::{Answer, ConsumerOffset, PartitionContext, PollHead, SendConfirmation};
use rill_domain::constants::HEADER_SIZE;
use rill_domain::error::ErrorCode;
use rill_domain::polling::{self, PartitionCursor, PollingStrategy};
use rill_domain::producers::Admission;
use rill_domain::version::Dialect;
use rill_domain::wire::response;

use super::markers::{self, CREATED_AT_MARKER, RESET_MARKER};
use super::partition::{Partition, label};
use super::store::PartitionStore;
use crate::memory_pool::PoolSlice;
use crate::partition::{
    Admitted, Appended, ConsumerKey, POLL_PREFIX_SIZE, PartitionLog, PollLimit, Polled, REPLY_ROOM,
};
use crate::ports::{BusReply, Env, PartitionOp, Reply, ShardReply};

pub(crate) fn io_failure(what: &str) -> impl FnOnce(std::io::Error) -> ErrorCode + '_ {
    move |error| {
        tracing::error!(%error, "{what} failed");
        ErrorCode::IoError
    }
}

/// What a poll does with the offset of the last message it returns, when the client asked
/// for auto-commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AutoCommit {
    /// Nothing: the client did not ask.
    Off,
    /// Stored here, under the partition's lock, before the reply.
    Here,
    /// Handed back to the caller, which commits it through the partition's group.
    Returned,
}

/// A poll's reply, and the offset to commit when it was handed back (`AutoCommit::Returned`).
pub(crate) type PollOutcome = (Reply, Option<u64>);

impl<E: Env> PartitionStore<E> {
    /// Runs an operation on a partition open here, under its lock (a poll plans under it and
    /// reads after it). Lifecycle operations are the owner's.
    pub(crate) async fn execute_local(&self, namespace: Namespace, op: PartitionOp) -> BusReply {
        if let PartitionOp::Poll { key, strategy, limit, auto_commit } = op {
            let commit = if auto_commit { AutoCommit::Here } else { AutoCommit::Off };
            let mut damaged = None;
            return self
                .poll(namespace, key, strategy, limit, commit, false, &mut damaged)
                .await
                .map(|(reply, _)| reply);
        }
        let partition = self.owned(namespace)?;
        let mut log = partition.log.lock().await;
        if partition.closed() {
            return Err(ErrorCode::PartitionNotFound);
        }
        let offsets_change = matches!(
            op,
            PartitionOp::StoreOffset { .. } | PartitionOp::DeleteOffset { .. } | PartitionOp::Purge { .. }
        );
        let reply = self.execute_locked(namespace, &mut log, op, &partition).await;
        partition.refresh(&log);
        if offsets_change {
            partition.publish_offsets(&log);
        }
        reply.map(Reply::Answer)
    }

    async fn execute_locked(
        &self,
        namespace: Namespace,
        log: &mut PartitionLog<E::Storage>,
        op: PartitionOp,
        partition: &Partition<E::Storage>,
    ) -> ShardReply {
        let stats = &partition.stats;
        match op {
            PartitionOp::Send { messages_count: _, batch, stream_id, topic_id } => {
                let appended = self.append(namespace, log, batch).await?;
                stats.note_appended(appended.stored as u64);
                stats.appended_bytes.fetch_add(appended.bytes, Ordering::Relaxed);
                let (partition_id, base_offset) = (namespace.partition_id(), appended.base_offset);
                Ok(Answer::Sent(SendConfirmation { stream_id, topic_id, partition_id, base_offset }))
            }
            PartitionOp::GetOffset { key } => Ok(Self::offset_answer(namespace, log, key, false)),
            PartitionOp::StoreOffset { key, offset } => {
                let fsync = log.settings.consumer_offset_fsync;
                log.offsets.store(&self.storage, key, offset, fsync).await.map_err(io_failure("storing an offset"))?;
                Ok(Answer::Done)
            }
            PartitionOp::DeleteOffset { key } => match log.offsets.delete(&self.storage, key).await {
                Ok(true) => Ok(Answer::Done),
                Ok(false) => Err(ErrorCode::ConsumerOffsetNotFound),
                Err(error) => Err(io_failure("deleting an offset")(error)),
            },
            PartitionOp::Flush { fsync } => {
                let was_read_only = log.write_failure().is_some();
                let result = log.flush(&self.storage, fsync).await;
                self.note_write(namespace, was_read_only, log.write_failure().is_some(), result.as_ref().err());
                result.map(|()| Answer::Nothing).map_err(|_| ErrorCode::CannotSaveMessagesToSegment)
            }
            PartitionOp::DeleteSegments { count } => {
                let detached =
                    log.delete_segments(&self.storage, count).await.map_err(io_failure("deleting segments"))?;
                self.shared.telemetry.data.retention_segments.fetch_add(detached.segments as u64, Ordering::Relaxed);
                Ok(Answer::Nothing)
            }
            PartitionOp::Purge { incarnation } => {
                let dir = self.partition_dir(namespace);
                let purged = markers::read_marker(&self.storage, &dir.join(RESET_MARKER)).await;
                let created = markers::read_marker(&self.storage, &dir.join(CREATED_AT_MARKER)).await;
                // This copy went through this purge already, or was created after it (a topic
                // deleted and created again since): the purge is committed again by a
                // clustered node's metadata recovery, and what was stored since stays.
                if purged.max(created).is_some_and(|done| done >= incarnation) {
                    return Ok(Answer::Nothing);
                }
                let purged = self.purge_partition(namespace, log, Some(incarnation)).await;
                purged.map_err(io_failure("purging a partition"))?;
                Ok(Answer::Nothing)
            }
            PartitionOp::Open { .. } | PartitionOp::Remove | PartitionOp::Poll { .. } => {
                unreachable!("lifecycle operations are the owner's, polls are planned apart")
            }
        }
    }

    /// GET_CONSUMER_OFFSET on a partition open here; a copy that lags (`behind`) has nothing
    /// stored.
    pub(crate) async fn get_offset(&self, namespace: Namespace, key: ConsumerKey, behind: bool) -> BusReply {
        let partition = self.owned(namespace)?;
        let log = partition.log.lock().await;
        if partition.closed() {
            return Err(ErrorCode::PartitionNotFound);
        }
        Ok(Reply::Answer(Self::offset_answer(namespace, &log, key, behind)))
    }

    /// A stored consumer offset with where the partition stands; none when nothing is
    /// stored (or the copy lags, `behind`, and serves nothing).
    fn offset_answer(namespace: Namespace, log: &PartitionLog<E::Storage>, key: ConsumerKey, behind: bool) -> Answer {
        Answer::Offset(log.offsets.get(key).filter(|_| !behind).map(|stored_offset| ConsumerOffset {
            partition_id: namespace.partition_id(),
            current_offset: log.current_offset(),
            stored_offset,
        }))
    }

    /// A poll: planned under the partition's lock (the start offset, the batches to read,
    /// the journal's copied in), read after it; the lock is taken again only to report
    /// damage or to auto-commit. A copy that lags (`behind`) serves nothing. A damaged
    /// batch the reads stopped at is left in `damaged`, failed poll or not.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn poll(
        &self,
        namespace: Namespace,
        key: ConsumerKey,
        strategy: PollingStrategy,
        limit: PollLimit,
        commit: AutoCommit,
        behind: bool,
        damaged: &mut Option<crate::partition::DamagedBatch>,
    ) -> Result<PollOutcome, ErrorCode> {
        let partition = self.owned(namespace)?;
        let (start, current_offset, plan, log_end) = {
            let log = partition.log.lock().await;
            if partition.closed() {
                return Err(ErrorCode::PartitionNotFound);
            }
            let cursor = PartitionCursor {
                first_offset: log.first_offset(),
                next_offset: log.next_offset(),
                stored_offset: log.offsets.get(key),
            };
            let start = match strategy {
                PollingStrategy::Timestamp(timestamp) if limit.messages > 0 => log.offset_at_timestamp(timestamp),
                strategy => polling::start_offset(strategy, limit.messages, cursor),
            };
            if behind {
                (None, 0, None, cursor.next_offset)
            } else {
                let plan = start.map(|start| log.plan_poll(start, limit, self.shared.pool));
                (start, log.current_offset(), plan, cursor.next_offset)
            }
        };
        let polled = match plan {
            Some(plan) => plan.read().await.map_err(io_failure("a poll read"))?,
            None => {
                let mut frame = self.shared.pool.acquire(REPLY_ROOM);
                frame.truncate(REPLY_ROOM);
                Polled { frame: frame.whole(), messages: 0, damaged: None }
            }
        };
        damaged.clone_from(&polled.damaged);
        let returned = self.after_poll(namespace, &partition, &polled, start, key, commit).await?;
        let Polled { frame, messages, .. } = polled;
        let mut frame = self.open_sealed(namespace, frame)?;
        partition.stats.polled_messages.fetch_add(messages as u64, Ordering::Relaxed);
        partition.stats.polled_bytes.fetch_add(frame.len().saturating_sub(REPLY_ROOM) as u64, Ordering::Relaxed);
        let context = PartitionContext {
            incarnation: partition.stats.incarnation(),
            owner_generation: 0,
            metadata_op: self.shared.replica.commit(),
        };
        let mut prefix = Vec::with_capacity(POLL_PREFIX_SIZE);
        let head =
            PollHead { partition_id: namespace.partition_id(), current_offset, messages_count: messages, context };
        response::poll_head(Dialect::V12, &mut prefix, &head);
        frame[HEADER_SIZE..REPLY_ROOM].copy_from_slice(&prefix);
        crate::partition::note_resolved_start(&mut frame, start.unwrap_or(log_end));
        Ok((Reply::Frame(frame), returned))
    }

    /// Under the lock again after a poll's reads: reports a damaged batch (failing the poll
    /// when nothing came before it) and auto-commits; the offset to commit elsewhere when
    /// `commit` hands it back.
    async fn after_poll(
        &self,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
        polled: &Polled,
        start: Option<u64>,
        key: ConsumerKey,
        commit: AutoCommit,
    ) -> Result<Option<u64>, ErrorCode> {
        let committing = commit != AutoCommit::Off && polled.messages > 0;
        if polled.damaged.is_none() && !committing {
            return Ok(None);
        }
        let mut log = partition.log.lock().await;
        if let Some(damaged) = &polled.damaged {
            self.report_damaged(&mut log, namespace, damaged, "poll");
            if polled.messages == 0 {
                // Nothing before the damaged batch: the poll fails rather than skip it.
                self.shared.telemetry.data.damaged_reads.fetch_add(1, Ordering::Relaxed);
                return Err(ErrorCode::InvalidMessageChecksum);
            }
        }
        if !committing {
            return Ok(None);
        }
        let last = start.unwrap_or(0).max(log.first_offset()) + polled.messages as u64 - 1;
        if commit == AutoCommit::Returned {
            return Ok(Some(last));
        }
        let fsync = log.settings.consumer_offset_fsync;
        let stored = log.offsets.store(&self.storage, key, last, fsync).await;
        partition.publish_offsets(&log);
        stored.map_err(io_failure("auto-commit"))?;
        Ok(None)
    }

    /// Appends a sent batch on its owner, refused early while the data volume is below its
    /// free-space floor. A failed write answers an error (the batch is not acknowledged)
    /// and leaves the partition read-only until a write succeeds.
    async fn append(
        &self,
        namespace: Namespace,
        log: &mut PartitionLog<E::Storage>,
        batch: PoolSlice,
    ) -> Result<Appended, ErrorCode> {
        self.refuse_below_floor()?;
        let data = &self.shared.telemetry.data;
        let now_us = self.now_us();
        let admitted = log.admit_producer(&self.storage, &batch, now_us).await?;
        if let Some(Admitted { admission: Admission::Duplicate { base_offset }, count, .. }) = admitted {
            data.duplicates_dropped.fetch_add(u64::from(count), Ordering::Relaxed);
            return Ok(Appended { base_offset, stored: 0, duplicates: count, bytes: 0, flush_due: false });
        }
        let batch = self.seal(namespace, batch)?;
        let was_read_only = log.write_failure().is_some();
        let result = match self.flush_queue.running() {
            true => log.append_deferring(&self.storage, batch, now_us).await,
            false => log.append(&self.storage, batch, now_us).await,
        };
        self.note_write(namespace, was_read_only, log.write_failure().is_some(), result.as_ref().err());
        let appended = result.map_err(|_| {
            data.sends_refused.fetch_add(1, Ordering::Relaxed);
            ErrorCode::CannotSaveMessagesToSegment
        })?;
        let _ = data.disk_available.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |available| {
            Some(available.saturating_sub(appended.bytes))
        });
        if appended.duplicates > 0 {
            data.duplicates_dropped.fetch_add(appended.duplicates as u64, Ordering::Relaxed);
        }
        if appended.flush_due {
            self.flush_queue.push(namespace);
        }
        if let Some(admitted) = admitted {
            log.record_producer(admitted, appended.base_offset, now_us);
        }
        Ok(appended)
    }

    /// Logs a damaged batch the first time it is found, and counts it.
    pub(crate) fn report_damaged(
        &self,
        log: &mut PartitionLog<E::Storage>,
        namespace: Namespace,
        damaged: &crate::partition::DamagedBatch,
        found_by: &str,
    ) {
        if log.first_report(damaged) {
            self.shared.telemetry.data.damaged_batches.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                partition = %label(namespace),
                file = %damaged.file.display(),
                position = damaged.position,
                first_offset = damaged.first_offset,
                last_offset = damaged.last_offset,
                found_by,
                "stored batch fails its checksum; it is never served"
            );
        }
    }
}
