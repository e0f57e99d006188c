//! Idempotent producers (protocol 0.12): a batch may carry its producer's id, epoch and the
//! sequence number of its first message. Per partition, [`ProducerTable`] admits each
//! producer's batches in sequence order, answers a batch it stored already with that
//! batch's original offset (stored once, however often it is sent), fences an older epoch
//! and forgets producers idle past its expiry.

use std::collections::{BTreeMap, VecDeque};

use crate::error::ErrorCode;
use crate::reader::Reader;

/// Sequences wrap to 0 after this value, as the 0.12 clients count them.
pub const SEQUENCE_MAX: u32 = i32::MAX as u32;
/// The most recent batches of a producer whose retries are recognised.
pub const RECENT_BATCHES: usize = 5;

/// A batch's producer section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchProducer {
    pub id: u64,
    pub epoch: u16,
    pub base_sequence: u32,
}

/// `sequence` moved forward by `by`, wrapping after [`SEQUENCE_MAX`].
pub fn advance(sequence: u32, by: u32) -> u32 {
    ((u64::from(sequence) + u64::from(by)) % (u64::from(SEQUENCE_MAX) + 1)) as u32
}

/// What to do with a producer's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Store it, then [`ProducerTable::record`] it.
    Append,
    /// It was stored already, at this offset: answer that, store nothing.
    Duplicate { base_offset: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StoredBatch {
    base_sequence: u32,
    count: u32,
    base_offset: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ProducerState {
    epoch: u16,
    next_sequence: u32,
    recent: VecDeque<StoredBatch>,
    last_append_us: u64,
}

/// The producers of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerTable {
    producers: BTreeMap<u64, ProducerState>,
    expiry_us: u64,
}

impl ProducerTable {
    /// A table that forgets a producer `expiry_us` after its last batch.
    pub fn new(expiry_us: u64) -> Self {
        Self { producers: BTreeMap::new(), expiry_us }
    }

    /// Takes a new expiry (a partition group's op carries the node's setting).
    pub fn set_expiry(&mut self, expiry_us: u64) {
        self.expiry_us = expiry_us;
    }

    /// `[expiry_us u64][producers u32]`, then per producer `[id u64][epoch u16]
    /// [next_sequence u32][last_append_us u64][recent u8]` and `[base_sequence u32][count u32]
    /// [base_offset u64]` per recent batch: the table as a partition group's snapshot holds it.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.expiry_us.to_le_bytes());
        out.extend_from_slice(&(self.producers.len() as u32).to_le_bytes());
        for (id, state) in &self.producers {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&state.epoch.to_le_bytes());
            out.extend_from_slice(&state.next_sequence.to_le_bytes());
            out.extend_from_slice(&state.last_append_us.to_le_bytes());
            out.push(state.recent.len() as u8);
            for batch in &state.recent {
                out.extend_from_slice(&batch.base_sequence.to_le_bytes());
                out.extend_from_slice(&batch.count.to_le_bytes());
                out.extend_from_slice(&batch.base_offset.to_le_bytes());
            }
        }
    }

    /// A table `encode` wrote.
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, ErrorCode> {
        let mut table = Self::new(reader.u64()?);
        for _ in 0..reader.u32()? {
            let id = reader.u64()?;
            let epoch = u16::from_le_bytes([reader.u8()?, reader.u8()?]);
            let (next_sequence, last_append_us) = (reader.u32()?, reader.u64()?);
            let recent_count = usize::from(reader.u8()?);
            if recent_count > RECENT_BATCHES {
                return Err(ErrorCode::InvalidFormat);
            }
            let mut recent = VecDeque::with_capacity(RECENT_BATCHES);
            for _ in 0..recent_count {
                let (base_sequence, count, base_offset) = (reader.u32()?, reader.u32()?, reader.u64()?);
                recent.push_back(StoredBatch { base_sequence, count, base_offset });
            }
            let state = ProducerState { epoch, next_sequence, recent, last_append_us };
            if table.producers.insert(id, state).is_some() {
                return Err(ErrorCode::InvalidFormat);
            }
        }
        Ok(table)
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Whether `producer`'s batch of `count` messages is stored, answered as a duplicate or
    /// refused: ProducerEpochFenced (an epoch older than the producer's), ProducerUnknown (a
    /// producer this partition does not know, or no longer remembers, not starting at
    /// sequence 0), ProducerSequenceOutOfOrder (a gap, or a batch older than the ones
    /// remembered).
    pub fn admit(&mut self, producer: BatchProducer, count: u32, now_us: u64) -> Result<Admission, ErrorCode> {
        self.forget_idle(now_us);
        let Some(state) = self.producers.get(&producer.id) else {
            return if producer.base_sequence == 0 { Ok(Admission::Append) } else { Err(ErrorCode::ProducerUnknown) };
        };
        if producer.epoch < state.epoch {
            return Err(ErrorCode::ProducerEpochFenced);
        }
        if producer.epoch > state.epoch {
            return match producer.base_sequence {
                0 => Ok(Admission::Append),
                _ => Err(ErrorCode::ProducerSequenceOutOfOrder),
            };
        }
        let same = |stored: &&StoredBatch| stored.base_sequence == producer.base_sequence && stored.count == count;
        if let Some(stored) = state.recent.iter().find(same) {
            return Ok(Admission::Duplicate { base_offset: stored.base_offset });
        }
        if producer.base_sequence == state.next_sequence {
            Ok(Admission::Append)
        } else {
            Err(ErrorCode::ProducerSequenceOutOfOrder)
        }
    }

    /// Records an admitted batch stored at `base_offset` (also a batch replayed from the log
    /// at start, with the time it was stored).
    pub fn record(&mut self, producer: BatchProducer, count: u32, base_offset: u64, at_us: u64) {
        let state = self.producers.entry(producer.id).or_insert_with(|| ProducerState {
            epoch: producer.epoch,
            next_sequence: 0,
            recent: VecDeque::with_capacity(RECENT_BATCHES),
            last_append_us: at_us,
        });
        if producer.epoch != state.epoch {
            state.epoch = producer.epoch;
            state.recent.clear();
        }
        if state.recent.len() == RECENT_BATCHES {
            state.recent.pop_front();
        }
        state.recent.push_back(StoredBatch { base_sequence: producer.base_sequence, count, base_offset });
        state.next_sequence = advance(producer.base_sequence, count);
        state.last_append_us = state.last_append_us.max(at_us);
    }

    /// Forgets every producer whose last batch is older than the expiry.
    pub fn forget_idle(&mut self, now_us: u64) {
        let expiry_us = self.expiry_us;
        self.producers.retain(|_, state| state.last_append_us.saturating_add(expiry_us) > now_us);
    }

    /// Forgets everything (the partition was purged).
    pub fn clear(&mut self) {
        self.producers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR_US: u64 = 3_600_000_000;

    fn producer(epoch: u16, base_sequence: u32) -> BatchProducer {
        BatchProducer { id: 7 << 20, epoch, base_sequence }
    }

    #[test]
    fn batches_in_order_are_stored_and_a_retry_gets_its_first_offset() {
        let mut table = ProducerTable::new(HOUR_US);
        assert_eq!(table.admit(producer(0, 0), 3, 1), Ok(Admission::Append));
        table.record(producer(0, 0), 3, 100, 1);
        assert_eq!(table.admit(producer(0, 3), 2, 2), Ok(Admission::Append));
        table.record(producer(0, 3), 2, 103, 2);
        assert_eq!(table.admit(producer(0, 0), 3, 3), Ok(Admission::Duplicate { base_offset: 100 }));
        assert_eq!(table.admit(producer(0, 3), 2, 3), Ok(Admission::Duplicate { base_offset: 103 }));
        assert_eq!(table.admit(producer(0, 5), 1, 3), Ok(Admission::Append));
    }

    #[test]
    fn gaps_old_epochs_and_unknown_producers_are_refused() {
        let mut table = ProducerTable::new(HOUR_US);
        assert_eq!(table.admit(producer(0, 4), 1, 1), Err(ErrorCode::ProducerUnknown));
        table.record(producer(1, 0), 2, 0, 1);
        assert_eq!(table.admit(producer(1, 3), 1, 2), Err(ErrorCode::ProducerSequenceOutOfOrder));
        assert_eq!(table.admit(producer(0, 2), 1, 2), Err(ErrorCode::ProducerEpochFenced));
        assert_eq!(table.admit(producer(2, 1), 1, 2), Err(ErrorCode::ProducerSequenceOutOfOrder));
        assert_eq!(table.admit(producer(2, 0), 1, 2), Ok(Admission::Append));
        table.record(producer(2, 0), 1, 2, 2);
        assert_eq!(table.admit(producer(1, 2), 1, 3), Err(ErrorCode::ProducerEpochFenced), "the new epoch fences");
    }

    #[test]
    fn only_the_most_recent_batches_are_recognised_and_idle_producers_are_forgotten() {
        let mut table = ProducerTable::new(HOUR_US);
        for batch in 0..=RECENT_BATCHES as u32 {
            table.record(producer(0, batch), 1, u64::from(batch), 10);
        }
        assert_eq!(table.admit(producer(0, 0), 1, 11), Err(ErrorCode::ProducerSequenceOutOfOrder));
        assert_eq!(table.admit(producer(0, 1), 1, 11), Ok(Admission::Duplicate { base_offset: 1 }));
        assert_eq!(table.len(), 1);
        assert_eq!(table.admit(producer(0, 9), 1, 10 + HOUR_US), Err(ErrorCode::ProducerUnknown));
        assert!(table.is_empty());
    }

    #[test]
    fn a_table_decodes_to_itself() {
        let mut table = ProducerTable::new(HOUR_US);
        table.record(producer(1, 0), 3, 10, 5);
        table.record(producer(1, 3), 2, 13, 6);
        table.record(BatchProducer { id: 9, epoch: 0, base_sequence: 0 }, 1, 15, 7);
        let mut bytes = Vec::new();
        table.encode(&mut bytes);
        let decoded = ProducerTable::decode(&mut Reader::new(&bytes)).unwrap();
        assert_eq!(decoded, table);
        for cut in 0..bytes.len() {
            assert!(ProducerTable::decode(&mut Reader::new(&bytes[..cut])).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn sequences_wrap_after_the_largest() {
        assert_eq!(advance(SEQUENCE_MAX, 1), 0);
        let mut table = ProducerTable::new(HOUR_US);
        table.record(producer(0, SEQUENCE_MAX - 1), 2, 0, 1);
        assert_eq!(table.admit(producer(0, 0), 1, 2), Ok(Admission::Append));
    }
}
