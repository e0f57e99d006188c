//! Metadata mutations. Any shard accepts them; shard 0 alone commits them: apply to the
//! authoritative copy, journal with fsync, publish to every shard's reader, then open,
//! purge or remove partitions on their owners. The client is answered after all of it.

use std::sync::atomic::Ordering;

use rill_domain::Namespace;
use rill_domain::error::ErrorCode;
use rill_domain::metadata::{Applied, Metadata};
use rill_domain::wire::command::MetadataOp;
use rill_domain::wire::response;

use super::{System, fatal, queries};
use crate::partition::PartitionSettings;
use crate::ports::{Env, MetadataPublish, PartitionOp, ShardBus, ShardReply, ShardRequest, Storage};

impl<E: Env> System<E> {
    /// Runs one metadata operation from a client; returns the result-framed reply body.
    pub async fn execute_metadata(&self, operation: u8, body: &[u8], _op: &MetadataOp<'_>) -> ShardReply {
        if self.writer.is_none() {
            self.shared.bus.metadata_forwarded.fetch_add(1, Ordering::Relaxed);
            return self.bus.call(0, ShardRequest::Metadata { operation, body: body.to_vec() }).await;
        }
        self.commit_metadata(operation, body).await
    }

    /// Commits a metadata operation on shard 0.
    pub(super) async fn commit_metadata(&self, operation: u8, body: &[u8]) -> ShardReply {
        let Some(writer) = &self.writer else {
            return Err(ErrorCode::InvalidCommand);
        };
        let mut reader = rill_domain::wire::reader::Reader::new(body);
        let Ok(Some(op)) = MetadataOp::decode(operation, &mut reader) else {
            return Err(ErrorCode::InvalidFormat);
        };
        let mut journal = writer.journal.lock().await;
        let timestamp = self.now_us();
        let applied = writer.metadata.borrow_mut().apply(&op, timestamp)?;
        match journal.append(timestamp, operation, body).await {
            Ok(op_number) => self.shared.set_commit(op_number),
            Err(error) => fatal(&format!("cannot append to the metadata journal: {error}")),
        }
        writer.publisher.borrow_mut().publish(operation, timestamp, body);
        if let Err(error) = self.reflect(&applied).await {
            fatal(&format!("cannot apply {applied:?} to storage: {error}"));
        }
        drop(journal);
        let mut out = Vec::new();
        response::result_ok(&mut out);
        let metadata = writer.metadata.borrow();
        match applied {
            Applied::StreamCreated { stream_id } => {
                queries::encode_stream_details(&mut out, &metadata, &self.shared, stream_id)
            }
            Applied::TopicCreated { stream_id, topic_id } => {
                queries::encode_topic_details(&mut out, &metadata, &self.shared, stream_id, topic_id)
            }
            Applied::GroupCreated { stream_id, topic_id, group_id } => queries::encode_group_details(
                &mut out,
                &metadata,
                &self.shared,
                crate::groups::GroupKey { stream_id, topic_id, group_id },
            ),
            Applied::UserChanged { user_id } if operation == rill_domain::wire::codes::operation::INSERT_USER => {
                if let Some(user) = metadata.user(user_id) {
                    response::user_details(&mut out, user);
                }
            }
            _ => {}
        }
        Ok(out)
    }

    /// Mirrors an applied operation in partition storage, on the owning shards.
    async fn reflect(&self, applied: &Applied) -> std::io::Result<()> {
        let every = |stream_id: u32, topic_id: Option<u32>| {
            self.namespaces(|ns| ns.stream_id() == stream_id && topic_id.is_none_or(|t| ns.topic_id() == t))
        };
        match *applied {
            Applied::StreamCreated { stream_id } => {
                self.storage.create_dir_all(&self.stream_dir(stream_id).join("topics")).await
            }
            Applied::StreamDeleted { stream_id } => {
                self.on_owners(every(stream_id, None), || PartitionOp::Remove).await?;
                self.storage.remove_dir_all(&self.stream_dir(stream_id)).await
            }
            Applied::StreamPurged { stream_id } => self.on_owners(every(stream_id, None), || PartitionOp::Purge).await,
            Applied::TopicCreated { stream_id, topic_id } => {
                let count = self
                    .writer_metadata(|m| m.topic_by_ids(stream_id, topic_id).map_or(0, |t| t.partitions.len() as u32));
                self.open_new(stream_id, topic_id, 0..count).await
            }
            Applied::TopicDeleted { stream_id, topic_id } => {
                self.on_owners(every(stream_id, Some(topic_id)), || PartitionOp::Remove).await?;
                self.storage.remove_dir_all(&self.topic_dir(stream_id, topic_id)).await
            }
            Applied::TopicPurged { stream_id, topic_id } => {
                self.on_owners(every(stream_id, Some(topic_id)), || PartitionOp::Purge).await
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
                    self.storage.remove_dir_all(&self.partition_dir(namespace)).await?;
                }
                Ok(())
            }
            Applied::GroupDeleted { stream_id, topic_id, group_id } => {
                self.shared.groups.remove_group(crate::groups::GroupKey { stream_id, topic_id, group_id });
                Ok(())
            }
            Applied::StreamUpdated { .. }
            | Applied::TopicUpdated { .. }
            | Applied::UserChanged { .. }
            | Applied::GroupCreated { .. } => Ok(()),
        }
    }

    fn writer_metadata<R>(&self, f: impl FnOnce(&Metadata) -> R) -> R {
        f(&self.writer.as_ref().expect("only shard 0 commits metadata").metadata.borrow())
    }

    /// Every registered partition matching `keep`, across all shards.
    fn namespaces(&self, keep: impl Fn(Namespace) -> bool) -> Vec<Namespace> {
        let table = self.shared.partitions.pin();
        let mut found: Vec<Namespace> = table.keys().copied().filter(|ns| keep(*ns)).collect();
        found.sort_unstable();
        found
    }

    async fn open_new(&self, stream_id: u32, topic_id: u32, partitions: std::ops::Range<u32>) -> std::io::Result<()> {
        let Some(settings) =
            self.writer_metadata(|m| m.topic_by_ids(stream_id, topic_id).map(|t| PartitionSettings::from(&t.settings)))
        else {
            return Ok(());
        };
        let namespaces: Vec<Namespace> = partitions.filter_map(|p| Namespace::new(stream_id, topic_id, p)).collect();
        self.on_owners(namespaces, || PartitionOp::Open { settings, fresh: true }).await
    }

    /// Runs a lifecycle operation on each partition's owner and waits for every answer.
    async fn on_owners(&self, namespaces: Vec<Namespace>, op: impl Fn() -> PartitionOp) -> std::io::Result<()> {
        for namespace in namespaces {
            let owner = self.shared.owner(namespace);
            let reply = if owner == self.shard_id {
                self.execute_partition(namespace, op()).await
            } else {
                self.bus.call(owner, ShardRequest::Partition { namespace, op: op() }).await
            };
            reply.map_err(|code| {
                std::io::Error::other(format!("shard {owner} failed a partition lifecycle operation: {code}"))
            })?;
        }
        Ok(())
    }
}
