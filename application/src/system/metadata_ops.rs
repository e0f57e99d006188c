//! Metadata mutations: apply to the state machine, journal with fsync, then mirror the
//! change in partition storage. Mutations are serialised by the journal lock.

use std::rc::Rc;

use rill_domain::error::ErrorCode;
use rill_domain::metadata::Applied;
use rill_domain::wire::command::MetadataOp;
use rill_domain::wire::response::{self, Usage};

use super::{Partition, System, fatal};
use crate::partition::PartitionSettings;
use crate::ports::{Env, Storage};

impl<E: Env> System<E> {
    /// Runs one metadata operation and returns the success reply body (result-framed).
    pub async fn execute_metadata(
        &self,
        operation: u8,
        body: &[u8],
        op: &MetadataOp<'_>,
    ) -> Result<Vec<u8>, ErrorCode> {
        let mut journal = self.journal.lock().await;
        let timestamp = self.now_us();
        let applied = self.metadata.borrow_mut().apply(op, timestamp)?;
        match journal.append(timestamp, operation, body).await {
            Ok(op_number) => self.commit.set(op_number),
            Err(error) => fatal(&format!("cannot append to the metadata journal: {error}")),
        }
        if let Err(error) = self.reflect(&applied).await {
            fatal(&format!("cannot apply {applied:?} to storage: {error}"));
        }
        drop(journal);
        let mut out = Vec::new();
        response::result_ok(&mut out);
        match applied {
            Applied::StreamCreated { stream_id } => self.encode_stream_details(&mut out, stream_id),
            Applied::TopicCreated { stream_id, topic_id } => self.encode_topic_details(&mut out, stream_id, topic_id),
            _ => {}
        }
        Ok(out)
    }

    /// Mirrors an applied operation in partition storage.
    async fn reflect(&self, applied: &Applied) -> std::io::Result<()> {
        match *applied {
            Applied::StreamCreated { stream_id } => {
                self.storage.create_dir_all(&self.stream_dir(stream_id).join("topics")).await
            }
            Applied::StreamDeleted { stream_id } => {
                self.remove_partitions(|ns| ns.stream_id() == stream_id).await;
                self.storage.remove_dir_all(&self.stream_dir(stream_id)).await
            }
            Applied::StreamPurged { stream_id } => self.purge_partitions(|ns| ns.stream_id() == stream_id).await,
            Applied::TopicCreated { stream_id, topic_id } => {
                let count =
                    self.metadata.borrow().topic_by_ids(stream_id, topic_id).map_or(0, |t| t.partitions.len() as u32);
                self.open_new_partitions(stream_id, topic_id, 0, count).await
            }
            Applied::TopicDeleted { stream_id, topic_id } => {
                self.remove_partitions(|ns| ns.stream_id() == stream_id && ns.topic_id() == topic_id).await;
                self.balanced.borrow_mut().remove(&(stream_id, topic_id));
                self.storage.remove_dir_all(&self.topic_dir(stream_id, topic_id)).await
            }
            Applied::TopicPurged { stream_id, topic_id } => {
                self.purge_partitions(|ns| ns.stream_id() == stream_id && ns.topic_id() == topic_id).await
            }
            Applied::PartitionsCreated { stream_id, topic_id, first, count } => {
                self.open_new_partitions(stream_id, topic_id, first, count).await
            }
            Applied::PartitionsDeleted { stream_id, topic_id, first, count } => {
                let range = first..first + count;
                self.remove_partitions(|ns| {
                    ns.stream_id() == stream_id && ns.topic_id() == topic_id && range.contains(&ns.partition_id())
                })
                .await;
                for partition_id in first..first + count {
                    self.storage.remove_dir_all(&self.partition_dir(stream_id, topic_id, partition_id)).await?;
                }
                Ok(())
            }
            Applied::StreamUpdated { .. } | Applied::TopicUpdated { .. } => Ok(()),
        }
    }

    async fn open_new_partitions(&self, stream_id: u32, topic_id: u32, first: u32, count: u32) -> std::io::Result<()> {
        let settings = match self.metadata.borrow().topic_by_ids(stream_id, topic_id) {
            Some(topic) => PartitionSettings::from(&topic.settings),
            None => return Ok(()),
        };
        for partition_id in first..first + count {
            // A fresh partition must not inherit files of a deleted one with the same ids.
            self.storage.remove_dir_all(&self.partition_dir(stream_id, topic_id, partition_id)).await?;
            self.open_partition(stream_id, topic_id, partition_id, settings).await?;
        }
        Ok(())
    }

    /// Unregisters partitions and waits for operations in flight on them to finish.
    async fn remove_partitions(&self, keep: impl Fn(rill_domain::Namespace) -> bool) {
        for (namespace, partition) in self.partitions_where(keep) {
            self.partitions.borrow_mut().remove(&namespace);
            partition.deleted.set(true);
            drop(partition.log.lock().await);
        }
    }

    async fn purge_partitions(&self, keep: impl Fn(rill_domain::Namespace) -> bool) -> std::io::Result<()> {
        for (_, partition) in self.partitions_where(keep) {
            let mut log = partition.log.lock().await;
            log.purge(&self.storage).await?;
            partition.refresh(&log);
        }
        Ok(())
    }

    /// Sum of the usage of a topic's partitions.
    pub(super) fn topic_usage(&self, stream_id: u32, topic_id: u32, partitions: u32) -> Usage {
        let mut usage = Usage::default();
        for partition_id in 0..partitions {
            if let Some(partition) = self.partition_usage(stream_id, topic_id, partition_id) {
                usage += partition.usage.get();
            }
        }
        usage
    }

    pub(super) fn partition_handle(
        &self,
        stream_id: u32,
        topic_id: u32,
        partition_id: u32,
    ) -> Option<Rc<Partition<E::Storage>>> {
        self.partition_usage(stream_id, topic_id, partition_id)
    }
}
