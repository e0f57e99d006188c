//! File storage on compio, and the offload of CPU-heavy work to compio's blocking pool.
//! Reads, writes and fsyncs (a directory's too) go through io_uring; listing and recursive
//! removal use std, because io_uring has no opcode for them, and they run only when a
//! partition opens or is deleted, never on a send or poll (removal on the blocking pool).
//! Files opened direct write with `O_DIRECT` (see `direct`). Reservations are `fallocate`
//! calls that keep the file's size.

mod direct;
mod recent;

use std::cell::RefCell;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::fs::{File, OpenOptions};
use compio::io::{AsyncReadAtExt, AsyncWriteAtExt};
use compio::runtime::ResumeUnwind;
use rill_application::latency::Histogram;
use rill_application::memory_pool::{MemoryPool, PoolSlice};
use rill_application::ports::{Space, Storage, StorageFile};

/// With a histogram, every file fsync's duration is recorded in it (the server's
/// `rill_fsync_duration_seconds`). With a pool, direct writes stage their blocks in its
/// buffers; with a budget for recent writes, the last of those blocks stay for reads (one
/// shard's storage and its clones share them).
#[derive(Debug, Clone, Default)]
pub struct UringStorage {
    fsync_latency: Option<Arc<Histogram>>,
    pool: Option<&'static MemoryPool>,
    recent: Option<Rc<RefCell<recent::RecentWrites>>>,
}

impl UringStorage {
    pub fn timing_fsyncs(histogram: Arc<Histogram>) -> Self {
        Self { fsync_latency: Some(histogram), ..Self::default() }
    }

    pub fn with_pool(self, pool: &'static MemoryPool) -> Self {
        Self { pool: Some(pool), ..self }
    }

    /// Keeps up to `budget_bytes` of the latest direct writes for reads (0: none).
    pub fn keeping_recent_writes(self, budget_bytes: usize) -> Self {
        let recent = (budget_bytes > 0).then(|| Rc::new(RefCell::new(recent::RecentWrites::new(budget_bytes))));
        Self { recent, ..self }
    }
}

#[derive(Debug)]
pub struct UringFile {
    file: File,
    fsync_latency: Option<Arc<Histogram>>,
    /// The `O_DIRECT` descriptor a direct file's appends go through.
    direct: Option<direct::DirectLog>,
}

impl StorageFile for UringFile {
    async fn len(&self) -> io::Result<u64> {
        if let Some(direct) = self.active_direct() {
            return Ok(direct.len());
        }
        Ok(self.file.metadata().await?.len())
    }

    async fn read_exact_at(&self, mut buf: PoolSlice, position: u64) -> (io::Result<()>, PoolSlice) {
        if buf.is_empty() {
            return (Ok(()), buf);
        }
        // Fresh bytes of a direct log are in memory, not in the page cache.
        if let Some(direct) = self.active_direct()
            && direct.read_recent(position, &mut buf)
        {
            return (Ok(()), buf);
        }
        // The kernel fills the slice's range of the pooled buffer in place: no copy.
        let (vec, range, home) = buf.into_vec();
        let BufResult(result, slice) = self.file.read_exact_at(vec.slice(range.clone()), position).await;
        (result, PoolSlice::from_vec(slice.into_inner(), range, home))
    }

    async fn write_at(&self, bufs: Vec<PoolSlice>, position: u64) -> (io::Result<()>, Vec<PoolSlice>) {
        let Some(direct) = self.active_direct() else { return self.buffered_write(bufs, position).await };
        if position == direct.len() {
            match direct.append(&self.file, &bufs).await {
                Err(error) if error.raw_os_error() == Some(nix::errno::Errno::EINVAL as i32) => {
                    // The filesystem or device refuses O_DIRECT (before any byte moved):
                    // the file goes buffered from now on, without its padding.
                    direct.retire();
                    direct.reset(position, 0);
                    if let Err(error) = self.file.set_len(position).await {
                        return (Err(error), bufs);
                    }
                    return self.buffered_write(bufs, position).await;
                }
                appended => return (appended, bufs),
            }
        }
        // Not an append (recovery rewriting a range): buffered, and the direct side learns
        // the new length and forgets the last block's bytes.
        let end = position + bufs.iter().map(|b| b.len() as u64).sum::<u64>();
        let (result, bufs) = self.buffered_write(bufs, position).await;
        direct.reset(direct.len().max(end), position);
        (result, bufs)
    }

    async fn sync(&self) -> io::Result<()> {
        let started = std::time::Instant::now();
        // One inode: an fdatasync through the buffered descriptor covers direct writes too
        // (their data is on the device already; this flushes its cache and the file size).
        let synced = self.file.sync_data().await;
        if let Some(histogram) = &self.fsync_latency {
            histogram.record(started.elapsed().as_micros() as u64);
        }
        synced
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        let result = self.file.set_len(len).await;
        if let Some(direct) = self.active_direct() {
            direct.reset(len, len);
        }
        result
    }

    async fn reserve(&self, position: u64, len: u64) -> io::Result<()> {
        // compio has no fallocate op, and an allocation can wait on the filesystem for
        // milliseconds, so a duplicate of the descriptor takes it to the blocking pool.
        let fd = self.file.as_fd().try_clone_to_owned()?;
        let (position, len) = (i64::try_from(position), i64::try_from(len));
        let (Ok(position), Ok(len)) = (position, len) else { return Err(io::ErrorKind::InvalidInput.into()) };
        let keep_size = nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE;
        let reserve = move || match nix::fcntl::fallocate(&fd, keep_size, position, len) {
            // Filesystems without fallocate (or without keeping the size) say so one way
            // or the other; both mean "do not ask again".
            Err(nix::errno::Errno::EOPNOTSUPP | nix::errno::Errno::ENOSYS) => Err(io::ErrorKind::Unsupported.into()),
            result => result.map_err(io::Error::from),
        };
        on_blocking_pool(reserve).await
    }
}

impl UringStorage {
    /// Opens a log for direct appends from its end, or, `reused`, from its start over the
    /// old bytes, which each append guards.
    async fn open_direct_from(&self, path: &Path, reused: bool) -> io::Result<UringFile> {
        let mut file = self.open(path).await?;
        let o_direct = nix::fcntl::OFlag::O_DIRECT.bits();
        match OpenOptions::new().write(true).custom_flags(o_direct).open(path).await {
            Ok(direct) => {
                let len = if reused { 0 } else { file.file.metadata().await?.len() };
                let log = direct::DirectLog::new(direct, len, self.pool, self.recent.clone());
                file.direct = Some(if reused { log.guarded() } else { log });
            }
            // A filesystem without O_DIRECT: the file is an ordinary one.
            Err(error) if error.raw_os_error() == Some(nix::errno::Errno::EINVAL as i32) => {}
            Err(error) => return Err(error),
        }
        Ok(file)
    }
}

impl UringFile {
    fn active_direct(&self) -> Option<&direct::DirectLog> {
        self.direct.as_ref().filter(|direct| direct.is_active())
    }

    async fn buffered_write(&self, bufs: Vec<PoolSlice>, position: u64) -> (io::Result<()>, Vec<PoolSlice>) {
        // Each range goes to the kernel as it sits in its buffer: one vectored write.
        let mut homes = Vec::with_capacity(bufs.len());
        let slices: Vec<_> = bufs
            .into_iter()
            .map(|buf| {
                let (vec, range, home) = buf.into_vec();
                homes.push((range.clone(), home));
                vec.slice(range)
            })
            .collect();
        let mut file = &self.file;
        let BufResult(result, slices) = file.write_vectored_all_at(slices, position).await;
        let bufs = slices
            .into_iter()
            .zip(homes)
            .map(|(slice, (range, home))| PoolSlice::from_vec(slice.into_inner(), range, home))
            .collect();
        (result, bufs)
    }
}

impl Storage for UringStorage {
    type File = UringFile;

    async fn open(&self, path: &Path) -> io::Result<UringFile> {
        let file = OpenOptions::new().read(true).write(true).create(true).open(path).await?;
        Ok(UringFile { file, fsync_latency: self.fsync_latency.clone(), direct: None })
    }

    async fn open_direct(&self, path: &Path) -> io::Result<UringFile> {
        self.open_direct_from(path, false).await
    }

    async fn reuse_direct(&self, spare: &Path, path: &Path) -> io::Result<UringFile> {
        self.rename(spare, path).await?;
        let file = self.open_direct_from(path, true).await?;
        if file.direct.is_none() {
            // No O_DIRECT here: an ordinary file, emptied, as the port's default gives.
            file.file.set_len(0).await?;
        }
        Ok(file)
    }

    async fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        compio::fs::create_dir_all(path).await
    }

    async fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        // The unlink that drops a file's last link evicts its cached pages right there: 50
        // to 140 ms per 600 MB measured here, which on the shard's thread would stall every
        // partition and connection it serves, so the removal runs on the blocking pool.
        let path = path.to_path_buf();
        let remove = move || std::fs::remove_dir_all(path);
        match on_blocking_pool(remove).await {
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    async fn remove_file(&self, path: &Path) -> io::Result<()> {
        compio::fs::remove_file(path).await
    }

    async fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(error),
        };
        let mut names = Vec::new();
        for entry in entries {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    async fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        compio::fs::rename(from, to).await
    }

    async fn sync_dir(&self, path: &Path) -> io::Result<()> {
        // A directory opens read-only like a file, and its fsync goes through io_uring, so
        // the shard's thread never blocks on it (a segment seal runs this on the send path).
        let dir = compio::fs::File::open(path).await?;
        let synced = dir.sync_all().await;
        let _ = dir.close().await;
        synced
    }

    async fn space(&self, path: &Path) -> io::Result<Space> {
        // statvfs is one cheap syscall with no io_uring opcode; `available` is what a
        // non-root writer gets (root's reserve excluded), which is what a full disk means here.
        let stat = nix::sys::statvfs::statvfs(path).map_err(io::Error::from)?;
        let block = stat.fragment_size() as u64;
        Ok(Space { total_bytes: stat.blocks() as u64 * block, available_bytes: stat.blocks_available() as u64 * block })
    }
}

/// Runs CPU-heavy work (password hashing) on compio's blocking thread pool, so the shard's
/// event loop keeps serving while it runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompioOffload;

impl rill_application::ports::Offload for CompioOffload {
    async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T {
        on_blocking_pool(work).await
    }
}

/// Runs `work` on compio's blocking pool and waits for it; a panic in it resumes here.
async fn on_blocking_pool<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    compio::runtime::spawn_blocking(work).await.resume_unwind().expect("blocking work is never cancelled")
}
