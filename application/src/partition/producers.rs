//! A partition's idempotent producers: which batches of each it admits (the rules are the
//! domain's [`ProducerTable`]), and the table rebuilt from the log at open. A partition that
//! ever stored a producer's batch has a `producers` marker file; only those read their log
//! back at open, and only the batches stored within the producers' expiry.

use std::io;

use rill_domain::batch;
use rill_domain::error::ErrorCode;
use rill_domain::producers::{Admission, BatchProducer, ProducerTable};

use super::PartitionLog;
use super::markers;
use super::segment::within_frame;
use crate::ports::Storage;

/// The marker of a partition that has stored producer batches.
pub const PRODUCERS_MARKER: &str = "producers";

/// A producer batch's admission, for [`PartitionLog::record_producer`] once it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub producer: BatchProducer,
    pub count: u32,
    pub admission: Admission,
}

impl<S: Storage> PartitionLog<S> {
    /// Admits `batch` by its producer section: `None` for a batch without one, else whether
    /// it is stored or answered as a duplicate. Refusals are the table's. The first producer
    /// batch of the partition writes its marker first.
    pub async fn admit_producer(
        &mut self,
        storage: &S,
        batch: &[u8],
        now_us: u64,
    ) -> Result<Option<Admitted>, ErrorCode> {
        let Some(producer) = batch::producer(batch)? else { return Ok(None) };
        let count = batch::BatchHeader::read(batch).message_count;
        let admission = self.producers.admit(producer, count, now_us)?;
        if !self.has_producers {
            let marker = self.dir.join(PRODUCERS_MARKER);
            markers::write_synced(storage, &self.dir, &marker, Vec::new())
                .await
                .map_err(|_| ErrorCode::CannotSaveMessagesToSegment)?;
            self.has_producers = true;
        }
        Ok(Some(Admitted { producer, count, admission }))
    }

    /// Records an admitted batch stored at `base_offset`.
    pub fn record_producer(&mut self, admitted: Admitted, base_offset: u64, now_us: u64) {
        self.producers.record(admitted.producer, admitted.count, base_offset, now_us);
    }

    /// Producers the partition remembers now.
    pub fn producers_count(&self) -> usize {
        self.producers.len()
    }

    /// The table as the log holds it: every producer batch stored within the expiry before
    /// the log's last stamp, replayed in offset order. Batches that fail their checksum are
    /// skipped (the scrubber reports them).
    pub(super) async fn rebuild_producers(&self, storage: &S) -> io::Result<(ProducerTable, bool)> {
        let expiry_us = self.settings.producer_expiry_us;
        let mut table = ProducerTable::new(expiry_us);
        if !storage.exists(&self.dir.join(PRODUCERS_MARKER)).await {
            return Ok((table, false));
        }
        let cutoff = self.last_timestamp.saturating_sub(expiry_us);
        let mut newest_first = Vec::new();
        for segment in self.segments.iter().rev() {
            let from = segment.entries.iter().rposition(|entry| entry.timestamp <= cutoff).map_or(0, |at| at + 1);
            if from < segment.entries.len() {
                let (entries, bytes) = segment.read_entries(from, usize::MAX).await?;
                let mut position = 0usize;
                let mut found = Vec::new();
                for entry in entries.iter().filter(|entry| within_frame(entry)) {
                    let record = &bytes[position..position + entry.length as usize];
                    position += entry.length as usize;
                    if batch::verify_stored(record)
                        && let Ok(Some(producer)) = batch::producer(record)
                    {
                        let header = batch::BatchHeader::read(record);
                        found.push((producer, header.message_count, header.base_offset, entry.timestamp));
                    }
                }
                newest_first.extend(found.into_iter().rev());
            }
            if from > 0 {
                break;
            }
        }
        for (producer, count, base_offset, at_us) in newest_first.into_iter().rev() {
            table.record(producer, count, base_offset, at_us);
        }
        Ok((table, true))
    }
}
