//! Partition operations through the group: sends, offset changes, segment deletions and
//! purges become ops of the group, answered once they commit; polls and offset reads are
//! served from this node's copy, which serves nothing while it lags its incarnation; and a
//! peer's request for stored batches is answered from it.

use rill_domain::Namespace;
use rill_domain::answer::{Answer, SendConfirmation};
use rill_domain::batch::BatchHeader;
use rill_domain::error::ErrorCode;
use rill_domain::partition_group;
use rill_domain::polling::PollingStrategy;
use rill_domain::retention::{RetentionPolicy, segments_to_delete};
use rill_domain::vsr::{ENTRY_BODY_MAX, Message};
use rill_domain::wire::codes::operation;

use super::apply::{Target, group_partition};
use super::core::consumer_kind;
use super::group::PartitionGroup;
use crate::memory_pool::PoolSlice;
use crate::partition::{ConsumerKey, PollLimit, REPLY_ROOM};
use crate::partitions::{AutoCommit, Partition, PartitionStore, io_failure, label};
use crate::ports::{BusReply, Env, PartitionOp, Reply, ShardReply};

impl<E: Env> PartitionGroup<E> {
    /// Runs an operation on a replicated partition this shard owns. Lifecycle operations
    /// are the owner's.
    pub(crate) async fn execute(&self, store: &PartitionStore<E>, namespace: Namespace, op: PartitionOp) -> BusReply {
        match op {
            PartitionOp::Send { messages_count: _, batch, stream_id, topic_id } => {
                let partition = store.owned(namespace)?;
                if partition.closed() {
                    return Err(ErrorCode::PartitionNotFound);
                }
                store.refuse_below_floor()?;
                self.replicate_send(store, (namespace, &partition), batch, (stream_id, topic_id))
                    .await
                    .map(Reply::Answer)
            }
            PartitionOp::StoreOffset { key, offset } => {
                store.owned(namespace)?;
                self.ensure_adopted(store, namespace).await?;
                self.replicate_offset(store, namespace, key, Some(offset)).await.map(Reply::Answer)
            }
            PartitionOp::DeleteOffset { key } => {
                store.owned(namespace)?;
                self.ensure_adopted(store, namespace).await?;
                self.replicate_offset(store, namespace, key, None).await.map(Reply::Answer)
            }
            PartitionOp::DeleteSegments { count } => {
                self.ensure_adopted(store, namespace).await?;
                self.delete_segments(store, namespace, count).await
            }
            PartitionOp::Purge { incarnation } => {
                let partition = store.owned(namespace)?;
                self.ensure_adopted(store, namespace).await?;
                let reach = self.reach(store);
                let noted = self.core.lock().await.note_purge(&reach, namespace, &partition, incarnation).await;
                noted.map_err(io_failure("recording a purge"))?;
                self.replicate_reset(store, namespace, incarnation).await.map(Reply::Answer)
            }
            PartitionOp::Poll { key, strategy, limit, auto_commit } => {
                self.poll(store, namespace, (key, strategy, limit), auto_commit).await
            }
            PartitionOp::GetOffset { key } => {
                let behind = self.behind(namespace).await;
                store.get_offset(namespace, key, behind).await
            }
            flush @ PartitionOp::Flush { .. } => store.execute_local(namespace, flush).await,
            PartitionOp::Open { .. } | PartitionOp::Remove => unreachable!("lifecycle operations are the owner's"),
        }
    }

    /// A poll of this node's copy; an auto-commit is replicated like any store, and a
    /// damaged batch asked of the peers.
    async fn poll(
        &self,
        store: &PartitionStore<E>,
        namespace: Namespace,
        (key, strategy, limit): (ConsumerKey, PollingStrategy, PollLimit),
        auto_commit: bool,
    ) -> BusReply {
        let behind = self.behind(namespace).await;
        let commit = if auto_commit { AutoCommit::Returned } else { AutoCommit::Off };
        let mut damaged = None;
        let polled = store.poll(namespace, key, strategy, limit, commit, behind, &mut damaged).await;
        if let Some(damaged) = &damaged {
            self.repair(store, namespace, damaged).await;
        }
        let (reply, last) = polled?;
        if let Some(last) = last {
            self.replicate_offset(store, namespace, key, Some(last)).await?;
        }
        Ok(reply)
    }

    /// A DELETE_SEGMENTS through the group: the offset below which segments go is read with
    /// the copy's incarnation, so a purge that commits first makes the group refuse it (the
    /// offset names the old messages). Counted as the log splits once what it holds is
    /// written.
    async fn delete_segments(&self, store: &PartitionStore<E>, namespace: Namespace, count: u32) -> BusReply {
        let partition = store.owned(namespace)?;
        let (below, incarnation) = {
            let core = self.core.lock().await;
            let mut log = partition.log.lock().await;
            log.flush(&store.storage, false).await.map_err(io_failure("writing before a deletion"))?;
            (log.start_after_oldest(count), core.copy(namespace).incarnation)
        };
        let body = partition_group::delete_segments_body(namespace.packed(), below, incarnation);
        self.submit(store, operation::DELETE_SEGMENTS, body).await.map(|_| Answer::Nothing.into())
    }

    /// Retention of a replicated partition: only the group's primary decides, from its own
    /// copy and clock, and asks the group to delete the sealed segments below where its copy
    /// would then start (a `DELETE_SEGMENTS` op), so every replica deletes the same messages
    /// when it applies it. Backups leave their copies to that op.
    pub(crate) async fn retain(
        &self,
        store: &PartitionStore<E>,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
        policy: RetentionPolicy,
    ) {
        let (below, incarnation) = {
            let core = self.core.lock().await;
            let primary = core.replica.primary_index(core.replica.view());
            let normal = core.replica.status() == rill_domain::vsr::Status::Normal;
            if !normal || primary != self.membership.replica_id {
                return;
            }
            let log = partition.log.lock().await;
            if partition.closed() {
                return;
            }
            let (sealed, active_bytes) = log.sealed_for_retention();
            match segments_to_delete(&sealed, active_bytes, store.now_us(), policy) {
                0 => return,
                count => (log.start_after_oldest(count as u32), core.copy(namespace).incarnation),
            }
        };
        let body = partition_group::delete_segments_body(namespace.packed(), below, incarnation);
        if let Err(code) = self.submit(store, operation::DELETE_SEGMENTS, body).await {
            tracing::warn!(%code, partition = %label(namespace), "retention's deletion did not commit; the next pass asks again");
        }
    }

    /// Before a send or an offset change: the group's state must know this partition's
    /// creation, or it still holds the offsets of a deleted partition with the same ids, and
    /// the last purge this node applied, or that purge's reset never committed.
    async fn ensure_incarnation(&self, store: &PartitionStore<E>, namespace: Namespace) -> Result<(), ErrorCode> {
        store.owned(namespace)?;
        let (known, copy) = {
            let core = self.core.lock().await;
            (core.replica.state_machine().state().incarnation(namespace.packed()), core.copy(namespace))
        };
        // The group knows a newer incarnation than this copy: a purge or a creation this
        // node has not applied yet. Writing now would put this node's stale view into it.
        if known > copy.incarnation {
            return Err(ErrorCode::TransientNotAccepted);
        }
        if known >= copy.wanted {
            return Ok(());
        }
        let body = partition_group::reset_body(namespace.packed(), copy.wanted);
        self.submit(store, operation::RESET_PARTITION, body).await.map(drop)
    }

    /// A validated send to a partition this shard owns, through its group; answered with
    /// the offset the group assigned once it commits.
    async fn replicate_send(
        &self,
        store: &PartitionStore<E>,
        (namespace, partition): (Namespace, &Partition<E::Storage>),
        batch: PoolSlice,
        (stream_id, topic_id): (u32, u32),
    ) -> ShardReply {
        if partition_group::SEND_ONCE_PREFIX + batch.len() > ENTRY_BODY_MAX {
            return Err(ErrorCode::TooBigMessagePayload);
        }
        let producer = rill_domain::batch::producer(&batch)?;
        self.ensure_adopted(store, namespace).await?;
        self.ensure_incarnation(store, namespace).await?;
        let count = BatchHeader::read(&batch).message_count;
        // A topic that deduplicates, or a producer's batch, goes as a once-only send: the
        // group's state drops the duplicates and recognises the producer's retries, on every
        // replica alike and across failovers.
        let settings = {
            let log = partition.log.lock().await;
            let dedup = log.settings.deduplication.map(|window| (window.max_entries as u32, window.expiry_us));
            partition_group::OnceSettings { dedup, producer_expiry_us: log.settings.producer_expiry_us }
        };
        let (operation, body) = match settings.dedup.is_some() || producer.is_some() {
            true => {
                let body = partition_group::send_once_body(namespace.packed(), count, settings, &batch);
                (partition_group::SEND_MESSAGES_ONCE, body)
            }
            false => (operation::SEND_MESSAGES, partition_group::send_body(namespace.packed(), count, &batch)),
        };
        drop(batch);
        let base_offset = self.submit(store, operation, body).await?;
        let base_offset = base_offset.ok_or(ErrorCode::InvalidMessagesCount)?;
        let partition_id = namespace.partition_id();
        Ok(Answer::Sent(SendConfirmation { stream_id, topic_id, partition_id, base_offset }))
    }

    /// A consumer offset store (`Some`) or delete through the group, answered once it commits.
    async fn replicate_offset(
        &self,
        store: &PartitionStore<E>,
        namespace: Namespace,
        key: ConsumerKey,
        offset: Option<u64>,
    ) -> ShardReply {
        self.ensure_incarnation(store, namespace).await?;
        let (operation, body) = match offset {
            Some(offset) => (
                operation::STORE_CONSUMER_OFFSET,
                partition_group::store_offset_body(namespace.packed(), consumer_kind(key), offset),
            ),
            None => (
                operation::DELETE_CONSUMER_OFFSET,
                partition_group::delete_offset_body(namespace.packed(), consumer_kind(key)),
            ),
        };
        self.submit(store, operation, body).await?;
        Ok(Answer::Done)
    }

    /// A purge of a replicated partition: a reset to the purge's incarnation, answered once
    /// it commits (every replica empties the partition when it applies it).
    async fn replicate_reset(&self, store: &PartitionStore<E>, namespace: Namespace, incarnation: u64) -> ShardReply {
        // Another node's reset for the same purge committed already (the usual case for all
        // but the first node to apply the purge): nothing to wait for.
        let known = self.core.lock().await.replica.state_machine().state().incarnation(namespace.packed());
        if known < incarnation {
            let body = partition_group::reset_body(namespace.packed(), incarnation);
            self.submit(store, operation::RESET_PARTITION, body).await?;
        }
        Ok(Answer::Nothing)
    }

    /// A peer asks for stored batches of a partition in an incarnation: whole batches from
    /// `from` on, up to a poll's byte budget, or none when this node has none there or its
    /// copy is in another incarnation (one side has not applied a purge or a recreation
    /// yet: the asker tries again, or another peer). The last batch is never cut at
    /// `until`: the asker stores what it gets as it is, and a batch cut short there would
    /// leave its log with other batch boundaries than the group's, and the rest of that
    /// batch's messages fitting nowhere.
    pub(super) async fn serve_batches(
        &self,
        store: &PartitionStore<E>,
        to: u8,
        (key, incarnation): (u64, u64),
        (from, until): (u64, u64),
    ) {
        let membership = self.membership;
        if to >= membership.replica_count || to == membership.replica_id {
            return;
        }
        let (mut batches, mut log_start) = (Vec::new(), 0);
        if let Target::Open(namespace, partition) = group_partition(&self.reach(store), key) {
            let copy_incarnation = self.core.lock().await.copy(namespace).incarnation;
            let plan = {
                let log = partition.log.lock().await;
                // Whole batches only: one cut at `until` could not be stored as it is.
                let count = if until > from { log.whole_batches_through(from, until - 1) } else { 0 };
                let same = copy_incarnation == incarnation && !partition.closed();
                if same {
                    log_start = log.first_offset();
                }
                (same && from >= log.first_offset() && count > 0)
                    .then(|| log.plan_poll(from, PollLimit::messages(count), store.shared.pool))
            };
            if let Some(plan) = plan {
                match plan.read().await {
                    Ok(polled) => batches = polled.frame[REPLY_ROOM..].to_vec(),
                    Err(error) => {
                        tracing::warn!(%error, partition = %label(namespace), "cannot read batches a peer asked for")
                    }
                }
            }
        }
        let message = Message::Batches {
            replica: membership.replica_id,
            partition: key,
            incarnation,
            from_offset: from,
            log_start,
            batches,
        };
        self.network.send(to, message);
    }
}
