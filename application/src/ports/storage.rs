//! Storage port: files and directories with owned buffers, in the io_uring completion style.
//!
//! Contract:
//! - Buffers are ranges of pooled buffers (`PoolSlice`). They move into a call and come back
//!   with its result, so an adapter can hand them to the kernel without copying: a write
//!   sends each range as it is, a read fills the range it was given.
//! - `write_at` writes every byte of every buffer, in order, from `position`, or fails.
//! - `read_exact_at` fills the whole buffer or fails with `UnexpectedEof`.
//! - Written bytes are durable only after `sync` returns; a crash may drop or tear unsynced
//!   writes (the simulated adapter does exactly that).
//! - Directory operations on a missing path: `list_dir` returns nothing, `remove_dir_all`
//!   succeeds.
//! - `open_direct` opens a file whose appends (writes at its end) may bypass the page
//!   cache. Until it is truncated, such a file may hold up to 4095 zero bytes past what
//!   was written after it is closed; while open, `len` reports what was written.
//! - `reuse_direct` moves a spare file to a path and opens it like `open_direct`, `len` 0:
//!   appends go over the blocks it holds, and its old bytes stay on disk past what was
//!   written. On such a file every append also leaves at least `REUSE_GUARD_BYTES` zero
//!   bytes after its end on disk, so a scan after a crash stops where the writes did and
//!   never reads on into the old bytes. Truncating the file (a seal, a recovery) drops them.
//! - `reserve` takes the disk blocks of a range not written yet without changing the
//!   file's length, so appends into it allocate nothing; truncating the file (to its own
//!   length too) gives back whatever lies past the new length. It is advisory: an adapter
//!   may take nothing, `Unsupported` means the filesystem cannot, and a failure (a full
//!   disk) leaves the file as it was.
//! - A failed call (a full disk is `StorageFull`, a device error `Other` or the OS's code)
//!   changes nothing it did not report: a failed `write_at` may have written a prefix, which
//!   the caller cuts or overwrites.

use std::io;
use std::path::Path;

use crate::memory_pool::PoolSlice;

/// The zero bytes an append to a reused file leaves after its end on disk: a batch header,
/// whose zero length no recovery takes for a batch.
pub const REUSE_GUARD_BYTES: usize = rill_domain::constants::BATCH_HEADER_SIZE;

#[allow(async_fn_in_trait, clippy::len_without_is_empty)]
pub trait StorageFile {
    async fn len(&self) -> io::Result<u64>;
    async fn read_exact_at(&self, buf: PoolSlice, position: u64) -> (io::Result<()>, PoolSlice);
    async fn write_at(&self, bufs: Vec<PoolSlice>, position: u64) -> (io::Result<()>, Vec<PoolSlice>);
    async fn sync(&self) -> io::Result<()>;
    async fn truncate(&self, len: u64) -> io::Result<()>;
    async fn reserve(&self, position: u64, len: u64) -> io::Result<()>;
}

/// The size of the filesystem that holds a path, and what an unprivileged writer may
/// still use of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    pub total_bytes: u64,
    pub available_bytes: u64,
}

#[allow(async_fn_in_trait)]
pub trait Storage {
    type File: StorageFile;

    /// Opens a file for reading and writing, creating it when missing.
    async fn open(&self, path: &Path) -> io::Result<Self::File>;
    /// Opens a file like `open`, for appends that go straight to the device where the
    /// adapter can (see the module's contract on padding).
    async fn open_direct(&self, path: &Path) -> io::Result<Self::File> {
        self.open(path).await
    }
    /// Moves `spare` to `path` and opens it for appends from its start over the blocks it
    /// holds (see the module's contract). An adapter that cannot reuse blocks gives an
    /// emptied file.
    async fn reuse_direct(&self, spare: &Path, path: &Path) -> io::Result<Self::File> {
        self.rename(spare, path).await?;
        let file = self.open_direct(path).await?;
        file.truncate(0).await?;
        Ok(file)
    }
    async fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    async fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    async fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Names of the entries in a directory, sorted.
    async fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    async fn exists(&self, path: &Path) -> bool;
    /// Atomically replaces `to` with `from`.
    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes directory entries (creations, renames) durable.
    async fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// The filesystem holding `path`: its size and the bytes still available.
    async fn space(&self, path: &Path) -> io::Result<Space>;
}
