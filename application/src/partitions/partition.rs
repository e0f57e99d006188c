//! One partition open on its owning shard: its log behind an async lock (appends, flushes
//! and reads of one partition are serialised) and the counters every shard can read.

use std::cell::Cell;
use std::sync::Arc;

use rill_domain::Namespace;

use crate::partition::PartitionLog;
use crate::ports::Storage;
use crate::shared::{PartitionSnapshot, PartitionStats};

pub struct Partition<S: Storage> {
    pub log: async_lock::Mutex<PartitionLog<S>>,
    pub(crate) stats: Arc<PartitionStats>,
    /// Set when the partition is removed or closed at shutdown: later operations are refused.
    closed: Cell<bool>,
}

impl<S: Storage> Partition<S> {
    pub(crate) fn new(log: PartitionLog<S>, stats: Arc<PartitionStats>) -> Self {
        Self { log: async_lock::Mutex::new(log), stats, closed: Cell::new(false) }
    }

    pub(crate) fn closed(&self) -> bool {
        self.closed.get()
    }

    /// Refuses every later operation (removed, or closed at shutdown).
    pub(crate) fn close(&self) {
        self.closed.set(true);
    }

    /// Publishes the log's counters, after an operation that may have changed them.
    pub(crate) fn refresh(&self, log: &PartitionLog<S>) {
        self.stats.set(PartitionSnapshot {
            usage: log.usage(),
            segments_count: log.segments_count(),
            current_offset: log.current_offset(),
            first_offset: log.first_offset(),
            read_only: log.write_failure().is_some(),
        });
    }

    /// Republishes the stored offsets, after an operation that may have changed them.
    pub(crate) fn publish_offsets(&self, log: &PartitionLog<S>) {
        self.stats.set_stored_offsets(log.offsets.all());
    }
}

/// `stream/topic/partition`, as logs name a partition.
pub fn label(namespace: Namespace) -> String {
    format!("{}/{}/{}", namespace.stream_id(), namespace.topic_id(), namespace.partition_id())
}
