//! Partition incarnations in a partition group (docs/vsr.md, "Partition groups"). The
//! group's state outlives a partition: a purge empties it, and a deleted partition's ids may
//! name a new one later. Both start the partition again through the group, as a
//! `RESET_PARTITION` op carrying the incarnation, the metadata timestamp of the creation or
//! the purge, which is the same on every node: every node submits it when it applies that
//! metadata (or, for a creation, before its first send or offset change there), the first to
//! commit empties the partition on every replica, in the group's order, and the rest change
//! nothing.

use rill_domain::Namespace;
use rill_domain::error::ErrorCode;
use rill_domain::partition_group;
use rill_domain::vsr::Entry;
use rill_domain::wire::codes::operation;

use super::Shard;
use super::group::PartitionGroup;
use super::maintenance::namespace_label;
use crate::ports::{Env, ShardReply};

impl<E: Env> Shard<E> {
    /// Before a send or an offset change: the group's state must know this partition's
    /// creation, or it still holds the offsets of a deleted partition with the same ids.
    pub(super) async fn ensure_incarnation(
        &self,
        group: &PartitionGroup<E>,
        namespace: Namespace,
    ) -> Result<(), ErrorCode> {
        let created_at = self.owned(namespace)?.created_at;
        let known = group.replica().state_machine().state().incarnation(namespace.packed());
        if known >= created_at {
            return Ok(());
        }
        self.submit(group, operation::RESET_PARTITION, partition_group::reset_body(namespace.packed(), created_at))
            .await
            .map(drop)
    }

    /// A purge of a replicated partition: a reset to the purge's incarnation, answered once
    /// it commits (every replica empties the partition when it applies it).
    pub(super) async fn replicate_reset(
        &self,
        group: &PartitionGroup<E>,
        namespace: Namespace,
        incarnation: u64,
    ) -> ShardReply {
        self.submit(group, operation::RESET_PARTITION, partition_group::reset_body(namespace.packed(), incarnation))
            .await?;
        Ok(Vec::new())
    }

    /// A committed reset that started the partition again: its log and stored offsets are
    /// emptied here too, and a gap it had is gone with them. False while it is not open.
    pub(super) async fn apply_reset(&self, group: &PartitionGroup<E>, entry: &Entry) -> bool {
        let Some((key, incarnation)) = partition_group::parse_reset_body(&entry.body) else { return true };
        let (namespace, partition) = match self.commit_target(key) {
            Ok(found) => found,
            Err(done) => return done,
        };
        let mut log = partition.log.lock().await;
        // Replayed from the journal after a restart: this copy is in that incarnation already.
        if partition.closed.get() || incarnation <= partition.incarnation.get() {
            return true;
        }
        match self.purge_partition(namespace, &mut log, Some(incarnation)).await {
            Ok(()) => partition.incarnation.set(incarnation),
            Err(error) => {
                tracing::error!(%error, partition = %namespace_label(namespace), "cannot empty a partition its group reset")
            }
        }
        partition.refresh(&log);
        partition.publish_offsets(&log);
        group.gaps.borrow_mut().remove(&namespace);
        true
    }
}
