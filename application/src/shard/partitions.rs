//! Routing partition operations to their owner: a partition is served only by its owning
//! shard (the Murmur3 rule), whose owner runs the operation; other shards forward over the
//! bus and wait for the reply.

use std::sync::atomic::Ordering;

use rill_domain::Namespace;

use super::Shard;
use crate::partition::PartitionSettings;
use crate::ports::{BusReply, Env, MetadataRead, PartitionOp, ShardBus, ShardRequest};

impl<E: Env> Shard<E> {
    /// Runs `op` on the partition's owner: here, or over the bus. With `direct` (a send on a
    /// plaintext TCP connection), an owner on another shard writes the reply to the client's
    /// socket itself, so the reply does not wait for this shard to wake and write it
    /// (docs/shards-and-bus.md).
    pub(super) async fn route_partition(
        &self,
        namespace: Namespace,
        op: PartitionOp,
        direct: Option<crate::ports::DirectReply>,
    ) -> BusReply {
        let owner = self.shared.partitions.owner(namespace);
        if owner == self.shard_id {
            return self.execute_partition(namespace, op).await;
        }
        self.shared.telemetry.bus.forwarded.fetch_add(1, Ordering::Relaxed);
        let request = match direct {
            Some(direct) => ShardRequest::SendReplying { namespace, op, direct },
            None => ShardRequest::Partition { namespace, op },
        };
        self.bus.call(owner, request).await
    }

    /// Executes one operation on a partition this shard owns, through its owner.
    pub(super) async fn execute_partition(&self, namespace: Namespace, op: PartitionOp) -> BusReply {
        self.owner().execute(namespace, op).await
    }

    /// Opens the partitions whose opening failed, as the metadata lists them now; one it no
    /// longer lists (or lists as a newer creation) is forgotten, or removed again if that
    /// happened while it opened.
    pub(super) async fn open_unopened(&self) {
        let listed = |namespace: Namespace, created_at: u64| -> Option<PartitionSettings> {
            self.metadata.read(|metadata| {
                let topic = metadata.topic_by_ids(namespace.stream_id(), namespace.topic_id())?;
                let listed_at = *topic.partitions.get(namespace.partition_id() as usize)?;
                (listed_at == created_at).then(|| self.partition_settings(&topic.settings))
            })
        };
        let owner = self.owner();
        for (namespace, (fresh, created_at)) in self.partitions.unopened() {
            let Some(settings) = listed(namespace, created_at) else {
                self.partitions.forget_unopened(namespace);
                continue;
            };
            let opened = owner.open(namespace, settings, fresh, created_at).await.is_ok();
            if opened && listed(namespace, created_at).is_none() {
                // Deleted while it opened.
                owner.remove(namespace).await;
            }
        }
    }
}
