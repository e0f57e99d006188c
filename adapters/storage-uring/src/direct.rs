//! A log file written with `O_DIRECT`: appends go from a staging block of the memory pool
//! straight to the device, never through the page cache (no kernel copy into freshly
//! faulted cache pages, no writeback later, and a device error is the write's own error
//! rather than one a later writeback may lose). Reads still go through a buffered
//! descriptor of the same file; the kernel keeps the two coherent (a direct write drops
//! the cached pages it overlaps).
//!
//! `O_DIRECT` wants the position, the length and the buffer's address on 4 KiB (the
//! logical block) boundaries. An append therefore rewrites the file's last partial block
//! from its start, the bytes already there (kept from the previous append) followed by the
//! new ones, and pads the block out with zeros. On disk the file may so run up to 4095
//! zero bytes past what was written; `len` reports what was written, and the segment
//! truncates the padding when it seals. After a crash the padding is a tail that does not
//! parse as a batch, which recovery cuts like any torn tail.
//!
//! A reused file (`Storage::reuse_direct`) holds old bytes past what was written: each
//! append to it pads on far enough to leave `REUSE_GUARD_BYTES` zeros after its end, one
//! more block when its own block has less room left.
//!
//! The staging buffer of each append goes to the shard's `RecentWrites` when there is one,
//! and reads it holds are served from there.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;

use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::fs::File;
use compio::io::{AsyncReadAtExt, AsyncWriteAtExt};
use rill_application::memory_pool::{MemoryPool, PoolBuf, PoolSlice};
use rill_application::ports::storage::REUSE_GUARD_BYTES;

use crate::recent::RecentWrites;

/// The alignment `O_DIRECT` is given: the page, a multiple of every logical block size
/// in common use (512 B and 4 KiB).
pub(crate) const BLOCK: u64 = 4096;

#[derive(Debug)]
pub(crate) struct DirectLog {
    file: File,
    pool: Option<&'static MemoryPool>,
    state: RefCell<State>,
    /// Cleared when the kernel refused a direct write (EINVAL): the file is buffered since.
    active: Cell<bool>,
    /// The shard's recent writes and this file's name in them.
    recent: Option<(Rc<RefCell<RecentWrites>>, u64)>,
    /// Zero bytes each append leaves after its end: 0, or `REUSE_GUARD_BYTES` for a
    /// reused file.
    guard: u64,
}

#[derive(Debug)]
struct State {
    /// Bytes written (the file's length without its padding).
    len: u64,
    /// The bytes of the last partial block, when known: `len % BLOCK` of them.
    tail: Option<Vec<u8>>,
}

impl DirectLog {
    pub(crate) fn new(
        file: File,
        len: u64,
        pool: Option<&'static MemoryPool>,
        recent: Option<Rc<RefCell<RecentWrites>>>,
    ) -> Self {
        let tail = len.is_multiple_of(BLOCK).then(Vec::new);
        let recent = recent.map(|recent| {
            let name = recent.borrow_mut().register();
            (recent, name)
        });
        Self { file, pool, state: RefCell::new(State { len, tail }), active: Cell::new(true), recent, guard: 0 }
    }

    /// The same log over a reused file: its appends guard their end with zeros.
    pub(crate) fn guarded(mut self) -> Self {
        self.guard = REUSE_GUARD_BYTES as u64;
        self
    }

    pub(crate) fn is_active(&self) -> bool {
        self.active.get()
    }

    pub(crate) fn retire(&self) {
        self.active.set(false);
    }

    pub(crate) fn len(&self) -> u64 {
        self.state.borrow().len
    }

    /// After a write elsewhere (the buffered descriptor) from `changed_from`, or a
    /// truncation to it: the new length, the last block's bytes read again before the next
    /// append, and nothing kept from the changed range on.
    pub(crate) fn reset(&self, len: u64, changed_from: u64) {
        let mut state = self.state.borrow_mut();
        state.len = len;
        state.tail = len.is_multiple_of(BLOCK).then(Vec::new);
        if let Some((recent, name)) = &self.recent {
            recent.borrow_mut().forget_from(*name, changed_from);
        }
    }

    /// Fills `out` from the recent writes when they hold every byte of it.
    pub(crate) fn read_recent(&self, position: u64, out: &mut [u8]) -> bool {
        self.recent.as_ref().is_some_and(|(recent, name)| recent.borrow().read(*name, position, out))
    }

    /// Appends `bufs` at the end of the file. `buffered` reads the last block's bytes when
    /// they are not known (after an open or a truncation).
    pub(crate) async fn append(&self, buffered: &File, bufs: &[PoolSlice]) -> io::Result<()> {
        let (len, known) = {
            let state = self.state.borrow();
            (state.len, state.tail.clone())
        };
        let aligned = len - len % BLOCK;
        let tail = match known {
            Some(tail) => tail,
            None => {
                let want = (len - aligned) as usize;
                let BufResult(read, tail) = buffered.read_exact_at(Vec::with_capacity(want), aligned).await;
                read?;
                tail
            }
        };
        let data_len: usize = bufs.iter().map(|b| b.len()).sum();
        let total = tail.len() + data_len;
        let padded = (total as u64 + self.guard).div_ceil(BLOCK) * BLOCK;
        let (mut staging, offset) = self.staging(padded as usize);
        let block = &mut staging[offset..offset + padded as usize];
        let mut at = tail.len();
        block[..at].copy_from_slice(&tail);
        for buf in bufs {
            block[at..at + buf.len()].copy_from_slice(buf);
            at += buf.len();
        }
        block[total..].fill(0);
        let (vec, home) = staging.into_vec();
        let mut file = &self.file;
        let BufResult(written, slice) = file.write_all_at(vec.slice(offset..offset + padded as usize), aligned).await;
        let staging = PoolBuf::from_vec(slice.into_inner(), home);
        if let Err(error) = written {
            // A failed direct write may have landed in part: the caller cuts it back.
            self.state.borrow_mut().tail = None;
            return Err(error);
        }
        let end = aligned + total as u64;
        let last_block = (end - end % BLOCK - aligned) as usize;
        let mut state = self.state.borrow_mut();
        state.len = end;
        state.tail = Some(staging[offset + last_block..offset + total].to_vec());
        if let Some((recent, name)) = &self.recent {
            recent.borrow_mut().insert(*name, aligned, staging, offset, total);
        }
        Ok(())
    }

    /// A buffer of at least `len` bytes with a block-aligned range of `len` starting at
    /// the returned offset. Pooled buffers are page-aligned in the server (its allocator
    /// aligns page-multiple sizes); anything else gets one block of slack to align in.
    fn staging(&self, len: usize) -> (PoolBuf, usize) {
        if let Some(pool) = self.pool {
            let buf = pool.acquire(len);
            if (buf.as_ptr() as usize).is_multiple_of(BLOCK as usize) {
                return (buf, 0);
            }
        }
        let buf = PoolBuf::plain(vec![0; len + BLOCK as usize]);
        let misalignment = buf.as_ptr() as usize % BLOCK as usize;
        let offset = if misalignment == 0 { 0 } else { BLOCK as usize - misalignment };
        (buf, offset)
    }
}

impl Drop for DirectLog {
    fn drop(&mut self) {
        if let Some((recent, name)) = &self.recent {
            recent.borrow_mut().forget(*name);
        }
    }
}
