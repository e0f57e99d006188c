//! Background work on a partition's log: retention (detaching the oldest sealed segments
//! under the partition's lock, removing their files after it), reads for the scrubber that
//! checks sealed segments away from the lock, and the dedup window rebuilt at open.

use std::io;
use std::path::PathBuf;

use rill_domain::batch;
use rill_domain::dedup::DedupWindow;
use rill_domain::retention::SealedSegment;
use rill_domain::segment::{IndexEntry, index_file_name, log_file_name};

use super::log::PartitionLog;
use super::segment::DamagedBatch;
use super::segment::{DELETED_SUFFIX, Segment, batch_matches, within_frame};
use super::settings::DedupSettings;
use super::spares::{prepare_spare, spare_path};
use crate::memory_pool::PoolSlice;
use crate::ports::{Storage, StorageFile};

/// Segments taken out of a partition by retention, whose files are still to be removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Detached {
    /// The renamed files, removed off the partition's lock.
    pub paths: Vec<PathBuf>,
    pub segments: u32,
    pub messages: u64,
    pub bytes: u64,
    /// The renamed logs that may become the partition's spares: a direct log's, not read by
    /// a poll when it was detached (none are read after).
    pub spare_candidates: Vec<SpareCandidate>,
    /// The partition's generation when they were detached: a purge since removed them.
    pub generation: u64,
}

/// A detached direct log that may become a spare of its own partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpareCandidate {
    /// Its path, renamed `*.deleted`.
    pub log: PathBuf,
    pub start_offset: u64,
    pub bytes: u64,
}

impl Detached {
    /// Readies the spare candidates off the partition's lock ([`prepare_spare`]); one that
    /// cannot be readied is removed with the rest.
    pub async fn prepare_spares<S: Storage>(&mut self, storage: &S) {
        let mut ready = Vec::with_capacity(self.spare_candidates.len());
        for candidate in std::mem::take(&mut self.spare_candidates) {
            match prepare_spare(storage, &candidate.log).await {
                Ok(()) => ready.push(candidate),
                Err(error) => {
                    tracing::debug!(%error, log = %candidate.log.display(), "a removed segment's log is not kept as a spare");
                }
            }
        }
        self.spare_candidates = ready;
    }
}

/// Removes the files of detached segments; one already gone is not an error.
pub async fn remove_detached<S: Storage>(storage: &S, detached: &Detached) -> io::Result<()> {
    for path in &detached.paths {
        match storage.remove_file(path).await {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
    }
    Ok(())
}

/// Whole batches of a sealed segment, read under the lock and checked after it.
#[derive(Debug)]
pub struct ScrubChunk {
    pub segment_start: u64,
    pub file: PathBuf,
    pub entries: Vec<IndexEntry>,
    pub bytes: Vec<u8>,
    /// The entry the next chunk of this segment starts at.
    pub next_entry: usize,
}

impl ScrubChunk {
    /// Every batch of the chunk that fails its checksums.
    pub fn damaged(&self) -> Vec<DamagedBatch> {
        let mut position = 0usize;
        let mut found = Vec::new();
        for entry in &self.entries {
            // A range longer than a frame comes alone and unread: it is damage by itself.
            let intact = within_frame(entry) && {
                let record = &self.bytes[position..position + entry.length as usize];
                position += entry.length as usize;
                batch_matches(record, entry, self.segment_start, true)
            };
            if !intact {
                found.push(DamagedBatch::at(self.file.clone(), self.segment_start, entry));
            }
        }
        found
    }
}

impl<S: Storage> PartitionLog<S> {
    /// The sealed segments, oldest first, as retention weighs them, and the active
    /// segment's bytes (journal included).
    pub fn sealed_for_retention(&self) -> (Vec<SealedSegment>, u64) {
        let sealed = &self.segments[..self.segments.len().saturating_sub(1)];
        let list = sealed
            .iter()
            .map(|s| SealedSegment { size_bytes: s.size_bytes, newest_timestamp_us: s.newest_timestamp() })
            .collect();
        (list, self.segments.last().map_or(0, |s| s.size_bytes) + self.journal_bytes)
    }

    /// Takes the oldest `count` sealed segments out of the partition (never the active one):
    /// their files are renamed to `*.deleted`, so a restart never loads them, and the
    /// partition's first offset moves past them. The caller removes the files later, off
    /// the lock. A rename that fails stops the pass there; what was detached stays detached.
    pub async fn detach_oldest(&mut self, storage: &S, count: usize) -> io::Result<Detached> {
        let count = count.min(self.segments.len().saturating_sub(1));
        let mut detached = Detached { generation: self.generation, ..Detached::default() };
        for _ in 0..count {
            let start = self.segments[0].start_offset;
            let names = [index_file_name(start), log_file_name(start)];
            let renamed = names.map(|name| (self.dir.join(&name), self.dir.join(format!("{name}{DELETED_SUFFIX}"))));
            // The index goes first: a segment whose log is left loads (rebuilding its index),
            // and an index without its log is removed at the next start.
            if let Err(error) = storage.rename(&renamed[0].0, &renamed[0].1).await {
                if detached.segments == 0 {
                    return Err(error);
                }
                tracing::warn!(%error, path = %renamed[0].0.display(), "retention stopped: cannot rename a segment");
                break;
            }
            if let Err(error) = storage.rename(&renamed[1].0, &renamed[1].1).await {
                // Put the index back: the segment stays, whole.
                let _ = storage.rename(&renamed[0].1, &renamed[0].0).await;
                if detached.segments == 0 {
                    return Err(error);
                }
                tracing::warn!(%error, path = %renamed[1].0.display(), "retention stopped: cannot rename a segment");
                break;
            }
            let segment = self.segments.remove(0);
            if self.may_keep_as_spare(&segment) {
                let log = renamed[1].1.clone();
                detached.spare_candidates.push(SpareCandidate { log, start_offset: start, bytes: segment.size_bytes });
            }
            detached.paths.extend(renamed.map(|(_, deleted)| deleted));
            detached.segments += 1;
            detached.messages += segment.messages_count();
            detached.bytes += segment.size_bytes;
        }
        if detached.segments > 0 {
            let first = self.first_offset();
            self.reported.retain(|&(start, _)| start >= first);
            if let Err(error) = storage.sync_dir(&self.dir).await {
                tracing::warn!(%error, dir = %self.dir.display(), "retention: directory sync failed");
            }
        }
        Ok(detached)
    }

    /// Starts the log again, empty, at `offset` past its end; the stored consumer offsets
    /// stay. A replicated copy whose peers deleted the segments it still lacks goes on from
    /// where theirs start. Every segment's files are renamed away before the new one is
    /// made, so a crash in between opens an empty log (whose gap asks the peers again), never
    /// old segments with a hole before the new one.
    pub async fn restart_at(&mut self, storage: &S, offset: u64) -> io::Result<()> {
        let mut detached = Detached::default();
        for start in self.segments.iter().map(|segment| segment.start_offset).collect::<Vec<_>>() {
            for name in [index_file_name(start), log_file_name(start)] {
                let (path, deleted) = (self.dir.join(&name), self.dir.join(format!("{name}{DELETED_SUFFIX}")));
                // Renamed already by a restart that failed after it: this is its retry.
                let renamed = !storage.exists(&path).await && storage.exists(&deleted).await;
                if !renamed && let Err(error) = storage.rename(&path, &deleted).await {
                    self.write_failure = Some(error.kind());
                    return Err(error);
                }
                detached.paths.push(deleted);
            }
        }
        let segment = match Segment::create(storage, &self.dir, offset, self.settings.direct_log).await {
            Ok(segment) => segment,
            Err(error) => {
                self.write_failure = Some(error.kind());
                return Err(error);
            }
        };
        self.start_empty(segment);
        storage.sync_dir(&self.dir).await?;
        remove_detached(storage, &detached).await
    }

    /// Where the partition would start after its `count` oldest sealed segments went: the
    /// start of the first segment kept (the active one at most).
    pub fn start_after_oldest(&self, count: u32) -> u64 {
        let kept = (count as usize).min(self.segments.len().saturating_sub(1));
        self.segments.get(kept).map_or(self.first_offset(), |segment| segment.start_offset)
    }

    /// Deletes the sealed segments that end at or below offset `below` (a replicated
    /// DELETE_SEGMENTS): a segment holding `below` or anything after it stays. Journaled
    /// batches are written first: where segments split must not depend on when this copy
    /// last flushed, or replicas would delete different messages.
    pub async fn delete_segments_below(&mut self, storage: &S, below: u64) -> io::Result<Detached> {
        if !self.journal.is_empty() {
            self.flush(storage, false).await?;
        }
        let whole = self.segments.windows(2).take_while(|pair| pair[1].start_offset <= below).count();
        self.delete_segments(storage, whole as u32).await
    }

    /// Deletes the oldest `count` sealed segments now (DELETE_SEGMENTS); returns how many.
    pub async fn delete_segments(&mut self, storage: &S, count: u32) -> io::Result<Detached> {
        let mut detached = self.detach_oldest(storage, count as usize).await?;
        detached.prepare_spares(storage).await;
        self.keep_spares(storage, &mut detached).await;
        remove_detached(storage, &detached).await?;
        Ok(detached)
    }

    /// Whether a segment leaving the partition may leave its log as a spare: a direct log,
    /// where the server keeps spares, that no poll reads (none can once it is gone).
    fn may_keep_as_spare(&self, segment: &Segment<S::File>) -> bool {
        self.settings.direct_log && self.spares.is_some() && !segment.log_shared()
    }

    /// Keeps the readied spare candidates the budget admits as this partition's spares
    /// (renamed `<start>.spare`); what is kept leaves `detached`'s files to remove. None
    /// are kept when a purge came between the detaching and now.
    pub async fn keep_spares(&mut self, storage: &S, detached: &mut Detached) {
        let Some(spares) = self.spares.as_mut().filter(|_| detached.generation == self.generation) else { return };
        for candidate in std::mem::take(&mut detached.spare_candidates) {
            let spare = spare_path(&self.dir, candidate.start_offset);
            if spares.keep(storage, &candidate.log, spare, candidate.bytes).await {
                detached.paths.retain(|path| *path != candidate.log);
            }
        }
    }

    /// The next whole batches (about `max_bytes`) of the first sealed segment starting at
    /// or after `segment_start`, from `entry` when it is that very segment. `None` once no
    /// sealed segment is left at or after it.
    pub async fn scrub_read(
        &self,
        segment_start: u64,
        entry: usize,
        max_bytes: usize,
    ) -> io::Result<Option<ScrubChunk>> {
        let sealed = &self.segments[..self.segments.len().saturating_sub(1)];
        for segment in sealed.iter().filter(|s| s.start_offset >= segment_start) {
            let from = if segment.start_offset == segment_start { entry } else { 0 };
            if from >= segment.entries.len() {
                continue;
            }
            let (entries, bytes) = segment.read_entries(from, max_bytes).await?;
            return Ok(Some(ScrubChunk {
                segment_start: segment.start_offset,
                file: segment.log_path().to_path_buf(),
                next_entry: from + entries.len(),
                entries,
                bytes,
            }));
        }
        Ok(None)
    }

    /// Refills the dedup window from the newest stored batches, back until it holds
    /// `max_entries` ids or batches are older than the expiry, measured from the newest
    /// batch. Batches that do not verify are skipped.
    pub(super) async fn rebuild_dedup_window(&self, settings: DedupSettings) -> io::Result<DedupWindow> {
        let mut window = DedupWindow::new(settings.max_entries, settings.expiry_us);
        let cutoff = self.last_timestamp.saturating_sub(settings.expiry_us);
        let mut newest_first: Vec<(u64, Vec<u128>)> = Vec::new();
        let mut wanted = settings.max_entries as u64;
        for segment in self.segments.iter().rev() {
            let mut from = segment.entries.len();
            while from > 0 && wanted > 0 && segment.entries[from - 1].timestamp > cutoff {
                from -= 1;
                wanted = wanted.saturating_sub(segment.entries[from].message_count as u64);
            }
            if from < segment.entries.len() {
                let (entries, bytes) = segment.read_entries(from, usize::MAX).await?;
                let mut position = 0usize;
                let mut batches = Vec::with_capacity(entries.len());
                for entry in entries.iter().filter(|e| within_frame(e)) {
                    let record = &bytes[position..position + entry.length as usize];
                    position += entry.length as usize;
                    if batch::verify_stored(record) {
                        batches.push((entry.timestamp, batch::message_ids(record).collect()));
                    }
                }
                newest_first.extend(batches.into_iter().rev());
            }
            if from > 0 {
                break;
            }
        }
        for (timestamp, ids) in newest_first.into_iter().rev() {
            window.record(&ids, timestamp);
        }
        Ok(window)
    }
}

impl<S: Storage> PartitionLog<S> {
    /// Writes a peer's copy of a damaged batch over it, in place: the copy must be the batch
    /// the index names there (same length, offsets and message count, every checksum
    /// intact). False when it is not, or the segment is gone (retention took it meanwhile).
    /// The file is opened buffered for the write, even for a direct log: one batch, fsynced.
    pub async fn repair_batch(&mut self, storage: &S, damaged: &DamagedBatch, copy: &[u8]) -> io::Result<bool> {
        let Some(segment) = self.segments.iter().find(|s| s.log_path() == damaged.file) else { return Ok(false) };
        let Some(entry) = segment.entries.iter().find(|e| u64::from(e.position) == damaged.position) else {
            return Ok(false);
        };
        if entry.length as usize != copy.len() || !batch_matches(copy, entry, segment.start_offset, true) {
            return Ok(false);
        }
        let start = segment.start_offset;
        let file = storage.open(&damaged.file).await?;
        file.write_at(vec![PoolSlice::plain(copy.to_vec())], damaged.position).await.0?;
        file.sync().await?;
        self.reported.remove(&(start, damaged.position));
        Ok(true)
    }
}
