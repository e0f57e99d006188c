//! `PoolBuf`, a buffer of the memory pool that goes back to its bucket when dropped, and
//! `PoolSlice`, a range of one that owns the whole buffer. Every path that lets go of a
//! buffer (a reply written, an error, a disconnect) returns it by dropping it, so the
//! pool's in-use count is exact by construction.

use std::ops::{Deref, DerefMut, Range};

use super::MemoryPool;

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
