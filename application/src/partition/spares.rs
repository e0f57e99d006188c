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

use std::cell::{Cell, RefCell};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::Detached;
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
}

/// One shard's spare logs.
#[derive(Debug)]
pub struct SpareLogs {
    dir: PathBuf,
    budget_bytes: u64,
    /// Logs shorter than this are removed as before (`MIN_SPARE_BYTES`).
    min_bytes: u64,
    /// Spares and their sizes, oldest first.
    files: RefCell<Vec<(PathBuf, u64)>>,
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
            next_name: Cell::new(0),
            counters,
            short_of_space: Cell::new(false),
        }
    }

    /// The same, keeping logs from `min_bytes` on (the simulations' logs are small).
    pub fn keeping_from(self, min_bytes: u64) -> Self {
        Self { min_bytes, ..self }
    }

    pub fn held_bytes(&self) -> u64 {
        self.files.borrow().iter().map(|(_, bytes)| bytes).sum()
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
            self.files.borrow_mut().push((path, bytes));
            self.counters.files.fetch_add(1, Relaxed);
            self.counters.bytes.fetch_add(bytes, Relaxed);
        }
        Ok(())
    }

    /// Removes every spare, and the directory.
    pub async fn clear<S: Storage>(&self, storage: &S) -> io::Result<()> {
        for (_, bytes) in self.files.borrow_mut().drain(..) {
            self.forget(bytes);
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
        if bytes < self.min_bytes || self.held_bytes() + bytes > self.budget_bytes || self.short_of_space.get() {
            return false;
        }
        let spare = self.dir.join(format!("{:020}.spare", self.next_name.get()));
        self.next_name.set(self.next_name.get() + 1);
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
        self.files.borrow_mut().push((spare, bytes));
        self.counters.files.fetch_add(1, Relaxed);
        self.counters.bytes.fetch_add(bytes, Relaxed);
        self.counters.kept.fetch_add(1, Relaxed);
        true
    }

    /// Keeps what it can of the logs retention or DELETE_SEGMENTS detached, before the
    /// rest of their files are removed.
    pub async fn keep_detached<S: Storage>(&self, storage: &S, detached: &Detached) {
        for (log, bytes) in &detached.spare_logs {
            self.keep(storage, log, *bytes).await;
        }
    }

    /// A new direct log at `path` over the newest spare, with the bytes that spare holds,
    /// or `None` when there is none (or it cannot be reused: it is dropped then).
    pub async fn take<S: Storage>(&self, storage: &S, path: &Path) -> Option<(S::File, u64)> {
        loop {
            let (spare, bytes) = self.files.borrow_mut().pop()?;
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
