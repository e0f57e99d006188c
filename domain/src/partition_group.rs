//! The replicated state of a partition group: what every replica of a group applies, in
//! commit order, for the partitions the group carries (docs/vsr.md, "Partition groups").
//! Offsets are assigned here, at apply time, from the committed order alone, so every
//! replica assigns the same offsets and a new primary after a failover continues where the
//! committed log ends: no offset is ever assigned twice. Consumer offsets are part of the
//! same state, so a failover keeps the last acknowledged store.
//!
//! Operations use the protocol's partition operation bytes:
//! - `SEND_MESSAGES` (160): `[partition u32][count u32][batch ...]`, replied
//!   `[status u32][partition u32][base_offset u64]`;
//! - `STORE_CONSUMER_OFFSET` (161): `[partition u32][kind u8][consumer u32][offset u64]`;
//! - `DELETE_CONSUMER_OFFSET` (162): `[partition u32][kind u8][consumer u32]`;
//!
//! both replied `[status u32]`. A status other than 0 is an Iggy error code; the state is
//! then unchanged.

use std::collections::BTreeMap;

use crate::error::ErrorCode;
use crate::vsr::{InvalidSnapshot, StateMachine};
use crate::wire::codes::operation;

/// A consumer's key: its kind (1 consumer, 2 group) and id.
pub type ConsumerKey = (u8, u32);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionGroupState {
    /// The next offset of each partition the group carries (index = partition id).
    next_offsets: Vec<u64>,
    /// Stored offsets by partition and consumer.
    consumer_offsets: BTreeMap<(u32, ConsumerKey), u64>,
}

/// What applying a SEND_MESSAGES assigned: the batch's first offset in its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub partition: u32,
    pub base_offset: u64,
    pub count: u32,
}

fn word(body: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?))
}

fn long(body: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
}

impl PartitionGroupState {
    /// A group carrying `partitions` partitions, all empty.
    pub fn new(partitions: u32) -> Self {
        Self { next_offsets: vec![0; partitions as usize], consumer_offsets: BTreeMap::new() }
    }

    pub fn next_offset(&self, partition: u32) -> Option<u64> {
        self.next_offsets.get(partition as usize).copied()
    }

    pub fn consumer_offset(&self, partition: u32, consumer: ConsumerKey) -> Option<u64> {
        self.consumer_offsets.get(&(partition, consumer)).copied()
    }

    /// Applies one committed operation; the assigned offsets of a send, or why it failed.
    pub fn apply_op(&mut self, op: u8, body: &[u8]) -> Result<Option<Appended>, ErrorCode> {
        let partition = word(body, 0).ok_or(ErrorCode::InvalidFormat)?;
        let next = self.next_offsets.get_mut(partition as usize).ok_or(ErrorCode::PartitionNotFound)?;
        match op {
            operation::SEND_MESSAGES => {
                let count = word(body, 4).ok_or(ErrorCode::InvalidFormat)?;
                if count == 0 {
                    return Err(ErrorCode::InvalidMessagesCount);
                }
                let base_offset = *next;
                *next = next.checked_add(u64::from(count)).ok_or(ErrorCode::InvalidMessagesCount)?;
                Ok(Some(Appended { partition, base_offset, count }))
            }
            operation::STORE_CONSUMER_OFFSET | operation::DELETE_CONSUMER_OFFSET => {
                let kind = *body.get(4).ok_or(ErrorCode::InvalidFormat)?;
                let consumer = word(body, 5).ok_or(ErrorCode::InvalidFormat)?;
                let key = (partition, (kind, consumer));
                if op == operation::DELETE_CONSUMER_OFFSET {
                    self.consumer_offsets.remove(&key).map(drop).ok_or(ErrorCode::ConsumerOffsetNotFound)?;
                    return Ok(None);
                }
                // Any offset is stored as given, as on one node.
                let offset = long(body, 9).ok_or(ErrorCode::InvalidFormat)?;
                self.consumer_offsets.insert(key, offset);
                Ok(None)
            }
            _ => Err(ErrorCode::InvalidCommand),
        }
    }
}

impl StateMachine for PartitionGroupState {
    fn apply(&mut self, _op: u64, _timestamp: u64, operation: u8, body: &[u8]) -> Vec<u8> {
        match self.apply_op(operation, body) {
            Ok(Some(appended)) => {
                let mut reply = 0u32.to_le_bytes().to_vec();
                reply.extend_from_slice(&appended.partition.to_le_bytes());
                reply.extend_from_slice(&appended.base_offset.to_le_bytes());
                reply
            }
            Ok(None) => 0u32.to_le_bytes().to_vec(),
            Err(code) => code.code().to_le_bytes().to_vec(),
        }
    }

    /// `[partitions u32][next u64 ...][offsets u32]` then `[partition u32][kind u8][id u32][offset u64]`.
    fn snapshot(&self) -> Vec<u8> {
        let mut out = (self.next_offsets.len() as u32).to_le_bytes().to_vec();
        for next in &self.next_offsets {
            out.extend_from_slice(&next.to_le_bytes());
        }
        out.extend_from_slice(&(self.consumer_offsets.len() as u32).to_le_bytes());
        for ((partition, (kind, id)), offset) in &self.consumer_offsets {
            out.extend_from_slice(&partition.to_le_bytes());
            out.push(*kind);
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
        }
        out
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), InvalidSnapshot> {
        let partitions = word(snapshot, 0).ok_or(InvalidSnapshot)? as usize;
        let mut at = 4;
        let mut next_offsets = Vec::with_capacity(partitions.min(1 << 16));
        for _ in 0..partitions {
            next_offsets.push(long(snapshot, at).ok_or(InvalidSnapshot)?);
            at += 8;
        }
        let count = word(snapshot, at).ok_or(InvalidSnapshot)?;
        at += 4;
        let mut consumer_offsets = BTreeMap::new();
        for _ in 0..count {
            let partition = word(snapshot, at).ok_or(InvalidSnapshot)?;
            let kind = *snapshot.get(at + 4).ok_or(InvalidSnapshot)?;
            let id = word(snapshot, at + 5).ok_or(InvalidSnapshot)?;
            let offset = long(snapshot, at + 9).ok_or(InvalidSnapshot)?;
            consumer_offsets.insert((partition, (kind, id)), offset);
            at += 17;
        }
        if at != snapshot.len() {
            return Err(InvalidSnapshot);
        }
        *self = Self { next_offsets, consumer_offsets };
        Ok(())
    }

    fn digest(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&self.snapshot())
    }
}

/// Body builders, for the replica plane's callers and the simulator.
pub fn send_body(partition: u32, count: u32, batch: &[u8]) -> Vec<u8> {
    let mut body = partition.to_le_bytes().to_vec();
    body.extend_from_slice(&count.to_le_bytes());
    body.extend_from_slice(batch);
    body
}

pub fn store_offset_body(partition: u32, consumer: ConsumerKey, offset: u64) -> Vec<u8> {
    let mut body = partition.to_le_bytes().to_vec();
    body.push(consumer.0);
    body.extend_from_slice(&consumer.1.to_le_bytes());
    body.extend_from_slice(&offset.to_le_bytes());
    body
}

pub fn delete_offset_body(partition: u32, consumer: ConsumerKey) -> Vec<u8> {
    let mut body = partition.to_le_bytes().to_vec();
    body.push(consumer.0);
    body.extend_from_slice(&consumer.1.to_le_bytes());
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_follow_the_committed_order_per_partition() {
        let mut state = PartitionGroupState::new(2);
        let send = |state: &mut PartitionGroupState, partition, count| {
            state.apply_op(operation::SEND_MESSAGES, &send_body(partition, count, b"batch"))
        };
        assert_eq!(send(&mut state, 0, 3), Ok(Some(Appended { partition: 0, base_offset: 0, count: 3 })));
        assert_eq!(send(&mut state, 1, 2), Ok(Some(Appended { partition: 1, base_offset: 0, count: 2 })));
        assert_eq!(send(&mut state, 0, 1), Ok(Some(Appended { partition: 0, base_offset: 3, count: 1 })));
        assert_eq!(send(&mut state, 2, 1), Err(ErrorCode::PartitionNotFound));
        assert_eq!(send(&mut state, 0, 0), Err(ErrorCode::InvalidMessagesCount));
        assert_eq!(state.next_offset(0), Some(4), "failed ops change nothing");
    }

    #[test]
    fn consumer_offsets_are_stored_within_the_partition_and_deleted() {
        let mut state = PartitionGroupState::new(1);
        let reader = (1, 7);
        let store = operation::STORE_CONSUMER_OFFSET;
        assert_eq!(state.apply_op(store, &store_offset_body(0, reader, 4)), Ok(None));
        assert_eq!(state.apply_op(store, &store_offset_body(0, reader, 2)), Ok(None));
        assert_eq!(state.consumer_offset(0, reader), Some(2), "the last store wins");
        assert_eq!(state.apply_op(store, &store_offset_body(1, reader, 2)), Err(ErrorCode::PartitionNotFound));
        let delete = operation::DELETE_CONSUMER_OFFSET;
        assert_eq!(state.apply_op(delete, &delete_offset_body(0, reader)), Ok(None));
        assert_eq!(state.apply_op(delete, &delete_offset_body(0, reader)), Err(ErrorCode::ConsumerOffsetNotFound));
    }

    #[test]
    fn a_snapshot_restores_the_same_state_and_refuses_damage() {
        let mut state = PartitionGroupState::new(3);
        state.apply_op(operation::SEND_MESSAGES, &send_body(2, 9, b"x")).unwrap();
        state.apply_op(operation::STORE_CONSUMER_OFFSET, &store_offset_body(2, (2, 1), 8)).unwrap();
        let snapshot = state.snapshot();
        let mut copy = PartitionGroupState::default();
        copy.restore(&snapshot).unwrap();
        assert_eq!(copy, state);
        assert_eq!(copy.digest(), state.digest());
        for cut in 0..snapshot.len() {
            assert_eq!(PartitionGroupState::default().restore(&snapshot[..cut]), Err(InvalidSnapshot), "cut at {cut}");
        }
    }

    #[test]
    fn replies_carry_the_status_and_the_base_offset() {
        let mut state = PartitionGroupState::new(1);
        let reply = state.apply(1, 0, operation::SEND_MESSAGES, &send_body(0, 2, b""));
        assert_eq!(reply, [&0u32.to_le_bytes()[..], &0u32.to_le_bytes(), &0u64.to_le_bytes()].concat());
        let reply = state.apply(2, 0, operation::SEND_MESSAGES, &send_body(5, 2, b""));
        assert_eq!(reply, ErrorCode::PartitionNotFound.code().to_le_bytes());
    }
}
