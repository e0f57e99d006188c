//! Protocol 0.12's partition routes: which history of a partition a client is working with
//! (its incarnation, see `PartitionStats::incarnation`) and which replica serves it. A
//! single node is the primary of every partition; the route's metadata op is the commit
//! the answer was read at, so a client never takes it for older than what it has seen.

use rill_domain::Namespace;
use rill_domain::answer::{Answer, PartitionContext, PartitionRoute};
use rill_domain::error::ErrorCode;
use rill_domain::wire::command::{Command, Partitioning, TopicRef};

use crate::ports::{Env, ShardReply};
use crate::shard::Shard;

impl<E: Env> Shard<E> {
    /// GET_PARTITION_ROUTE: the partition's incarnation and this node as its primary.
    pub(crate) fn partition_route(&self, topic: &TopicRef, partition_id: u32) -> ShardReply {
        let (stream_id, topic_id, partitions_count) = self.resolve_topic(topic)?;
        let namespace = Namespace::new(stream_id, topic_id, partition_id)
            .filter(|_| partition_id < partitions_count)
            .ok_or(ErrorCode::PartitionNotFound)?;
        self.require_primary().map_err(|_| ErrorCode::NotPrimary)?;
        let context = self.partition_context(namespace);
        Ok(Answer::Route(PartitionRoute {
            incarnation: context.incarnation,
            metadata_op: context.metadata_op,
            view: self.shared.replica.role().view,
            partitions_count,
            primary_replica: self.shared.config.membership.replica_id,
        }))
    }

    /// The context a reply about `namespace` carries: its incarnation as its owner
    /// published it (zero while no shard serves it) and the metadata commit.
    pub(crate) fn partition_context(&self, namespace: Namespace) -> PartitionContext {
        let incarnation = self.shared.partitions.stats(namespace).map_or(0, |stats| stats.incarnation());
        PartitionContext { incarnation, owner_generation: 0, metadata_op: self.commit() }
    }

    /// A 0.12 partition request routed to another history of its partition than the one
    /// served (the partition was deleted and created again, or purged, since the client
    /// read its route) is refused with HistoryUnavailable; the client reads the route again.
    /// Zero names no history (a request made without a route).
    pub(crate) fn check_incarnation(&self, incarnation: u64, command: &Command<'_>) -> Result<(), ErrorCode> {
        if incarnation == 0 {
            return Ok(());
        }
        let (topic, partition_id) = match command {
            Command::SendMessages { topic, partitioning: Partitioning::PartitionId(id), .. } => (topic, *id),
            Command::PollMessages(request) => match request.partition_id {
                Some(id) => (&request.topic, id),
                None => return Ok(()),
            },
            Command::GetConsumerOffset { topic, partition_id: Some(id), .. }
            | Command::StoreConsumerOffset { topic, partition_id: Some(id), .. }
            | Command::DeleteConsumerOffset { topic, partition_id: Some(id), .. } => (topic, *id),
            _ => return Ok(()),
        };
        let Ok(namespace) = self.resolve_partition(topic, partition_id) else { return Ok(()) };
        match self.partition_context(namespace).incarnation {
            served if served == incarnation => Ok(()),
            _ => Err(ErrorCode::HistoryUnavailable),
        }
    }
}
