//! Background work on the partitions a shard has open: a retention pass over one
//! partition, the scrubber that verifies sealed segments, retries of partitions whose last
//! write failed, and the spare logs fitted to the volume's free space. Each pass holds a
//! partition's lock only for in-memory work and small file operations; file removal and
//! checksum verification run after the lock is released.

use std::sync::atomic::Ordering;

use rill_domain::Namespace;
use rill_domain::retention::{RetentionPolicy, segments_to_delete};

use super::partition::{Partition, label};
use super::store::PartitionStore;
use crate::partition::{DamagedBatch, ScrubChunk, remove_detached};
use crate::ports::{Env, Storage};

/// Under the data path: where an earlier version kept every shard's spare logs, removed
/// at start (a spare now lives in its own partition's directory).
const LEGACY_SPARE_LOGS_DIR: &str = "spare-logs";

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

impl<E: Env> PartitionStore<E> {
    /// Deletes the sealed segments of one partition that `policy` no longer keeps; returns
    /// how many went. The segments are detached under the lock; their files are removed
    /// after it, and the logs the partition may write over again are readied off the lock
    /// and kept under it.
    pub(crate) async fn retain(
        &self,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
        policy: RetentionPolicy,
    ) -> u32 {
        let detached = {
            let mut log = partition.log.lock().await;
            if partition.closed() {
                return 0;
            }
            let (sealed, active_bytes) = log.sealed_for_retention();
            let count = segments_to_delete(&sealed, active_bytes, self.now_us(), policy);
            if count == 0 {
                return 0;
            }
            let detached = log.detach_oldest(&self.storage, count).await;
            partition.refresh(&log);
            detached
        };
        let mut detached = match detached {
            Ok(detached) => detached,
            Err(error) => {
                tracing::warn!(%error, partition = %label(namespace), "retention could not delete segments");
                return 0;
            }
        };
        if !detached.spare_candidates.is_empty() {
            detached.prepare_spares(&self.storage).await;
            let mut log = partition.log.lock().await;
            if !partition.closed() {
                log.keep_spares(&self.storage, &mut detached).await;
            }
        }
        if let Err(error) = remove_detached(&self.storage, &detached).await {
            tracing::warn!(%error, partition = %label(namespace), "retention could not remove files; they go at the next start");
        }
        self.count_retention(namespace, &detached, "retention deleted segments");
        detached.segments
    }

    /// Verifies the next chunk (about `max_bytes`) of the sealed segments this shard owns,
    /// going round every partition in order; returns the bytes verified (0 once a pass over
    /// every partition is complete: the next call starts another) and the damaged batches
    /// it found, each reported.
    pub(crate) async fn scrub_step(
        &self,
        cursor: &mut ScrubCursor,
        max_bytes: usize,
    ) -> (usize, Vec<(Namespace, DamagedBatch)>) {
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
                return (0, Vec::new());
            };
            if cursor.namespace != Some(namespace) {
                *cursor = ScrubCursor { namespace: Some(namespace), ..ScrubCursor::default() };
            }
            let chunk = {
                let log = partition.log.lock().await;
                if log.generation() != cursor.generation {
                    (cursor.segment_start, cursor.entry, cursor.generation) = (0, 0, log.generation());
                }
                if partition.closed() {
                    Ok(None)
                } else {
                    log.scrub_read(cursor.segment_start, cursor.entry, max_bytes).await
                }
            };
            match chunk {
                Ok(Some(chunk)) => {
                    (cursor.segment_start, cursor.entry) = (chunk.segment_start, chunk.next_entry);
                    let damaged = self.verify_chunk(namespace, &partition, &chunk).await;
                    return (chunk.bytes.len(), damaged.into_iter().map(|batch| (namespace, batch)).collect());
                }
                Ok(None) => cursor.past = true,
                Err(error) => {
                    tracing::warn!(%error, partition = %label(namespace), "scrubber could not read a segment");
                    cursor.past = true;
                }
            }
        }
    }

    /// Checks a chunk the scrubber read, away from the partition's lock; a damaged batch
    /// is reported (and remembered) under the lock again.
    async fn verify_chunk(
        &self,
        namespace: Namespace,
        partition: &Partition<E::Storage>,
        chunk: &ScrubChunk,
    ) -> Vec<DamagedBatch> {
        let damaged = chunk.damaged();
        let counters = &self.shared.telemetry.data;
        counters.scrub_bytes.fetch_add(chunk.bytes.len() as u64, Ordering::Relaxed);
        counters.scrub_batches.fetch_add(chunk.entries.len() as u64, Ordering::Relaxed);
        if damaged.is_empty() {
            return damaged;
        }
        let mut log = partition.log.lock().await;
        for batch in &damaged {
            counters.scrub_damaged.fetch_add(1, Ordering::Relaxed);
            self.report_damaged(&mut log, namespace, batch, "scrubber");
        }
        damaged
    }

    /// Retries the pending writes of partitions whose last write failed, so what they
    /// acknowledged reaches disk and they take sends again once the disk has room, and
    /// fits the spare logs to the free space.
    pub(crate) async fn retry_failed_writes(&self) {
        self.fit_spares_to_space().await;
        for (namespace, partition) in self.owned_partitions() {
            if !partition.stats.read_only() {
                continue;
            }
            let mut log = partition.log.lock().await;
            // With nothing pending (a persisted topic's journal is always empty, and no purge
            // is left half done) the next send is the retry.
            let nothing_pending = log.unsaved_messages() == 0 && !log.purge_pending();
            if partition.closed() || log.write_failure().is_none() || nothing_pending {
                continue;
            }
            let fsync = log.settings.enforce_fsync;
            if log.flush(&self.storage, fsync).await.is_ok() && log.write_failure().is_none() {
                tracing::info!(partition = %label(namespace), "partition takes writes again");
            }
            partition.refresh(&log);
        }
    }

    /// Removes the shared spare directory an earlier version kept (shard 0, at start, before
    /// its partitions open): its files held other partitions' deleted logs.
    pub(crate) async fn remove_legacy_spares(&self) {
        if self.shard_id() != 0 {
            return;
        }
        let legacy = self.data_path().join(LEGACY_SPARE_LOGS_DIR);
        if let Err(error) = self.storage.remove_dir_all(&legacy).await {
            tracing::warn!(%error, dir = %legacy.display(), "cannot remove an earlier version's spare logs");
        }
    }

    /// While the data volume is short of free space (shard 0's last reading, less what was
    /// appended since), keeps no spares and removes those its partitions hold.
    async fn fit_spares_to_space(&self) {
        let Some(budget) = &self.spares else { return };
        let data = &self.shared.telemetry.data;
        // Nothing read yet (a shard starting before shard 0's first reading).
        if data.disk_total.load(Ordering::Relaxed) == 0 {
            return;
        }
        let (available, floor) = (data.disk_available.load(Ordering::Relaxed), data.disk_floor.load(Ordering::Relaxed));
        if !budget.note_space(available, floor) || budget.counters().files.load(Ordering::Relaxed) == 0 {
            return;
        }
        for (_, partition) in self.owned_partitions() {
            let mut log = partition.log.lock().await;
            if log.spare_count() > 0 {
                log.remove_spares(&self.storage).await;
            }
        }
    }
}
