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

use super::group::PartitionGroup;
use super::maintenance::namespace_label;
use super::{Partition, Shard};
use crate::ports::{Env, ShardReply};

impl<E: Env> Shard<E> {
    /// Before a send or an offset change: the group's state must know this partition's
    /// creation, or it still holds the offsets of a deleted partition with the same ids, and
    /// the last purge this node applied, or that purge's reset never committed.
    pub(super) async fn ensure_incarnation(
        &self,
        group: &PartitionGroup<E>,
        namespace: Namespace,
    ) -> Result<(), ErrorCode> {
        let partition = self.owned(namespace)?;
        let known = group.replica().state_machine().state().incarnation(namespace.packed());
        // The group knows a newer incarnation than this copy: a purge or a creation this
        // node has not applied yet. Writing now would put this node's stale view into it.
        if known > partition.incarnation.get() {
            return Err(ErrorCode::TransientNotAccepted);
        }
        let wanted = partition.wanted_incarnation.get();
        if known >= wanted {
            return Ok(());
        }
        self.submit(group, operation::RESET_PARTITION, partition_group::reset_body(namespace.packed(), wanted))
            .await
            .map(drop)
    }

    /// Whether this node's copy of a replicated partition is older than the incarnation the
    /// partition is in: a purge or a recreation this node's metadata applied, or its group
    /// committed, not made in the copy yet (it lags). Its messages and stored offsets are
    /// gone from the partition already, so reads here serve none of them meanwhile.
    pub(super) fn copy_behind(&self, namespace: Namespace, partition: &Partition<E::Storage>) -> bool {
        let Some(group) = self.group() else { return false };
        let known = group.replica().state_machine().state().incarnation(namespace.packed());
        known.max(partition.wanted_incarnation.get()) > partition.incarnation.get()
    }

    /// After a restart: a reset in the journal above what the replica applied is a purge or
    /// a recreation the metadata committed; until it commits here too, the copy it empties
    /// lags and serves nothing (seed 771 of the disk-fault runs: a node whose purge record
    /// could not be written restarted and served purged messages until its group caught up).
    pub(super) fn note_journaled_resets(&self, group: &PartitionGroup<E>) {
        for (key, incarnation) in Self::journaled_resets(group) {
            if let super::group::Target::Open(_, partition) = self.group_partition(key) {
                partition.wanted_incarnation.set(partition.wanted_incarnation.get().max(incarnation));
            }
        }
    }

    /// A partition opened after its group, before it is served (one created since, or one
    /// whose files could not be opened when the node started, a disk error): what the
    /// group's opening checks of the others, the journal's resets and messages written
    /// outside the group, for it, and its offset files to be made what the state says.
    pub(super) fn check_late_partition(
        &self,
        group: &PartitionGroup<E>,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
    ) {
        let resets = Self::journaled_resets(group).into_iter().filter(|(key, _)| *key == namespace.packed());
        for (_, incarnation) in resets {
            partition.wanted_incarnation.set(partition.wanted_incarnation.get().max(incarnation));
        }
        let log = partition.log.try_lock().expect("a partition not yet served is unlocked");
        self.refuse_if_unrecorded(group, &Self::journaled_sends(group), namespace, partition, &log);
        // Offsets the group committed while it was not open here, or that a checkpoint
        // installed meanwhile carried, are made in its files once nothing waits (seed 694
        // of the disk-restart runs: a state installed while the partition could not be
        // opened left its offset files without the stores the state held, for good).
        group.unsynced_offsets.borrow_mut().insert(namespace);
    }

    /// The resets (partition key, incarnation) in the group's journal above what its
    /// replica applied.
    fn journaled_resets(group: &PartitionGroup<E>) -> Vec<(u64, u64)> {
        Self::journaled(group, operation::RESET_PARTITION, partition_group::parse_reset_body)
    }

    /// A purge of a replicated partition: a reset to the purge's incarnation, answered once
    /// it commits (every replica empties the partition when it applies it).
    pub(super) async fn replicate_reset(
        &self,
        group: &PartitionGroup<E>,
        namespace: Namespace,
        incarnation: u64,
    ) -> ShardReply {
        // Another node's reset for the same purge committed already (the usual case for all
        // but the first node to apply the purge): nothing to wait for.
        let known = group.replica().state_machine().state().incarnation(namespace.packed());
        if known < incarnation {
            let body = partition_group::reset_body(namespace.packed(), incarnation);
            self.submit(group, operation::RESET_PARTITION, body).await?;
        }
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
        // Replayed from the journal after a restart, this copy is in that incarnation already.
        self.start_again(group, namespace, &partition, incarnation).await;
        true
    }

    /// Empties every copy here that is older than the incarnation the group's state names:
    /// after a checkpoint installed from a peer (a purge or recreation this node missed), so
    /// the gaps found next are filled with the new incarnation's batches only, and every
    /// second, for a copy whose emptying failed (a disk error) when its reset committed.
    pub(super) async fn adopt_incarnations(&self, group: &PartitionGroup<E>) {
        for (namespace, partition) in self.owned_partitions() {
            let incarnation = group.replica().state_machine().state().incarnation(namespace.packed());
            self.start_again(group, namespace, &partition, incarnation).await;
        }
    }

    /// Empties this node's copy of a partition into `incarnation`, unless it is in that one
    /// or a newer one already; whether it is now. Before a committed op of `incarnation` is
    /// made in a copy, false means the emptying failed (a disk error; tried again every
    /// second): the op would land among the old incarnation's messages and offsets, so it
    /// is not made there (the copy fetches it from a peer, or takes its offsets from the
    /// group's state, once emptied).
    pub(super) async fn start_again(
        &self,
        group: &PartitionGroup<E>,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
        incarnation: u64,
    ) -> bool {
        if incarnation <= partition.incarnation.get() {
            return true;
        }
        let mut log = partition.log.lock().await;
        if partition.closed.get() || incarnation <= partition.incarnation.get() {
            return incarnation <= partition.incarnation.get();
        }
        match self.purge_partition(namespace, &mut log, Some(incarnation)).await {
            Ok(()) => {
                tracing::info!(partition = %namespace_label(namespace), incarnation, "the partition group started this copy again (emptied)");
                partition.incarnation.set(incarnation)
            }
            // Tried again every second; logged once an incarnation, not every time.
            Err(error) if partition.failed_reset.replace(incarnation) != incarnation => {
                tracing::error!(%error, partition = %namespace_label(namespace), "cannot empty a partition its group started again: it serves nothing and takes no sends here until it can (tried again every second)")
            }
            Err(_) => {}
        }
        partition.refresh(&log);
        partition.publish_offsets(&log);
        group.gaps.borrow_mut().remove(&namespace);
        group.repairs.borrow_mut().retain(|(named, _), _| *named != namespace);
        incarnation <= partition.incarnation.get()
    }
}
