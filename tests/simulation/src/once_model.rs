//! Once-only sends in the partition group's model: the workload's sends to deduplicating
//! partitions, with message ids drawn from a small range (so batches repeat ids of earlier
//! ones, as an application's retry after a failover does under a new request) and some from
//! idempotent producers with sequences drawn near where they stand. `OnceRecord` follows what
//! the group stored, independently of the state's own window and tables: an id stored twice
//! in a partition, a producer's batch stored out of sequence, or a retry stored again counts
//! as a violation, which the final checks require to be none.

use std::collections::BTreeMap;

use rill_adapter_sim::vsr::Prng;
use rill_domain::batch::{self, BatchBuilder, set_producer};
use rill_domain::partition_group::{self, Appended, OnceSettings};
use rill_domain::producers::BatchProducer;

/// Ids are drawn from 1 to this: repeats are common.
const IDS: u64 = 40;
/// The window outlives every run: any id stored twice is a violation.
const SETTINGS: OnceSettings = OnceSettings { dedup: Some((10_000, u64::MAX / 2)), producer_expiry_us: u64::MAX / 2 };

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnceRecord {
    /// Every id stored per partition, with the offset of the batch that stored it.
    stored_ids: BTreeMap<(u64, u128), u64>,
    /// The sequence each producer's next new batch must start at, per partition.
    next_sequences: BTreeMap<(u64, u64), u32>,
    /// Where each producer batch was stored first, by partition, producer and sequence.
    first_offsets: BTreeMap<(u64, u64, u32), u64>,
    pub violations: u64,
}

/// A once-only send to `partition`: one to five messages with ids from the small range, a
/// third of them from one of three producers.
pub fn once_request(prng: &mut Prng, partition: u64) -> Vec<u8> {
    let count = prng.range(1, 6);
    let mut builder = BatchBuilder::with_capacity(64);
    for _ in 0..count {
        builder.push(u128::from(prng.range(1, IDS + 1)), b"once", b"");
    }
    let mut bytes = builder.finish(0);
    if prng.below(3) == 0 {
        let producer = BatchProducer { id: prng.range(1, 4), epoch: 0, base_sequence: prng.below(12) as u32 };
        set_producer(&mut bytes, producer);
    }
    partition_group::send_once_body(partition, count as u32, SETTINGS, &bytes)
}

impl OnceRecord {
    /// Follows a once-only send the state applied.
    pub fn note(&mut self, body: &[u8], appended: &Appended) {
        let Some((partition, count, _, batch)) = partition_group::parse_send_once(body) else { return };
        if let Ok(Some(producer)) = batch::producer(batch) {
            let next = self.next_sequences.entry((partition, producer.id)).or_insert(0);
            match producer.base_sequence.cmp(next) {
                // A retry of a batch stored already: answered, never stored again.
                std::cmp::Ordering::Less => self.violations += u64::from(appended.count > 0),
                std::cmp::Ordering::Equal => {
                    *next += count;
                    let key = (partition, producer.id, producer.base_sequence);
                    self.first_offsets.insert(key, appended.base_offset);
                }
                std::cmp::Ordering::Greater => self.violations += 1,
            }
        }
        if appended.count == 0 {
            return;
        }
        let mut dropped = appended.dropped.iter().flatten();
        for id in batch::message_ids(batch) {
            let kept = !dropped.next().copied().unwrap_or(false);
            if kept && self.stored_ids.insert((partition, id), appended.base_offset).is_some() {
                self.violations += 1;
            }
        }
    }

    /// Where `producer`'s batch starting at `sequence` was stored first in `partition`.
    pub fn first_offset(&self, partition: u64, producer: u64, sequence: u32) -> Option<u64> {
        self.first_offsets.get(&(partition, producer, sequence)).copied()
    }

    /// Whether `id` is stored in `partition`.
    pub fn holds(&self, partition: u64, id: u128) -> bool {
        self.stored_ids.contains_key(&(partition, id))
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.stored_ids.len() as u32).to_le_bytes());
        for ((partition, id), offset) in &self.stored_ids {
            out.extend_from_slice(&partition.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
        }
        out.extend_from_slice(&(self.next_sequences.len() as u32).to_le_bytes());
        for ((partition, producer), next) in &self.next_sequences {
            out.extend_from_slice(&partition.to_le_bytes());
            out.extend_from_slice(&producer.to_le_bytes());
            out.extend_from_slice(&next.to_le_bytes());
        }
        out.extend_from_slice(&(self.first_offsets.len() as u32).to_le_bytes());
        for ((partition, producer, sequence), offset) in &self.first_offsets {
            out.extend_from_slice(&partition.to_le_bytes());
            out.extend_from_slice(&producer.to_le_bytes());
            out.extend_from_slice(&sequence.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
        }
        out.extend_from_slice(&self.violations.to_le_bytes());
    }

    /// A record `encode` wrote, from the front of `bytes`, and the bytes it took.
    pub fn decode(bytes: &[u8]) -> Option<(Self, usize)> {
        let mut reader = rill_domain::reader::Reader::new(bytes);
        let mut record = Self::default();
        for _ in 0..reader.u32().ok()? {
            let key = (reader.u64().ok()?, reader.u128().ok()?);
            record.stored_ids.insert(key, reader.u64().ok()?);
        }
        for _ in 0..reader.u32().ok()? {
            let key = (reader.u64().ok()?, reader.u64().ok()?);
            record.next_sequences.insert(key, reader.u32().ok()?);
        }
        for _ in 0..reader.u32().ok()? {
            let key = (reader.u64().ok()?, reader.u64().ok()?, reader.u32().ok()?);
            record.first_offsets.insert(key, reader.u64().ok()?);
        }
        record.violations = reader.u64().ok()?;
        Some((record, reader.position()))
    }
}
