//! The partitions a shard has open, and the one place that opens, closes and empties them:
//! their files (recovered, or made for a new partition), the incarnation markers beside
//! them, the partitions whose opening failed (retried every second), and the counters
//! every shard reads. Both owners (`owner.rs`) run their operations on this store.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rill_domain::Namespace;
use rill_domain::error::ErrorCode;

use super::flush_queue::FlushQueue;
use super::markers::{self, CREATED_AT_MARKER, RESET_MARKER};
use super::partition::{Partition, label};
use super::sealers::Sealers;
use crate::memory_pool::PoolSlice;
use crate::partition::{Detached, PartitionLog, PartitionSettings, SpareBudget};
use crate::ports::{Clock, Env, Storage};
use crate::shared::{PartitionStats, Shared};

/// Open partitions of one shard, by namespace.
type Table<S> = BTreeMap<Namespace, Rc<Partition<S>>>;

/// One shard's open partitions and what operating on them needs.
pub struct PartitionStore<E: Env> {
    pub(crate) storage: E::Storage,
    clock: E::Clock,
    pub(crate) shared: Arc<Shared>,
    shard_id: u16,
    partitions: RefCell<Table<E::Storage>>,
    /// Partitions this shard owns whose opening failed (a disk error), with the `fresh` and
    /// `created_at` they were opened with: opened again by the failed-write retry.
    unopened: RefCell<BTreeMap<Namespace, (bool, u64)>>,
    /// Seal messages before they are stored and open them in polls (encryption at rest).
    sealers: Sealers<E::MetadataReader>,
    /// Partitions whose flush a send left to the flusher.
    pub(super) flush_queue: FlushQueue,
    /// The budget of the spare logs its partitions keep (`partition::spares`); `None`
    /// when the server keeps none.
    pub(super) spares: Option<SpareBudget>,
}

impl<E: Env> PartitionStore<E> {
    pub fn new(
        storage: E::Storage,
        clock: E::Clock,
        shared: Arc<Shared>,
        shard_id: u16,
        metadata: E::MetadataReader,
    ) -> Self {
        let sealers = Sealers::new(shared.config.encryption.as_ref(), metadata);
        let budget_bytes = shared.config.data.spare_logs_bytes.saturating_mul(shared.shard_count.into());
        let counters = shared.telemetry.data.spare_logs.clone();
        let spares = (budget_bytes > 0).then(|| SpareBudget::new(budget_bytes, counters));
        Self {
            storage,
            clock,
            shared,
            shard_id,
            partitions: RefCell::default(),
            unopened: RefCell::default(),
            sealers,
            flush_queue: FlushQueue::default(),
            spares,
        }
    }

    pub fn shard_id(&self) -> u16 {
        self.shard_id
    }

    pub(crate) fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    pub(crate) fn data_path(&self) -> &Path {
        &self.shared.config.data_path
    }

    pub(crate) fn stream_dir(&self, stream_id: u32) -> PathBuf {
        self.data_path().join("streams").join(stream_id.to_string())
    }

    pub(crate) fn topic_dir(&self, stream_id: u32, topic_id: u32) -> PathBuf {
        self.stream_dir(stream_id).join("topics").join(topic_id.to_string())
    }

    pub(crate) fn partition_dir(&self, namespace: Namespace) -> PathBuf {
        self.topic_dir(namespace.stream_id(), namespace.topic_id())
            .join("partitions")
            .join(namespace.partition_id().to_string())
    }

    /// A partition this shard serves; one the metadata lists that could not be opened is an
    /// I/O error, not a missing partition.
    pub(crate) fn owned(&self, namespace: Namespace) -> Result<Rc<Partition<E::Storage>>, ErrorCode> {
        let missing = || {
            if self.unopened.borrow().contains_key(&namespace) {
                ErrorCode::IoError
            } else {
                ErrorCode::PartitionNotFound
            }
        };
        self.partitions.borrow().get(&namespace).cloned().ok_or_else(missing)
    }

    /// Every partition open here, in namespace order.
    pub(crate) fn owned_partitions(&self) -> Vec<(Namespace, Rc<Partition<E::Storage>>)> {
        self.partitions.borrow().iter().map(|(ns, p)| (*ns, p.clone())).collect()
    }

    /// Opens a partition this shard owns, not served yet (`register` serves it). `fresh`
    /// says the metadata just created it: files of a deleted partition with the same ids
    /// are removed then, but not its own files, which a clustered node that replays the
    /// creation while it catches up already holds (the `created_at` marker in the directory
    /// tells the two apart). One that cannot be opened (a disk error) is noted for the
    /// failed-write retry, and logged once.
    pub(crate) async fn open_partition(
        &self,
        namespace: Namespace,
        settings: PartitionSettings,
        fresh: bool,
        created_at: u64,
    ) -> std::io::Result<Rc<Partition<E::Storage>>> {
        let opened = async {
            let dir = self.partition_dir(namespace);
            let marker = dir.join(CREATED_AT_MARKER);
            let recorded = markers::read_marker(&self.storage, &marker).await;
            let replayed = recorded == Some(created_at);
            if fresh && !replayed {
                // A new partition must not inherit files of a deleted one with the same ids.
                self.storage.remove_dir_all(&dir).await?;
            }
            let clean = self.shared.clean_start && (!fresh || replayed);
            let id = namespace.partition_id();
            let log = PartitionLog::open_with(&self.storage, &dir, id, settings, clean, self.spares.clone()).await?;
            if recorded != Some(created_at) {
                markers::write_marker(&self.storage, &dir, &marker, created_at).await?;
            }
            let stats = Arc::new(PartitionStats::new(self.shard_id));
            let reset = markers::read_marker(&self.storage, &dir.join(RESET_MARKER)).await.unwrap_or(0);
            stats.set_incarnation(created_at.max(reset));
            Ok(Rc::new(Partition::new(log, stats)))
        }
        .await;
        if let Err(error) = &opened
            && self.unopened.borrow_mut().insert(namespace, (fresh, created_at)).is_none()
        {
            tracing::error!(%error, partition = %label(namespace), "cannot open a partition: it serves nothing here until it can (tried again every second)");
        }
        opened
    }

    /// Serves a partition `open_partition` opened: in the table, its counters published.
    pub(crate) fn register(&self, namespace: Namespace, partition: Rc<Partition<E::Storage>>) {
        if self.unopened.borrow_mut().remove(&namespace).is_some() {
            tracing::info!(partition = %label(namespace), "opened a partition that could not be opened before");
        }
        let opened = partition.log.try_lock().expect("a partition not served yet is unlocked");
        partition.refresh(&opened);
        partition.publish_offsets(&opened);
        drop(opened);
        self.shared.partitions.insert(namespace, partition.stats.clone());
        self.partitions.borrow_mut().insert(namespace, partition);
    }

    /// Forgets a partition whose opening failed (its deletion committed meanwhile).
    pub(crate) fn forget_unopened(&self, namespace: Namespace) {
        self.unopened.borrow_mut().remove(&namespace);
    }

    /// The partitions whose opening failed, with the `fresh` and `created_at` they were
    /// opened with.
    pub(crate) fn unopened(&self) -> Vec<(Namespace, (bool, u64))> {
        self.unopened.borrow().iter().map(|(n, o)| (*n, *o)).collect()
    }

    /// Closes a removed partition and waits for the operations in flight on it; its files
    /// go with its directory, which the metadata operation removes next, spares included.
    pub(crate) async fn remove_partition(&self, namespace: Namespace) -> Option<Rc<Partition<E::Storage>>> {
        let removed = self.partitions.borrow_mut().remove(&namespace);
        self.shared.partitions.remove(namespace);
        let partition = removed?;
        partition.close();
        // Its journal's buffers go back to the pool with the log.
        drop(partition.log.lock().await);
        Some(partition)
    }

    /// Empties a partition's log and stored offsets. The purge removes its directory; the
    /// markers are written again (`created_at`, so a replayed creation still knows the
    /// files; `purged_at`, whose purge this copy may still lag), with `reset`, the
    /// incarnation of the purge or group reset that asked for it, if one did.
    pub(crate) async fn purge_partition(
        &self,
        namespace: Namespace,
        log: &mut PartitionLog<E::Storage>,
        reset: Option<u64>,
    ) -> std::io::Result<()> {
        let dir = self.partition_dir(namespace);
        let before = markers::read_incarnations(&self.storage, &dir).await;
        log.purge(&self.storage).await?;
        let keep = [(CREATED_AT_MARKER, before.created_at), (markers::PURGED_MARKER, before.purged)];
        for (name, incarnation) in keep.into_iter().filter(|(_, incarnation)| *incarnation > 0) {
            markers::write_marker(&self.storage, &dir, &dir.join(name), incarnation).await?;
        }
        let Some(incarnation) = reset else { return Ok(()) };
        markers::write_marker(&self.storage, &dir, &dir.join(RESET_MARKER), incarnation).await?;
        if let Some(stats) = self.shared.partitions.stats(namespace) {
            stats.set_incarnation(before.created_at.max(incarnation));
        }
        Ok(())
    }

    /// Flushes, with fsync, every partition this shard owns (messages and stored consumer
    /// offsets) and closes it: an operation that arrives later is refused instead of
    /// acknowledged and then lost. Used at shutdown; operations already in flight finish
    /// first, since each holds its partition's lock. A partition that cannot be flushed
    /// does not stop the others; the first failure is returned once all were tried.
    pub(crate) async fn flush_owned(&self) -> std::io::Result<()> {
        let mut failure = None;
        for (namespace, partition) in self.owned_partitions() {
            let mut log = partition.log.lock().await;
            let flushed = match log.flush(&self.storage, true).await {
                Ok(()) => log.sync_active().await,
                failed => failed,
            };
            let flushed = match flushed {
                Ok(()) => log.offsets.sync().await,
                failed => failed,
            };
            if let Err(error) = flushed {
                tracing::error!(
                    %error,
                    partition = %label(namespace),
                    unsaved_messages = log.unsaved_messages(),
                    "cannot flush a partition at shutdown: its unsaved messages are lost"
                );
                failure.get_or_insert(error);
            }
            partition.refresh(&log);
            partition.close();
        }
        failure.map_or(Ok(()), Err)
    }

    /// The batch as it is stored: sealed when encryption at rest is on, with the key of
    /// `namespace`'s stream.
    pub(crate) fn seal(&self, namespace: Namespace, batch: PoolSlice) -> Result<PoolSlice, ErrorCode> {
        let Some(encryptor) = self.sealers.for_stream(namespace.stream_id())? else { return Ok(batch) };
        let count = rill_domain::batch::BatchHeader::read(&batch).message_count as usize;
        let mut sealed = Vec::with_capacity(batch.len() + count * crate::encryption::SEAL_OVERHEAD);
        encryptor.seal_batch(&batch, &mut sealed)?;
        Ok(PoolSlice::plain(sealed))
    }

    /// Opens sealed messages for a poll's reply (encryption at rest); the frame as it is
    /// without it.
    pub(super) fn open_sealed(&self, namespace: Namespace, frame: PoolSlice) -> Result<PoolSlice, ErrorCode> {
        let Some(encryptor) = self.sealers.for_stream(namespace.stream_id())? else { return Ok(frame) };
        let room = crate::partition::REPLY_ROOM;
        // Sealed messages open into a reply of their own: the plain bytes are shorter.
        let mut opened = Vec::with_capacity(frame.len());
        opened.extend_from_slice(&frame[..room]);
        encryptor.open_records(&frame[room..], &mut opened)?;
        Ok(PoolSlice::plain(opened))
    }

    /// Counts a failed write and logs each change of a partition's read-only state once.
    pub(crate) fn note_write(
        &self,
        namespace: Namespace,
        was_read_only: bool,
        now_read_only: bool,
        error: Option<&std::io::Error>,
    ) {
        match error {
            Some(error) => {
                self.shared.telemetry.data.write_failures.fetch_add(1, Ordering::Relaxed);
                if !was_read_only {
                    tracing::error!(%error, partition = %label(namespace), "partition write failed: the partition is read-only until a write succeeds");
                }
            }
            None if was_read_only && !now_read_only => {
                tracing::info!(partition = %label(namespace), "partition takes writes again");
            }
            None => {}
        }
    }

    /// Refuses a send while the disk is below its free-space floor.
    pub(crate) fn refuse_below_floor(&self) -> Result<(), ErrorCode> {
        let data = &self.shared.telemetry.data;
        // The free space last read, less what was appended since: the floor holds even
        // when producers fill the disk faster than it is read.
        if data.disk_available.load(Ordering::Relaxed) < data.disk_floor.load(Ordering::Relaxed) {
            data.below_floor.store(true, Ordering::Relaxed);
            data.sends_refused.fetch_add(1, Ordering::Relaxed);
            return Err(ErrorCode::CannotAppendMessage);
        }
        Ok(())
    }

    /// Whether the data volume is below its free-space floor: a journal reopened now would
    /// fail its first write again.
    pub(crate) fn below_floor(&self) -> bool {
        self.shared.telemetry.data.below_floor.load(Ordering::Relaxed)
    }

    /// Counts and logs segments deleted by retention or by a committed deletion.
    pub(crate) fn count_retention(&self, namespace: Namespace, detached: &Detached, what: &str) {
        let counters = &self.shared.telemetry.data;
        counters.retention_segments.fetch_add(detached.segments as u64, Ordering::Relaxed);
        counters.retention_messages.fetch_add(detached.messages, Ordering::Relaxed);
        counters.retention_bytes.fetch_add(detached.bytes, Ordering::Relaxed);
        tracing::info!(
            partition = %label(namespace),
            segments = detached.segments,
            messages = detached.messages,
            bytes = detached.bytes,
            "{what}"
        );
    }
}
