//! Idempotent producers (protocol 0.12): a batch may carry its producer's id, epoch and the
//! sequence number of its first message. Per partition, [`ProducerTable`] admits each
//! producer's batches in sequence order, answers a batch it stored already with that
//! batch's original offset (stored once, however often it is sent), fences an older epoch
//! and forgets producers idle past its expiry.

use std::collections::{HashMap, VecDeque};

use crate::error::ErrorCode;

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

#[derive(Debug, Clone)]
struct ProducerState {
    epoch: u16,
    next_sequence: u32,
    recent: VecDeque<StoredBatch>,
    last_append_us: u64,
}

/// The producers of one partition.
#[derive(Debug, Clone, Default)]
pub struct ProducerTable {
    producers: HashMap<u64, ProducerState>,
    expiry_us: u64,
}

impl ProducerTable {
    /// A table that forgets a producer `expiry_us` after its last batch.
    pub fn new(expiry_us: u64) -> Self {
        Self { producers: HashMap::new(), expiry_us }
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
    fn sequences_wrap_after_the_largest() {
        assert_eq!(advance(SEQUENCE_MAX, 1), 0);
        let mut table = ProducerTable::new(HOUR_US);
        table.record(producer(0, SEQUENCE_MAX - 1), 2, 0, 1);
        assert_eq!(table.admit(producer(0, 0), 1, 2), Ok(Admission::Append));
    }
}
