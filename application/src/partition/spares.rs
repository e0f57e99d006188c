//! A partition's spare logs: the files of its own direct segments that retention or
//! DELETE_SEGMENTS removed, kept in its directory (`<start offset>.spare`) for its next
//! direct segments to be written over. An fsynced append into blocks a file already holds,
//! within its size, needs no filesystem journal commit; an append that grows the file, or
//! writes into blocks only reserved, commits one at every fsync (docs/direct-io.md, "Spare
//! logs").
//!
//! A spare never leaves its partition: it lives in the partition's directory, goes with it
//! when the partition is deleted or purged, and only that partition's later segments take
//! it. So no file ever holds another partition's bytes.
//!
//! A spare's old bytes must never read as the new log's. They are the partition's own
//! batches from before, whose offsets are all below any new batch's, so recovery's scan,
//! which takes only the very next offset, can never take one. Beyond that, before a file
//! becomes a spare its first block is zeroed and synced, and each append to a reused file
//! leaves a zeroed batch header after it on disk (`REUSE_GUARD_BYTES`). A clean stop or a
//! seal cuts the file to its last batch.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::memory_pool::PoolSlice;
use crate::ports::{Storage, StorageFile};

/// Files smaller than this are not worth keeping: removed as before. Half the smallest
/// segment a topic may have (1 MiB), so a sealed one, which may stop a batch short of the
/// size, is kept.
pub const MIN_SPARE_BYTES: u64 = 512 << 10;

/// The suffix of a spare's name in its partition's directory, after the start offset of
/// the segment whose log it was.
pub const SPARE_SUFFIX: &str = ".spare";

/// A partition keeps at most this many spares: a roll takes one at a time, and retention
/// seldom removes more than one segment between two rolls.
pub const MAX_SPARES_PER_PARTITION: usize = 2;

/// What is zeroed at a spare's start: the block an `O_DIRECT` append rewrites whole.
const ZEROED_HEAD_BYTES: usize = 4096;

/// Every partition's spares together, for `/metrics` and the budget.
#[derive(Debug, Default)]
pub struct SpareLogCounters {
    pub files: AtomicU64,
    pub bytes: AtomicU64,
    /// Spares new logs were written over, and removed logs kept, since start.
    pub taken: AtomicU64,
    pub kept: AtomicU64,
    /// Set while the data volume is short of free space: nothing is kept.
    short_of_space: AtomicBool,
}

/// The budget every partition's spares draw on: one for the whole server.
#[derive(Debug, Clone)]
pub struct SpareBudget {
    budget_bytes: u64,
    /// Logs shorter than this are removed as before (`MIN_SPARE_BYTES`).
    min_bytes: u64,
    counters: Arc<SpareLogCounters>,
}

impl SpareBudget {
    /// Spares of at most `budget_bytes` together (0 keeps none).
    pub fn new(budget_bytes: u64, counters: Arc<SpareLogCounters>) -> Self {
        Self { budget_bytes, min_bytes: MIN_SPARE_BYTES, counters }
    }

    /// The same, keeping logs from `min_bytes` on (the simulations' logs are small).
    pub fn keeping_from(self, min_bytes: u64) -> Self {
        Self { min_bytes, ..self }
    }

    pub fn counters(&self) -> &SpareLogCounters {
        &self.counters
    }

    /// Whether the volume has `available_bytes` free above its `floor_bytes` for spares:
    /// the budget and more. Short of it, none are kept (and the shards remove theirs), so a
    /// send is never refused for space a spare holds.
    pub fn note_space(&self, available_bytes: u64, floor_bytes: u64) -> bool {
        let short = available_bytes < floor_bytes.saturating_add(self.budget_bytes);
        let was_short = self.counters.short_of_space.swap(short, Relaxed);
        if short && !was_short {
            tracing::warn!(available_bytes, floor_bytes, "short of free space: spare logs are removed");
        }
        short
    }

    fn admits(&self, bytes: u64) -> bool {
        bytes >= self.min_bytes
            && !self.counters.short_of_space.load(Relaxed)
            && self.counters.bytes.load(Relaxed).saturating_add(bytes) <= self.budget_bytes
    }
}

/// A kept log file and the bytes it holds.
#[derive(Debug)]
struct Spare {
    path: PathBuf,
    bytes: u64,
}

/// One partition's spares, oldest first. Dropped with its log, it gives their bytes back
/// to the budget (the files stay for a later start, or go with the partition's directory).
#[derive(Debug)]
pub struct OwnSpares {
    budget: SpareBudget,
    files: Vec<Spare>,
}

impl OwnSpares {
    pub fn new(budget: SpareBudget) -> Self {
        Self { budget, files: Vec::new() }
    }

    pub fn count(&self) -> usize {
        self.files.len()
    }

    /// Takes up the spares the partition's directory holds (`names`, as listed at open):
    /// each was zeroed at its start and synced before it was named a spare, so it is as
    /// safe to write over as when it was kept. What the budget does not admit is removed.
    pub(super) async fn take_up<S: Storage>(&mut self, storage: &S, dir: &Path, names: &[String]) -> io::Result<()> {
        for name in names.iter().filter(|name| name.ends_with(SPARE_SUFFIX)) {
            let path = dir.join(name);
            let bytes = storage.open(&path).await?.len().await?;
            if !self.hold(path.clone(), bytes) {
                storage.remove_file(&path).await?;
            }
        }
        Ok(())
    }

    /// Holds a file named as a spare when the budget admits it; false otherwise.
    fn hold(&mut self, path: PathBuf, bytes: u64) -> bool {
        if self.files.len() >= MAX_SPARES_PER_PARTITION || !self.budget.admits(bytes) {
            return false;
        }
        let counters = &self.budget.counters;
        counters.files.fetch_add(1, Relaxed);
        counters.bytes.fetch_add(bytes, Relaxed);
        self.files.push(Spare { path, bytes });
        true
    }

    fn forget(&self, spare: &Spare) {
        self.budget.counters.files.fetch_sub(1, Relaxed);
        self.budget.counters.bytes.fetch_sub(spare.bytes, Relaxed);
    }

    /// Keeps a detached log (`log`, renamed `*.deleted` and prepared by [`prepare_spare`])
    /// of `bytes` as the spare `spare` when the budget admits it: renamed to that name.
    /// False when it was not kept; the caller removes it with the rest.
    pub(super) async fn keep<S: Storage>(&mut self, storage: &S, log: &Path, spare: PathBuf, bytes: u64) -> bool {
        // Held first, so the budget counts it while the rename runs.
        if !self.hold(spare.clone(), bytes) {
            return false;
        }
        if let Err(error) = storage.rename(log, &spare).await {
            tracing::debug!(%error, log = %log.display(), "a removed segment's log is not kept as a spare");
            let held = self.files.pop().expect("held just now");
            self.forget(&held);
            return false;
        }
        self.budget.counters.kept.fetch_add(1, Relaxed);
        true
    }

    /// A new direct log at `path` over the newest spare, with the bytes that spare holds,
    /// or `None` when there is none (or it cannot be reused: it is dropped then).
    pub(super) async fn take<S: Storage>(&mut self, storage: &S, path: &Path) -> Option<(S::File, u64)> {
        while let Some(spare) = self.files.pop() {
            self.forget(&spare);
            match storage.reuse_direct(&spare.path, path).await {
                Ok(file) => {
                    self.budget.counters.taken.fetch_add(1, Relaxed);
                    return Some((file, spare.bytes));
                }
                Err(error) => {
                    tracing::warn!(%error, spare = %spare.path.display(), "a spare log cannot be reused");
                    let _ = storage.remove_file(&spare.path).await;
                }
            }
        }
        None
    }

    /// Removes every spare (the volume is short of space).
    pub(super) async fn remove_all<S: Storage>(&mut self, storage: &S) {
        for spare in std::mem::take(&mut self.files) {
            self.forget(&spare);
            if let Err(error) = storage.remove_file(&spare.path).await {
                tracing::warn!(%error, spare = %spare.path.display(), "cannot remove a spare log");
            }
        }
    }

    /// Forgets every spare, whose files went with the partition's directory (a purge).
    pub(super) fn forget_all(&mut self) {
        for spare in std::mem::take(&mut self.files) {
            self.forget(&spare);
        }
    }
}

impl Drop for OwnSpares {
    fn drop(&mut self) {
        self.forget_all();
    }
}

/// Readies a detached log file (renamed `*.deleted`, so nothing else opens it) to become
/// a spare: its first block zeroed and synced, so a log written over it that crashes
/// before its first append finds no batch. Runs off the partition's lock.
pub async fn prepare_spare<S: Storage>(storage: &S, log: &Path) -> io::Result<()> {
    let file = storage.open(log).await?;
    let zeros = PoolSlice::plain(vec![0; ZEROED_HEAD_BYTES]);
    let (written, _) = file.write_at(vec![zeros], 0).await;
    written?;
    file.sync().await
}

/// The spare a detached log starting at `start_offset` becomes in `dir`.
pub fn spare_path(dir: &Path, start_offset: u64) -> PathBuf {
    dir.join(format!("{start_offset:020}{SPARE_SUFFIX}"))
}
