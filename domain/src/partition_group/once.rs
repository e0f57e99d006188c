//! Sends stored once in a partition group: message-id deduplication and 0.12 idempotent
//! producers as part of the group's replicated state, decided at apply time from the
//! committed order and the primary's timestamp alone, so every replica drops the same
//! duplicates, answers the same retried batch with its first offsets, and a new primary
//! after a failover knows every batch its predecessor committed.
//!
//! `SEND_MESSAGES_ONCE` (164): `[partition u64][count u32][dedup_max u32][dedup_expiry_us u64]
//! [producer_expiry_us u64][batch ...]`, replied as `SEND_MESSAGES`. The settings travel in
//! the op (the node that took the send read them from its topic and configuration), so
//! replicas whose own configuration differs still decide alike. `dedup_max` 0: the topic
//! does not deduplicate.

use std::collections::BTreeMap;

use crate::batch;
use crate::dedup::DedupWindow;
use crate::error::ErrorCode;
use crate::producers::{Admission, BatchProducer, ProducerTable};
use crate::reader::Reader;

/// Bytes before a once-only send's batch.
pub const SEND_ONCE_PREFIX: usize = 32;

/// What a once-only send carries besides its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnceSettings {
    /// The topic's id window (most ids, how long each is kept), when it deduplicates.
    pub dedup: Option<(u32, u64)>,
    /// How long a producer is remembered after its last batch.
    pub producer_expiry_us: u64,
}

pub fn send_once_body(partition: u64, count: u32, settings: OnceSettings, batch: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(SEND_ONCE_PREFIX + batch.len());
    body.extend_from_slice(&partition.to_le_bytes());
    body.extend_from_slice(&count.to_le_bytes());
    let (max, expiry) = settings.dedup.unwrap_or((0, 0));
    body.extend_from_slice(&max.to_le_bytes());
    body.extend_from_slice(&expiry.to_le_bytes());
    body.extend_from_slice(&settings.producer_expiry_us.to_le_bytes());
    body.extend_from_slice(batch);
    body
}

/// A once-only send body's partition, count, settings and batch.
pub fn parse_send_once(body: &[u8]) -> Option<(u64, u32, OnceSettings, &[u8])> {
    let mut reader = Reader::new(body);
    let (partition, count, max, expiry) =
        (reader.u64().ok()?, reader.u32().ok()?, reader.u32().ok()?, reader.u64().ok()?);
    let settings = OnceSettings { dedup: (max > 0).then_some((max, expiry)), producer_expiry_us: reader.u64().ok()? };
    Some((partition, count, settings, reader.rest()))
}

/// What a once-only send stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    /// A producer's retry: answered with the offset its first batch got, nothing stored.
    Retry { base_offset: u64 },
    /// `kept` messages get the partition's next offsets (none: every one was a duplicate);
    /// `dropped` marks the duplicates when some, not all, were. A producer's batch is
    /// recorded with [`OnceState::stored`] once its offset is known.
    Store { kept: u32, dropped: Option<Vec<bool>>, producer: Option<BatchProducer> },
}

/// The id windows and producer tables of a group's partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnceState {
    windows: BTreeMap<u64, DedupWindow>,
    producers: BTreeMap<u64, ProducerTable>,
}

impl OnceState {
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty() && self.producers.is_empty()
    }

    /// Decides a once-only send of `count` messages at `timestamp`: a producer's batch is
    /// admitted by its sequence, then messages whose id the window holds are dropped and
    /// the kept ids join it. Refused: a malformed batch, a producer's batch out of turn.
    pub fn admit(
        &mut self,
        partition: u64,
        (count, settings): (u32, OnceSettings),
        batch: &[u8],
        timestamp: u64,
    ) -> Result<Admitted, ErrorCode> {
        if !batch::check_structure(batch) || batch::BatchHeader::read(batch).message_count != count {
            return Err(ErrorCode::InvalidFormat);
        }
        let producer = batch::producer(batch)?;
        if let Some(producer) = producer {
            let table = self.producers.entry(partition).or_insert_with(|| ProducerTable::new(0));
            table.set_expiry(settings.producer_expiry_us);
            if let Admission::Duplicate { base_offset } = table.admit(producer, count, timestamp)? {
                return Ok(Admitted::Retry { base_offset });
            }
        }
        let (kept, dropped) = match settings.dedup {
            Some(bounds) => self.drop_duplicates(partition, bounds, batch, timestamp),
            None => (count, None),
        };
        Ok(Admitted::Store { kept, dropped, producer })
    }

    /// Records a producer's admitted batch, stored at `base_offset`.
    pub fn stored(&mut self, partition: u64, producer: BatchProducer, (count, base_offset): (u32, u64), at: u64) {
        if let Some(table) = self.producers.get_mut(&partition) {
            table.record(producer, count, base_offset, at);
        }
    }

    /// Forgets a partition that starts again.
    pub fn reset(&mut self, partition: u64) {
        self.windows.remove(&partition);
        self.producers.remove(&partition);
    }

    /// How many of the batch's messages are kept and, when some but not all are dropped,
    /// which: ids the window holds, or repeated within the batch. The kept ids join it.
    fn drop_duplicates(
        &mut self,
        partition: u64,
        (max, expiry): (u32, u64),
        batch: &[u8],
        timestamp: u64,
    ) -> (u32, Option<Vec<bool>>) {
        let window = self.windows.entry(partition).or_insert_with(|| DedupWindow::new(max as usize, expiry));
        window.set_bounds(max as usize, expiry);
        let mut ids: Vec<u128> = batch::message_ids(batch).collect();
        let dropped = window.duplicates(&ids, timestamp);
        if let Some(mask) = &dropped {
            let mut marks = mask.iter();
            ids.retain(|_| !marks.next().copied().unwrap_or(false));
        }
        window.record(&ids, timestamp);
        let kept = ids.len() as u32;
        (kept, dropped.filter(|_| kept > 0))
    }

    /// `[windows u32]` and `[partition u64][window]` each, `[tables u32]` and `[partition
    /// u64][producer table]` each (`DedupWindow::encode`, `ProducerTable::encode`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.windows.len() as u32).to_le_bytes());
        for (partition, window) in &self.windows {
            out.extend_from_slice(&partition.to_le_bytes());
            window.encode(out);
        }
        out.extend_from_slice(&(self.producers.len() as u32).to_le_bytes());
        for (partition, table) in &self.producers {
            out.extend_from_slice(&partition.to_le_bytes());
            table.encode(out);
        }
    }

    /// What `encode` wrote, from the reader's position.
    pub fn decode_from(reader: &mut Reader<'_>) -> Result<Self, ErrorCode> {
        let mut state = Self::default();
        for _ in 0..reader.u32()? {
            let partition = reader.u64()?;
            state.windows.insert(partition, DedupWindow::decode(reader)?);
        }
        for _ in 0..reader.u32()? {
            let partition = reader.u64()?;
            state.producers.insert(partition, ProducerTable::decode(reader)?);
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchBuilder, set_producer};
    use crate::partition_group::{Appended, PartitionGroupState, SEND_MESSAGES_ONCE, reset_body};
    use crate::vsr::{InvalidSnapshot, StateMachine};
    use crate::wire::codes::operation;

    const SETTINGS: OnceSettings = OnceSettings { dedup: Some((100, 1_000)), producer_expiry_us: 10_000 };

    fn batch(ids: &[u128]) -> Vec<u8> {
        let mut builder = BatchBuilder::with_capacity(64);
        for id in ids {
            builder.push(*id, b"payload", b"");
        }
        builder.finish(0)
    }

    fn send(state: &mut PartitionGroupState, at: u64, batch: &[u8]) -> Result<Option<Appended>, ErrorCode> {
        let count = batch::BatchHeader::read(batch).message_count;
        state.apply_at(SEND_MESSAGES_ONCE, at, &send_once_body(3, count, SETTINGS, batch))
    }

    fn stored(partition: u64, base_offset: u64, count: u32, dropped: Option<Vec<bool>>) -> Option<Appended> {
        Some(Appended { partition, base_offset, count, dropped })
    }

    #[test]
    fn ids_the_window_holds_are_dropped_and_a_whole_duplicate_stores_nothing() {
        let mut state = PartitionGroupState::default();
        assert_eq!(send(&mut state, 10, &batch(&[1, 2])), Ok(stored(3, 0, 2, None)));
        let some = send(&mut state, 20, &batch(&[2, 3, 3]));
        assert_eq!(some, Ok(stored(3, 2, 1, Some(vec![true, false, true]))), "2 was stored, 3 repeats");
        assert_eq!(send(&mut state, 30, &batch(&[1, 3])), Ok(stored(3, 3, 0, None)), "nothing left to store");
        assert_eq!(state.next_offset(3), Some(3));
        assert_eq!(send(&mut state, 1_010, &batch(&[1])), Ok(stored(3, 3, 1, None)), "id 1 expired at 1,010");
        let no_dedup = OnceSettings { dedup: None, ..SETTINGS };
        let body = send_once_body(3, 1, no_dedup, &batch(&[1]));
        let appended = state.apply_at(SEND_MESSAGES_ONCE, 1_020, &body);
        assert_eq!(appended, Ok(stored(3, 4, 1, None)), "a topic without deduplication keeps every id");
        let malformed = send_once_body(3, 2, SETTINGS, &batch(&[1]));
        let refused = state.apply_at(SEND_MESSAGES_ONCE, 1_030, &malformed);
        assert_eq!(refused, Err(ErrorCode::InvalidFormat), "a count the batch does not hold");
    }

    #[test]
    fn a_producers_retry_gets_its_first_offsets_and_its_errors_change_nothing() {
        let mut state = PartitionGroupState::default();
        let producer = |base_sequence| BatchProducer { id: 5, epoch: 1, base_sequence };
        let from = |ids: &[u128], base_sequence| {
            let mut bytes = batch(ids);
            set_producer(&mut bytes, producer(base_sequence));
            bytes
        };
        assert_eq!(send(&mut state, 10, &from(&[0, 0], 0)), Ok(stored(3, 0, 2, None)));
        assert_eq!(send(&mut state, 11, &from(&[0], 2)), Ok(stored(3, 2, 1, None)));
        assert_eq!(send(&mut state, 12, &from(&[0, 0], 0)), Ok(stored(3, 0, 0, None)), "the retry's first offsets");
        let before = state.clone();
        assert_eq!(send(&mut state, 13, &from(&[0], 9)), Err(ErrorCode::ProducerSequenceOutOfOrder));
        assert_eq!(state, before, "a refused batch changes nothing");
        assert_eq!(send(&mut state, 14, &from(&[0], 3)), Ok(stored(3, 3, 1, None)));
    }

    #[test]
    fn windows_and_producers_survive_a_snapshot_and_go_with_a_reset() {
        let mut state = PartitionGroupState::default();
        let mut bytes = batch(&[7, 8]);
        set_producer(&mut bytes, BatchProducer { id: 5, epoch: 0, base_sequence: 0 });
        send(&mut state, 10, &bytes).unwrap();
        state.apply_op(operation::RESET_PARTITION, &reset_body(9, 4)).unwrap();
        let snapshot = state.snapshot();
        let mut copy = PartitionGroupState::default();
        copy.restore(&snapshot).unwrap();
        assert_eq!(copy, state);
        assert_eq!(send(&mut copy, 20, &bytes), Ok(stored(3, 0, 0, None)), "the copy knows the producer's batch");
        for cut in snapshot.len() - 40..snapshot.len() {
            assert_eq!(PartitionGroupState::default().restore(&snapshot[..cut]), Err(InvalidSnapshot), "cut at {cut}");
        }
        state.apply_op(operation::RESET_PARTITION, &reset_body(3, 50)).unwrap();
        assert_eq!(send(&mut state, 30, &bytes), Ok(stored(3, 0, 2, None)), "a purged partition starts afresh");
    }
}
