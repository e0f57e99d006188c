//! Partition operations on the owning shard, and the routing that gets them there: a
//! partition is served only by its owner (the Murmur3 rule); other shards forward over the
//! bus and wait for the reply.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rill_domain::Namespace;
use rill_domain::error::ErrorCode;
use rill_domain::polling::{self, PartitionCursor, PollingStrategy};
use rill_domain::wire::response;

use super::maintenance::namespace_label;
use super::{Partition, Shard};
use crate::partition::{ConsumerKey, POLL_PREFIX_SIZE, PartitionLog, PartitionSettings, Polled, REPLY_ROOM};
use crate::ports::{BusReply, Env, MetadataRead, PartitionOp, Reply, ShardBus, ShardReply, ShardRequest, Storage};
use crate::shared::PartitionStats;
use rill_domain::constants::HEADER_SIZE;

fn io_failure(what: &str) -> impl FnOnce(std::io::Error) -> ErrorCode + '_ {
    move |error| {
        tracing::error!(%error, "{what} failed");
        ErrorCode::IoError
    }
}

/// The file in a partition's directory that names the incarnation it holds.
const CREATED_AT_MARKER: &str = "created_at";
/// The file naming the incarnation a purge (or a partition group's reset) started it in,
/// when that is newer than its creation: a purge or reset committed again after a restart
/// (a clustered node's metadata recovery, a group's journal) must not empty it again.
const RESET_MARKER: &str = "reset_incarnation";
/// The file naming the newest purge this node's metadata applied to a replicated partition:
/// until its group's reset empties this copy, the copy lags and must serve nothing, a
/// restart in between included.
const PURGED_MARKER: &str = "purged_at";

/// Whether a partition directory at or under `dir` (a stream's, a topic's or a partition's
/// directory) was created after `timestamp`. A clustered node's metadata recovery commits
/// again the ops since its last checkpoint, and a deletion replayed so must not remove the
/// files of a partition created since with the same ids.
pub(super) async fn created_after<S: Storage>(storage: &S, dir: &std::path::Path, timestamp: u64) -> bool {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        if let Some(created_at) = read_marker(storage, &dir.join(CREATED_AT_MARKER)).await {
            if created_at > timestamp {
                return true;
            }
            continue;
        }
        for level in ["topics", "partitions"] {
            let below = dir.join(level);
            for name in storage.list_dir(&below).await.unwrap_or_default() {
                pending.push(below.join(name));
            }
        }
    }
    false
}

async fn read_marker<S: Storage>(storage: &S, path: &std::path::Path) -> Option<u64> {
    use crate::ports::StorageFile;
    if !storage.exists(path).await {
        return None;
    }
    let file = storage.open(path).await.ok()?;
    let (result, bytes) = file.read_exact_at(crate::memory_pool::PoolSlice::plain(vec![0; 8]), 0).await;
    result.ok()?;
    Some(u64::from_le_bytes(bytes[..8].try_into().ok()?))
}

/// Records the incarnation durably, before any batch of it is acknowledged.
async fn write_marker<S: Storage>(
    storage: &S,
    dir: &std::path::Path,
    path: &std::path::Path,
    created_at: u64,
) -> std::io::Result<()> {
    crate::partition::markers::write_synced(storage, dir, path, created_at.to_le_bytes().to_vec()).await
}

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

    /// Empties a partition's log and stored offsets. The purge removes its directory; the
    /// `created_at` marker is written again, so a replayed creation still knows the files,
    /// and so is the incarnation of the group reset that asked for it, if one did.
    pub(super) async fn purge_partition(
        &self,
        namespace: Namespace,
        log: &mut PartitionLog<E::Storage>,
        reset: Option<u64>,
    ) -> std::io::Result<()> {
        let dir = self.partition_dir(namespace);
        let marker = dir.join(CREATED_AT_MARKER);
        let recorded = read_marker(&self.storage, &marker).await;
        // A purge recorded here outlives the emptying: it may be a later one than the reset
        // that empties the copy now, which the copy still lags (seed 14316).
        let purged = read_marker(&self.storage, &dir.join(PURGED_MARKER)).await;
        log.purge(&self.storage).await?;
        if let Some(created_at) = recorded {
            write_marker(&self.storage, &dir, &marker, created_at).await?;
        }
        if let Some(purged) = purged {
            write_marker(&self.storage, &dir, &dir.join(PURGED_MARKER), purged).await?;
        }
        match reset {
            Some(incarnation) => write_marker(&self.storage, &dir, &dir.join(RESET_MARKER), incarnation).await,
            None => Ok(()),
        }
    }

    /// Opens a partition this shard owns. `fresh` says the metadata just created it: files
    /// of a deleted partition with the same ids are removed then, but not its own files,
    /// which a clustered node that replays the creation while it catches up already holds
    /// (the `created_at` marker in the directory tells the two apart). One that cannot be
    /// opened (a disk error) is noted for the failed-write retry, and logged once.
    pub(super) async fn open_partition(
        &self,
        namespace: Namespace,
        settings: PartitionSettings,
        fresh: bool,
        created_at: u64,
    ) -> std::io::Result<()> {
        let partition = match self.open_files(namespace, settings, fresh, created_at).await {
            Ok(partition) => partition,
            Err(error) => {
                if self.unopened.borrow_mut().insert(namespace, (fresh, created_at)).is_none() {
                    tracing::error!(%error, partition = %namespace_label(namespace), "cannot open a partition: it serves nothing here until it can (tried again every second)");
                }
                return Err(error);
            }
        };
        if self.unopened.borrow_mut().remove(&namespace).is_some() {
            tracing::info!(partition = %namespace_label(namespace), "opened a partition that could not be opened before");
        }
        if let Some(group) = self.group() {
            self.check_late_partition(group, namespace, &partition);
        }
        let opened = partition.log.try_lock().expect("a new partition is unlocked");
        partition.refresh(&opened);
        partition.publish_offsets(&opened);
        drop(opened);
        let stats = partition.stats.clone();
        self.partitions.borrow_mut().insert(namespace, partition);
        self.shared.partitions.insert(namespace, stats);
        Ok(())
    }

    /// A partition's files, recovered (or made, for a fresh one), and its markers read.
    async fn open_files(
        &self,
        namespace: Namespace,
        settings: PartitionSettings,
        fresh: bool,
        created_at: u64,
    ) -> std::io::Result<Rc<Partition<E::Storage>>> {
        let dir = self.partition_dir(namespace);
        let marker = dir.join(CREATED_AT_MARKER);
        let recorded = read_marker(&self.storage, &marker).await;
        let replayed = recorded == Some(created_at);
        if fresh && !replayed {
            // A new partition must not inherit files of a deleted one with the same ids.
            self.storage.remove_dir_all(&dir).await?;
        }
        let clean = self.shared.clean_start && (!fresh || replayed);
        let spares = self.spares_for_partitions();
        let id = namespace.partition_id();
        let log = PartitionLog::open_with(&self.storage, &dir, id, settings, clean, spares).await?;
        if recorded != Some(created_at) {
            write_marker(&self.storage, &dir, &marker, created_at).await?;
        }
        let reset = read_marker(&self.storage, &dir.join(RESET_MARKER)).await.unwrap_or(0);
        let purged = read_marker(&self.storage, &dir.join(PURGED_MARKER)).await.unwrap_or(0);
        Ok(Rc::new(Partition {
            log: async_lock::Mutex::new(log),
            stats: Arc::new(PartitionStats::new(self.shard_id)),
            closed: Default::default(),
            incarnation: std::cell::Cell::new(created_at.max(reset)),
            wanted_incarnation: std::cell::Cell::new(created_at.max(purged)),
            failed_reset: Default::default(),
            unrecorded_purge: Default::default(),
        }))
    }

    async fn record_purge(&self, namespace: Namespace, incarnation: u64) -> std::io::Result<()> {
        let dir = self.partition_dir(namespace);
        write_marker(&self.storage, &dir, &dir.join(PURGED_MARKER), incarnation).await
    }

    /// Writes the purge records a disk error kept from being written, for copies their
    /// group has not emptied since (an emptied copy records its incarnation itself), so a
    /// restart before the group's reset still knows the copy lags.
    pub(super) async fn record_purges(&self) {
        for (namespace, partition) in self.owned_partitions() {
            if !partition.unrecorded_purge.get() {
                continue;
            }
            let _log = partition.log.lock().await;
            let wanted = partition.wanted_incarnation.get();
            let recorded = partition.closed.get()
                || partition.incarnation.get() >= wanted
                || self.record_purge(namespace, wanted).await.is_ok();
            partition.unrecorded_purge.set(!recorded);
        }
    }

    /// Opens the partitions whose opening failed, as the metadata lists them now; one it no
    /// longer lists (or lists as a newer creation) is forgotten, or removed again if that
    /// happened while it opened.
    pub(super) async fn open_unopened(&self) {
        let unopened: Vec<(Namespace, (bool, u64))> = self.unopened.borrow().iter().map(|(n, o)| (*n, *o)).collect();
        let listed = |namespace: Namespace, created_at: u64| {
            self.metadata.read(|metadata| {
                let topic = metadata.topic_by_ids(namespace.stream_id(), namespace.topic_id())?;
                let listed_at = *topic.partitions.get(namespace.partition_id() as usize)?;
                (listed_at == created_at).then(|| self.partition_settings(&topic.settings))
            })
        };
        for (namespace, (fresh, created_at)) in unopened {
            let Some(settings) = listed(namespace, created_at) else {
                self.unopened.borrow_mut().remove(&namespace);
                continue;
            };
            let opened = self.open_partition(namespace, settings, fresh, created_at).await.is_ok();
            if opened && listed(namespace, created_at).is_none() {
                // Deleted while it opened.
                self.remove_partition(namespace).await;
            }
        }
    }

    /// A partition this shard serves; one the metadata lists that could not be opened is an
    /// I/O error, not a missing partition.
    pub(super) fn owned(&self, namespace: Namespace) -> Result<Rc<Partition<E::Storage>>, ErrorCode> {
        let missing = || {
            if self.unopened.borrow().contains_key(&namespace) {
                ErrorCode::IoError
            } else {
                ErrorCode::PartitionNotFound
            }
        };
        self.partitions.borrow().get(&namespace).cloned().ok_or_else(missing)
    }

    /// Executes one operation on a partition this shard owns. A poll holds the partition's
    /// lock only to plan (and to report or commit after); its disk reads run without it.
    pub(super) async fn execute_partition(&self, namespace: Namespace, op: PartitionOp) -> BusReply {
        let op = match op {
            PartitionOp::Open { settings, fresh, created_at } => {
                return self
                    .open_partition(namespace, settings, fresh, created_at)
                    .await
                    .map(|()| Vec::new().into())
                    .map_err(|_| ErrorCode::IoError);
            }
            PartitionOp::Remove => {
                self.unopened.borrow_mut().remove(&namespace);
                self.remove_partition(namespace).await;
                return Ok(Vec::new().into());
            }
            PartitionOp::Poll { key, strategy, count, auto_commit } => {
                return self.poll(namespace, key, strategy, count, auto_commit).await;
            }
            // A replicated send is written when it commits, under the partition's lock then.
            PartitionOp::Send { messages_count: _, batch, stream_id, topic_id } if let Some(group) = self.group() => {
                let partition = self.owned(namespace)?;
                if partition.closed.get() {
                    return Err(ErrorCode::PartitionNotFound);
                }
                self.refuse_below_floor()?;
                return self.replicate_send(group, namespace, batch, stream_id, topic_id).await.map(Reply::Body);
            }
            PartitionOp::StoreOffset { key, offset } if let Some(group) = self.group() => {
                self.owned(namespace)?;
                return self.replicate_offset(group, namespace, key, Some(offset)).await.map(Reply::Body);
            }
            PartitionOp::DeleteOffset { key } if let Some(group) = self.group() => {
                self.owned(namespace)?;
                return self.replicate_offset(group, namespace, key, None).await.map(Reply::Body);
            }
            PartitionOp::DeleteSegments { count } if let Some(group) = self.group() => {
                let partition = self.owned(namespace)?;
                // Read under the lock with the copy's incarnation: a purge that commits first
                // makes the group refuse it (58), as the offset names the old messages.
                // Counted as the log splits once what it holds is written.
                let (below, incarnation) = {
                    let mut log = partition.log.lock().await;
                    log.flush(&self.storage, false).await.map_err(io_failure("writing before a deletion"))?;
                    (log.start_after_oldest(count), partition.incarnation.get())
                };
                let body = rill_domain::partition_group::delete_segments_body(namespace.packed(), below, incarnation);
                let operation = rill_domain::wire::codes::operation::DELETE_SEGMENTS;
                return self.submit(group, operation, body).await.map(|_| Reply::Body(Vec::new()));
            }
            PartitionOp::Purge { incarnation } if let Some(group) = self.group() => {
                let partition = self.owned(namespace)?;
                {
                    // Under the partition's lock: another node's reset for this purge may be
                    // committing here and emptying the directory the marker goes into, and
                    // a file created during that removal fails it (ENOTEMPTY), leaving the
                    // copy unemptied. The lock is let go before the reset is waited for,
                    // whose apply takes it.
                    let _log = partition.log.lock().await;
                    if incarnation > partition.wanted_incarnation.get() {
                        // Known to lag first: a copy whose record cannot be written must
                        // still serve nothing of what the purge removed (seed 68 of the
                        // disk-fault runs). The next send submits the reset if this fails.
                        partition.wanted_incarnation.set(incarnation);
                        let recorded = self.record_purge(namespace, incarnation).await;
                        partition.unrecorded_purge.set(recorded.is_err());
                        recorded.map_err(io_failure("recording a purge"))?;
                    }
                }
                return self.replicate_reset(group, namespace, incarnation).await.map(Reply::Body);
            }
            op => op,
        };
        let partition = self.owned(namespace)?;
        let mut log = partition.log.lock().await;
        if partition.closed.get() {
            return Err(ErrorCode::PartitionNotFound);
        }
        let offsets_change = matches!(
            op,
            PartitionOp::StoreOffset { .. } | PartitionOp::DeleteOffset { .. } | PartitionOp::Purge { .. }
        );
        let reply = self.execute_locked(namespace, &mut log, op, &partition).await;
        partition.refresh(&log);
        if offsets_change {
            partition.publish_offsets(&log);
        }
        reply.map(Reply::Body)
    }

    /// Closes a removed partition; its files go with its directory, which the metadata
    /// operation removes next, spares included.
    async fn remove_partition(&self, namespace: Namespace) {
        let removed = self.partitions.borrow_mut().remove(&namespace);
        self.shared.partitions.remove(namespace);
        if let Some(partition) = removed {
            partition.closed.set(true);
            // Wait for operations in flight on it to finish before its files go; its
            // journal's buffers go back to the pool with the log.
            drop(partition.log.lock().await);
        }
    }

    async fn execute_locked(
        &self,
        namespace: Namespace,
        log: &mut PartitionLog<E::Storage>,
        op: PartitionOp,
        partition: &Partition<E::Storage>,
    ) -> ShardReply {
        let stats = &partition.stats;
        let partition_id = namespace.partition_id();
        match op {
            PartitionOp::Send { messages_count: _, batch, stream_id, topic_id } => {
                let appended = self.append(namespace, log, batch).await?;
                stats.appended_messages.fetch_add(appended.stored as u64, Ordering::Relaxed);
                stats.appended_bytes.fetch_add(appended.bytes, Ordering::Relaxed);
                let mut out = Vec::new();
                response::send_confirmation(&mut out, stream_id, topic_id, partition_id, appended.base_offset);
                Ok(out)
            }
            PartitionOp::GetOffset { key } => {
                let mut out = Vec::new();
                let behind = self.copy_behind(namespace, partition);
                if let Some(stored) = log.offsets.get(key).filter(|_| !behind) {
                    out.extend_from_slice(&partition_id.to_le_bytes());
                    out.extend_from_slice(&log.current_offset().to_le_bytes());
                    out.extend_from_slice(&stored.to_le_bytes());
                }
                Ok(out)
            }
            PartitionOp::StoreOffset { key, offset } => {
                let fsync = log.settings.consumer_offset_fsync;
                log.offsets.store(&self.storage, key, offset, fsync).await.map_err(io_failure("storing an offset"))?;
                Ok(0u32.to_le_bytes().to_vec())
            }
            PartitionOp::DeleteOffset { key } => match log.offsets.delete(&self.storage, key).await {
                Ok(true) => Ok(0u32.to_le_bytes().to_vec()),
                Ok(false) => Err(ErrorCode::ConsumerOffsetNotFound),
                Err(error) => Err(io_failure("deleting an offset")(error)),
            },
            PartitionOp::Flush { fsync } => {
                let was_read_only = log.write_failure().is_some();
                let result = log.flush(&self.storage, fsync).await;
                self.note_write(namespace, was_read_only, log.write_failure().is_some(), result.as_ref().err());
                result.map(|()| Vec::new()).map_err(|_| ErrorCode::CannotSaveMessagesToSegment)
            }
            PartitionOp::DeleteSegments { count } => {
                let detached =
                    log.delete_segments(&self.storage, count).await.map_err(io_failure("deleting segments"))?;
                self.shared.telemetry.data.retention_segments.fetch_add(detached.segments as u64, Ordering::Relaxed);
                Ok(Vec::new())
            }
            PartitionOp::Purge { incarnation } => {
                let dir = self.partition_dir(namespace);
                let purged = read_marker(&self.storage, &dir.join(RESET_MARKER)).await;
                let created = read_marker(&self.storage, &dir.join(CREATED_AT_MARKER)).await;
                // This copy went through this purge already, or was created after it (a topic
                // deleted and created again since): the purge is committed again by a
                // clustered node's metadata recovery, and what was stored since stays.
                if purged.max(created).is_some_and(|done| done >= incarnation) {
                    return Ok(Vec::new());
                }
                let purged = self.purge_partition(namespace, log, Some(incarnation)).await;
                purged.map_err(io_failure("purging a partition"))?;
                Ok(Vec::new())
            }
            PartitionOp::Open { .. } | PartitionOp::Remove | PartitionOp::Poll { .. } => {
                unreachable!("handled before locking")
            }
        }
    }

    /// A poll: planned under the partition's lock (the start offset, the batches to read, the
    /// journal's copied in), read after it; the lock is taken again only to report damage
    /// or to auto-commit.
    async fn poll(
        &self,
        namespace: Namespace,
        key: ConsumerKey,
        strategy: PollingStrategy,
        count: u32,
        auto_commit: bool,
    ) -> BusReply {
        let partition = self.owned(namespace)?;
        let (start, current_offset, plan) = {
            let log = partition.log.lock().await;
            if partition.closed.get() {
                return Err(ErrorCode::PartitionNotFound);
            }
            let cursor = PartitionCursor {
                first_offset: log.first_offset(),
                next_offset: log.next_offset(),
                stored_offset: log.offsets.get(key),
            };
            let start = match strategy {
                PollingStrategy::Timestamp(timestamp) if count > 0 => log.offset_at_timestamp(timestamp),
                strategy => polling::start_offset(strategy, count, cursor),
            };
            // A copy that lags a purge or a recreation serves what the partition holds now
            // as far as it knows: nothing.
            if self.copy_behind(namespace, &partition) {
                (None, 0, None)
            } else {
                let plan = start.map(|start| log.plan_poll(start, count, self.shared.pool));
                (start, log.current_offset(), plan)
            }
        };
        let polled = match plan {
            Some(plan) => plan.read().await.map_err(io_failure("a poll read"))?,
            None => {
                let mut frame = self.shared.pool.acquire(REPLY_ROOM);
                frame.truncate(REPLY_ROOM);
                Polled { frame: frame.whole(), messages: 0, damaged: None }
            }
        };
        let mut replicated_commit = None;
        if polled.damaged.is_some() || (auto_commit && polled.messages > 0) {
            let mut log = partition.log.lock().await;
            if let Some(damaged) = &polled.damaged {
                self.report_damaged(&mut log, namespace, damaged, "poll");
                if polled.messages == 0 {
                    // Nothing before the damaged batch: the poll fails rather than skip it.
                    self.shared.telemetry.data.damaged_reads.fetch_add(1, Ordering::Relaxed);
                    return Err(ErrorCode::InvalidMessageChecksum);
                }
            }
            if auto_commit && polled.messages > 0 {
                let last = start.unwrap_or(0).max(log.first_offset()) + polled.messages as u64 - 1;
                match self.group() {
                    // Replicated like any store, after the lock: the commit takes it again.
                    Some(_) => replicated_commit = Some(last),
                    None => {
                        let fsync = log.settings.consumer_offset_fsync;
                        let stored = log.offsets.store(&self.storage, key, last, fsync).await;
                        partition.publish_offsets(&log);
                        stored.map_err(io_failure("auto-commit"))?;
                    }
                }
            }
        }
        if let (Some(last), Some(group)) = (replicated_commit, self.group()) {
            self.replicate_offset(group, namespace, key, Some(last)).await?;
        }
        let Polled { mut frame, messages, .. } = polled;
        if let Some(encryptor) = &self.encryptor {
            // Sealed messages open into a reply of their own: the plain bytes are shorter.
            let mut opened = Vec::with_capacity(frame.len());
            opened.extend_from_slice(&frame[..REPLY_ROOM]);
            encryptor.open_records(&frame[REPLY_ROOM..], &mut opened)?;
            frame = crate::memory_pool::PoolSlice::plain(opened);
        }
        partition.stats.polled_messages.fetch_add(messages as u64, Ordering::Relaxed);
        partition.stats.polled_bytes.fetch_add(frame.len().saturating_sub(REPLY_ROOM) as u64, Ordering::Relaxed);
        let mut prefix = Vec::with_capacity(POLL_PREFIX_SIZE);
        response::poll_prefix(&mut prefix, namespace.partition_id(), current_offset, messages);
        frame[HEADER_SIZE..REPLY_ROOM].copy_from_slice(&prefix);
        Ok(Reply::Frame(frame))
    }
}

impl<E: Env> Shard<E> {
    /// Appends a sent batch on its owner, refused early while the data volume is below its
    /// free-space floor. A failed write answers an error (the batch is not acknowledged)
    /// and leaves the partition read-only until a write succeeds.
    async fn append(
        &self,
        namespace: Namespace,
        log: &mut PartitionLog<E::Storage>,
        batch: crate::memory_pool::PoolSlice,
    ) -> Result<crate::partition::Appended, ErrorCode> {
        self.refuse_below_floor()?;
        let data = &self.shared.telemetry.data;
        let batch = self.seal(batch)?;
        let was_read_only = log.write_failure().is_some();
        let result = match self.flush_queue.running() {
            true => log.append_deferring(&self.storage, batch, self.now_us()).await,
            false => log.append(&self.storage, batch, self.now_us()).await,
        };
        self.note_write(namespace, was_read_only, log.write_failure().is_some(), result.as_ref().err());
        let appended = result.map_err(|_| {
            data.sends_refused.fetch_add(1, Ordering::Relaxed);
            ErrorCode::CannotSaveMessagesToSegment
        })?;
        let _ = data.disk_available.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |available| {
            Some(available.saturating_sub(appended.bytes))
        });
        if appended.duplicates > 0 {
            data.duplicates_dropped.fetch_add(appended.duplicates as u64, Ordering::Relaxed);
        }
        if appended.flush_due {
            self.flush_queue.push(namespace);
        }
        Ok(appended)
    }

    /// Refuses a send while the disk is below its free-space floor.
    fn refuse_below_floor(&self) -> Result<(), ErrorCode> {
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

    /// The batch as it is stored: sealed when encryption at rest is on.
    pub(super) fn seal(
        &self,
        batch: crate::memory_pool::PoolSlice,
    ) -> Result<crate::memory_pool::PoolSlice, ErrorCode> {
        let Some(encryptor) = &self.encryptor else { return Ok(batch) };
        let count = rill_domain::batch::BatchHeader::read(&batch).message_count as usize;
        let mut sealed = Vec::with_capacity(batch.len() + count * crate::encryption::SEAL_OVERHEAD);
        encryptor.seal_batch(&batch, &mut sealed)?;
        Ok(crate::memory_pool::PoolSlice::plain(sealed))
    }

    /// Counts a failed write and logs each change of a partition's read-only state once.
    pub(super) fn note_write(
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
                    tracing::error!(%error, partition = %namespace_label(namespace), "partition write failed: the partition is read-only until a write succeeds");
                }
            }
            None if was_read_only && !now_read_only => {
                tracing::info!(partition = %namespace_label(namespace), "partition takes writes again");
            }
            None => {}
        }
    }
}
