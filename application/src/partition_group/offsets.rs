//! Stored consumer offsets kept what the group's state says: after a checkpoint installed
//! from a peer, and for the partitions a committed offset op could not change here (a disk
//! error), tried again every second once nothing committed waits.

use rill_domain::Namespace;

use super::core::{GroupCore, Reach, consumer_key_of};
use crate::partition::ConsumerKey;
use crate::partitions::{Partition, label};
use crate::ports::Env;

impl<E: Env> GroupCore<E> {
    /// Makes every offset file of the group's partitions what a state a checkpoint just
    /// installed says (stores the state has, deletes of those it lacks), except in a copy of
    /// a newer incarnation than the state's: the state's offsets are the old one's.
    pub async fn adopt_group_offsets(&mut self, reach: &Reach<'_, E>) {
        for (namespace, partition) in reach.store.owned_partitions() {
            if let Err(error) = self.adopt_offsets(reach, namespace, &partition).await {
                tracing::error!(%error, partition = %label(namespace), "cannot store the consumer offsets a group checkpoint holds");
                self.unsynced_offsets.insert(namespace);
            }
        }
    }

    /// Makes the offset files of the partitions a committed op could not change here what
    /// the group's state says; called once nothing committed waits, when the state holds
    /// exactly what this node applied.
    pub async fn sync_offsets(&mut self, reach: &Reach<'_, E>) {
        let unsynced: Vec<Namespace> = self.unsynced_offsets.iter().copied().collect();
        for namespace in unsynced {
            // A copy older than its incarnation takes the state's offsets once emptied: the
            // emptying would remove them.
            let synced = match reach.store.owned(namespace) {
                Ok(_) if self.behind(namespace) || self.unadopted.contains(&namespace) => false,
                Ok(partition) => self.adopt_offsets(reach, namespace, &partition).await.is_ok(),
                Err(_) => true,
            };
            if synced {
                self.unsynced_offsets.remove(&namespace);
            }
        }
    }

    /// Makes one partition's offset files what the group's state says (stores the state has,
    /// deletes of those it lacks), except in a copy of a newer incarnation than the state's.
    async fn adopt_offsets(
        &mut self,
        reach: &Reach<'_, E>,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
    ) -> std::io::Result<()> {
        let state = self.replica.state_machine().state();
        let offsets = state.consumer_offsets(namespace.packed());
        let wanted: Vec<(ConsumerKey, u64)> = offsets.map(|(key, offset)| (consumer_key_of(key), offset)).collect();
        let incarnation = state.incarnation(namespace.packed());
        let mut log = partition.log.lock().await;
        if partition.closed() || self.copy(namespace).incarnation > incarnation {
            return Ok(());
        }
        let storage = &reach.store.storage;
        let local = log.offsets.all();
        let mut result = Ok(());
        for (key, _) in local.iter().filter(|(key, _)| !wanted.iter().any(|(k, _)| k == key)) {
            result = result.and(log.offsets.delete(storage, *key).await.map(drop));
        }
        for (key, offset) in wanted.iter().filter(|wanted| !local.contains(wanted)) {
            let fsync = log.settings.consumer_offset_fsync;
            result = result.and(log.offsets.store(storage, *key, *offset, fsync).await);
        }
        partition.publish_offsets(&log);
        result
    }
}
