//! A partition group's health as `/metrics` shows it (docs/operations.md, "Metrics"): the
//! shard that drives the group publishes its view, primary, status, commit number, whether
//! it halted, and how many of this node's copies lag their peers, once a tick.

use std::sync::atomic::Ordering::Relaxed;

use rill_domain::vsr::Status;

use super::Shard;
use super::group::PartitionGroup;
use crate::ports::Env;

impl<E: Env> Shard<E> {
    pub(super) fn publish_group_health(&self, group: &PartitionGroup<E>) {
        let Some(gauges) = self.shared.telemetry.groups.get(usize::from(self.shard_id)) else { return };
        // Before the replica is borrowed: whether a copy lags reads the group's state.
        let lagging = {
            let gaps = group.gaps.borrow();
            let owned = self.owned_partitions().into_iter();
            owned
                .filter(|(namespace, partition)| {
                    gaps.contains_key(namespace) || self.copy_behind(*namespace, partition)
                })
                .count()
        };
        gauges.lagging_copies.store(lagging as u32, Relaxed);
        gauges.halted.store(group.halted.get().is_some(), Relaxed);
        let replica = group.replication.replica.borrow();
        gauges.view.store(replica.view(), Relaxed);
        gauges.primary.store(u32::from(replica.primary_index(replica.view())), Relaxed);
        gauges.normal.store(replica.status() == Status::Normal, Relaxed);
        gauges.commit.store(replica.commit(), Relaxed);
        gauges.open.store(true, Relaxed);
    }
}
