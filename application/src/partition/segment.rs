//! One segment on disk: its `.log` of stamped batches and its `.index` of one entry per
//! batch. Appends either land whole or leave the segment as it was; reads check every batch
//! before any of it is served. The index on disk may trail the log: recovery indexes every
//! batch past its end from the log, so entries are written in runs (see `INDEX_WRITE_*`),
//! and completely when the segment is synced (sealing, an fsync with nothing to write,
//! shutdown), rather than with one extra write per append.

use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rill_domain::batch::{self, BatchHeader, StoredBatch};
use rill_domain::constants::{INDEX_ENTRY_SIZE, MAX_FRAME_SIZE, MAX_IOVECS_PER_WRITE};
use rill_domain::segment::{self, IndexEntry};

use super::spares::OwnSpares;
use crate::memory_pool::PoolSlice;
use crate::ports::{Storage, StorageFile};

/// Suffix a segment file takes when retention removes it: a restart never loads it.
pub const DELETED_SUFFIX: &str = ".deleted";

/// Index entries held back before they are written: a crash then costs at most this many
/// batches of rescanning at start.
const INDEX_WRITE_ENTRIES: usize = 256;
/// Log bytes whose entries are held back before they are written, bounding that rescan.
const INDEX_WRITE_BYTES: u64 = 16 << 20;

/// An active log starts reserving disk blocks past its end (see `reserve_ahead`) once it
/// holds this much: below it, a reservation would save too little to pay for its call.
const RESERVE_FROM_BYTES: u64 = 1 << 20;
/// The most an active log reserves past what it holds.
const RESERVE_AHEAD_MAX_BYTES: u64 = 64 << 20;

/// A plain buffer of `len` bytes for a read off the hot path (recovery, scrubbing).
pub(super) fn scratch(len: usize) -> PoolSlice {
    PoolSlice::plain(vec![0u8; len])
}

pub struct Segment<F> {
    pub start_offset: u64,
    pub(super) log_path: PathBuf,
    /// Shared with polls reading it after the partition's lock is released.
    pub(super) log: Rc<F>,
    pub(super) index: F,
    pub size_bytes: u64,
    pub entries: Vec<IndexEntry>,
    /// How many of `entries` the index file holds.
    pub(super) indexed: usize,
    /// Whether the log was opened direct (its file may run on with padding; see the
    /// storage port).
    pub(super) direct: bool,
    /// Where the blocks this process reserved for the log end (at most `size_bytes` when
    /// none are). Sealing and stopping cut the log whatever it says, since a log opened at
    /// start may hold blocks a crashed run reserved.
    pub(super) reserved_to: u64,
    /// Cleared when the filesystem cannot reserve.
    pub(super) reserving: bool,
    /// The log is a spare's file written over: its old bytes run on past `size_bytes`
    /// until a seal or a stop cuts them.
    pub(super) reused: bool,
}

/// A stored batch that failed its check on a read: never served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedBatch {
    pub file: PathBuf,
    pub position: u64,
    pub first_offset: u64,
    pub last_offset: u64,
    /// The batch's length as the index records it.
    pub length: u32,
}

impl DamagedBatch {
    /// The batch `entry` names in the segment starting at `segment_start`, stored in `file`.
    pub fn at(file: PathBuf, segment_start: u64, entry: &IndexEntry) -> Self {
        let first_offset = segment_start + entry.relative_offset as u64;
        DamagedBatch {
            file,
            position: entry.position as u64,
            first_offset,
            last_offset: first_offset + (entry.message_count as u64).max(1) - 1,
            length: entry.length,
        }
    }
}

/// Whether an entry can name a batch at all: longer than any frame, it is a damaged range
/// recovery indexed over unreadable bytes, reported without being read.
pub fn within_frame(entry: &IndexEntry) -> bool {
    entry.length as usize <= MAX_FRAME_SIZE
}

/// Whether a batch read back at `entry` is the one the index names, with its checksums
/// (`validate`) or, without them, at least lengths that can be sliced safely.
pub fn batch_matches(record: &[u8], entry: &IndexEntry, start_offset: u64, validate: bool) -> bool {
    let sound =
        if validate { batch::check_stored(record) == StoredBatch::Valid } else { batch::check_structure(record) };
    if !sound {
        return false;
    }
    let header = BatchHeader::read(record);
    header.base_offset == start_offset + entry.relative_offset as u64 && header.message_count == entry.message_count
}

impl<F: StorageFile> Segment<F> {
    /// Offset one past the segment's last message.
    pub fn end_offset(&self) -> u64 {
        self.start_offset + self.entries.last().map_or(0, |e| e.end_relative_offset())
    }

    pub fn messages_count(&self) -> u64 {
        self.end_offset() - self.start_offset
    }

    /// Append time of the newest batch (0 for an empty segment).
    pub fn newest_timestamp(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.timestamp)
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Whether a poll holds the log file, reading it after the partition's lock.
    pub fn log_shared(&self) -> bool {
        Rc::strong_count(&self.log) > 1
    }

    pub async fn create<S: Storage<File = F>>(
        storage: &S,
        dir: &Path,
        start_offset: u64,
        direct: bool,
    ) -> io::Result<Self> {
        Self::create_over(storage, dir, start_offset, direct, None).await
    }

    /// Like `create`, a direct log written over one of its partition's spares when
    /// `spares` holds one.
    pub async fn create_over<S: Storage<File = F>>(
        storage: &S,
        dir: &Path,
        start_offset: u64,
        direct: bool,
        spares: Option<&mut OwnSpares>,
    ) -> io::Result<Self> {
        // The log file's name is what makes a segment exist at start (an index alone is
        // removed), so it is created last: a creation that fails half-way leaves no segment
        // that would claim offsets the active one goes on taking.
        let index = storage.open(&dir.join(segment::index_file_name(start_offset))).await?;
        index.truncate(0).await?;
        let log_path = dir.join(segment::log_file_name(start_offset));
        let spare = match spares {
            Some(spares) if direct => spares.take(storage, &log_path).await,
            _ => None,
        };
        if let Some((log, bytes)) = spare {
            let mut segment = Self::opened(start_offset, log_path, log, index, Vec::new(), direct);
            // Its blocks are the file's already: nothing to reserve, nothing to cut at a sync.
            segment.reserved_to = bytes;
            segment.reused = true;
            return Ok(segment);
        }
        let log = open_log(storage, &log_path, direct).await?;
        if log.len().await? > 0 {
            log.truncate(0).await?;
        }
        Ok(Self::opened(start_offset, log_path, log, index, Vec::new(), direct))
    }

    /// A segment over open files, its `entries` not yet checked against the log (its size
    /// and the entries the index file holds are set by whoever opened it).
    pub(super) fn opened(
        start_offset: u64,
        log_path: PathBuf,
        log: F,
        index: F,
        entries: Vec<IndexEntry>,
        direct: bool,
    ) -> Self {
        let log = Rc::new(log);
        Self {
            start_offset,
            log_path,
            log,
            index,
            size_bytes: 0,
            entries,
            indexed: 0,
            direct,
            reserved_to: 0,
            reserving: true,
            reused: false,
        }
    }

    /// Appends stamped batches: the log in vectored writes of at most 1024 buffers, then
    /// (when enough are held back) the index entries not yet written, then an fsync of the
    /// log when asked. Either all of it lands and the segment grows, or the segment stays as
    /// it was (a written prefix is cut, best effort) and the call fails. The buffers always
    /// come back, in order, for recycling or a retry.
    pub async fn append(
        &mut self,
        batches: Vec<PoolSlice>,
        fsync: bool,
        segment_size: u64,
    ) -> (io::Result<()>, Vec<PoolSlice>) {
        let (before_entries, before_size) = (self.entries.len(), self.size_bytes);
        let mut position = self.size_bytes;
        let mut new_entries = Vec::with_capacity(batches.len());
        for stored in &batches {
            new_entries.push(entry_for(&BatchHeader::read(stored), self.start_offset, position));
            position += stored.len() as u64;
        }
        self.reserve_ahead(position, segment_size).await;
        let (result, batches) = self.write_log(batches).await;
        if let Err(error) = result {
            self.cut_back().await;
            return (Err(error), batches);
        }
        self.entries.extend(new_entries);
        self.size_bytes = position;
        // Only the log needs to be durable before the send is acknowledged: a lost index
        // tail costs a rescan at start, never a message.
        let result = match self.index_due() {
            true => self.write_index().await,
            false => Ok(()),
        };
        let result = match (result, fsync) {
            (Ok(()), true) => self.log.sync().await,
            (result, _) => result,
        };
        if let Err(error) = result {
            self.entries.truncate(before_entries);
            self.size_bytes = before_size;
            self.cut_back().await;
            return (Err(error), batches);
        }
        (Ok(()), batches)
    }

    /// Reserves the log's disk blocks up to past `end` (where the append about to be written
    /// ends), when `end` is past the reservation: half as far again as the log will hold,
    /// at most `RESERVE_AHEAD_MAX_BYTES` and never past the segment's size. A write into
    /// reserved blocks skips the filesystem's allocation work for each page (on ext4 about
    /// a third of a buffered write's kernel time); at most a third of an active log's
    /// blocks are reserved and unwritten, and sealing gives them back. A failed reservation
    /// changes nothing: the write goes on, and reports a full disk itself.
    async fn reserve_ahead(&mut self, end: u64, segment_size: u64) {
        if !self.reserving || end <= self.reserved_to || end < RESERVE_FROM_BYTES {
            return;
        }
        let from = self.reserved_to.max(self.size_bytes);
        let to = (end + (end / 2).min(RESERVE_AHEAD_MAX_BYTES)).min(segment_size.max(end));
        match self.log.reserve(from, to - from).await {
            Ok(()) => self.reserved_to = to,
            Err(error) if error.kind() == io::ErrorKind::Unsupported => self.reserving = false,
            Err(_) => {}
        }
    }

    /// Records a cut of the file at `size_bytes`: no reserved block past it.
    fn cut_at_size(&mut self) {
        self.reserved_to = self.size_bytes;
    }

    /// Whether the entries held back have reached a limit.
    fn index_due(&self) -> bool {
        let held = &self.entries[self.indexed.min(self.entries.len())..];
        held.len() >= INDEX_WRITE_ENTRIES
            || held.first().is_some_and(|first| self.size_bytes - first.position as u64 >= INDEX_WRITE_BYTES)
    }

    /// Writes the entries the index file does not hold yet.
    async fn write_index(&mut self) -> io::Result<()> {
        if self.indexed >= self.entries.len() {
            return Ok(());
        }
        let mut bytes = Vec::with_capacity((self.entries.len() - self.indexed) * INDEX_ENTRY_SIZE);
        for entry in &self.entries[self.indexed..] {
            entry.encode(&mut bytes);
        }
        let position = (self.indexed * INDEX_ENTRY_SIZE) as u64;
        let (result, _) = self.index.write_at(vec![PoolSlice::plain(bytes)], position).await;
        result?;
        self.indexed = self.entries.len();
        Ok(())
    }

    /// Cuts what a failed append left past the segment's end, durably, so no batch that was
    /// refused turns up after a restart. Best effort: on a disk that fails every call the
    /// cut fails too, and a crash may then bring a refused batch back (at its own offsets,
    /// never over an acknowledged one).
    async fn cut_back(&mut self) {
        self.indexed = self.indexed.min(self.entries.len());
        let index_len = (self.indexed * INDEX_ENTRY_SIZE) as u64;
        let cut = self.log.truncate(self.size_bytes).await.is_ok();
        if cut {
            self.cut_at_size();
        }
        if cut && self.index.truncate(index_len).await.is_ok() {
            let _ = self.log.sync().await;
            let _ = self.index.sync().await;
        }
    }

    async fn write_log(&self, batches: Vec<PoolSlice>) -> (io::Result<()>, Vec<PoolSlice>) {
        let mut write_position = self.size_bytes;
        let mut remaining = batches;
        let mut written = Vec::with_capacity(remaining.len());
        while !remaining.is_empty() {
            let rest = remaining.split_off(remaining.len().min(MAX_IOVECS_PER_WRITE));
            let chunk_len: u64 = remaining.iter().map(|b| b.len() as u64).sum();
            let (result, bufs) = self.log.write_at(remaining, write_position).await;
            written.extend(bufs);
            if let Err(error) = result {
                written.extend(rest);
                return (Err(error), written);
            }
            write_position += chunk_len;
            remaining = rest;
        }
        (Ok(()), written)
    }

    /// Makes the segment durable whole: the entries held back are written, a direct log's
    /// padding is cut (its reserved blocks with it), then log and index are fsynced.
    pub async fn sync(&mut self) -> io::Result<()> {
        self.sync_cutting(self.direct && !self.reused).await
    }

    /// Syncs like `sync`, the log cut to its length first whether direct or not, which
    /// gives back every block reserved past it: for a segment being sealed, or the active
    /// one at a stop.
    pub async fn sync_releasing(&mut self) -> io::Result<()> {
        self.sync_cutting(true).await
    }

    async fn sync_cutting(&mut self, cut: bool) -> io::Result<()> {
        self.write_index().await?;
        if cut {
            self.log.truncate(self.size_bytes).await?;
            self.cut_at_size();
        }
        self.log.sync().await?;
        self.index.sync().await
    }

    /// Where a damaged batch is, for logs and metrics.
    pub fn damaged(&self, entry: &IndexEntry) -> DamagedBatch {
        DamagedBatch::at(self.log_path.clone(), self.start_offset, entry)
    }

    /// Reads the whole batches of entries `from..` up to about `max_bytes` (at least one)
    /// for the scrubber, which checks them away from the partition's lock. An entry longer
    /// than a frame comes alone, with no bytes read.
    pub async fn read_entries(&self, from: usize, max_bytes: usize) -> io::Result<(Vec<IndexEntry>, Vec<u8>)> {
        if self.entries.get(from).is_some_and(|e| !within_frame(e)) {
            return Ok((vec![self.entries[from]], Vec::new()));
        }
        let mut to = from;
        let mut bytes = 0usize;
        while to < self.entries.len()
            && within_frame(&self.entries[to])
            && (to == from || bytes + self.entries[to].length as usize <= max_bytes)
        {
            bytes += self.entries[to].length as usize;
            to += 1;
        }
        let entries = self.entries[from..to].to_vec();
        let Some(first) = entries.first() else { return Ok((entries, Vec::new())) };
        let (result, buf) = self.log.read_exact_at(scratch(bytes), first.position as u64).await;
        result?;
        Ok((entries, buf.into_inner().to_vec()))
    }

    /// The offset of the first batch stamped at or after `timestamp`, if this segment has one.
    pub fn offset_at_timestamp(&self, timestamp: u64) -> Option<u64> {
        let index = segment::find_by_timestamp(&self.entries, timestamp)?;
        Some(self.start_offset + self.entries[index].relative_offset as u64)
    }
}

pub(super) async fn open_log<S: Storage>(storage: &S, path: &Path, direct: bool) -> io::Result<S::File> {
    match direct {
        true => storage.open_direct(path).await,
        false => storage.open(path).await,
    }
}

pub(super) fn entry_for(header: &BatchHeader, start_offset: u64, position: u64) -> IndexEntry {
    IndexEntry {
        relative_offset: (header.base_offset - start_offset) as u32,
        position: position as u32,
        timestamp: header.base_timestamp,
        message_count: header.message_count,
        length: header.batch_length as u32,
    }
}
