//! Spare logs: the files of removed direct logs (a deleted partition's, segments retention
//! deleted), kept up to a byte budget per shard for new direct logs to be written over. An
//! fsynced append into blocks a file already holds, within its size, needs no filesystem
//! journal commit; an append that grows the file, or writes into blocks only reserved,
//! commits one at every fsync. On ext4 here a 1 MiB direct write and fsync took about 1.6
//! times as long appending as writing over (docs/direct-io.md, "Spare logs").
//!
//! A spare's old bytes must never read as the new log's. Before a file becomes a spare its
//! first block is zeroed and synced, so a crash before the first append finds no batch; each
//! append to a reused file leaves a zeroed batch header after it on disk
//! (`REUSE_GUARD_BYTES`), so recovery after a crash, which stops at the first bytes past the
//! index that are not the next batch, stops there. A clean stop or a seal cuts the file to
//! its last batch. Spares live in their own directory per shard, taken up again at start.
//!
//! Buffered logs (a deleted partition's, where the shard allows it) are kept too, for the
//! first log of a new buffered partition: writes over pages still cached allocate nothing,
//! and the removal frees none. Nothing guards their old bytes, and a buffered append is not
//! synced, so the new log is told apart from them by time instead: before the spare becomes
//! the log, a floor file (`segment::floor_file_name`) records a timestamp above every batch
//! the spare holds, and every batch the new log takes is stamped at or above it (the
//! partition's stamps never go below its floor). Recovery takes no batch under the floor.
//! Buffered spares live only as long as the process: a start removes them with what is not
//! a spare. A new log that finds none gets half of what another log of its shard has of a
//! spare past its end (`PartitionLog::give_up_half_spare_room`): cut from that file, its
//! cached pages are the first the kernel hands to the new log's writes.

use std::cell::{Cell, RefCell};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{Detached, PartitionLog, Segment};
use crate::memory_pool::PoolSlice;
use crate::ports::{Storage, StorageFile};

/// Files smaller than this are not worth keeping: removed as before.
pub const MIN_SPARE_BYTES: u64 = 1 << 20;

/// What is zeroed at a spare's start: the block an `O_DIRECT` append rewrites whole.
const ZEROED_HEAD_BYTES: usize = 4096;

/// Every shard's spares together, for `/metrics`.
#[derive(Debug, Default)]
pub struct SpareLogCounters {
    pub files: AtomicU64,
    pub bytes: AtomicU64,
    /// Spares new logs were written over, and removed logs kept, since start.
    pub taken: AtomicU64,
    pub kept: AtomicU64,
    /// Bytes of spares' old logs cut from logs written over them, for new logs that found
    /// no spare, since start.
    pub room_shared_bytes: AtomicU64,
}

/// A kept log file and the bytes it holds.
#[derive(Debug)]
struct Spare {
    path: PathBuf,
    bytes: u64,
    /// A buffered log's newest batch timestamp; `None` for a direct log.
    newest_timestamp: Option<u64>,
}

/// A buffered spare taken for a new log: its path, its bytes, and the floor the new log's
/// stamps must keep to (above every batch it holds).
#[derive(Debug)]
pub struct BufferedSpare {
    pub path: PathBuf,
    pub bytes: u64,
    pub floor: u64,
}

/// One shard's spare logs.
#[derive(Debug)]
pub struct SpareLogs {
    dir: PathBuf,
    budget_bytes: u64,
    /// Logs shorter than this are removed as before (`MIN_SPARE_BYTES`).
    min_bytes: u64,
    /// Spares, oldest first.
    files: RefCell<Vec<Spare>>,
    /// Whether removed buffered logs are kept (not where partitions are replicated: their
    /// copies must stamp alike, and a floor is one node's).
    buffered: Cell<bool>,
    next_name: Cell<u64>,
    counters: Arc<SpareLogCounters>,
    /// Set while the data volume is short of free space: nothing is kept.
    short_of_space: Cell<bool>,
}

impl SpareLogs {
    /// Spares under `dir`, at most `budget_bytes` of them (0 keeps none).
    pub fn new(dir: PathBuf, budget_bytes: u64, counters: Arc<SpareLogCounters>) -> Self {
        Self {
            dir,
            budget_bytes,
            min_bytes: MIN_SPARE_BYTES,
            files: RefCell::default(),
            buffered: Cell::new(false),
            next_name: Cell::new(0),
            counters,
            short_of_space: Cell::new(false),
        }
    }

    /// The same, keeping logs from `min_bytes` on (the simulations' logs are small).
    pub fn keeping_from(self, min_bytes: u64) -> Self {
        Self { min_bytes, ..self }
    }

    /// Keeps removed buffered logs from now on.
    pub fn allow_buffered(&self) {
        self.buffered.set(true);
    }

    pub fn buffered_allowed(&self) -> bool {
        self.buffered.get()
    }

    pub fn held_bytes(&self) -> u64 {
        self.files.borrow().iter().map(|spare| spare.bytes).sum()
    }

    pub fn count(&self) -> usize {
        self.files.borrow().len()
    }

    /// Whether the volume has `available_bytes` free above its `floor_bytes` for spares:
    /// the budget and more. Short of it, the spares held are removed and none are kept
    /// until it has (a send is never refused for space a spare holds).
    pub async fn fit_to_space<S: Storage>(&self, storage: &S, available_bytes: u64, floor_bytes: u64) {
        let short = available_bytes < floor_bytes.saturating_add(self.budget_bytes);
        self.short_of_space.set(short);
        if short && self.count() > 0 {
            tracing::warn!(available_bytes, floor_bytes, "short of free space: spare logs removed");
            if let Err(error) = self.clear(storage).await {
                tracing::warn!(%error, "cannot remove the spare logs");
            }
        }
    }

    /// Takes up the spares an earlier run left (at start, before any is kept): each was
    /// zeroed at its start and synced before it moved in, so it is as safe to write over as
    /// when it was kept. What does not fit the budget, or is not a spare, is removed.
    pub async fn recover<S: Storage>(&self, storage: &S) -> io::Result<()> {
        for name in storage.list_dir(&self.dir).await? {
            let path = self.dir.join(&name);
            let number = name.strip_suffix(".spare").and_then(|stem| stem.parse::<u64>().ok());
            let bytes = match number {
                Some(_) => storage.open(&path).await?.len().await?,
                None => 0,
            };
            if bytes < self.min_bytes || self.held_bytes() + bytes > self.budget_bytes {
                storage.remove_file(&path).await?;
                continue;
            }
            self.next_name.set(self.next_name.get().max(number.unwrap_or(0) + 1));
            self.files.borrow_mut().push(Spare { path, bytes, newest_timestamp: None });
            self.counters.files.fetch_add(1, Relaxed);
            self.counters.bytes.fetch_add(bytes, Relaxed);
        }
        Ok(())
    }

    /// Removes every spare, and the directory.
    pub async fn clear<S: Storage>(&self, storage: &S) -> io::Result<()> {
        for spare in self.files.borrow_mut().drain(..) {
            self.forget(spare.bytes);
        }
        storage.remove_dir_all(&self.dir).await
    }

    fn forget(&self, bytes: u64) {
        self.counters.files.fetch_sub(1, Relaxed);
        self.counters.bytes.fetch_sub(bytes, Relaxed);
    }

    /// Keeps the log file of a removed segment (`bytes` long, its partition gone or past
    /// it) as a spare when the budget has room: its first block zeroed and synced, then
    /// moved into the spares' directory. False when it was not kept; the caller removes it
    /// as before. A failure on the way leaves the file where it was.
    pub async fn keep<S: Storage>(&self, storage: &S, log: &Path, bytes: u64) -> bool {
        let Some(spare) = self.room_for(bytes, "spare") else { return false };
        let moved = async {
            let file = storage.open(log).await?;
            let zeros = PoolSlice::plain(vec![0; ZEROED_HEAD_BYTES]);
            let (written, _) = file.write_at(vec![zeros], 0).await;
            written?;
            file.sync().await?;
            storage.create_dir_all(&self.dir).await?;
            storage.rename(log, &spare).await
        };
        if let Err(error) = moved.await {
            tracing::debug!(%error, log = %log.display(), "a removed segment's log is not kept as a spare");
            return false;
        }
        self.hold(Spare { path: spare, bytes, newest_timestamp: None });
        true
    }

    /// Keeps a removed buffered log (`bytes` long, its newest batch stamped
    /// `newest_timestamp`) as a spare when buffered spares are allowed and the budget has
    /// room: moved as it is, its pages left cached. False when it was not kept.
    pub async fn keep_buffered<S: Storage>(&self, storage: &S, log: &Path, bytes: u64, newest_timestamp: u64) -> bool {
        if !self.buffered.get() {
            return false;
        }
        let Some(spare) = self.room_for(bytes, "bspare") else { return false };
        let moved = async {
            storage.create_dir_all(&self.dir).await?;
            storage.rename(log, &spare).await
        };
        if let Err(error) = moved.await {
            tracing::debug!(%error, log = %log.display(), "a removed buffered log is not kept as a spare");
            return false;
        }
        self.hold(Spare { path: spare, bytes, newest_timestamp: Some(newest_timestamp) });
        true
    }

    /// The path a kept log of `bytes` moves to, when the budget has room for it (the name's
    /// `extension` tells the kinds apart; a start takes up only `.spare` files).
    fn room_for(&self, bytes: u64, extension: &str) -> Option<PathBuf> {
        if bytes < self.min_bytes || self.held_bytes() + bytes > self.budget_bytes || self.short_of_space.get() {
            return None;
        }
        let spare = self.dir.join(format!("{:020}.{extension}", self.next_name.get()));
        self.next_name.set(self.next_name.get() + 1);
        Some(spare)
    }

    fn hold(&self, spare: Spare) {
        self.counters.files.fetch_add(1, Relaxed);
        self.counters.bytes.fetch_add(spare.bytes, Relaxed);
        self.counters.kept.fetch_add(1, Relaxed);
        self.files.borrow_mut().push(spare);
    }

    /// Keeps what it can of the logs retention or DELETE_SEGMENTS detached, before the
    /// rest of their files are removed.
    pub async fn keep_detached<S: Storage>(&self, storage: &S, detached: &Detached) {
        for (log, bytes) in &detached.spare_logs {
            self.keep(storage, log, *bytes).await;
        }
    }

    /// The newest buffered spare, for a new log whose stamps may start at `now_us`: its
    /// floor is above its newest batch and at most `now_us` (a spare stamped later, by a
    /// clock since set back, is left). The caller records the floor, then reuses the file
    /// (`Storage::reuse_buffered`), or removes it.
    pub fn take_buffered(&self, now_us: u64) -> Option<BufferedSpare> {
        let mut files = self.files.borrow_mut();
        let found = files.iter().rposition(|spare| spare.newest_timestamp.is_some_and(|newest| newest < now_us))?;
        let Spare { path, bytes, newest_timestamp } = files.remove(found);
        drop(files);
        self.forget(bytes);
        Some(BufferedSpare { path, bytes, floor: newest_timestamp.unwrap_or(0) + 1 })
    }

    /// Counts a buffered spare written over (`take_buffered` leaves that to the caller,
    /// whose reuse may fail).
    pub fn count_taken(&self) {
        self.counters.taken.fetch_add(1, Relaxed);
    }

    /// Counts bytes of a spare's old log cut for a new log that found no spare.
    pub fn count_room_shared(&self, bytes: u64) {
        self.counters.room_shared_bytes.fetch_add(bytes, Relaxed);
    }

    /// A new direct log at `path` over the newest direct spare, with the bytes that spare holds,
    /// or `None` when there is none (or it cannot be reused: it is dropped then).
    pub async fn take<S: Storage>(&self, storage: &S, path: &Path) -> Option<(S::File, u64)> {
        loop {
            let found = self.files.borrow().iter().rposition(|spare| spare.newest_timestamp.is_none())?;
            let Spare { path: spare, bytes, .. } = self.files.borrow_mut().remove(found);
            self.forget(bytes);
            match storage.reuse_direct(&spare, path).await {
                Ok(file) => {
                    self.counters.taken.fetch_add(1, Relaxed);
                    return Some((file, bytes));
                }
                Err(error) => {
                    tracing::warn!(%error, spare = %spare.display(), "a spare log cannot be reused");
                    let _ = storage.remove_file(&spare).await;
                }
            }
        }
    }
}

/// Whether a partition's new buffered logs may go over its shard's buffered spares.
pub(super) fn buffered_over_spares(direct_log: bool, spares: Option<&SpareLogs>) -> bool {
    !direct_log && spares.is_some_and(SpareLogs::buffered_allowed)
}

impl<S: Storage> PartitionLog<S> {
    /// Bytes of a buffered spare's old log past the active log's end, still in its file.
    pub fn spare_room(&self) -> u64 {
        self.segments.last().map_or(0, Segment::spare_room)
    }

    /// Whether the log could have gone over a buffered spare and holds none of one past
    /// its end: for a new partition's first log, one that found no spare to take.
    pub fn lacks_buffered_spare(&self) -> bool {
        buffered_over_spares(self.settings.direct_log, self.spares.as_deref()) && self.spare_room() == 0
    }

    /// Cuts the second half of the active log's spare room from its file, for a new log of
    /// the same shard that found no spare: freed just before that log's first writes, the
    /// cached pages are the first the kernel hands them. Returns the bytes cut.
    pub async fn give_up_half_spare_room(&mut self) -> io::Result<u64> {
        let given_up = match self.segments.last_mut() {
            Some(active) => active.give_up_half_spare_room().await?,
            None => 0,
        };
        if let Some(spares) = &self.spares {
            spares.count_room_shared(given_up);
        }
        Ok(given_up)
    }
}
