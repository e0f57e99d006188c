//! Background work each shard runs on the partitions it owns: the retention cleaner, the
//! scrubber that verifies sealed segments, retries of partitions whose last write failed,
//! and (shard 0) the free-space check that makes sends fail early before the disk is full.
//! Each pass holds a partition's lock only for in-memory work and small file operations;
//! file removal and checksum verification run after the lock is released.

use std::rc::Rc;
use std::sync::atomic::Ordering;

use rill_domain::Namespace;
use rill_domain::retention::{RetentionPolicy, segments_to_delete};

use super::{Partition, Shard};
use crate::partition::{DamagedBatch, Detached, ScrubChunk, remove_detached};
use crate::ports::{Env, HostMetrics, MetadataRead, Storage};

/// Where a shard's scrubber is: the partition, the segment and the entry it reads next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScrubCursor {
    namespace: Option<Namespace>,
    /// The partition is done: go on with the next one.
    past: bool,
    segment_start: u64,
    entry: usize,
    /// The partition's generation the place refers to (a purge starts a new one).
    generation: u64,
}

impl<E: Env> Shard<E> {
    pub(super) fn owned_partitions(&self) -> Vec<(Namespace, Rc<Partition<E::Storage>>)> {
        self.partitions.borrow().iter().map(|(ns, p)| (*ns, p.clone())).collect()
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

    /// One cleaning pass over the partitions this shard owns: each deletes the sealed
    /// segments its topic's expiry and size share no longer keep. Returns the segments
    /// deleted here by the pass itself (a replicated partition's go when its group commits
    /// the deletion the primary's pass asks for, on every replica at once).
    pub async fn clean_partitions(&self) -> u32 {
        let mut deleted = 0;
        for (namespace, partition) in self.owned_partitions() {
            let Some(policy) = self.retention_policy(namespace) else { continue };
            if let Some(group) = self.group() {
                self.replicate_retention(group, namespace, &partition, policy).await;
                continue;
            }
            let detached = {
                let mut log = partition.log.lock().await;
                if partition.closed.get() {
                    continue;
                }
                let (sealed, active_bytes) = log.sealed_for_retention();
                let count = segments_to_delete(&sealed, active_bytes, self.now_us(), policy);
                if count == 0 {
                    continue;
                }
                let detached = log.detach_oldest(&self.storage, count).await;
                partition.refresh(&log);
                detached
            };
            let mut detached = match detached {
                Ok(detached) => detached,
                Err(error) => {
                    tracing::warn!(%error, partition = %namespace_label(namespace), "retention could not delete segments");
                    continue;
                }
            };
            // The files go after the lock is released: polls of the partition go on. Logs the
            // partition may write over again are readied off the lock too, and kept under it.
            if !detached.spare_candidates.is_empty() {
                detached.prepare_spares(&self.storage).await;
                let mut log = partition.log.lock().await;
                if !partition.closed.get() {
                    log.keep_spares(&self.storage, &mut detached).await;
                }
            }
            if let Err(error) = remove_detached(&self.storage, &detached).await {
                tracing::warn!(%error, partition = %namespace_label(namespace), "retention could not remove files; they go at the next start");
            }
            self.count_retention(namespace, &detached, "retention deleted segments");
            deleted += detached.segments;
        }
        deleted
    }

    /// Counts and logs segments deleted by retention or by a committed deletion.
    pub(super) fn count_retention(&self, namespace: Namespace, detached: &Detached, what: &str) {
        let counters = &self.shared.telemetry.data;
        counters.retention_segments.fetch_add(detached.segments as u64, Ordering::Relaxed);
        counters.retention_messages.fetch_add(detached.messages, Ordering::Relaxed);
        counters.retention_bytes.fetch_add(detached.bytes, Ordering::Relaxed);
        tracing::info!(
            partition = %namespace_label(namespace),
            segments = detached.segments,
            messages = detached.messages,
            bytes = detached.bytes,
            "{what}"
        );
    }

    /// Retention of a replicated partition: only the group's primary decides, from its own
    /// copy and clock, and asks the group to delete the sealed segments below where its copy
    /// would then start (a `DELETE_SEGMENTS` op), so every replica deletes the same
    /// messages when it applies it. Backups leave their copies to that op.
    async fn replicate_retention(
        &self,
        group: &super::group::PartitionGroup<E>,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
        policy: RetentionPolicy,
    ) {
        if !self
            .group_role()
            .is_some_and(|(_, primary, normal)| normal && primary == group.replication.membership.replica_id)
        {
            return;
        }
        let (below, incarnation) = {
            let log = partition.log.lock().await;
            if partition.closed.get() {
                return;
            }
            let (sealed, active_bytes) = log.sealed_for_retention();
            match segments_to_delete(&sealed, active_bytes, self.now_us(), policy) {
                0 => return,
                count => (log.start_after_oldest(count as u32), partition.incarnation.get()),
            }
        };
        let body = rill_domain::partition_group::delete_segments_body(namespace.packed(), below, incarnation);
        let operation = rill_domain::wire::codes::operation::DELETE_SEGMENTS;
        if let Err(code) = self.submit(group, operation, body).await {
            tracing::warn!(%code, partition = %namespace_label(namespace), "retention's deletion did not commit; the next pass asks again");
        }
    }

    /// Verifies the next chunk (about `max_bytes`) of the sealed segments this shard owns,
    /// going round every partition in order; returns the bytes verified, 0 once a pass over
    /// every partition is complete (the next call starts another).
    pub async fn scrub_step(&self, cursor: &mut ScrubCursor, max_bytes: usize) -> usize {
        loop {
            let next = self.owned_partitions().into_iter().find(|(ns, _)| match cursor.namespace {
                None => true,
                Some(current) if cursor.past => *ns > current,
                Some(current) => *ns >= current,
            });
            let Some((namespace, partition)) = next else {
                if cursor.namespace.is_some() {
                    self.shared.telemetry.data.scrub_passes.fetch_add(1, Ordering::Relaxed);
                }
                *cursor = ScrubCursor::default();
                return 0;
            };
            if cursor.namespace != Some(namespace) {
                *cursor = ScrubCursor { namespace: Some(namespace), ..ScrubCursor::default() };
            }
            let chunk = {
                let log = partition.log.lock().await;
                if log.generation() != cursor.generation {
                    (cursor.segment_start, cursor.entry, cursor.generation) = (0, 0, log.generation());
                }
                if partition.closed.get() {
                    Ok(None)
                } else {
                    log.scrub_read(cursor.segment_start, cursor.entry, max_bytes).await
                }
            };
            match chunk {
                Ok(Some(chunk)) => {
                    (cursor.segment_start, cursor.entry) = (chunk.segment_start, chunk.next_entry);
                    self.verify_chunk(namespace, &partition, &chunk).await;
                    return chunk.bytes.len();
                }
                Ok(None) => cursor.past = true,
                Err(error) => {
                    tracing::warn!(%error, partition = %namespace_label(namespace), "scrubber could not read a segment");
                    cursor.past = true;
                }
            }
        }
    }

    /// Checks a chunk the scrubber read, away from the partition's lock; a damaged batch
    /// is reported (and remembered) under the lock again.
    async fn verify_chunk(&self, namespace: Namespace, partition: &Partition<E::Storage>, chunk: &ScrubChunk) {
        let damaged = chunk.damaged();
        let counters = &self.shared.telemetry.data;
        counters.scrub_bytes.fetch_add(chunk.bytes.len() as u64, Ordering::Relaxed);
        counters.scrub_batches.fetch_add(chunk.entries.len() as u64, Ordering::Relaxed);
        if damaged.is_empty() {
            return;
        }
        let mut log = partition.log.lock().await;
        for batch in &damaged {
            counters.scrub_damaged.fetch_add(1, Ordering::Relaxed);
            self.report_damaged(&mut log, namespace, batch, "scrubber");
        }
    }

    /// Logs a damaged batch the first time it is found, and counts it.
    pub(super) fn report_damaged(
        &self,
        log: &mut crate::partition::PartitionLog<E::Storage>,
        namespace: Namespace,
        damaged: &DamagedBatch,
        found_by: &str,
    ) {
        if log.first_report(damaged) {
            self.shared.telemetry.data.damaged_batches.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                partition = %namespace_label(namespace),
                file = %damaged.file.display(),
                position = damaged.position,
                first_offset = damaged.first_offset,
                last_offset = damaged.last_offset,
                found_by,
                "stored batch fails its checksum; it is never served"
            );
        }
        // Every replica of a partition group holds the same bytes: a peer's copy repairs it.
        if let Some(group) = self.group() {
            self.ask_repair(group, namespace, damaged);
        }
    }

    /// Retries the pending writes of partitions whose last write failed, so what they
    /// acknowledged reaches disk, and they take sends again, once the disk has room.
    /// A metadata journal that could not be written is opened again first (shard 0),
    /// partitions that could not be opened are opened again, and purge records that could
    /// not be written are written.
    pub async fn retry_failed_writes(&self) {
        self.reopen_halted_metadata().await;
        self.open_unopened().await;
        self.record_purges().await;
        self.fit_spares_to_space().await;
        for (namespace, partition) in self.owned_partitions() {
            if !partition.stats.read_only() {
                continue;
            }
            let mut log = partition.log.lock().await;
            // With nothing pending (a persisted topic's journal is always empty, and no purge
            // is left half done) the next send is the retry.
            let nothing_pending = log.unsaved_messages() == 0 && !log.purge_pending();
            if partition.closed.get() || log.write_failure().is_none() || nothing_pending {
                continue;
            }
            let fsync = log.settings.enforce_fsync;
            if log.flush(&self.storage, fsync).await.is_ok() && log.write_failure().is_none() {
                tracing::info!(partition = %namespace_label(namespace), "partition takes writes again");
            }
            partition.refresh(&log);
        }
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

/// `stream/topic/partition`, as logs name a partition.
pub(super) fn namespace_label(namespace: Namespace) -> String {
    format!("{}/{}/{}", namespace.stream_id(), namespace.topic_id(), namespace.partition_id())
}
