//! A memory pool shared by every shard for the buffers of the hot path (a send's body, a
//! poll's reply), so a busy server reuses a few sizes of buffer instead of asking the
//! allocator for a fresh one per request.
//!
//! A buffer is a [`PoolBuf`] that goes back to its bucket when dropped: nothing releases
//! buffers by hand. Each bucket hands out vectors whose capacity is exactly its size. The
//! pool lives for the whole process (`leak`), so a buffer needs no reference count to find
//! its way home from any shard.
//!
//! Capacities are multiples of the 4 KiB page. Addresses are page-aligned only when the
//! process's allocator makes them so (the server binary's does, for page-sized requests);
//! nothing here depends on it: the one user that needs aligned buffers, a direct log's
//! write (`O_DIRECT`), checks the address and aligns a plain buffer itself when it must.
//!
//! Accounting: the pool counts the bytes of the bucket buffers it has created, in use or
//! free, and never lets that total pass its budget; past the budget, or above the largest
//! bucket, `acquire` falls back to a plain allocation of the exact length and counts a miss.
//! Each bucket counts its buffers in use; a buffer coming home, or lost on the way (a lent
//! `Vec` that never came back), takes one off, so the counts are exact by construction.

use std::ops::{Deref, DerefMut, Range};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_queue::ArrayQueue;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// The bucket sizes, ascending: doubling up to 512 KiB, then steps of x1.5 and x4/3 in turn,
/// so above 512 KiB a buffer leaves at most a third of its capacity unused.
pub const BUCKET_SIZES: [usize; 28] = [
    4 * KIB,
    8 * KIB,
    16 * KIB,
    32 * KIB,
    64 * KIB,
    128 * KIB,
    256 * KIB,
    512 * KIB,
    768 * KIB,
    MIB,
    3 * MIB / 2,
    2 * MIB,
    3 * MIB,
    4 * MIB,
    6 * MIB,
    8 * MIB,
    12 * MIB,
    16 * MIB,
    24 * MIB,
    32 * MIB,
    48 * MIB,
    64 * MIB,
    96 * MIB,
    128 * MIB,
    192 * MIB,
    256 * MIB,
    384 * MIB,
    512 * MIB,
];

/// The page size every bucket size is a multiple of.
pub const PAGE_BYTES: usize = 4096;
/// The largest length served from a bucket.
pub const LARGEST_BUCKET_BYTES: usize = BUCKET_SIZES[BUCKET_SIZES.len() - 1];
pub const DEFAULT_TOTAL_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// The smallest budget: one buffer of the largest bucket must fit.
pub const MIN_TOTAL_BYTES: u64 = LARGEST_BUCKET_BYTES as u64;
pub const DEFAULT_BUCKET_CAPACITY: usize = 8192;
/// Bounds the free buffers kept per bucket (and the queue slots allocated up front).
pub const MAX_BUCKET_CAPACITY: usize = 8192;

const _: () = {
    assert!(BUCKET_SIZES.len() == 28);
    assert!(BUCKET_SIZES[0] == 4 * KIB && LARGEST_BUCKET_BYTES == 512 * MIB);
    let mut index = 0;
    while index < BUCKET_SIZES.len() {
        assert!(BUCKET_SIZES[index].is_multiple_of(PAGE_BYTES));
        assert!(index == 0 || BUCKET_SIZES[index - 1] < BUCKET_SIZES[index]);
        index += 1;
    }
    assert!(MIN_TOTAL_BYTES <= DEFAULT_TOTAL_BYTES);
    assert!(DEFAULT_BUCKET_CAPACITY <= MAX_BUCKET_CAPACITY);
};

/// Why a pool cannot be built; shown at start with the offending setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    #[error("memory pool size {total_bytes} bytes is below the minimum of {MIN_TOTAL_BYTES} bytes (512 MiB)")]
    TotalTooSmall { total_bytes: u64 },
    #[error("memory pool bucket_capacity {bucket_capacity} is outside 1..={MAX_BUCKET_CAPACITY}")]
    BucketCapacityOutOfRange { bucket_capacity: usize },
}

/// A snapshot of the pool's counters. The counters move independently, so a snapshot taken
/// while other threads work may be off by the operations in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Bytes of the bucket buffers the pool has created and not dropped, in use or free.
    pub allocated_bytes: u64,
    /// Bucket buffers handed out and not yet released.
    pub in_use_buffers: usize,
    /// Bucket buffers waiting in the pool for reuse.
    pub free_buffers: usize,
    /// Acquires served with a reused buffer.
    pub hits: u64,
    /// Acquires that fell back to a plain allocation (over budget, or above the largest bucket).
    pub misses: u64,
}

#[derive(Debug)]
struct Bucket {
    size: usize,
    free: ArrayQueue<Vec<u8>>,
    in_use: AtomicUsize,
}

/// The pool. `Send + Sync`: every operation is a lock-free queue operation or an atomic.
#[derive(Debug)]
pub struct MemoryPool {
    /// Empty when the pool is disabled.
    buckets: Vec<Bucket>,
    total_bytes: u64,
    allocated_bytes: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl MemoryPool {
    /// Makes the pool live for the rest of the process, which is what lets every buffer
    /// find its way back to it without a reference count. A server has one; tests leak a
    /// small one each.
    pub fn leak(self) -> &'static Self {
        Box::leak(Box::new(self))
    }

    /// A pool that creates at most `total_bytes` of bucket buffers and keeps at most
    /// `bucket_capacity` free buffers per bucket.
    pub fn new(total_bytes: u64, bucket_capacity: usize) -> Result<Self, PoolError> {
        Self::check(total_bytes, bucket_capacity)?;
        let buckets = BUCKET_SIZES
            .iter()
            .map(|&size| Bucket { size, free: ArrayQueue::new(bucket_capacity), in_use: AtomicUsize::new(0) })
            .collect();
        Ok(Self { buckets, total_bytes, ..Self::disabled() })
    }

    /// Validates settings without building the pool (whose free lists are allocated).
    pub fn check(total_bytes: u64, bucket_capacity: usize) -> Result<(), PoolError> {
        if total_bytes < MIN_TOTAL_BYTES {
            return Err(PoolError::TotalTooSmall { total_bytes });
        }
        if bucket_capacity == 0 || bucket_capacity > MAX_BUCKET_CAPACITY {
            return Err(PoolError::BucketCapacityOutOfRange { bucket_capacity });
        }
        Ok(())
    }

    /// A pool that never pools: every acquire is a plain allocation, counted neither as a
    /// hit nor as a miss, and every release drops the buffer.
    pub fn disabled() -> Self {
        Self {
            buckets: Vec::new(),
            total_bytes: 0,
            allocated_bytes: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn is_enabled(&self) -> bool {
        !self.buckets.is_empty()
    }

    /// The most bytes of bucket buffers the pool keeps in existence at once.
    pub fn budget_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// A buffer of exactly `len` bytes. Its bytes are initialized but not necessarily zero:
    /// a reused buffer keeps what its last user wrote, so callers overwrite all `len` bytes
    /// before reading them or sending them anywhere. Clearing on every reuse would cost a
    /// memset of up to 512 MiB on the hot path.
    pub fn acquire(&'static self, len: usize) -> PoolBuf {
        if !self.is_enabled() {
            return PoolBuf::plain(vec![0; len]);
        }
        let Some(index) = self.bucket_index_for_len(len) else {
            return self.miss(len);
        };
        let bucket = &self.buckets[index];
        if let Some(mut buf) = bucket.free.pop() {
            self.hits.fetch_add(1, Ordering::Relaxed);
            bucket.in_use.fetch_add(1, Ordering::Relaxed);
            // Shortening keeps the old bytes; only growing past the old length writes zeros.
            buf.resize(len, 0);
            return PoolBuf::pooled(buf, self, index);
        }
        if !self.reserve(bucket.size) {
            return self.miss(len);
        }
        bucket.in_use.fetch_add(1, Ordering::Relaxed);
        // Only `len` bytes are written (zeros): the rest of the capacity stays untouched,
        // pages the kernel has not handed over yet. `vec![0; size]` would write them all:
        // the server's page-aligning allocator cannot get zeroed memory from `calloc`, so
        // zeroing is a memset of the whole bucket, every page faulted in (in a first
        // fsync-pp run, 11% of the server's samples were page faults under that memset).
        let mut buf = Vec::with_capacity(bucket.size);
        buf.resize(len, 0);
        PoolBuf::pooled(buf, self, index)
    }

    /// A buffer coming home (its `PoolBuf` was dropped): kept for reuse while the bucket
    /// has room, otherwise dropped and its bytes leave the budget.
    fn give_back(&self, bucket: usize, buf: Vec<u8>) {
        let home = &self.buckets[bucket];
        home.in_use.fetch_sub(1, Ordering::Relaxed);
        if buf.capacity() != home.size || home.free.push(buf).is_err() {
            self.allocated_bytes.fetch_sub(home.size as u64, Ordering::Relaxed);
        }
    }

    /// A buffer that will not come home (lent out and dropped elsewhere, or grown past
    /// its bucket): it leaves the counts and the budget.
    fn forget(&self, bucket: usize) {
        let home = &self.buckets[bucket];
        home.in_use.fetch_sub(1, Ordering::Relaxed);
        self.allocated_bytes.fetch_sub(home.size as u64, Ordering::Relaxed);
    }

    /// Whether a vector of `capacity` can go back to `bucket`.
    fn fits(&self, bucket: usize, capacity: usize) -> bool {
        self.buckets.get(bucket).is_some_and(|home| home.size == capacity)
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            allocated_bytes: self.allocated_bytes.load(Ordering::Relaxed),
            in_use_buffers: self.buckets.iter().map(|bucket| bucket.in_use.load(Ordering::Relaxed)).sum(),
            free_buffers: self.buckets.iter().map(|bucket| bucket.free.len()).sum(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    /// The smallest bucket that holds `len` bytes.
    fn bucket_index_for_len(&self, len: usize) -> Option<usize> {
        let index = BUCKET_SIZES.partition_point(|&size| size < len);
        (index < self.buckets.len()).then_some(index)
    }

    /// Takes `size` bytes out of the budget, or says there is no room.
    fn reserve(&self, size: usize) -> bool {
        let size = size as u64;
        self.allocated_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |allocated| {
                allocated.checked_add(size).filter(|&total| total <= self.total_bytes)
            })
            .is_ok()
    }

    fn miss(&self, len: usize) -> PoolBuf {
        self.misses.fetch_add(1, Ordering::Relaxed);
        PoolBuf::plain(vec![0; len])
    }
}

// Buffers: `PoolBuf`, a buffer of the pool that goes back to its bucket when dropped, and
// `PoolSlice`, a range of one that owns the whole buffer. Every path that lets go of a
// buffer (a reply written, an error, a disconnect) returns it by dropping it, so the
// pool's in-use count is exact by construction.

/// Where a pooled buffer goes back to.
#[derive(Debug, Clone, Copy)]
struct Home {
    pool: &'static MemoryPool,
    bucket: usize,
}

/// A buffer from the pool (or, when the pool could not serve it, a plain allocation that
/// is simply freed). It derefs to its `len` bytes; its capacity never changes while it is
/// out, so it always fits its bucket when it comes back.
#[derive(Debug)]
pub struct PoolBuf {
    vec: Vec<u8>,
    home: Option<Home>,
}

/// The way home of a buffer lent out as a bare `Vec` (to an IO library that owns its
/// buffers). Handing the `Vec` back with [`PoolBuf::from_vec`] makes it a `PoolBuf` again;
/// dropping this instead tells the pool the buffer is gone, so its counts stay exact.
#[derive(Debug)]
pub struct PoolHome(Option<Home>);

impl PoolBuf {
    pub(super) fn pooled(vec: Vec<u8>, pool: &'static MemoryPool, bucket: usize) -> Self {
        Self { vec, home: Some(Home { pool, bucket }) }
    }

    /// Bytes that are not the pool's: freed when dropped, counted nowhere.
    pub fn plain(vec: Vec<u8>) -> Self {
        Self { vec, home: None }
    }

    /// Whether it goes back to a bucket when dropped.
    pub fn is_pooled(&self) -> bool {
        self.home.is_some()
    }

    pub fn capacity(&self) -> usize {
        self.vec.capacity()
    }

    /// Shortens it to `len` bytes (no-op when already shorter).
    pub fn truncate(&mut self, len: usize) {
        self.vec.truncate(len);
    }

    /// Appends bytes within the capacity it has. Past it the buffer would reallocate and
    /// no longer fit its bucket, so it becomes a plain allocation (the pool counts it gone).
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        if self.vec.len() + bytes.len() > self.vec.capacity()
            && let Some(home) = self.home.take()
        {
            drop(PoolHome(Some(home)));
        }
        self.vec.extend_from_slice(bytes);
    }

    /// The range `range` of it, owning the whole buffer.
    pub fn slice(self, range: Range<usize>) -> PoolSlice {
        assert!(range.start <= range.end && range.end <= self.vec.len(), "slice {range:?} of {} bytes", self.vec.len());
        PoolSlice { buf: self, range }
    }

    /// All of it as a slice.
    pub fn whole(self) -> PoolSlice {
        let len = self.vec.len();
        self.slice(0..len)
    }

    /// Lends the bytes out as a `Vec`; see [`PoolHome`].
    pub fn into_vec(mut self) -> (Vec<u8>, PoolHome) {
        let home = PoolHome(self.home.take());
        (std::mem::take(&mut self.vec), home)
    }

    /// Takes a lent `Vec` back. One whose capacity changed is kept as a plain allocation.
    pub fn from_vec(vec: Vec<u8>, mut home: PoolHome) -> Self {
        match home.0.take() {
            Some(home) if home.pool.fits(home.bucket, vec.capacity()) => Self { vec, home: Some(home) },
            // Grown past its bucket: the pool counts the buffer gone.
            lost => {
                drop(PoolHome(lost));
                Self::plain(vec)
            }
        }
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            home.pool.give_back(home.bucket, std::mem::take(&mut self.vec));
        }
    }
}

impl Drop for PoolHome {
    fn drop(&mut self) {
        if let Some(home) = self.0.take() {
            home.pool.forget(home.bucket);
        }
    }
}

impl Deref for PoolBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.vec
    }
}

impl DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.vec
    }
}

impl PartialEq for PoolBuf {
    fn eq(&self, other: &Self) -> bool {
        self.vec == other.vec
    }
}

impl Eq for PoolBuf {}

/// A range of a pooled buffer that owns the whole buffer: a batch inside the request frame
/// it arrived in, or the place in a reply frame a read fills.
#[derive(Debug, PartialEq, Eq)]
pub struct PoolSlice {
    buf: PoolBuf,
    range: Range<usize>,
}

impl PoolSlice {
    /// Bytes that are not the pool's, whole.
    pub fn plain(vec: Vec<u8>) -> Self {
        PoolBuf::plain(vec).whole()
    }

    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// The buffer it is a range of.
    pub fn buffer(&self) -> &PoolBuf {
        &self.buf
    }

    pub fn into_inner(self) -> PoolBuf {
        self.buf
    }

    /// Shortens the range to its first `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.range.end = self.range.end.min(self.range.start + len);
    }

    /// Drops the range's first `len` bytes (all of them when it is shorter).
    pub fn advance(&mut self, len: usize) {
        self.range.start = self.range.end.min(self.range.start + len);
    }

    /// Lends the whole buffer out as a `Vec`, with the range; see [`PoolHome`].
    pub fn into_vec(self) -> (Vec<u8>, Range<usize>, PoolHome) {
        let range = self.range;
        let (vec, home) = self.buf.into_vec();
        (vec, range, home)
    }

    pub fn from_vec(vec: Vec<u8>, range: Range<usize>, home: PoolHome) -> Self {
        PoolBuf::from_vec(vec, home).slice(range)
    }
}

impl Deref for PoolSlice {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.range.clone()]
    }
}

impl From<Vec<u8>> for PoolSlice {
    fn from(vec: Vec<u8>) -> Self {
        PoolSlice::plain(vec)
    }
}

/// So a transport library can own a reply frame until it is sent (then it goes home).
impl AsRef<[u8]> for PoolSlice {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl DerefMut for PoolSlice {
    fn deref_mut(&mut self) -> &mut [u8] {
        let range = self.range.clone();
        &mut self.buf[range]
    }
}
