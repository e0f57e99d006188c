//! Metadata mutations. Any shard accepts them; shard 0 alone commits them through the
//! replica (journal with fsync, a quorum in a cluster), publishes them to every shard's
//! reader, then opens, purges or removes partitions on their owners. The client is
//! answered after all of it.

use std::sync::atomic::Ordering;

use rill_domain::Namespace;
use rill_domain::answer::{Answer, Created, UserDetails};
use rill_domain::error::ErrorCode;
use rill_domain::metadata::{Applied, Metadata};
use rill_domain::wire::command::MetadataOp;

use super::{Shard, queries};
use crate::ports::{Env, PartitionOp, ShardBus, ShardReply, ShardRequest, Storage};

impl<E: Env> Shard<E> {
    /// Runs one metadata operation from a client; answers `Done`, or the created
    /// resource's details.
    pub async fn execute_metadata(&self, operation: u8, body: &[u8], op: &MetadataOp<'_>) -> ShardReply {
        // A topic cannot have more replicas than the cluster has nodes.
        if let MetadataOp::CreateTopic { options, .. } = op
            && let Ok(Some(factor)) = rill_domain::topic_options::replication_factor(options)
            && factor > u32::from(self.shared.config.membership.replica_count).max(1)
        {
            return Err(ErrorCode::InvalidReplicationFactor);
        }
        let sealed_create;
        let body = match op {
            MetadataOp::CreateStream { name, options } => {
                sealed_create = self.stream_create_body(name, options)?;
                sealed_create.as_deref().unwrap_or(body)
            }
            _ => body,
        };
        if self.writer.is_none() {
            self.shared.telemetry.bus.metadata_forwarded.fetch_add(1, Ordering::Relaxed);
            let request = ShardRequest::Metadata { operation, body: body.to_vec() };
            return self.bus.call(0, request).await?.into_answer();
        }
        self.commit_metadata(operation, body).await
    }

    /// A stream create's body as it is committed, when it differs from the client's: with
    /// the server key, the stream's key (the client's, or one drawn here) goes in sealed in
    /// its envelope, never in clear; without it, a key asked for is refused (4106).
    fn stream_create_body(&self, name: &str, options: &[u8]) -> Result<Option<Vec<u8>>, ErrorCode> {
        let requested = rill_domain::stream_options::requested_key(options)?;
        let Some(server_key) = &self.shared.config.encryption else {
            return match requested {
                Some(_) => Err(ErrorCode::StreamEncryptionUnavailable),
                None => Ok(None),
            };
        };
        let block = crate::stream_keys::KeyWrapper::new(server_key).create_block(requested)?;
        let create = rill_domain::wire::command::Command::Metadata(MetadataOp::CreateStream {
            name: name.to_owned(),
            options: &block,
        });
        Ok(Some(create.encode()?.body))
    }

    /// Commits a metadata operation on shard 0.
    pub(super) async fn commit_metadata(&self, operation: u8, body: &[u8]) -> ShardReply {
        let Some(writer) = &self.writer else {
            return Err(ErrorCode::InvalidCommand);
        };
        // Committed, published and mirrored in storage by the time it returns.
        let applied = self.replicate(operation, body, self.now_us()).await?.result?;
        let created = writer.metadata(|metadata| self.created(metadata, operation, applied));
        Ok(created.map_or(Answer::Done, Answer::Created))
    }

    /// The details a create answers with.
    fn created(&self, metadata: &Metadata, operation: u8, applied: Applied) -> Option<Created> {
        match applied {
            Applied::StreamCreated { stream_id } => {
                queries::stream_details(metadata, &self.shared, stream_id).map(Created::Stream)
            }
            Applied::TopicCreated { stream_id, topic_id } => {
                queries::topic_details(metadata, &self.shared, stream_id, topic_id).map(Created::Topic)
            }
            Applied::GroupCreated { stream_id, topic_id, group_id } => {
                let key = rill_domain::consumer_group::GroupKey { stream_id, topic_id, group_id };
                queries::group_details(metadata, key).map(Created::Group)
            }
            Applied::UserChanged { user_id } if operation == rill_domain::wire::codes::operation::INSERT_USER => {
                metadata.user(user_id).map(|user| Created::User(UserDetails::of(user)))
            }
            _ => None,
        }
    }

    /// Removes a deleted stream's, topic's or partition's directory, unless a partition in
    /// it was created after the deletion (`timestamp`): then the deletion is one a
    /// clustered node's metadata recovery commits again, and the creation that follows it
    /// in the log opens those files again.
    async fn remove_unless_recreated(&self, dir: &std::path::Path, timestamp: u64) -> std::io::Result<()> {
        if crate::partitions::markers::created_after(&self.storage, dir, timestamp).await {
            tracing::info!(dir = %dir.display(), "a deletion committed again after a restart keeps files created since");
            return Ok(());
        }
        self.storage.remove_dir_all(dir).await
    }

    /// Mirrors an applied operation in partition storage, on the owning shards.
    pub(super) async fn reflect(&self, applied: &Applied, timestamp: u64) -> std::io::Result<()> {
        let every = |stream_id: u32, topic_id: Option<u32>| {
            self.namespaces(|ns| ns.stream_id() == stream_id && topic_id.is_none_or(|t| ns.topic_id() == t))
        };
        match *applied {
            Applied::StreamCreated { stream_id } => {
                self.storage.create_dir_all(&self.partitions.stream_dir(stream_id).join("topics")).await
            }
            Applied::StreamDeleted { stream_id } => {
                self.on_owners(every(stream_id, None), || PartitionOp::Remove).await?;
                self.remove_unless_recreated(&self.partitions.stream_dir(stream_id), timestamp).await
            }
            Applied::StreamPurged { stream_id } => {
                self.on_owners(every(stream_id, None), || PartitionOp::Purge { incarnation: timestamp }).await
            }
            Applied::TopicCreated { stream_id, topic_id } => {
                let count = self
                    .writer_metadata(|m| m.topic_by_ids(stream_id, topic_id).map_or(0, |t| t.partitions.len() as u32));
                self.open_new(stream_id, topic_id, 0..count).await
            }
            Applied::TopicDeleted { stream_id, topic_id } => {
                self.on_owners(every(stream_id, Some(topic_id)), || PartitionOp::Remove).await?;
                self.remove_unless_recreated(&self.partitions.topic_dir(stream_id, topic_id), timestamp).await
            }
            Applied::TopicPurged { stream_id, topic_id } => {
                self.on_owners(every(stream_id, Some(topic_id)), || PartitionOp::Purge { incarnation: timestamp }).await
            }
            Applied::PartitionsCreated { stream_id, topic_id, first, count } => {
                self.open_new(stream_id, topic_id, first..first + count).await
            }
            Applied::PartitionsDeleted { stream_id, topic_id, first, count } => {
                let range = first..first + count;
                let doomed = self.namespaces(|ns| {
                    ns.stream_id() == stream_id && ns.topic_id() == topic_id && range.contains(&ns.partition_id())
                });
                self.on_owners(doomed.clone(), || PartitionOp::Remove).await?;
                for namespace in doomed {
                    self.remove_unless_recreated(&self.partitions.partition_dir(namespace), timestamp).await?;
                }
                Ok(())
            }
            Applied::StreamUpdated { .. }
            | Applied::TopicUpdated { .. }
            | Applied::UserChanged { .. }
            | Applied::GroupCreated { .. }
            | Applied::GroupDeleted { .. }
            | Applied::MembershipChanged => Ok(()),
        }
    }

    fn writer_metadata<R>(&self, f: impl FnOnce(&Metadata) -> R) -> R {
        self.writer.as_ref().expect("only shard 0 commits metadata").metadata(f)
    }

    /// Every registered partition matching `keep`, across all shards.
    fn namespaces(&self, keep: impl Fn(Namespace) -> bool) -> Vec<Namespace> {
        self.shared.partitions.namespaces(keep)
    }

    async fn open_new(&self, stream_id: u32, topic_id: u32, partitions: std::ops::Range<u32>) -> std::io::Result<()> {
        let Some((settings, created)) = self.writer_metadata(|m| {
            m.topic_by_ids(stream_id, topic_id).map(|t| (self.partition_settings(&t.settings), t.partitions.clone()))
        }) else {
            return Ok(());
        };
        // A partition that fails to open does not keep the others from it: the first failure
        // is returned once all were tried.
        let mut opened = Ok(());
        for partition in partitions {
            let Some(namespace) = Namespace::new(stream_id, topic_id, partition) else { continue };
            let created_at = created.get(partition as usize).copied().unwrap_or_default();
            let open =
                self.on_owners(vec![namespace], || PartitionOp::Open { settings, fresh: true, created_at }).await;
            opened = opened.and(open);
        }
        opened
    }

    /// Runs a lifecycle operation on each partition's owner, all at once, and waits for every
    /// answer: one partition that fails (a replicated purge whose group cannot commit) does
    /// not keep the others from it. The first failure is returned.
    async fn on_owners(&self, namespaces: Vec<Namespace>, op: impl Fn() -> PartitionOp) -> std::io::Result<()> {
        let calls = namespaces.into_iter().map(|namespace| {
            let (owner, op) = (self.shared.partitions.owner(namespace), op());
            async move {
                let reply = if owner == self.shard_id {
                    self.execute_partition(namespace, op).await
                } else {
                    self.bus.call(owner, ShardRequest::Partition { namespace, op }).await
                };
                reply.map(drop).map_err(|code| {
                    std::io::Error::other(format!("shard {owner} failed a partition lifecycle operation: {code}"))
                })
            }
        });
        futures_util::future::join_all(calls).await.into_iter().collect()
    }
}
