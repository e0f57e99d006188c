//! How a shard owns its partitions: one owner, two implementations. The local owner runs
//! every operation on this node; the replicated owner writes through the shard's partition
//! group (sends, offset changes, deletions and purges commit there first) and serves reads
//! from this node's copy. The shard picks one in one place (`Shard::owner`) and hands it
//! every partition operation.

use rill_domain::Namespace;
use rill_domain::answer::Answer;
use rill_domain::error::ErrorCode;
use rill_domain::retention::RetentionPolicy;

use super::maintenance::ScrubCursor;
use super::partition::Partition;
use super::store::PartitionStore;
use crate::partition::PartitionSettings;
use crate::partition_group::PartitionGroup;
use crate::ports::{BusReply, Env, PartitionOp};

/// The owner of a shard's partitions.
pub enum Owner<'a, E: Env> {
    /// A single node, or a cluster that replicates metadata only: every operation runs here.
    Local(&'a PartitionStore<E>),
    /// A cluster that replicates partitions: writes commit through the shard's group.
    Replicated(&'a PartitionStore<E>, &'a PartitionGroup<E>),
}

impl<'a, E: Env> Owner<'a, E> {
    pub fn store(&self) -> &'a PartitionStore<E> {
        match self {
            Owner::Local(store) | Owner::Replicated(store, _) => store,
        }
    }

    /// Executes one operation on a partition this shard owns.
    pub async fn execute(&self, namespace: Namespace, op: PartitionOp) -> BusReply {
        match (self, op) {
            (_, PartitionOp::Open { settings, fresh, created_at }) => self
                .open(namespace, settings, fresh, created_at)
                .await
                .map(|()| Answer::Nothing.into())
                .map_err(|_| ErrorCode::IoError),
            (_, PartitionOp::Remove) => {
                self.store().forget_unopened(namespace);
                self.remove(namespace).await;
                Ok(Answer::Nothing.into())
            }
            (Owner::Local(store), op) => store.execute_local(namespace, op).await,
            (Owner::Replicated(store, group), op) => group.execute(store, namespace, op).await,
        }
    }

    /// Opens a partition and serves it; a replicated one's copy is known to the group
    /// before anything can reach it.
    pub async fn open(
        &self,
        namespace: Namespace,
        settings: PartitionSettings,
        fresh: bool,
        created_at: u64,
    ) -> std::io::Result<()> {
        let store = self.store();
        let partition = store.open_partition(namespace, settings, fresh, created_at).await?;
        if let Owner::Replicated(store, group) = self {
            group.opened(store, namespace, &partition).await;
        }
        store.register(namespace, partition);
        Ok(())
    }

    /// Closes a removed partition; its files go with its directory next.
    pub async fn remove(&self, namespace: Namespace) {
        self.store().remove_partition(namespace).await;
        if let Owner::Replicated(_, group) = self {
            group.removed(namespace).await;
        }
    }

    /// One partition's retention: deleted here, or asked of the group by its primary.
    /// Returns the segments deleted here by the pass itself (a replicated partition's go
    /// when its group commits the deletion, on every replica at once).
    pub async fn retain(
        &self,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
        policy: RetentionPolicy,
    ) -> u32 {
        match self {
            Owner::Local(store) => store.retain(namespace, partition, policy).await,
            Owner::Replicated(store, group) => {
                group.retain(store, namespace, partition, policy).await;
                0
            }
        }
    }

    /// Verifies the next chunk of the sealed segments (`PartitionStore::scrub_step`); a
    /// replicated partition's damaged batches are asked of the peers.
    pub async fn scrub_step(&self, cursor: &mut ScrubCursor, max_bytes: usize) -> usize {
        let (bytes, damaged) = self.store().scrub_step(cursor, max_bytes).await;
        if let Owner::Replicated(store, group) = self {
            for (namespace, batch) in &damaged {
                group.repair(store, *namespace, batch).await;
            }
        }
        bytes
    }

    /// Retries the writes that failed (every second); a replicated owner also writes the
    /// purge records a disk error kept from being written.
    pub async fn retry_failed_writes(&self) {
        if let Owner::Replicated(store, group) = self {
            group.record_purges(store).await;
            group.adopt_unrecorded(store).await;
        }
        self.store().retry_failed_writes().await;
    }
}
