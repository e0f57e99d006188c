//! A partition's log: the in-memory journal of stamped batches not yet written, and the
//! segments on disk. Appends stamp offsets and time; the journal flushes at the topic's
//! thresholds; polls read disk and journal as one sequence.

mod offsets;
mod segment;

use std::io;
use std::path::{Path, PathBuf};

use rill_domain::batch::{self, BatchHeader};
use rill_domain::segment::parse_log_file_name;
use rill_domain::topic_options::TopicSettings;
use rill_domain::wire::response::Usage;

pub use offsets::{ConsumerKey, ConsumerOffsets};
pub use segment::{Recovery, Segment};

use crate::ports::Storage;

/// Poll replies stop adding batches past this many bytes (at least one batch is returned).
pub const MAX_POLL_BYTES: usize = 32 * 1024 * 1024;

/// The per-topic settings a partition runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionSettings {
    pub segment_size_bytes: u64,
    pub messages_required_to_save: u32,
    pub size_required_to_save_bytes: u64,
    pub enforce_fsync: bool,
    pub consumer_offset_fsync: bool,
}

impl From<&TopicSettings> for PartitionSettings {
    fn from(topic: &TopicSettings) -> Self {
        Self {
            segment_size_bytes: topic.segment_size_bytes,
            messages_required_to_save: topic.messages_required_to_save,
            size_required_to_save_bytes: topic.size_required_to_save_bytes,
            enforce_fsync: topic.enforce_fsync,
            consumer_offset_fsync: topic.consumer_offset_fsync,
        }
    }
}

pub struct PartitionLog<S: Storage> {
    dir: PathBuf,
    partition_id: u32,
    pub settings: PartitionSettings,
    segments: Vec<Segment<S::File>>,
    journal: Vec<Vec<u8>>,
    journal_messages: u32,
    journal_bytes: u64,
    next_offset: u64,
    pub offsets: ConsumerOffsets<S::File>,
    /// Buffers whose bytes are on disk, waiting to be recycled by the caller.
    spent: Vec<Vec<u8>>,
}

impl<S: Storage> PartitionLog<S> {
    /// Opens (or creates) the partition under `dir`, recovering every segment.
    pub async fn open(storage: &S, dir: &Path, partition_id: u32, settings: PartitionSettings) -> io::Result<Self> {
        storage.create_dir_all(dir).await?;
        let mut starts: Vec<u64> = storage.list_dir(dir).await?.iter().filter_map(|n| parse_log_file_name(n)).collect();
        starts.sort_unstable();
        let mut segments = Vec::with_capacity(starts.len().max(1));
        for start in starts {
            let (segment, recovery) = Segment::load(storage, dir, start).await?;
            if recovery != Recovery::default() {
                tracing::warn!(dir = %dir.display(), start, ?recovery, "segment repaired at start");
            }
            segments.push(segment);
        }
        if segments.is_empty() {
            segments.push(Segment::create(storage, dir, 0).await?);
        }
        let next_offset = segments.last().map_or(0, |s| s.end_offset());
        let offsets = ConsumerOffsets::load(storage, dir).await?;
        Ok(Self {
            dir: dir.to_path_buf(),
            partition_id,
            settings,
            segments,
            journal: Vec::new(),
            journal_messages: 0,
            journal_bytes: 0,
            next_offset,
            offsets,
            spent: Vec::new(),
        })
    }

    pub fn first_offset(&self) -> u64 {
        self.segments.first().map_or(0, |s| s.start_offset)
    }

    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// The last stored offset, or 0 for an empty partition (as Iggy reports it).
    pub fn current_offset(&self) -> u64 {
        self.next_offset.saturating_sub(1)
    }

    pub fn segments_count(&self) -> u32 {
        self.segments.len() as u32
    }

    pub fn usage(&self) -> Usage {
        let disk: u64 = self.segments.iter().map(|s| s.size_bytes).sum();
        Usage { size_bytes: disk + self.journal_bytes, messages_count: self.next_offset - self.first_offset() }
    }

    /// Stamps a validated batch with the next offsets and `now_us`, journals it, and flushes
    /// when a threshold is reached or the topic demands fsync. Returns the base offset.
    pub async fn append(&mut self, storage: &S, mut stored: Vec<u8>, now_us: u64) -> io::Result<u64> {
        let base_offset = self.next_offset;
        batch::stamp(&mut stored, self.partition_id, base_offset, now_us);
        let count = BatchHeader::read(&stored).message_count;
        self.next_offset += count as u64;
        self.journal_messages += count;
        self.journal_bytes += stored.len() as u64;
        self.journal.push(stored);
        let threshold_reached = self.journal_messages >= self.settings.messages_required_to_save
            || self.journal_bytes >= self.settings.size_required_to_save_bytes;
        if threshold_reached || self.settings.enforce_fsync {
            self.flush(storage, self.settings.enforce_fsync).await?;
        }
        Ok(base_offset)
    }

    /// Writes the journal to the active segment, sealing it and opening a new one whenever
    /// the next batch would cross the segment size.
    pub async fn flush(&mut self, storage: &S, fsync: bool) -> io::Result<()> {
        let journal = std::mem::take(&mut self.journal);
        let mut pending: Vec<Vec<u8>> = Vec::new();
        let mut pending_bytes = 0u64;
        for stored in journal {
            let active = self.segments.last().expect("a partition always has a segment");
            if active.size_bytes + pending_bytes > 0
                && active.size_bytes + pending_bytes + stored.len() as u64 > self.settings.segment_size_bytes
            {
                self.write_pending(std::mem::take(&mut pending), fsync).await?;
                pending_bytes = 0;
                self.seal_and_roll(storage, BatchHeader::read(&stored).base_offset).await?;
            }
            pending_bytes += stored.len() as u64;
            pending.push(stored);
        }
        self.write_pending(pending, fsync).await?;
        if fsync {
            self.segments.last().unwrap().sync().await?;
        }
        self.journal_messages = 0;
        self.journal_bytes = 0;
        Ok(())
    }

    async fn write_pending(&mut self, pending: Vec<Vec<u8>>, fsync: bool) -> io::Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let written = self.segments.last_mut().unwrap().append(pending, fsync).await?;
        self.spent.extend(written);
        Ok(())
    }

    /// Takes the buffers already written to disk, for the caller's memory pool.
    pub fn take_spent(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.spent)
    }

    async fn seal_and_roll(&mut self, storage: &S, start_offset: u64) -> io::Result<()> {
        // A sealed segment is never written again, so make it durable once, now.
        self.segments.last().unwrap().sync().await?;
        let segment = Segment::create(storage, &self.dir, start_offset).await?;
        self.segments.push(segment);
        storage.sync_dir(&self.dir).await
    }

    /// Appends up to `count` messages from `start` as batch records; returns how many.
    pub async fn read(&self, start: u64, count: u32, out: &mut Vec<u8>) -> io::Result<u32> {
        let mut read = 0u32;
        let mut next = start;
        let budget_start = out.len();
        for segment in &self.segments {
            if read >= count || out.len() - budget_start >= MAX_POLL_BYTES {
                return Ok(read);
            }
            if segment.end_offset() <= next {
                continue;
            }
            let budget = MAX_POLL_BYTES.saturating_sub(out.len() - budget_start).max(1);
            let taken = segment.read(next, count - read, budget, out).await?;
            read += taken;
            next += taken as u64;
        }
        for stored in &self.journal {
            if read >= count || out.len() - budget_start >= MAX_POLL_BYTES {
                break;
            }
            let taken = batch::append_slice(stored, next, count - read, out);
            read += taken;
            next += taken as u64;
        }
        Ok(read)
    }

    /// The offset of the first message stamped at or after `timestamp`.
    pub fn offset_at_timestamp(&self, timestamp: u64) -> Option<u64> {
        self.segments.iter().find_map(|s| s.offset_at_timestamp(timestamp)).or_else(|| {
            self.journal
                .iter()
                .map(|b| BatchHeader::read(b))
                .find(|h| h.base_timestamp >= timestamp)
                .map(|h| h.base_offset)
        })
    }

    /// Deletes every message and stored offset; the partition starts again at offset 0.
    pub async fn purge(&mut self, storage: &S) -> io::Result<()> {
        self.journal.clear();
        self.journal_messages = 0;
        self.journal_bytes = 0;
        self.segments.clear();
        storage.remove_dir_all(&self.dir).await?;
        storage.create_dir_all(&self.dir).await?;
        self.segments.push(Segment::create(storage, &self.dir, 0).await?);
        self.offsets = ConsumerOffsets::load(storage, &self.dir).await?;
        self.next_offset = 0;
        Ok(())
    }

    /// Deletes the oldest `count` sealed segments; the active segment is never deleted.
    /// Returns how many were deleted.
    pub async fn delete_segments(&mut self, storage: &S, count: u32) -> io::Result<u32> {
        let sealed = self.segments.len().saturating_sub(1);
        let deleting = (count as usize).min(sealed);
        for segment in self.segments.drain(..deleting) {
            let start = segment.start_offset;
            storage.remove_file(&self.dir.join(rill_domain::segment::log_file_name(start))).await?;
            storage.remove_file(&self.dir.join(rill_domain::segment::index_file_name(start))).await?;
        }
        Ok(deleting as u32)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
