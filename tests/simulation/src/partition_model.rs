//! The partition group's model for the simulator: the domain's `PartitionGroupState` (offsets
//! assigned at apply, consumer offsets) plus, for the checks only, a record of every batch it
//! appended. After convergence: each partition's batches sit end to end from offset 0 (no
//! offset assigned twice, none skipped); every acknowledged send is present exactly once, at
//! the offset its reply gave, with the bytes the client sent; every consumer offset is the
//! last store or delete committed for it (an acknowledged store never goes back); and the
//! once-only sends (`once_model.rs`) stored no id twice and no producer's batch out of
//! sequence or again, while every id of an acknowledged one is stored.

use std::collections::BTreeMap;

use rill_adapter_sim::vsr::Prng;
use rill_domain::partition_group::{self, PartitionGroupState};
use rill_domain::vsr::{Entry, InvalidSnapshot, StateMachine};
use rill_domain::wire::codes::operation;

use crate::model::Model;
use crate::once_model::{OnceRecord, once_request};

/// Partitions one simulated group's clients send to (the state takes any key).
pub const PARTITIONS: u64 = 4;

/// One appended batch: where it landed and a digest of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub partition: u64,
    pub base_offset: u64,
    pub count: u32,
    pub digest: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionModel {
    pub state: PartitionGroupState,
    pub batches: Vec<Batch>,
    pub once: OnceRecord,
}

fn word(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

fn long(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
}

impl StateMachine for PartitionModel {
    fn apply(&mut self, op: u64, timestamp: u64, operation: u8, body: &[u8]) -> Vec<u8> {
        if operation == partition_group::SEND_MESSAGES_ONCE {
            let (result, reply) = self.state.apply_with_reply(operation, timestamp, body);
            if let Ok(Some(appended)) = result {
                self.once.note(body, &appended);
                if appended.count > 0 {
                    let (partition, base_offset, count) = (appended.partition, appended.base_offset, appended.count);
                    self.batches.push(Batch { partition, base_offset, count, digest: 0 });
                }
            }
            return reply;
        }
        let reply = self.state.apply(op, timestamp, operation, body);
        if operation == operation::SEND_MESSAGES
            && let Some((partition, base_offset)) = partition_group::parse_send_reply(&reply)
            && let Some((_, count, batch)) = partition_group::parse_send(body)
        {
            let digest = xxhash_rust::xxh3::xxh3_64(batch);
            self.batches.push(Batch { partition, base_offset, count, digest });
        }
        reply
    }

    fn snapshot(&self) -> Vec<u8> {
        let state = self.state.snapshot();
        let mut out = (state.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&state);
        out.extend_from_slice(&(self.batches.len() as u32).to_le_bytes());
        for batch in &self.batches {
            out.extend_from_slice(&batch.partition.to_le_bytes());
            out.extend_from_slice(&batch.base_offset.to_le_bytes());
            out.extend_from_slice(&batch.count.to_le_bytes());
            out.extend_from_slice(&batch.digest.to_le_bytes());
        }
        self.once.encode(&mut out);
        out
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), InvalidSnapshot> {
        let len = snapshot.get(..4).map(|b| word(b, 0) as usize).ok_or(InvalidSnapshot)?;
        let state_bytes = snapshot.get(4..4 + len).ok_or(InvalidSnapshot)?;
        let count = snapshot.get(4 + len..8 + len).map(|b| word(b, 0) as usize).ok_or(InvalidSnapshot)?;
        let records = snapshot.get(8 + len..8 + len + 28 * count).ok_or(InvalidSnapshot)?;
        let mut state = PartitionGroupState::default();
        state.restore(state_bytes)?;
        let batches = records
            .chunks(28)
            .map(|r| Batch { partition: long(r, 0), base_offset: long(r, 8), count: word(r, 16), digest: long(r, 20) })
            .collect();
        let rest = &snapshot[8 + len + 28 * count..];
        let (once, used) = OnceRecord::decode(rest).ok_or(InvalidSnapshot)?;
        if used != rest.len() {
            return Err(InvalidSnapshot);
        }
        *self = Self { state, batches, once };
        Ok(())
    }

    fn digest(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&self.snapshot())
    }
}

impl Model for PartitionModel {
    fn initial() -> Self {
        Self { state: PartitionGroupState::default(), batches: Vec::new(), once: OnceRecord::default() }
    }

    /// Mostly sends of 1 to 10 messages with distinct bytes, once-only sends (ids that
    /// repeat, producers' batches), some offset stores and deletes for three consumers, now
    /// and then a malformed send.
    fn request(prng: &mut Prng) -> (u8, Vec<u8>) {
        let partition = prng.below(PARTITIONS);
        let consumer = (1, prng.range(1, 4) as u32);
        match prng.below(100) {
            0..20 => (partition_group::SEND_MESSAGES_ONCE, once_request(prng, partition)),
            20..70 => {
                let batch: Vec<u8> = (0..prng.range(8, 33)).map(|_| prng.below(256) as u8).collect();
                let count = prng.range(1, 11) as u32;
                (operation::SEND_MESSAGES, partition_group::send_body(partition, count, &batch))
            }
            70..72 => (operation::SEND_MESSAGES, partition.to_le_bytes().to_vec()),
            72..95 => {
                let body = partition_group::store_offset_body(partition, consumer, prng.below(200));
                (operation::STORE_CONSUMER_OFFSET, body)
            }
            _ => (operation::DELETE_CONSUMER_OFFSET, partition_group::delete_offset_body(partition, consumer)),
        }
    }

    fn check_final(replay: &Self, committed: &BTreeMap<u64, Entry>, replies: &[(u128, u64, Vec<u8>)]) {
        check_offsets(replay);
        assert_eq!(replay.once.violations, 0, "a once-only send stored an id twice or a producer's batch out of turn");
        let bodies: BTreeMap<(u128, u64), &Entry> =
            committed.values().map(|entry| ((entry.client_id, entry.request_number), entry)).collect();
        for (client, request, reply) in replies {
            let entry = bodies.get(&(*client, *request)).expect("a replied request was committed");
            if entry.operation == partition_group::SEND_MESSAGES_ONCE
                && let Some((_, base_offset)) = partition_group::parse_send_reply(reply)
            {
                check_once_reply(replay, entry, base_offset);
            }
            if entry.operation != operation::SEND_MESSAGES {
                continue;
            }
            let Some((partition, base_offset)) = partition_group::parse_send_reply(reply) else { continue };
            let (_, _, batch) = partition_group::parse_send(&entry.body).expect("an acknowledged send is well formed");
            let digest = xxhash_rust::xxh3::xxh3_64(batch);
            let found: Vec<&Batch> = replay.batches.iter().filter(|b| b.digest == digest).collect();
            assert_eq!(found.len(), 1, "acknowledged send {client}/{request} is stored {} times", found.len());
            assert_eq!(
                (found[0].partition, found[0].base_offset),
                (partition, base_offset),
                "at the acknowledged offset"
            );
        }
        check_consumer_offsets(replay, committed);
    }
}

/// An acknowledged once-only send: a producer's batch is answered with the offset it was
/// stored at first (a retry with its first batch's, whatever it holds); every id of any
/// other is stored in its partition, by this send or an earlier one.
fn check_once_reply(replay: &PartitionModel, entry: &Entry, base_offset: u64) {
    let (partition, _, _, batch) = partition_group::parse_send_once(&entry.body).expect("well formed");
    match rill_domain::batch::producer(batch) {
        Ok(Some(producer)) => {
            let first = replay.once.first_offset(partition, producer.id, producer.base_sequence);
            assert_eq!(first, Some(base_offset), "producer {producer:?}'s batch answered at another offset");
        }
        _ => {
            for id in rill_domain::batch::message_ids(batch) {
                assert!(replay.once.holds(partition, id), "acknowledged id {id} is not stored in {partition}");
            }
        }
    }
}

/// Each partition's batches run end to end from 0 up to its next offset.
fn check_offsets(replay: &PartitionModel) {
    for partition in 0..PARTITIONS {
        let mut next = 0;
        for batch in replay.batches.iter().filter(|b| b.partition == partition) {
            assert_eq!(batch.base_offset, next, "partition {partition}: an offset assigned twice or skipped");
            next += u64::from(batch.count);
        }
        assert_eq!(replay.state.next_offset(partition).unwrap_or(0), next, "partition {partition}'s end");
    }
}

/// Every consumer offset is what the last committed store or delete for it left.
fn check_consumer_offsets(replay: &PartitionModel, committed: &BTreeMap<u64, Entry>) {
    let mut last: BTreeMap<(u64, (u8, u32)), Option<u64>> = BTreeMap::new();
    for entry in committed.values() {
        let Some((partition, consumer, offset)) = partition_group::parse_offset_body(&entry.body) else { continue };
        match entry.operation {
            operation::STORE_CONSUMER_OFFSET => {
                last.insert((partition, consumer), offset);
            }
            operation::DELETE_CONSUMER_OFFSET => {
                last.insert((partition, consumer), None);
            }
            _ => {}
        }
    }
    for ((partition, consumer), expected) in last {
        assert_eq!(replay.state.consumer_offset(partition, consumer), expected, "consumer {consumer:?} on {partition}");
    }
}
