//! Partitions holding messages their group has no record of: written outside the group (by
//! a node run without `replicate_partitions`, or on another shard under an earlier placement
//! rule). The group's state would number such a partition's next send from 0, and a replica
//! whose log is past it would take the send for one it stored before and drop it,
//! acknowledged; so such a copy is proposed to the group first (`adopt.rs`), and sends to it
//! here wait until an adoption commits. Nothing stored is touched.

use std::collections::BTreeSet;

use rill_domain::wire::codes::operation;
use rill_domain::{Namespace, partition_group};

use super::core::{GroupCore, Reach, op_partition};
use crate::partition::PartitionLog;
use crate::partitions::{Partition, label};
use crate::ports::Env;

impl<E: Env> GroupCore<E> {
    /// Halts the group when one of its partitions holds messages the group's state has no
    /// record of. Sends in the journal above the applied state count as a record too: a
    /// restart applies them once their commit is known again, and they may be in the
    /// partition already (a recreated partition's first sends may follow the last
    /// checkpoint, which had no record of it).
    pub async fn note_unrecorded_partitions(&mut self, reach: &Reach<'_, E>) {
        let in_log = self.journaled_sends();
        for (namespace, partition) in reach.store.owned_partitions() {
            let log = partition.log.lock().await;
            self.note_if_unrecorded(reach, &in_log, namespace, &log);
        }
    }

    /// A partition opened after its group, before it is served: the journal's resets and
    /// the messages it holds checked as at the group's opening, and its offset files to be
    /// made what the state says.
    pub async fn check_late_partition(
        &mut self,
        reach: &Reach<'_, E>,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
    ) {
        let resets: Vec<(u64, u64)> =
            self.journaled(operation::RESET_PARTITION, rill_domain::partition_group::parse_reset_body);
        let wanted = resets.into_iter().filter(|(key, _)| *key == namespace.packed()).map(|(_, inc)| inc).max();
        if let (Some(wanted), Some(copy)) = (wanted, self.copies.get_mut(&namespace)) {
            copy.wanted = copy.wanted.max(wanted);
        }
        let in_log = self.journaled_sends();
        let log = partition.log.lock().await;
        self.note_if_unrecorded(reach, &in_log, namespace, &log);
        // Offsets the group committed while it was not open here, or that a checkpoint
        // installed meanwhile carried, are made in its files once nothing waits (a state
        // installed while the partition could not be opened would otherwise leave its
        // offset files without the stores the state held, for good).
        self.unsynced_offsets.insert(namespace);
    }

    /// The partitions with a send in the group's journal above what its replica applied.
    fn journaled_sends(&self) -> BTreeSet<Namespace> {
        let mut sends: BTreeSet<Namespace> = self.journaled(operation::SEND_MESSAGES, op_partition);
        sends.extend(self.journaled::<_, Vec<_>>(partition_group::SEND_MESSAGES_ONCE, op_partition));
        sends
    }

    /// Notes the partition for adoption when it holds messages and neither the group's state
    /// nor its journal (`in_log`) records any. A copy older than its incarnation holds the old
    /// incarnation's messages, which the state forgot at the reset and the copy's emptying
    /// (failed, a disk error) removes.
    fn note_if_unrecorded(
        &mut self,
        reach: &Reach<'_, E>,
        in_log: &BTreeSet<Namespace>,
        namespace: Namespace,
        log: &PartitionLog<E::Storage>,
    ) {
        let recorded = in_log.contains(&namespace)
            || self.replica.state_machine().state().next_offset(namespace.packed()).is_some();
        let held = log.next_offset();
        if recorded || held == 0 || self.behind(namespace) {
            return;
        }
        if self.unadopted.insert(namespace) {
            tracing::info!(
                partition = %label(namespace),
                directory = %log.dir().display(),
                messages = held,
                group = reach.group(),
                "a partition holds messages its partition group has no record of (written by a single \
                 node, or outside the group): proposing them to the group"
            );
        }
    }
}
