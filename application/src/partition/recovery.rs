//! Opening a segment at start: its index is checked against the log and rebuilt from it
//! where it is missing, short, garbage or rotten. A torn tail (only possible in the active
//! segment after a crash) is cut back to the last batch that verifies; anything else that
//! fails its checks is bit rot and stays indexed, so reads report it instead of the offsets
//! vanishing or being handed out again. A sealed segment is never cut.

use std::io;
use std::path::Path;

use rill_domain::batch::{self, BatchHeader, StoredBatch};
use rill_domain::constants::{BATCH_HEADER_SIZE, INDEX_ENTRY_SIZE, MAX_FRAME_SIZE};
use rill_domain::segment::{self, IndexEntry};

use super::segment::{Segment, batch_matches, entry_for, open_log, scratch, within_frame};
use crate::memory_pool::PoolSlice;
use crate::ports::{Storage, StorageFile};

/// What recovery found in a segment's files.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Bytes cut from the end of the log because they did not verify.
    pub truncated_bytes: u64,
    /// Index entries rebuilt from the log.
    pub rebuilt_entries: usize,
    /// Batches that fail their checksums but stay indexed (reads report them).
    pub damaged_entries: usize,
    /// Runs of unreadable bytes indexed as one damaged range between two readable batches.
    pub unreadable_ranges: usize,
}

/// How far the scan for the next readable batch reads at a time.
const RESYNC_WINDOW: usize = 4 << 20;

/// How a segment is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadMode {
    /// The active segment after an unclean stop: its unsynced tail may be torn.
    pub torn_tail_possible: bool,
    /// Open the log direct (appends bypass the page cache).
    pub direct: bool,
    /// The start offset of the next segment, which bounds this one's offsets.
    pub next_start: Option<u64>,
}

impl<F: StorageFile> Segment<F> {
    /// Opens an existing segment and repairs its index from the log: entries that do not
    /// tile the log are dropped and the batches after them re-indexed. See the module
    /// comment for what is cut and what is kept.
    pub async fn load<S: Storage<File = F>>(
        storage: &S,
        dir: &Path,
        start_offset: u64,
        mode: LoadMode,
    ) -> io::Result<(Self, Recovery)> {
        let log_path = dir.join(segment::log_file_name(start_offset));
        let log = open_log(storage, &log_path, mode.direct).await?;
        let index = storage.open(&dir.join(segment::index_file_name(start_offset))).await?;
        let log_len = log.len().await?;
        let mut entries = read_index(&index).await?;
        let read_entries = entries.clone();
        let offset_limit = mode.next_start.map(|next| next.saturating_sub(start_offset));
        keep_consistent_prefix(&mut entries, log_len, offset_limit);
        let mut segment = Self::opened(start_offset, log_path, log, index, entries, mode.direct);
        let kept = if mode.torn_tail_possible {
            // After an unclean stop the trailing batches that fail are a torn write (never
            // fsynced, so never acknowledged on a persisted topic). Damage before the last
            // batch that verifies stays: cutting there would give its offsets out again.
            segment.verified_suffix_start().await?
        } else if segment.index_agrees(mode).await? {
            segment.entries.len()
        } else {
            segment.agreeing_prefix(log_len).await?
        };
        segment.entries.truncate(kept);
        segment.size_bytes = segment.entries.last().map_or(0, |e| e.position as u64 + e.length as u64);
        let indexed = segment.entries.len();
        let mut recovery = Recovery::default();
        segment.scan_tail(log_len, mode, &mut recovery).await?;
        recovery.rebuilt_entries = segment.entries.len() - indexed;
        // A sealed segment is never cut: what could not be indexed stays on disk, unread.
        if segment.size_bytes < log_len && mode.next_start.is_none() {
            recovery.truncated_bytes = log_len - segment.size_bytes;
            segment.log.truncate(segment.size_bytes).await?;
        }
        if segment.entries != read_entries {
            segment.rewrite_index().await?;
        }
        // The index file now holds every entry (as read, or rewritten).
        segment.indexed = segment.entries.len();
        Ok((segment, recovery))
    }

    /// How many entries to keep after an unclean stop: all up to the last that names a
    /// batch reading back whole and verified.
    async fn verified_suffix_start(&self) -> io::Result<usize> {
        for kept in (1..=self.entries.len()).rev() {
            let entry = &self.entries[kept - 1];
            if !within_frame(entry) {
                continue;
            }
            let (result, buf) = self.log.read_exact_at(scratch(entry.length as usize), entry.position as u64).await;
            result?;
            if batch_matches(&buf, entry, self.start_offset, true) {
                return Ok(kept);
            }
        }
        Ok(0)
    }

    /// The cheap check of an index that has no checksum of its own: its last entry agrees
    /// with the batch header it names, and a sealed segment ends where the next begins.
    async fn index_agrees(&self, mode: LoadMode) -> io::Result<bool> {
        if let Some(next_start) = mode.next_start
            && self.end_offset() != next_start
        {
            return Ok(false);
        }
        match self.entries.last() {
            Some(last) => self.header_agrees(last).await,
            None => Ok(true),
        }
    }

    async fn header_agrees(&self, entry: &IndexEntry) -> io::Result<bool> {
        let (result, head) = self.log.read_exact_at(scratch(BATCH_HEADER_SIZE), entry.position as u64).await;
        result?;
        let header = BatchHeader::read(&head);
        Ok(header.base_offset == self.start_offset + entry.relative_offset as u64
            && header.message_count == entry.message_count
            && header.batch_length == entry.length as u64
            && header.base_timestamp == entry.timestamp)
    }

    /// How many leading entries to keep once the index looks wrong. An entry that disagrees
    /// with the header it names is dropped (with all after it, to be re-indexed from the
    /// log) when the batch there verifies by its own length: then the index is what rotted.
    /// When the batch does not verify, the log rotted: the entry is kept and reads report
    /// the damage.
    async fn agreeing_prefix(&self, log_len: u64) -> io::Result<usize> {
        for (kept, entry) in self.entries.iter().enumerate() {
            if self.header_agrees(entry).await? {
                continue;
            }
            let (result, head) = self.log.read_exact_at(scratch(BATCH_HEADER_SIZE), entry.position as u64).await;
            result?;
            let length = BatchHeader::read(&head).batch_length;
            let fits = (BATCH_HEADER_SIZE as u64..=MAX_FRAME_SIZE as u64).contains(&length)
                && entry.position as u64 + length <= log_len;
            if fits && self.verifies_at(entry.position as u64, length).await? {
                return Ok(kept);
            }
        }
        Ok(self.entries.len())
    }

    /// Indexes the batches after `size_bytes`. A batch that verifies is indexed; past the
    /// possibly torn tail, so is one whose lengths and offsets are right but whose checksums
    /// fail (rot), and unreadable bytes up to the next readable batch become one damaged range.
    async fn scan_tail(&mut self, log_len: u64, mode: LoadMode, recovery: &mut Recovery) -> io::Result<()> {
        while log_len - self.size_bytes >= BATCH_HEADER_SIZE as u64 {
            match self.batch_here(log_len, mode.next_start).await? {
                Some((header, StoredBatch::Valid)) => self.index_batch(&header),
                Some((header, StoredBatch::Damaged)) if !mode.torn_tail_possible => {
                    recovery.damaged_entries += 1;
                    self.index_batch(&header);
                }
                _ if mode.torn_tail_possible => return Ok(()),
                _ => {
                    let expected = self.end_offset();
                    let next = self.next_readable(log_len, expected, mode.next_start).await?;
                    let (until, next_base) = match next {
                        Some((position, base)) => (position, base),
                        None => match mode.next_start {
                            Some(next_start) if next_start > expected => (log_len, next_start),
                            _ => return Ok(()),
                        },
                    };
                    if !self.index_unreadable(until, next_base) {
                        return Ok(());
                    }
                    recovery.unreadable_ranges += 1;
                }
            }
        }
        // Fewer bytes left in a sealed segment than a batch header, though offsets up to
        // the next segment are missing: the log lost its end. The remnant holds those
        // offsets as damage, so reads report them rather than skip them in silence.
        if let Some(next_start) = mode.next_start
            && next_start > self.end_offset()
            && self.size_bytes < log_len
            && self.index_unreadable(log_len, next_start)
        {
            recovery.unreadable_ranges += 1;
        }
        Ok(())
    }

    /// The batch at `size_bytes` if its length fits the log, its base offset is the next
    /// one and its offsets end by the next segment's start, with what its checksums say.
    async fn batch_here(
        &self,
        log_len: u64,
        next_start: Option<u64>,
    ) -> io::Result<Option<(BatchHeader, StoredBatch)>> {
        let (result, head) = self.log.read_exact_at(scratch(BATCH_HEADER_SIZE), self.size_bytes).await;
        result?;
        let header = BatchHeader::read(&head);
        let length = header.batch_length;
        if length < BATCH_HEADER_SIZE as u64
            || length > MAX_FRAME_SIZE as u64
            || self.size_bytes + length > log_len
            || header.base_offset != self.end_offset()
            || next_start.is_some_and(|next| header.base_offset.saturating_add(u64::from(header.message_count)) > next)
        {
            return Ok(None);
        }
        let (result, buf) = self.log.read_exact_at(scratch(length as usize), self.size_bytes).await;
        result?;
        Ok(match batch::check_stored(&buf) {
            StoredBatch::Malformed => None,
            check => Some((header, check)),
        })
    }

    fn index_batch(&mut self, header: &BatchHeader) {
        self.entries.push(entry_for(header, self.start_offset, self.size_bytes));
        self.size_bytes += header.batch_length;
    }

    /// Indexes the bytes up to `until` as one damaged range holding offsets up to
    /// `next_base`; false (nothing indexed) when the range does not fit an index entry.
    fn index_unreadable(&mut self, until: u64, next_base: u64) -> bool {
        let expected = self.end_offset();
        let fields = (
            u32::try_from(expected - self.start_offset),
            u32::try_from(self.size_bytes),
            u32::try_from(next_base.saturating_sub(expected)),
            u32::try_from(until.saturating_sub(self.size_bytes)),
        );
        let (Ok(relative_offset), Ok(position), Ok(message_count), Ok(length)) = fields else { return false };
        if message_count == 0 || length == 0 {
            return false;
        }
        let timestamp = self.entries.last().map_or(0, |e| e.timestamp);
        self.entries.push(IndexEntry { relative_offset, position, timestamp, message_count, length });
        self.size_bytes = until;
        true
    }

    /// Looks past unreadable bytes for the next batch that verifies and whose base offset
    /// follows `expected` (and comes before the next segment's start): a header's 204
    /// reserved bytes are zero, which makes candidates rare, and only those are read whole
    /// and checked.
    async fn next_readable(
        &self,
        log_len: u64,
        expected: u64,
        next_start: Option<u64>,
    ) -> io::Result<Option<(u64, u64)>> {
        let mut window_start = self.size_bytes + 1;
        while window_start + BATCH_HEADER_SIZE as u64 <= log_len {
            let len = ((log_len - window_start) as usize).min(RESYNC_WINDOW);
            let (result, window) = self.log.read_exact_at(scratch(len), window_start).await;
            result?;
            for at in 0..=len.saturating_sub(BATCH_HEADER_SIZE) {
                let head = &window[at..at + BATCH_HEADER_SIZE];
                if head[52..].iter().any(|&b| b != 0) {
                    continue;
                }
                let header = BatchHeader::read(head);
                let position = window_start + at as u64;
                let plausible = header.base_offset > expected
                    && next_start.is_none_or(|next| header.base_offset < next)
                    && header.base_offset - self.start_offset <= u32::MAX as u64
                    && (BATCH_HEADER_SIZE as u64..=MAX_FRAME_SIZE as u64).contains(&header.batch_length)
                    && position.checked_add(header.batch_length).is_some_and(|end| end <= log_len);
                if plausible && self.verifies_at(position, header.batch_length).await? {
                    return Ok(Some((position, header.base_offset)));
                }
            }
            // Overlap the windows by a header so no candidate straddles two unseen.
            window_start += (len - BATCH_HEADER_SIZE + 1) as u64;
        }
        Ok(None)
    }

    async fn verifies_at(&self, position: u64, length: u64) -> io::Result<bool> {
        let (result, buf) = self.log.read_exact_at(scratch(length as usize), position).await;
        result?;
        Ok(batch::verify_stored(&buf))
    }

    async fn rewrite_index(&mut self) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(self.entries.len() * INDEX_ENTRY_SIZE);
        for entry in &self.entries {
            entry.encode(&mut bytes);
        }
        self.index.truncate(0).await?;
        let (result, _) = self.index.write_at(vec![PoolSlice::plain(bytes)], 0).await;
        result?;
        self.index.sync().await
    }
}

async fn read_index<F: StorageFile>(index: &F) -> io::Result<Vec<IndexEntry>> {
    let len = index.len().await? as usize / INDEX_ENTRY_SIZE * INDEX_ENTRY_SIZE;
    if len == 0 {
        return Ok(Vec::new());
    }
    let (result, buf) = index.read_exact_at(scratch(len), 0).await;
    result?;
    Ok(buf.chunks_exact(INDEX_ENTRY_SIZE).map(|chunk| IndexEntry::decode(chunk.try_into().unwrap())).collect())
}

/// Keeps the longest prefix of entries that tile the log from position 0 with contiguous
/// offsets and lie inside it, and (in a sealed segment) end by the next segment's start:
/// `offset_limit` offsets from this one's.
fn keep_consistent_prefix(entries: &mut Vec<IndexEntry>, log_len: u64, offset_limit: Option<u64>) {
    let (mut position, mut relative) = (0u64, 0u64);
    let keep = entries
        .iter()
        .take_while(|e| {
            let fits = e.position as u64 == position
                && e.relative_offset as u64 == relative
                && e.message_count > 0
                && e.length as usize >= BATCH_HEADER_SIZE
                && position + e.length as u64 <= log_len
                && offset_limit.is_none_or(|limit| relative + e.message_count as u64 <= limit);
            position += e.length as u64;
            relative += e.message_count as u64;
            fits
        })
        .count();
    entries.truncate(keep);
}
