//! The shard's side of its partition group: opening it (the cluster's wiring does, once the
//! shard's partitions are open), the messages from its peers, its ticks, and its role.

use rill_domain::vsr::Message;

use super::Shard;
use crate::partition_group::PartitionGroup;
use crate::ports::{Env, ReplicaNetwork};
use crate::replication::{JournalError, Membership};

impl<E: Env> Shard<E> {
    /// Opens this shard's replica of its partition group from `<data>/groups/<shard>/`;
    /// from then on its partitions are owned through the group. A restarted replica replays
    /// its committed sends into the partitions, which must be open already. `seed` must
    /// differ per process start.
    pub async fn open_group(
        &self,
        membership: Membership,
        network: Box<dyn ReplicaNetwork>,
        seed: u64,
    ) -> Result<(), JournalError> {
        if self.group.get().is_some() {
            return Ok(());
        }
        let group = PartitionGroup::open(&self.partitions, membership, network, seed).await?;
        let _ = self.group.set(group);
        Ok(())
    }

    /// A message from a peer's replica of this shard's group.
    pub async fn on_group_message(&self, message: Message) {
        if let Some(group) = self.group.get() {
            group.on_message(&self.partitions, message).await;
        }
    }

    /// One tick of the group's replica (every `TICK_MS`).
    pub async fn group_tick(&self) {
        if let Some(group) = self.group.get() {
            group.tick(&self.partitions).await;
        }
    }

    /// The group's view and primary, and whether it runs normally, as last published (none
    /// without a group).
    pub fn group_role(&self) -> Option<(u32, u8, bool)> {
        self.group.get()?.role(&self.partitions)
    }
}
