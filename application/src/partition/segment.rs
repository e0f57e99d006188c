//! One segment on disk: its `.log` of stamped batches and its `.index` of one entry per
//! batch, with crash recovery that cuts a torn or corrupt tail at the last verified batch.

use std::io;
use std::path::Path;

use rill_domain::batch::{self, BatchHeader};
use rill_domain::constants::{BATCH_HEADER_SIZE, INDEX_ENTRY_SIZE, MAX_FRAME_SIZE, MAX_IOVECS_PER_WRITE};
use rill_domain::segment::{self, IndexEntry};

use crate::ports::{Storage, StorageFile};

pub struct Segment<F> {
    pub start_offset: u64,
    log: F,
    index: F,
    pub size_bytes: u64,
    pub entries: Vec<IndexEntry>,
}

/// What recovery found in a segment's files.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Bytes cut from the end of the log because they did not verify.
    pub truncated_bytes: u64,
    /// Index entries rebuilt from the log.
    pub rebuilt_entries: usize,
}

impl<F: StorageFile> Segment<F> {
    /// Offset one past the segment's last message.
    pub fn end_offset(&self) -> u64 {
        self.start_offset + self.entries.last().map_or(0, |e| e.end_relative_offset())
    }

    pub fn messages_count(&self) -> u64 {
        self.end_offset() - self.start_offset
    }

    pub async fn create<S: Storage<File = F>>(storage: &S, dir: &Path, start_offset: u64) -> io::Result<Self> {
        let log = storage.open(&dir.join(segment::log_file_name(start_offset))).await?;
        let index = storage.open(&dir.join(segment::index_file_name(start_offset))).await?;
        log.truncate(0).await?;
        index.truncate(0).await?;
        Ok(Self { start_offset, log, index, size_bytes: 0, entries: Vec::new() })
    }

    /// Opens an existing segment and repairs it: index entries that point past the log or
    /// at a batch that does not verify are dropped, batches after the index are re-indexed,
    /// and anything after the last verified batch is cut.
    pub async fn load<S: Storage<File = F>>(
        storage: &S,
        dir: &Path,
        start_offset: u64,
    ) -> io::Result<(Self, Recovery)> {
        let log = storage.open(&dir.join(segment::log_file_name(start_offset))).await?;
        let index = storage.open(&dir.join(segment::index_file_name(start_offset))).await?;
        let log_len = log.len().await?;
        let mut entries = read_index(&index).await?;
        keep_consistent_prefix(&mut entries, log_len);
        let mut segment = Self { start_offset, log, index, size_bytes: 0, entries };
        while let Some(last) = segment.entries.last().copied() {
            if segment.verify_batch(&last).await? {
                break;
            }
            segment.entries.pop();
        }
        segment.size_bytes = segment.entries.last().map_or(0, |e| e.position as u64 + e.length as u64);
        let indexed = segment.entries.len();
        let rebuilt_entries = segment.scan_tail(log_len).await?;
        let recovery = Recovery { truncated_bytes: log_len - segment.size_bytes, rebuilt_entries };
        if recovery.truncated_bytes > 0 {
            segment.log.truncate(segment.size_bytes).await?;
        }
        if rebuilt_entries > 0 || segment.index.len().await? != (indexed * INDEX_ENTRY_SIZE) as u64 {
            segment.rewrite_index().await?;
        }
        Ok((segment, recovery))
    }

    async fn verify_batch(&self, entry: &IndexEntry) -> io::Result<bool> {
        let buf = vec![0u8; entry.length as usize];
        let (result, buf) = self.log.read_exact_at(buf, entry.position as u64).await;
        result?;
        let header = BatchHeader::read(&buf);
        Ok(batch::verify_stored(&buf) && header.base_offset == self.start_offset + entry.relative_offset as u64)
    }

    /// Indexes verified batches after `size_bytes`; returns how many were added.
    async fn scan_tail(&mut self, log_len: u64) -> io::Result<usize> {
        let mut added = 0;
        while log_len - self.size_bytes >= BATCH_HEADER_SIZE as u64 {
            let (result, head) = self.log.read_exact_at(vec![0u8; BATCH_HEADER_SIZE], self.size_bytes).await;
            result?;
            let length = BatchHeader::read(&head).batch_length;
            if length < BATCH_HEADER_SIZE as u64 || length > MAX_FRAME_SIZE as u64 || self.size_bytes + length > log_len
            {
                break;
            }
            let (result, buf) = self.log.read_exact_at(vec![0u8; length as usize], self.size_bytes).await;
            result?;
            let header = BatchHeader::read(&buf);
            if !batch::verify_stored(&buf) || header.base_offset != self.end_offset() {
                break;
            }
            self.entries.push(entry_for(&header, self.start_offset, self.size_bytes));
            self.size_bytes += length;
            added += 1;
        }
        Ok(added)
    }

    async fn rewrite_index(&mut self) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(self.entries.len() * INDEX_ENTRY_SIZE);
        for entry in &self.entries {
            entry.encode(&mut bytes);
        }
        self.index.truncate(0).await?;
        let (result, _) = self.index.write_at(vec![bytes], 0).await;
        result
    }

    /// Appends stamped batches: the log in vectored writes of at most 1024 buffers, then
    /// their index entries; both fsynced when asked. The written buffers come back so the
    /// caller can recycle them.
    pub async fn append(&mut self, batches: Vec<Vec<u8>>, fsync: bool) -> io::Result<Vec<Vec<u8>>> {
        let mut index_bytes = Vec::with_capacity(batches.len() * INDEX_ENTRY_SIZE);
        let mut position = self.size_bytes;
        let mut new_entries = Vec::with_capacity(batches.len());
        for stored in &batches {
            let entry = entry_for(&BatchHeader::read(stored), self.start_offset, position);
            entry.encode(&mut index_bytes);
            new_entries.push(entry);
            position += stored.len() as u64;
        }
        let mut write_position = self.size_bytes;
        let mut remaining = batches;
        let mut written = Vec::with_capacity(remaining.len());
        while !remaining.is_empty() {
            let rest = remaining.split_off(remaining.len().min(MAX_IOVECS_PER_WRITE));
            let chunk_len: u64 = remaining.iter().map(|b| b.len() as u64).sum();
            let (result, bufs) = self.log.write_at(remaining, write_position).await;
            result?;
            written.extend(bufs);
            write_position += chunk_len;
            remaining = rest;
        }
        let index_position = (self.entries.len() * INDEX_ENTRY_SIZE) as u64;
        let (result, _) = self.index.write_at(vec![index_bytes], index_position).await;
        result?;
        if fsync {
            self.log.sync().await?;
            self.index.sync().await?;
        }
        self.entries.extend(new_entries);
        self.size_bytes = position;
        Ok(written)
    }

    pub async fn sync(&self) -> io::Result<()> {
        self.log.sync().await?;
        self.index.sync().await
    }

    /// Appends to `out` the messages from `from` on, at most `max_messages`, reading one
    /// contiguous range of whole batches. Returns the number of messages appended.
    pub async fn read(&self, from: u64, max_messages: u32, max_bytes: usize, out: &mut Vec<u8>) -> io::Result<u32> {
        let Some(first) = segment::find_by_offset(&self.entries, from.saturating_sub(self.start_offset)) else {
            return Ok(0);
        };
        let mut last = first;
        let first_base = self.start_offset + self.entries[first].relative_offset as u64;
        let mut available = first_base + self.entries[first].message_count as u64 - from.max(first_base);
        let mut bytes = self.entries[first].length as usize;
        while last + 1 < self.entries.len() && available < max_messages as u64 && bytes < max_bytes {
            last += 1;
            available += self.entries[last].message_count as u64;
            bytes += self.entries[last].length as usize;
        }
        let start = self.entries[first].position as u64;
        let (result, buf) = self.log.read_exact_at(vec![0u8; bytes], start).await;
        result?;
        let mut appended = 0;
        let mut position = 0;
        for entry in &self.entries[first..=last] {
            let record = &buf[position..position + entry.length as usize];
            appended += batch::append_slice(record, from, max_messages - appended, out);
            position += entry.length as usize;
        }
        Ok(appended)
    }

    /// The offset of the first batch stamped at or after `timestamp`, if this segment has one.
    pub fn offset_at_timestamp(&self, timestamp: u64) -> Option<u64> {
        let index = segment::find_by_timestamp(&self.entries, timestamp)?;
        Some(self.start_offset + self.entries[index].relative_offset as u64)
    }
}

fn entry_for(header: &BatchHeader, start_offset: u64, position: u64) -> IndexEntry {
    IndexEntry {
        relative_offset: (header.base_offset - start_offset) as u32,
        position: position as u32,
        timestamp: header.base_timestamp,
        message_count: header.message_count,
        length: header.batch_length as u32,
    }
}

async fn read_index<F: StorageFile>(index: &F) -> io::Result<Vec<IndexEntry>> {
    let len = index.len().await? as usize / INDEX_ENTRY_SIZE * INDEX_ENTRY_SIZE;
    if len == 0 {
        return Ok(Vec::new());
    }
    let (result, buf) = index.read_exact_at(vec![0u8; len], 0).await;
    result?;
    Ok(buf.chunks_exact(INDEX_ENTRY_SIZE).map(|chunk| IndexEntry::decode(chunk.try_into().unwrap())).collect())
}

/// Keeps the longest prefix of entries that tile the log from position 0 with contiguous
/// offsets and lie inside it.
fn keep_consistent_prefix(entries: &mut Vec<IndexEntry>, log_len: u64) {
    let (mut position, mut relative) = (0u64, 0u64);
    let keep = entries
        .iter()
        .take_while(|e| {
            let fits = e.position as u64 == position
                && e.relative_offset as u64 == relative
                && e.message_count > 0
                && e.length as usize >= BATCH_HEADER_SIZE
                && position + e.length as u64 <= log_len;
            position += e.length as u64;
            relative += e.message_count as u64;
            fits
        })
        .count();
    entries.truncate(keep);
}
