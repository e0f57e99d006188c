//! Background work each shard runs on the partitions it owns, through its owner: the
//! retention cleaner, the scrubber that verifies sealed segments, retries of what failed
//! (the metadata journal, partitions that could not be opened, writes), and (shard 0) the
//! free-space check that makes sends fail early before the disk is full.

use std::sync::atomic::Ordering;

use rill_domain::Namespace;
use rill_domain::retention::RetentionPolicy;

use super::Shard;
use crate::partitions::ScrubCursor;
use crate::ports::{Env, HostMetrics, MetadataRead, Storage};

impl<E: Env> Shard<E> {
    /// One cleaning pass over the partitions this shard owns: each deletes the sealed
    /// segments its topic's expiry and size share no longer keep. Returns the segments
    /// deleted here by the pass itself (a replicated partition's go when its group commits
    /// the deletion the primary's pass asks for, on every replica at once).
    pub async fn clean_partitions(&self) -> u32 {
        let owner = self.owner();
        let mut deleted = 0;
        for (namespace, partition) in self.partitions.owned_partitions() {
            if let Some(policy) = self.retention_policy(namespace) {
                deleted += owner.retain(namespace, &partition, policy).await;
            }
        }
        deleted
    }

    /// Verifies the next chunk (about `max_bytes`) of the sealed segments this shard owns,
    /// going round every partition in order; returns the bytes verified, 0 once a pass over
    /// every partition is complete (the next call starts another).
    pub async fn scrub_step(&self, cursor: &mut ScrubCursor, max_bytes: usize) -> usize {
        self.owner().scrub_step(cursor, max_bytes).await
    }

    /// Retries what failed, every second: a metadata journal that could not be written is
    /// opened again first (shard 0), partitions that could not be opened are opened again,
    /// and the pending writes of partitions whose last write failed are written, so what
    /// they acknowledged reaches disk and they take sends again once the disk has room.
    pub async fn retry_failed_writes(&self) {
        self.reopen_halted_metadata().await;
        self.open_unopened().await;
        self.owner().retry_failed_writes().await;
    }

    /// A partition's retention policy as its topic says now (so `update_topic` applies on
    /// the next pass), or `None` when it keeps everything.
    fn retention_policy(&self, namespace: Namespace) -> Option<RetentionPolicy> {
        let defaults = self.shared.config.data.retention;
        self.metadata
            .read(|m| {
                let topic = m.topic_by_ids(namespace.stream_id(), namespace.topic_id())?;
                Some(RetentionPolicy::for_partition(&topic.settings, topic.partitions.len() as u32, defaults))
            })
            .filter(|policy| !policy.is_unlimited())
    }

    /// Reads the data volume's free space into the shared counters; sends are refused
    /// while it is below the floor (appends also lower the figure by what they write, until
    /// the next reading). Logs each crossing of the floor once.
    pub async fn check_free_space(&self) {
        let space = match self.storage.space(self.data_path()).await {
            Ok(space) => space,
            Err(error) => {
                tracing::warn!(%error, "cannot read the data volume's free space");
                return;
            }
        };
        let floor = self.shared.config.data.min_free_space.bytes(space.total_bytes);
        let counters = &self.shared.telemetry.data;
        counters.data_directory_bytes.store(self.host_metrics.sample().data_directory_bytes, Ordering::Relaxed);
        counters.disk_total.store(space.total_bytes, Ordering::Relaxed);
        counters.disk_available.store(space.available_bytes, Ordering::Relaxed);
        counters.disk_floor.store(floor, Ordering::Relaxed);
        let below = space.available_bytes < floor;
        counters.below_floor.store(below, Ordering::Relaxed);
        // Appends refused for the floor set the gauge too; only this reading logs.
        if counters.floor_logged.swap(below, Ordering::Relaxed) != below {
            if below {
                tracing::error!(
                    available_bytes = space.available_bytes,
                    floor_bytes = floor,
                    "free space on the data volume is below the floor: sends are refused until it is freed"
                );
            } else {
                tracing::info!(
                    available_bytes = space.available_bytes,
                    "free space is above the floor again: sends are accepted"
                );
            }
        }
    }
}
