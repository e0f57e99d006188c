//! Partitions written outside their group brought into it (docs/vsr.md, "Partition
//! groups"): a copy holding messages the group has no record of (a single node's data
//! directory, a cluster's that did not replicate partitions, a partition that moved shard
//! under an earlier placement rule) is proposed to the group as it stands, from this node
//! once a second and before any send to it here. The first proposal to commit becomes the
//! partition's record; replicas without a copy fetch its batches from a peer as for any gap.
//! A copy that differs from the record (a send that committed first, another node's
//! proposal that won with other messages) halts its group until an operator moves it out:
//! serving it would put other messages under the group's offsets.

use rill_domain::Namespace;
use rill_domain::error::ErrorCode;
use rill_domain::partition_group::{ADOPT_PARTITION, Adoption};
use rill_domain::vsr::Entry;

use super::apply::commit_target;
use super::core::{GroupCore, Reach, consumer_kind};
use super::group::PartitionGroup;
use crate::partitions::{PartitionStore, label};
use crate::ports::Env;
use crate::replication::{Halt, Membership};

impl<E: Env> PartitionGroup<E> {
    /// Proposes every copy of this shard that holds unrecorded messages, and reports the
    /// empty copies of unrecorded partitions that predate the group (once a second).
    pub(crate) async fn adopt_unrecorded(&self, store: &PartitionStore<E>) {
        let proposals: Vec<Namespace> = {
            let core = self.core.lock().await;
            let owned = store.owned_partitions().into_iter().map(|(namespace, _)| namespace);
            let to_report: Vec<Namespace> =
                owned.filter(|ns| core.awaits_reports(*ns) && !core.reported_empty.contains(ns)).collect();
            core.unadopted.iter().copied().chain(to_report).collect()
        };
        for namespace in proposals {
            if self.propose_adoption(store, namespace).await.is_ok() {
                self.core.lock().await.reported_empty.insert(namespace);
            }
        }
    }

    /// Before an op on `namespace` here: its copy is proposed first when the group has no
    /// record of its messages (or, empty, while the group waits for every replica's
    /// report), and the op waits (refused as not accepted) until the group records it.
    pub(super) async fn ensure_adopted(
        &self,
        store: &PartitionStore<E>,
        namespace: Namespace,
    ) -> Result<(), ErrorCode> {
        let waits = |core: &GroupCore<E>| core.unadopted.contains(&namespace) || core.awaits_reports(namespace);
        if !waits(&*self.core.lock().await) {
            return Ok(());
        }
        self.propose_adoption(store, namespace).await?;
        match waits(&*self.core.lock().await) {
            true => Err(ErrorCode::TransientNotAccepted),
            false => Ok(()),
        }
    }

    /// Submits this copy as it stands as its partition's record (an empty one as a report).
    async fn propose_adoption(&self, store: &PartitionStore<E>, namespace: Namespace) -> Result<(), ErrorCode> {
        let partition = store.owned(namespace)?;
        let incarnation = self.core.lock().await.copy(namespace).incarnation;
        let Membership { replica_id, replica_count } = self.membership;
        let adoption = {
            let log = partition.log.lock().await;
            Adoption {
                partition: namespace.packed(),
                incarnation,
                next_offset: log.next_offset(),
                log_start: log.first_offset(),
                last_timestamp: log.last_timestamp(),
                replica: replica_id,
                replicas: replica_count,
                offsets: log.offsets.all().into_iter().map(|(key, offset)| (consumer_kind(key), offset)).collect(),
            }
        };
        self.submit(store, ADOPT_PARTITION, adoption.encode()).await.map(drop)
    }
}

impl<E: Env> GroupCore<E> {
    /// Whether sends to `namespace` wait for every replica's report: the group has no
    /// record of it and it predates this node's group, so another node may hold messages
    /// of it that it has not proposed yet.
    pub(super) fn awaits_reports(&self, namespace: Namespace) -> bool {
        let predates = self.born_at > 0 && self.copy(namespace).incarnation < self.born_at;
        predates && !self.replica.state_machine().state().records(namespace.packed())
    }

    /// A committed adoption: the copy here stays when it is the adopted one or empty (its
    /// batches then come as for a gap), and halts the group when it holds other messages.
    /// False while the partition is not open here yet.
    pub(super) async fn apply_adoption(&mut self, reach: &Reach<'_, E>, entry: &Entry, adopted: bool) -> bool {
        let Ok(adoption) = Adoption::decode(&entry.body) else { return true };
        let (namespace, partition) = match commit_target(reach, adoption.partition) {
            Ok(found) => found,
            Err(done) => return done,
        };
        let recorded = self.replica.state_machine().state().records(adoption.partition);
        // Another replica's report of its empty copy records nothing yet: this copy waits on.
        if !recorded || !self.unadopted.remove(&namespace) {
            return true;
        }
        let log = partition.log.lock().await;
        let held = (log.next_offset(), log.last_timestamp());
        drop(log);
        if adopted && held == (adoption.next_offset, adoption.last_timestamp) {
            tracing::info!(partition = %label(namespace), messages = held.0, group = reach.group(), "a partition written outside its group was brought into it");
            self.unsynced_offsets.insert(namespace);
            return true;
        }
        let why = match adopted {
            true => "its group adopted another node's copy of it",
            false => "its group already had a record of it (a send, or another node's copy, committed first)",
        };
        self.diverged(reach, namespace, why);
        true
    }

    /// Halts the group: this node's copy of `namespace` holds messages other than the ones
    /// the group records under the same offsets.
    pub(super) fn diverged(&mut self, reach: &Reach<'_, E>, namespace: Namespace, why: &str) {
        let directory = reach.store.partition_dir(namespace);
        tracing::error!(
            partition = %label(namespace),
            directory = %directory.display(),
            group = reach.group(),
            why,
            "this node's copy of a partition holds messages its group does not: the group refuses every \
             send here. To go on, stop the node and move this partition's directory out of the data \
             directory: it is fetched from the peers at the next start, and the messages moved out stay \
             where they were moved"
        );
        self.halted = Some(Halt::UntilRestart);
        self.fail_waiters(ErrorCode::IoError, |_| false);
    }
}
