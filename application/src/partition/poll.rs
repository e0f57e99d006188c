//! A poll's reply, read straight into one pooled frame. Under the partition's lock the poll
//! is planned from the index (which stored batches, where each lands in the frame) and the
//! batches still in the journal are copied in; the segments are read after the lock is
//! released, each batch checked where it landed. A batch the poll cuts is resealed in place:
//! the tail is dropped by ending the frame early, the head by moving the batch header up to
//! the first frame kept (and the reply header with it), so no batch bytes move.

use std::io;
use std::path::PathBuf;
use std::rc::Rc;

use rill_domain::batch;
use rill_domain::constants::{BATCH_HEADER_SIZE, HEADER_SIZE};
use rill_domain::segment::{self, IndexEntry};
use rill_domain::version::Dialect;
use rill_domain::wire::response;

use super::log::PartitionLog;
use super::segment::{DamagedBatch, batch_matches, within_frame};
use crate::memory_pool::{MemoryPool, PoolBuf, PoolSlice};
use crate::ports::{Storage, StorageFile};

/// Poll replies take no batch that would bring them past this many bytes of batches (the
/// first batch always comes, whatever its size).
pub const MAX_POLL_BYTES: usize = 32 * 1024 * 1024;

/// How much a poll may return: messages, and bytes of batches (at least the first batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollLimit {
    pub messages: u32,
    pub bytes: usize,
}

impl PollLimit {
    /// Up to `messages` messages within the server's byte cap.
    pub fn messages(messages: u32) -> Self {
        Self { messages, bytes: MAX_POLL_BYTES }
    }

    /// Up to `messages` messages in a reply body of at most `max_bytes` (0: the server's
    /// cap) after a 0.12 poll prefix.
    pub fn within(messages: u32, max_bytes: u32) -> Self {
        let bytes = match max_bytes {
            0 => MAX_POLL_BYTES,
            max => (max as usize).saturating_sub(POLL_PREFIX_SIZE).min(MAX_POLL_BYTES),
        };
        Self { messages, bytes }
    }

    /// Whether a batch of `len` more bytes would break the byte budget, `bytes` and
    /// `messages` planned so far (the first batch never does).
    fn full(&self, messages: u32, bytes: usize, len: usize) -> bool {
        messages > 0 && bytes + len > self.bytes
    }
}

/// Room for the longest poll prefix, before the batches: protocol 0.12's
/// `[partition_id u32][current_offset u64][messages_count u32][context 24 bytes]`. A poll
/// writes that prefix; [`poll_frame_for`] trims it to a 0.11 reply's 16 bytes.
pub const POLL_PREFIX_SIZE: usize = 40;
/// Room a poll frame keeps before its batches: the reply header and the poll prefix.
pub const REPLY_ROOM: usize = HEADER_SIZE + POLL_PREFIX_SIZE;

/// A poll's frame (the 0.12 prefix written in its room) laid out for `dialect`: a 0.11
/// prefix is the 0.12 one without its context, moved up against the batches, and the frame
/// starts that much later. No batch byte moves.
pub fn poll_frame_for(mut frame: PoolSlice, dialect: Dialect) -> PoolSlice {
    let kept = response::poll_prefix_size(dialect);
    let unused = POLL_PREFIX_SIZE - kept;
    if unused > 0 && frame.len() >= REPLY_ROOM {
        frame.copy_within(HEADER_SIZE..HEADER_SIZE + kept, HEADER_SIZE + unused);
        frame.advance(unused);
    }
    // A 0.11 client refuses the producer section 0.12 producers' batches carry.
    if dialect == Dialect::V11 && frame.len() > HEADER_SIZE + kept && batch::any_producer(&frame[HEADER_SIZE + kept..])
    {
        batch::strip_producers(&mut frame[HEADER_SIZE + kept..]);
    }
    frame
}

/// A poll frame carries, in the room its reply header will take, the offset the poll
/// resolved its start to (the log's end when it found none): a fetch reports it as where
/// the partition's next read starts. Writing the reply header overwrites it.
pub fn note_resolved_start(frame: &mut [u8], start: u64) {
    frame[..8].copy_from_slice(&start.to_le_bytes());
}

/// The start [`note_resolved_start`] left in a poll frame.
pub fn resolved_start(frame: &[u8]) -> u64 {
    u64::from_le_bytes(frame[..8].try_into().expect("a poll frame has room for its header"))
}

/// One contiguous read of a segment's batches into the frame.
struct PlannedRead<F> {
    log: Rc<F>,
    log_path: PathBuf,
    segment_start: u64,
    position: u64,
    /// Where in the frame the read lands.
    at: usize,
    entries: Vec<IndexEntry>,
}

/// A poll planned under the partition's lock, to be read after it.
pub struct PollPlan<F> {
    frame: PoolBuf,
    reads: Vec<PlannedRead<F>>,
    from: u64,
    count: u32,
    /// Where the copies of journal batches end (they follow the stored batches).
    end: usize,
    journal_messages: u32,
    validate: bool,
    /// A damaged range met before anything could be planned: reported without a read.
    damaged: Option<DamagedBatch>,
}

/// What a poll read: the frame (`REPLY_ROOM` bytes of room, for the caller to fill, then
/// the batches), the messages in it, and the damaged batch it stopped at, if any.
#[derive(Debug)]
pub struct Polled {
    pub frame: PoolSlice,
    pub messages: u32,
    pub damaged: Option<DamagedBatch>,
}

impl<S: Storage> PartitionLog<S> {
    /// Plans a poll of up to `count` messages from `start` (at least the first offset): the
    /// stored batches to read and where, then the journal's batches, copied into the frame
    /// now, while the lock is held. Stops at the byte budget and before a damaged range
    /// too long to be a batch.
    pub fn plan_poll(&self, start: u64, limit: PollLimit, pool: &'static MemoryPool) -> PollPlan<S::File> {
        let count = limit.messages;
        let from = start.max(self.first_offset());
        let (mut next, mut messages, mut bytes) = (from, 0u32, 0usize);
        let mut reads = Vec::new();
        let mut damaged = None;
        let mut reached_journal = true;
        'segments: for segment in &self.segments {
            if segment.end_offset() <= next {
                continue;
            }
            let Some(first) = segment::find_by_offset(&segment.entries, next.saturating_sub(segment.start_offset))
            else {
                continue;
            };
            let mut read = PlannedRead {
                log: segment.log.clone(),
                log_path: segment.log_path.clone(),
                segment_start: segment.start_offset,
                position: segment.entries[first].position as u64,
                at: REPLY_ROOM + bytes,
                entries: Vec::new(),
            };
            for entry in &segment.entries[first..] {
                if messages >= count || limit.full(messages, bytes, entry.length as usize) {
                    reached_journal = false;
                    break;
                }
                if !within_frame(entry) {
                    if messages == 0 {
                        damaged = Some(segment.damaged(entry));
                    }
                    reached_journal = false;
                    if !read.entries.is_empty() {
                        reads.push(read);
                    }
                    break 'segments;
                }
                let base = segment.start_offset + entry.relative_offset as u64;
                let end = base + entry.message_count as u64;
                messages = messages.saturating_add((end - next.max(base)) as u32);
                bytes += entry.length as usize;
                next = end;
                read.entries.push(*entry);
            }
            if !read.entries.is_empty() {
                reads.push(read);
            }
            if !reached_journal {
                break;
            }
        }
        let disk_bytes = bytes;
        let mut copies = Vec::new();
        if reached_journal && damaged.is_none() {
            for stored in &self.journal {
                if messages >= count {
                    break;
                }
                if let Some((range, taken)) = batch::part(stored, next, count - messages) {
                    if limit.full(messages, bytes, BATCH_HEADER_SIZE + range.len()) {
                        break;
                    }
                    copies.push((stored, next, count - messages));
                    bytes += BATCH_HEADER_SIZE + range.len();
                    messages += taken;
                    next += taken as u64;
                }
            }
        }
        let mut frame = pool.acquire(REPLY_ROOM + bytes);
        let (mut at, mut journal_messages) = (REPLY_ROOM + disk_bytes, 0);
        for (stored, from, max) in copies {
            let (taken, len) = batch::copy_part(stored, from, max, &mut frame[at..]);
            journal_messages += taken;
            at += len;
        }
        let validate = self.settings.validate_checksum;
        PollPlan { frame, reads, from, count, end: at, journal_messages, validate, damaged }
    }

    /// How many messages from `from` (a batch's first offset) reach the end of the batch
    /// holding `last`, so that a poll of that many serves whole batches only; up to the log's
    /// end when it does not hold `last`.
    pub fn whole_batches_through(&self, from: u64, last: u64) -> u32 {
        let in_segment = self.segments.iter().find(|segment| segment.end_offset() > last).and_then(|segment| {
            let first = segment::find_by_offset(&segment.entries, last.saturating_sub(segment.start_offset))?;
            let entry = segment.entries[first];
            Some(segment.start_offset + u64::from(entry.relative_offset) + u64::from(entry.message_count))
        });
        let in_journal = || {
            let mut ends = self.journal.iter().map(|stored| {
                let header = batch::BatchHeader::read(stored);
                header.base_offset + u64::from(header.message_count)
            });
            ends.find(|&end| end > last)
        };
        let end = in_segment.or_else(in_journal).unwrap_or_else(|| self.next_offset());
        u32::try_from(end.saturating_sub(from)).unwrap_or(u32::MAX)
    }

    /// Plans and reads a poll in one go, with the lock (if any) held throughout.
    pub async fn poll(&self, start: u64, count: u32, pool: &'static MemoryPool) -> io::Result<Polled> {
        self.plan_poll(start, PollLimit::messages(count), pool).read().await
    }
}

impl<F: StorageFile> PollPlan<F> {
    /// Reads the planned batches into the frame, checks each where it landed, and cuts the
    /// first and last where the poll's range starts and ends. A damaged batch ends the
    /// reply before it (and the journal copies after it are dropped).
    pub async fn read(self) -> io::Result<Polled> {
        let PollPlan { mut frame, reads, from, count, end, journal_messages, validate, damaged } = self;
        if let Some(damaged) = damaged {
            frame.truncate(REPLY_ROOM);
            return Ok(Polled { frame: frame.whole(), messages: 0, damaged: Some(damaged) });
        }
        for read in &reads {
            let len: usize = read.entries.iter().map(|e| e.length as usize).sum();
            let (result, slice) = read.log.read_exact_at(frame.slice(read.at..read.at + len), read.position).await;
            frame = slice.into_inner();
            result?;
        }
        let mut cursor = Cursor { first_batch: REPLY_ROOM, end, next: from, left: count, messages: 0 };
        for read in &reads {
            let mut at = read.at;
            for entry in &read.entries {
                if let Err(damaged) = cursor.take(&mut frame, at, entry, read, validate) {
                    frame.truncate(at.max(cursor.first_batch));
                    let head = cursor.first_batch - REPLY_ROOM;
                    let frame = frame.slice(head..at.max(cursor.first_batch));
                    return Ok(Polled { frame, messages: cursor.messages, damaged: Some(damaged) });
                }
                at += entry.length as usize;
            }
        }
        let head = cursor.first_batch - REPLY_ROOM;
        let messages = cursor.messages + journal_messages;
        frame.truncate(cursor.end);
        Ok(Polled { frame: frame.slice(head..cursor.end), messages, damaged: None })
    }
}

/// Where a poll's reading stands: where its first batch starts (moved up by a head cut),
/// where it ends (moved down by a tail cut), the next offset and the messages left.
struct Cursor {
    first_batch: usize,
    end: usize,
    next: u64,
    left: u32,
    messages: u32,
}

impl Cursor {
    /// Checks the batch read at `at` and takes the part of it the poll wants, cutting it in
    /// place if needed; the damaged batch's place when it fails its check.
    fn take<F>(
        &mut self,
        frame: &mut PoolBuf,
        at: usize,
        entry: &IndexEntry,
        read: &PlannedRead<F>,
        validate: bool,
    ) -> Result<(), DamagedBatch> {
        let len = entry.length as usize;
        if !batch_matches(&frame[at..at + len], entry, read.segment_start, validate) {
            return Err(DamagedBatch::at(read.log_path.clone(), read.segment_start, entry));
        }
        let Some((frames, taken)) = batch::part(&frame[at..at + len], self.next, self.left) else {
            return Ok(());
        };
        let (mut start, end) = (at, at + frames.end);
        if frames.start > BATCH_HEADER_SIZE {
            // Only the first batch of a poll is cut at its head: its header moves up.
            start = at + frames.start - BATCH_HEADER_SIZE;
            frame.copy_within(at..at + BATCH_HEADER_SIZE, start);
            self.first_batch = start;
        }
        if start != at || frames.end != len {
            batch::reseal(&mut frame[start..end], taken);
        }
        if frames.end != len {
            // Only the last: the poll's count ends inside it.
            self.end = end;
        }
        self.messages += taken;
        self.left -= taken;
        self.next = read.segment_start + entry.end_relative_offset();
        Ok(())
    }
}
