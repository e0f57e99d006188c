//! A partition's log: the in-memory journal of stamped batches not yet written, and the
//! segments on disk. Appends stamp offsets and time; the journal flushes at the topic's
//! thresholds. A failed write leaves the partition read-only, keeping what it acknowledged,
//! until a write succeeds again.

use std::collections::{BTreeSet, VecDeque};
use std::io;
use std::path::{Path, PathBuf};

use rill_domain::answer::Usage;
use rill_domain::batch::{self, BatchHeader};
use rill_domain::dedup::DedupWindow;
use rill_domain::segment::parse_log_file_name;

use super::offsets::ConsumerOffsets;
use super::recovery::{LoadMode, Recovery};
use super::segment::{DELETED_SUFFIX, DamagedBatch, Segment};
use super::settings::PartitionSettings;
use super::spares::{OwnSpares, SPARE_SUFFIX, SpareBudget};
use crate::memory_pool::PoolSlice;
use crate::ports::Storage;

/// Damaged batches a partition remembers having reported, so each is logged once.
const MAX_REPORTED: usize = 4096;

/// How far ahead of the clock the last stamp may be and still hold later stamps back.
const MAX_CLOCK_AHEAD_US: u64 = 3_600_000_000;

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The first offset given to the batch (the next offset when nothing was stored).
    pub base_offset: u64,
    pub stored: u32,
    /// Messages dropped because their id was stored in the window already.
    pub duplicates: u32,
    pub bytes: u64,
    /// A flush threshold was reached and the flush was left to the caller (`append_deferring`).
    pub flush_due: bool,
}

/// How far past its flush thresholds a journal may grow while a deferred flush is pending,
/// not counting what a flusher has taken on and is writing: at twice a threshold the send
/// writes a chunk itself, so a flusher that falls behind slows producers down instead of
/// letting memory grow (a journal holds at most about three times what it held when every
/// threshold flush ran in the send).
const DEFERRED_FLUSH_SLACK: u64 = 2;

/// The most a deferred flush writes while it holds the partition (at least one batch): a
/// send that arrives during the flush waits for one such write, not for the whole journal.
const DEFERRED_CHUNK_BYTES: u64 = 1 << 20;

pub struct PartitionLog<S: Storage> {
    pub(super) dir: PathBuf,
    pub(super) partition_id: u32,
    pub settings: PartitionSettings,
    pub(super) segments: Vec<Segment<S::File>>,
    /// Stamped batches not yet written, each the range of the request frame it came in.
    pub(super) journal: VecDeque<PoolSlice>,
    pub(super) journal_messages: u32,
    pub(super) journal_bytes: u64,
    /// Messages and bytes at the journal's front that a deferred flush has taken on and not
    /// written yet: a send does not count them toward flushing itself.
    pub(super) deferred: (u32, u64),
    pub(super) next_offset: u64,
    /// Stamps never go back, so the index can be searched by time.
    pub(super) last_timestamp: u64,
    pub offsets: ConsumerOffsets<S::File>,
    /// Why the last write failed, while the partition refuses sends.
    pub(super) write_failure: Option<io::ErrorKind>,
    pub(super) dedup: Option<DedupWindow>,
    /// Idempotent producers' recent batches (see `producers.rs`), and whether the partition
    /// has its producers marker.
    pub(super) producers: rill_domain::producers::ProducerTable,
    pub(super) has_producers: bool,
    /// Damaged batches already reported: (segment start offset, position).
    pub(super) reported: BTreeSet<(u64, u64)>,
    /// Bumped by each purge, so a scrubber's place in the old files is not taken for one
    /// in the new.
    pub(super) generation: u64,
    /// A purge removed the files and could not make the new ones: the segments still held
    /// are gone from disk, and the next write makes the new files first.
    pub(super) purge_pending: bool,
    /// The log files of this partition's removed direct segments, which its new direct
    /// segments are written over; `None` where the server keeps no spares.
    pub(super) spares: Option<OwnSpares>,
}

impl<S: Storage> PartitionLog<S> {
    /// Opens (or creates) the partition under `dir`, recovering every segment. `clean` says
    /// the server stopped gracefully, after fsyncing everything: then no tail can be torn.
    pub async fn open(
        storage: &S,
        dir: &Path,
        partition_id: u32,
        settings: PartitionSettings,
        clean: bool,
    ) -> io::Result<Self> {
        Self::open_with(storage, dir, partition_id, settings, clean, None).await
    }

    /// Like `open`, the log files of segments it removes kept (within `spares`, the
    /// server's budget) for its new direct segments to be written over, and the spares its
    /// directory holds taken up.
    pub async fn open_with(
        storage: &S,
        dir: &Path,
        partition_id: u32,
        settings: PartitionSettings,
        clean: bool,
        spares: Option<SpareBudget>,
    ) -> io::Result<Self> {
        storage.create_dir_all(dir).await?;
        let names = storage.list_dir(dir).await?;
        let orphan = |name: &String, suffix: &str| {
            name.strip_suffix(suffix).is_some_and(|stem| !names.contains(&format!("{stem}.log")))
        };
        let mut spares = spares.filter(|_| settings.direct_log).map(OwnSpares::new);
        // A `.floor` file is an earlier version's, beside a log it wrote over another
        // partition's file; nothing reads it now.
        let leftovers = names.iter().filter(|n| {
            n.ends_with(DELETED_SUFFIX)
                || orphan(n, ".index")
                || n.ends_with(".floor")
                || (n.ends_with(SPARE_SUFFIX) && spares.is_none())
        });
        for leftover in leftovers {
            // A cleaning pass renamed or half-renamed a segment and stopped before removing
            // it, or a spare is left that this log does not keep.
            storage.remove_file(&dir.join(leftover)).await?;
        }
        if let Some(spares) = &mut spares {
            spares.take_up(storage, dir, &names).await?;
        }
        let mut starts: Vec<u64> = names.iter().filter_map(|n| parse_log_file_name(n)).collect();
        starts.sort_unstable();
        let mut segments = Vec::with_capacity(starts.len().max(1));
        for (i, &start) in starts.iter().enumerate() {
            let last = i + 1 == starts.len();
            let mode = LoadMode {
                torn_tail_possible: last && !clean,
                next_start: starts.get(i + 1).copied(),
                // A sealed segment is never written again.
                direct: last && settings.direct_log,
            };
            let (segment, recovery) = Segment::load(storage, dir, start, mode).await?;
            if recovery != Recovery::default() {
                tracing::warn!(dir = %dir.display(), start, ?recovery, "segment repaired at start");
            }
            segments.push(segment);
        }
        if segments.is_empty() {
            segments.push(Segment::create_over(storage, dir, 0, settings.direct_log, spares.as_mut()).await?);
        }
        let next_offset = segments.last().map_or(0, |s| s.end_offset());
        let last_timestamp = segments.iter().rev().find_map(|s| s.entries.last()).map_or(0, |e| e.timestamp);
        let offsets = ConsumerOffsets::load(storage, dir).await?;
        let mut log = Self {
            dir: dir.to_path_buf(),
            partition_id,
            settings,
            segments,
            journal: VecDeque::new(),
            journal_messages: 0,
            journal_bytes: 0,
            deferred: (0, 0),
            next_offset,
            last_timestamp,
            offsets,
            write_failure: None,
            dedup: None,
            producers: rill_domain::producers::ProducerTable::new(settings.producer_expiry_us),
            has_producers: false,
            reported: BTreeSet::new(),
            generation: 0,
            purge_pending: false,
            spares,
        };
        if let Some(window) = settings.deduplication {
            log.dedup = Some(log.rebuild_dedup_window(window).await?);
        }
        (log.producers, log.has_producers) = log.rebuild_producers(storage).await?;
        Ok(log)
    }

    pub fn first_offset(&self) -> u64 {
        self.segments.first().map_or(0, |s| s.start_offset)
    }

    /// The stamp of the last message stored (0 for an empty log).
    pub fn last_timestamp(&self) -> u64 {
        self.last_timestamp
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

    /// Why the partition refuses sends, while a write has failed and none succeeded since.
    pub fn write_failure(&self) -> Option<io::ErrorKind> {
        self.write_failure
    }

    /// Messages acknowledged but not yet written.
    pub fn unsaved_messages(&self) -> u32 {
        self.journal_messages
    }

    /// Stamps a validated batch with the next offsets and `now_us`, journals it, and flushes
    /// when a threshold is reached or the topic demands fsync. Messages whose id is in the
    /// dedup window are dropped first. A batch that cannot be written is taken back: the
    /// call fails, its offsets are not used, and the partition refuses sends until a write
    /// succeeds (each later send first retries what is pending).
    /// The batch arrives as the range of its request frame and stays there, stamped in
    /// place, until it is written; refused or dropped, it goes back to the pool with it.
    pub async fn append(&mut self, storage: &S, stored: PoolSlice, now_us: u64) -> io::Result<Appended> {
        self.append_with(storage, stored, now_us, false).await
    }

    /// Like `append`, except that a topic without fsync leaves a flush its thresholds call
    /// for to the caller (`flush_due`), who acknowledges the send first: the batch is
    /// journaled, which is all such a send promises. Far past the thresholds the send still
    /// writes a chunk of the journal itself.
    pub async fn append_deferring(&mut self, storage: &S, stored: PoolSlice, now_us: u64) -> io::Result<Appended> {
        self.append_with(storage, stored, now_us, true).await
    }

    async fn append_with(
        &mut self,
        storage: &S,
        mut stored: PoolSlice,
        now_us: u64,
        defer: bool,
    ) -> io::Result<Appended> {
        if self.write_failure.is_some() {
            self.flush(storage, self.settings.enforce_fsync).await?;
        }
        // Stamps never go back, unless the last one is far ahead of the clock: a rotten
        // index entry must not pin every later stamp.
        let now_us = if self.last_timestamp > now_us.saturating_add(MAX_CLOCK_AHEAD_US) {
            now_us
        } else {
            now_us.max(self.last_timestamp)
        };
        let mut duplicates = 0;
        let mut ids: Option<Vec<u128>> = None;
        if let Some(window) = &mut self.dedup {
            let mut batch_ids: Vec<u128> = batch::message_ids(&stored).collect();
            if let Some(mask) = window.duplicates(&batch_ids, now_us) {
                let (kept, len) = batch::drop_frames(&mut stored, &mask);
                stored.truncate(len);
                duplicates = mask.iter().filter(|&&d| d).count() as u32;
                if kept == 0 {
                    let base_offset = self.next_offset;
                    return Ok(Appended { base_offset, stored: 0, duplicates, bytes: 0, flush_due: false });
                }
                let mut dropped = mask.iter();
                batch_ids.retain(|_| !dropped.next().copied().unwrap_or(false));
            }
            ids = Some(batch_ids);
        }
        let base_offset = self.next_offset;
        batch::stamp(&mut stored, self.partition_id, base_offset, now_us);
        let count = BatchHeader::read(&stored).message_count;
        let bytes = stored.len() as u64;
        self.push_journal(stored, count);
        let threshold_reached = self.journal_past(1);
        let deferring = defer && !self.settings.enforce_fsync;
        let far_past = self.journal_past_deferred(DEFERRED_FLUSH_SLACK);
        let mut flush_due = threshold_reached && deferring && !far_past;
        // Far past the thresholds a deferring send writes one chunk from the journal's
        // front, not all of it: a flusher's backlog is shared out over the sends that find
        // it, a chunk each, instead of landing whole on one of them.
        let batches = if deferring { self.next_chunk_batches() } else { usize::MAX };
        if (threshold_reached || self.settings.enforce_fsync)
            && !flush_due
            && let Err(error) = self.flush_front(storage, self.settings.enforce_fsync, batches).await
        {
            // Never written: its offsets are given out again. Written but not made durable
            // (the fsync failed): it stays in the log, and the send still fails, since a
            // persisted topic acknowledges only what reached the disk.
            if self.take_back(base_offset, count).is_none() {
                self.last_timestamp = now_us;
            }
            return Err(error);
        }
        // What a chunk left over a threshold is the flusher's.
        flush_due |= deferring && far_past && self.journal_past(1);
        self.last_timestamp = now_us;
        if let (Some(window), Some(ids)) = (&mut self.dedup, ids) {
            window.record(&ids, now_us);
        }
        Ok(Appended { base_offset, stored: count, duplicates, bytes, flush_due })
    }

    /// Writes a batch a partition group committed at `base_offset`, stamped with the time
    /// the group's primary gave it, so every replica stores the same bytes at the same
    /// offsets. Committed means acknowledged: the batch is never taken back; a failed flush
    /// leaves it journaled (the partition read-only) for the retry. A batch this log holds
    /// already (a replay after a restart) is skipped; one past the log's end is refused,
    /// since writing it would leave a gap.
    pub async fn append_replicated(
        &mut self,
        storage: &S,
        mut stored: PoolSlice,
        base_offset: u64,
        timestamp_us: u64,
    ) -> io::Result<Option<Appended>> {
        if base_offset < self.next_offset {
            return Ok(None);
        }
        if base_offset > self.next_offset {
            return Err(io::Error::other(format!(
                "the committed batch at offset {base_offset} is past this log's end {}: offsets {}..{base_offset} are missing here",
                self.next_offset, self.next_offset
            )));
        }
        let now_us = timestamp_us.max(self.last_timestamp);
        batch::stamp(&mut stored, self.partition_id, base_offset, now_us);
        let count = BatchHeader::read(&stored).message_count;
        let bytes = stored.len() as u64;
        self.push_journal(stored, count);
        self.last_timestamp = now_us;
        if self.journal_past(1) || self.settings.enforce_fsync || self.write_failure.is_some() {
            self.flush(storage, self.settings.enforce_fsync).await?;
        }
        Ok(Some(Appended { base_offset, stored: count, duplicates: 0, bytes, flush_due: false }))
    }

    /// Whether the journal holds `times` a flush threshold of messages or bytes, or more.
    fn journal_past(&self, times: u64) -> bool {
        self.past(times, self.journal_messages, self.journal_bytes)
    }

    /// Like `journal_past`, leaving out what a deferred flush has taken on.
    fn journal_past_deferred(&self, times: u64) -> bool {
        let (messages, bytes) = self.deferred;
        self.past(times, self.journal_messages.saturating_sub(messages), self.journal_bytes.saturating_sub(bytes))
    }

    fn past(&self, times: u64, messages: u32, bytes: u64) -> bool {
        let settings = &self.settings;
        u64::from(messages) >= u64::from(settings.messages_required_to_save).saturating_mul(times)
            || bytes >= settings.size_required_to_save_bytes.saturating_mul(times)
    }

    fn push_journal(&mut self, stored: PoolSlice, count: u32) {
        self.next_offset += count as u64;
        self.journal_messages += count;
        self.journal_bytes += stored.len() as u64;
        self.journal.push_back(stored);
    }

    /// Takes the last journaled batch back if it is still unwritten and is the one at
    /// `base_offset`: it was never acknowledged, so its offsets are given out again.
    fn take_back(&mut self, base_offset: u64, count: u32) -> Option<PoolSlice> {
        if self.journal.back().map(|b| BatchHeader::read(b).base_offset) != Some(base_offset) {
            return None;
        }
        let batch = self.journal.pop_back()?;
        self.next_offset -= count as u64;
        self.journal_messages -= count;
        self.journal_bytes -= batch.len() as u64;
        Some(batch)
    }

    /// Writes the journal to the active segment, sealing it and opening a new one whenever
    /// the next batch would cross the segment size. Each write lands whole or not at all;
    /// what could not be written stays journaled, and the partition turns read-only.
    pub async fn flush(&mut self, storage: &S, fsync: bool) -> io::Result<()> {
        self.flush_front(storage, fsync, usize::MAX).await
    }

    /// The journaled batches a deferred flush writes in one go before it lets other work on
    /// the partition in: the first batch, and those after it while they fit in
    /// `DEFERRED_CHUNK_BYTES` together.
    pub fn next_chunk_batches(&self) -> usize {
        let mut bytes = 0u64;
        let mut batches = 0;
        for stored in &self.journal {
            bytes += stored.len() as u64;
            if batches > 0 && bytes > DEFERRED_CHUNK_BYTES {
                break;
            }
            batches += 1;
        }
        batches
    }

    /// Whether the journal holds a flush threshold of messages or bytes.
    pub fn threshold_reached(&self) -> bool {
        self.journal_past(1)
    }

    /// A deferred flush takes on everything journaled now; until it is written (or
    /// `end_deferred`), sends do not count it toward flushing themselves.
    pub fn take_on_deferred(&mut self) {
        self.deferred = (self.journal_messages, self.journal_bytes);
    }

    pub fn end_deferred(&mut self) {
        self.deferred = (0, 0);
    }

    /// Whether part of what a deferred flush took on is still unwritten.
    pub fn deferring(&self) -> bool {
        self.deferred != (0, 0)
    }

    /// Like `flush`, for at most the first `batches` journaled batches.
    pub async fn flush_front(&mut self, storage: &S, fsync: bool, batches: usize) -> io::Result<()> {
        match self.write_journal(storage, fsync, batches).await {
            Ok(wrote) => {
                // Only a write that landed proves the disk takes writes again.
                if wrote {
                    self.write_failure = None;
                }
                Ok(())
            }
            Err(error) => {
                self.write_failure = Some(error.kind());
                Err(error)
            }
        }
    }

    /// Writes at most the first `batches` journaled batches; returns whether anything was
    /// written.
    async fn write_journal(&mut self, storage: &S, fsync: bool, batches: usize) -> io::Result<bool> {
        if self.purge_pending {
            // Into removed files a write would seem to land and be gone after a restart.
            self.finish_purge(storage).await?;
            return Ok(true);
        }
        let mut wrote = false;
        let mut left = batches;
        while !self.journal.is_empty() && left > 0 {
            let active = self.segments.last().expect("a partition always has a segment");
            let mut size = active.size_bytes;
            let mut take = 0;
            for stored in self.journal.iter().take(left) {
                if size > 0 && size + stored.len() as u64 > self.settings.segment_size_bytes {
                    break;
                }
                // Index entries hold offsets relative to the segment's start in 32 bits: a
                // batch past that (only after a rotten count moved the next offset far on)
                // goes to a new segment, or it could be stored and never found.
                let header = BatchHeader::read(stored);
                let end = header.base_offset + u64::from(header.message_count);
                if end - active.start_offset > u64::from(u32::MAX) {
                    break;
                }
                size += stored.len() as u64;
                take += 1;
            }
            if take == 0 {
                let start = BatchHeader::read(&self.journal[0]).base_offset;
                self.seal_and_roll(storage, start).await?;
                continue;
            }
            left -= take;
            let chunk: Vec<PoolSlice> = self.journal.drain(..take).collect();
            let segment_size = self.settings.segment_size_bytes;
            let (result, chunk) = self.segments.last_mut().unwrap().append(chunk, fsync, segment_size).await;
            if let Err(error) = result {
                for stored in chunk.into_iter().rev() {
                    self.journal.push_front(stored);
                }
                return Err(error);
            }
            for stored in &chunk {
                let count = BatchHeader::read(stored).message_count;
                self.journal_messages -= count;
                self.journal_bytes -= stored.len() as u64;
                // Writes take the journal from its front, where the deferred part is.
                self.deferred.0 = self.deferred.0.saturating_sub(count);
                self.deferred.1 = self.deferred.1.saturating_sub(stored.len() as u64);
            }
            // Written: the buffers go back to the pool as `chunk` drops.
            wrote = true;
        }
        if fsync && !wrote {
            self.segments.last_mut().unwrap().sync().await?;
        }
        Ok(wrote)
    }

    /// Makes the active segment durable whole, index entries held back included, and
    /// gives back its reserved blocks (a graceful stop, after the last flush).
    pub async fn sync_active(&mut self) -> io::Result<()> {
        self.segments.last_mut().expect("a partition always has a segment").sync_releasing().await
    }

    /// Which incarnation of the partition's files this is (a purge starts a new one).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    async fn seal_and_roll(&mut self, storage: &S, start_offset: u64) -> io::Result<()> {
        // A sealed segment is never written again, so make it durable once, now, without
        // the blocks reserved for appends that will not come.
        self.segments.last_mut().unwrap().sync_releasing().await?;
        let direct = self.settings.direct_log;
        let segment = match Segment::create_over(storage, &self.dir, start_offset, direct, self.spares.as_mut()).await {
            Ok(segment) => segment,
            Err(error) => {
                // Best effort: a half-created segment must not outlive the failed roll (the
                // retry creates it again).
                for name in [
                    rill_domain::segment::log_file_name(start_offset),
                    rill_domain::segment::index_file_name(start_offset),
                ] {
                    let _ = storage.remove_file(&self.dir.join(name)).await;
                }
                return Err(error);
            }
        };
        self.segments.push(segment);
        storage.sync_dir(&self.dir).await
    }

    /// Whether a damaged batch is reported for the first time (so it is logged once).
    pub fn first_report(&mut self, damaged: &DamagedBatch) -> bool {
        let start = self
            .segments
            .iter()
            .find(|s| s.log_path() == damaged.file)
            .map_or(damaged.first_offset, |s| s.start_offset);
        if self.reported.len() >= MAX_REPORTED {
            return false;
        }
        self.reported.insert((start, damaged.position))
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

    /// Spares this partition holds.
    pub fn spare_count(&self) -> usize {
        self.spares.as_ref().map_or(0, OwnSpares::count)
    }

    /// Removes the partition's spares (the volume is short of free space).
    pub async fn remove_spares(&mut self, storage: &S) {
        if let Some(spares) = &mut self.spares {
            spares.remove_all(storage).await;
        }
    }

    /// Deletes every message and stored offset; the partition starts again at offset 0.
    /// On a failure the partition keeps its state in memory and is read-only: if the old
    /// files went already, the next write makes the new ones first (`purge_pending`).
    pub async fn purge(&mut self, storage: &S) -> io::Result<()> {
        if let Err(error) = storage.remove_dir_all(&self.dir).await {
            self.write_failure = Some(error.kind());
            return Err(error);
        }
        // Its spares went with the directory: the purged messages are nowhere.
        if let Some(spares) = &mut self.spares {
            spares.forget_all();
        }
        self.purge_pending = true;
        self.finish_purge(storage).await
    }

    /// Whether a purge removed the files and has not made the new ones yet.
    pub fn purge_pending(&self) -> bool {
        self.purge_pending
    }

    /// Makes a purged log's new files; until it succeeds the partition is read-only.
    async fn finish_purge(&mut self, storage: &S) -> io::Result<()> {
        let fresh = async {
            storage.create_dir_all(&self.dir).await?;
            let segment = Segment::create(storage, &self.dir, 0, self.settings.direct_log).await?;
            Ok::<_, io::Error>((segment, ConsumerOffsets::load(storage, &self.dir).await?))
        };
        let (segment, offsets) = match fresh.await {
            Ok(fresh) => fresh,
            Err(error) => {
                self.write_failure = Some(error.kind());
                return Err(error);
            }
        };
        self.offsets = offsets;
        self.last_timestamp = 0;
        self.purge_pending = false;
        self.start_empty(segment);
        Ok(())
    }

    /// The log holds `segment` alone, empty, and goes on from its start: nothing journaled,
    /// no failure, a new generation (a purge, or a copy started again past deletions).
    pub(super) fn start_empty(&mut self, segment: Segment<S::File>) {
        self.journal.clear();
        (self.journal_messages, self.journal_bytes, self.deferred) = (0, 0, (0, 0));
        self.next_offset = segment.start_offset;
        self.segments = vec![segment];
        self.generation += 1;
        self.write_failure = None;
        self.reported.clear();
        if let Some(window) = self.settings.deduplication {
            self.dedup = Some(DedupWindow::new(window.max_entries, window.expiry_us));
        }
        self.producers.clear();
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
