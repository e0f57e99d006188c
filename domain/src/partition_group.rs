//! The replicated state of a partition group: what every replica of a group applies, in
//! commit order, for the partitions the group carries (docs/vsr.md, "Partition groups").
//! Offsets are assigned here, at apply time, from the committed order alone, so every
//! replica assigns the same offsets and a new primary after a failover continues where the
//! committed log ends: no offset is ever assigned twice. Consumer offsets are part of the
//! same state, so a failover keeps the last acknowledged store.
//!
//! A partition is named by a `u64` key (the server uses the packed `Namespace`); a key no
//! op named yet is an empty partition. Operations use the protocol's partition bytes:
//! - `SEND_MESSAGES` (160): `[partition u64][count u32][batch ...]`, replied
//!   `[status u32][partition u64][base_offset u64]`;
//! - `SEND_MESSAGES_ONCE` (164): a send whose duplicates are dropped and whose producer's
//!   retries are answered with their first offsets (`once.rs`);
//! - `ADOPT_PARTITION` (165): a copy written outside the group becomes the group's record of
//!   its partition, when the group has none yet (`adopt.rs`);
//! - `STORE_CONSUMER_OFFSET` (161): `[partition u64][kind u8][consumer u32][offset u64]`;
//! - `DELETE_CONSUMER_OFFSET` (162): `[partition u64][kind u8][consumer u32]`;
//! - `RESET_PARTITION` (163): `[partition u64][incarnation u64]`: the partition starts again
//!   empty (no messages, no stored offsets) when `incarnation` is newer than the one it has,
//!   and the op changes nothing otherwise. An incarnation is the metadata timestamp of what
//!   (re)started the partition, its creation or a purge, the same on every node, so every
//!   node may submit the same reset and only the first to commit takes effect;
//! - `DELETE_SEGMENTS` (138): `[partition u64][below u64][incarnation u64]`: every replica
//!   deletes its sealed segments that end at or below offset `below` (the start of the first
//!   segment the node that took the request keeps), so replicas whose segments split
//!   differently never delete a message at or above it. The state records `below` as the
//!   partition's log start (the highest one committed), so a replica that installs the state
//!   deletes too. Refused with 58 when the partition was started again since `incarnation`
//!   (the copy `below` was read from): that offset names the old incarnation's messages. A
//!   16-byte body (from a node before the incarnation joined it) counts as the current one;
//!
//! all but the sends replied `[status u32]`. A status other than 0 is an Iggy error code; the
//! state is then unchanged (but for ids and producers past their expiry, which every replica
//! forgets alike).

mod adopt;
mod once;

use std::collections::{BTreeMap, BTreeSet};

use crate::error::ErrorCode;
use crate::vsr::{InvalidSnapshot, StateMachine};
use crate::wire::codes::operation;

pub use adopt::Adoption;
pub use once::{Admitted, OnceSettings, OnceState, SEND_ONCE_PREFIX, parse_send_once, send_once_body};

/// A group op: a partition's copy written outside the group becomes its record.
pub const ADOPT_PARTITION: u8 = 165;

/// A group op: a send stored once (ids deduplicated, producers' retries recognised).
pub const SEND_MESSAGES_ONCE: u8 = 164;

/// A consumer's key: its kind (1 consumer, 2 group) and id.
pub type ConsumerKey = (u8, u32);

/// Bytes before a send's batch: the partition key and the message count.
pub const SEND_PREFIX: usize = 12;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionGroupState {
    /// The next offset of each partition a send has named.
    next_offsets: BTreeMap<u64, u64>,
    /// Stored offsets by partition and consumer.
    consumer_offsets: BTreeMap<(u64, ConsumerKey), u64>,
    /// The incarnation each reset partition has (0 for one never reset).
    incarnations: BTreeMap<u64, u64>,
    /// The highest offset a committed deletion named per partition, in its incarnation: its
    /// copies hold nothing below it that a deletion did not leave (a segment reaching past).
    log_starts: BTreeMap<u64, u64>,
    /// The message ids each deduplicating partition stored recently, and the idempotent
    /// producers of each partition that stored a producer's batch.
    once: OnceState,
    /// Per unrecorded partition, the replicas (a bit each) that reported holding nothing of it.
    empty_reports: BTreeMap<u64, u64>,
}

/// What applying a send assigned: the first offset in its partition of the messages stored,
/// how many are stored (0: every one was a duplicate, or the batch is a producer's retry and
/// `base_offset` is where it was stored first), and which were dropped as duplicates when
/// some, not all, were.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub partition: u64,
    pub base_offset: u64,
    pub count: u32,
    pub dropped: Option<Vec<bool>>,
}

fn word(body: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?))
}

fn long(body: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
}

/// A send body's partition, message count and batch.
pub fn parse_send(body: &[u8]) -> Option<(u64, u32, &[u8])> {
    Some((long(body, 0)?, word(body, 8)?, body.get(SEND_PREFIX..)?))
}

/// Whether `operation` is one of the group's sends.
pub fn is_send(operation: u8) -> bool {
    matches!(operation, operation::SEND_MESSAGES | SEND_MESSAGES_ONCE)
}

/// Either send's partition, message count and batch.
pub fn parse_any_send(operation: u8, body: &[u8]) -> Option<(u64, u32, &[u8])> {
    match operation {
        operation::SEND_MESSAGES => parse_send(body),
        SEND_MESSAGES_ONCE => parse_send_once(body).map(|(partition, count, _, batch)| (partition, count, batch)),
        _ => None,
    }
}

/// A successful send reply's partition and base offset.
pub fn parse_send_reply(reply: &[u8]) -> Option<(u64, u64)> {
    (reply.len() == 20 && word(reply, 0)? == 0).then_some((long(reply, 4)?, long(reply, 12)?))
}

/// A reset body's partition and incarnation, or a segment deletion's partition and offset.
pub fn parse_reset_body(body: &[u8]) -> Option<(u64, u64)> {
    (body.len() == 16).then_some((long(body, 0)?, long(body, 8)?))
}

/// A segment deletion's partition, offset and the incarnation it was read in (none in a body
/// from before incarnations joined it).
pub fn parse_delete_body(body: &[u8]) -> Option<(u64, u64, Option<u64>)> {
    match body.len() {
        16 => Some((long(body, 0)?, long(body, 8)?, None)),
        24 => Some((long(body, 0)?, long(body, 8)?, Some(long(body, 16)?))),
        _ => None,
    }
}

/// An offset body's partition and consumer, and the offset a store carries.
pub fn parse_offset_body(body: &[u8]) -> Option<(u64, ConsumerKey, Option<u64>)> {
    Some((long(body, 0)?, (*body.get(8)?, word(body, 9)?), long(body, 13)))
}

impl PartitionGroupState {
    /// The next offset of `partition`, once a send named it.
    pub fn next_offset(&self, partition: u64) -> Option<u64> {
        self.next_offsets.get(&partition).copied()
    }

    pub fn consumer_offset(&self, partition: u64, consumer: ConsumerKey) -> Option<u64> {
        self.consumer_offsets.get(&(partition, consumer)).copied()
    }

    /// The incarnation of `partition`: 0 until a reset named it.
    pub fn incarnation(&self, partition: u64) -> u64 {
        self.incarnations.get(&partition).copied().unwrap_or(0)
    }

    /// The highest offset a committed deletion named in `partition`'s incarnation (0: none).
    pub fn log_start(&self, partition: u64) -> u64 {
        self.log_starts.get(&partition).copied().unwrap_or(0)
    }

    /// Every partition a send has named, with its next offset.
    pub fn next_offsets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.next_offsets.iter().map(|(partition, next)| (*partition, *next))
    }

    /// The stored offsets of `partition`'s consumers.
    pub fn consumer_offsets(&self, partition: u64) -> impl Iterator<Item = (ConsumerKey, u64)> + '_ {
        let consumers = (partition, (0, 0))..=(partition, (u8::MAX, u32::MAX));
        self.consumer_offsets.range(consumers).map(|((_, consumer), offset)| (*consumer, *offset))
    }

    /// Every partition with a stored consumer offset.
    pub fn partitions_with_offsets(&self) -> BTreeSet<u64> {
        self.consumer_offsets.keys().map(|(partition, _)| *partition).collect()
    }

    /// Applies one committed operation that reads no time (every one but a once-only send,
    /// which then sees time 0); the assigned offsets of a send, or why it failed.
    pub fn apply_op(&mut self, op: u8, body: &[u8]) -> Result<Option<Appended>, ErrorCode> {
        self.apply_at(op, 0, body)
    }

    /// Applies one committed operation, stamped `timestamp` by the primary.
    pub fn apply_at(&mut self, op: u8, timestamp: u64, body: &[u8]) -> Result<Option<Appended>, ErrorCode> {
        match op {
            operation::SEND_MESSAGES => {
                let (partition, count, _) = parse_send(body).ok_or(ErrorCode::InvalidFormat)?;
                if count == 0 {
                    return Err(ErrorCode::InvalidMessagesCount);
                }
                let next = self.next_offsets.entry(partition).or_insert(0);
                let base_offset = *next;
                *next = next.checked_add(u64::from(count)).ok_or(ErrorCode::InvalidMessagesCount)?;
                Ok(Some(Appended { partition, base_offset, count, dropped: None }))
            }
            SEND_MESSAGES_ONCE => self.apply_send_once(body, timestamp),
            ADOPT_PARTITION => {
                self.adopt(&Adoption::decode(body)?);
                Ok(None)
            }
            operation::STORE_CONSUMER_OFFSET | operation::DELETE_CONSUMER_OFFSET => {
                let (partition, consumer, offset) = parse_offset_body(body).ok_or(ErrorCode::InvalidFormat)?;
                let key = (partition, consumer);
                if op == operation::DELETE_CONSUMER_OFFSET {
                    self.consumer_offsets.remove(&key).map(drop).ok_or(ErrorCode::ConsumerOffsetNotFound)?;
                    return Ok(None);
                }
                // Any offset is stored as given, as on one node.
                self.consumer_offsets.insert(key, offset.ok_or(ErrorCode::InvalidFormat)?);
                Ok(None)
            }
            operation::RESET_PARTITION => {
                let (partition, incarnation) = parse_reset_body(body).ok_or(ErrorCode::InvalidFormat)?;
                if incarnation > self.incarnation(partition) {
                    self.incarnations.insert(partition, incarnation);
                    self.next_offsets.remove(&partition);
                    self.log_starts.remove(&partition);
                    self.once.reset(partition);
                    self.consumer_offsets.retain(|(named, _), _| *named != partition);
                }
                Ok(None)
            }
            operation::DELETE_SEGMENTS => {
                let (partition, below, incarnation) = parse_delete_body(body).ok_or(ErrorCode::InvalidFormat)?;
                if incarnation.is_some_and(|read_in| read_in < self.incarnation(partition)) {
                    return Err(ErrorCode::TransientNotAccepted);
                }
                let end = self.next_offset(partition).unwrap_or(0);
                let start = self.log_starts.entry(partition).or_insert(0);
                *start = (*start).max(below.min(end));
                Ok(None)
            }
            _ => Err(ErrorCode::InvalidCommand),
        }
    }
}

impl PartitionGroupState {
    /// Whether the state records `partition`: a send or an adoption named it.
    pub fn records(&self, partition: u64) -> bool {
        self.next_offsets.contains_key(&partition)
    }

    /// Takes `adoption` as the record of its partition, unless the state has one already
    /// (an earlier adoption, or a send that committed first) or knows a newer incarnation:
    /// then it changes nothing. True when it took it.
    pub fn adopt(&mut self, adoption: &Adoption) -> bool {
        let partition = adoption.partition;
        if self.records(partition) || adoption.incarnation < self.incarnation(partition) {
            return false;
        }
        if adoption.next_offset == 0 {
            // A report of an empty copy: recorded empty once every replica reported.
            let reported = self.empty_reports.entry(partition).or_default();
            *reported |= 1 << adoption.replica;
            if reported.count_ones() >= u32::from(adoption.replicas) {
                self.empty_reports.remove(&partition);
                self.next_offsets.insert(partition, 0);
            }
            return false;
        }
        self.empty_reports.remove(&partition);
        self.next_offsets.insert(partition, adoption.next_offset);
        if adoption.incarnation > 0 {
            self.incarnations.insert(partition, adoption.incarnation);
        }
        if adoption.log_start > 0 {
            self.log_starts.insert(partition, adoption.log_start);
        }
        self.consumer_offsets.retain(|(named, _), _| *named != partition);
        for (consumer, offset) in &adoption.offsets {
            self.consumer_offsets.insert((partition, *consumer), *offset);
        }
        true
    }

    /// Applies a once-only send at `timestamp` (`once.rs` decides what is stored): a
    /// producer's retry is answered with its first offset, and the kept messages get the
    /// partition's next offsets.
    fn apply_send_once(&mut self, body: &[u8], timestamp: u64) -> Result<Option<Appended>, ErrorCode> {
        let (partition, count, settings, batch) = parse_send_once(body).ok_or(ErrorCode::InvalidFormat)?;
        if count == 0 {
            return Err(ErrorCode::InvalidMessagesCount);
        }
        let (kept, dropped, producer) = match self.once.admit(partition, (count, settings), batch, timestamp)? {
            Admitted::Retry { base_offset } => {
                return Ok(Some(Appended { partition, base_offset, count: 0, dropped: None }));
            }
            Admitted::Store { kept, dropped, producer } => (kept, dropped, producer),
        };
        let next = self.next_offsets.entry(partition).or_insert(0);
        let base_offset = *next;
        *next = next.checked_add(u64::from(kept)).ok_or(ErrorCode::InvalidMessagesCount)?;
        if let Some(producer) = producer {
            self.once.stored(partition, producer, (count, base_offset), timestamp);
        }
        Ok(Some(Appended { partition, base_offset, count: kept, dropped }))
    }

    /// Applies one committed operation stamped `timestamp`: what it did, and the reply its
    /// client gets.
    pub fn apply_with_reply(
        &mut self,
        operation: u8,
        timestamp: u64,
        body: &[u8],
    ) -> (Result<Option<Appended>, ErrorCode>, Vec<u8>) {
        let result = self.apply_at(operation, timestamp, body);
        let reply = match &result {
            Ok(Some(appended)) => {
                let mut reply = 0u32.to_le_bytes().to_vec();
                reply.extend_from_slice(&appended.partition.to_le_bytes());
                reply.extend_from_slice(&appended.base_offset.to_le_bytes());
                reply
            }
            Ok(None) => 0u32.to_le_bytes().to_vec(),
            Err(code) => code.code().to_le_bytes().to_vec(),
        };
        (result, reply)
    }
}

impl StateMachine for PartitionGroupState {
    fn apply(&mut self, _op: u64, timestamp: u64, operation: u8, body: &[u8]) -> Vec<u8> {
        self.apply_with_reply(operation, timestamp, body).1
    }

    /// `[partitions u32]` then `[partition u64][next u64]` each, `[offsets u32]` then
    /// `[partition u64][kind u8][id u32][offset u64]` each, then, when any partition was
    /// reset or had segments deleted, `[incarnations u32]` and `[partition u64][incarnation
    /// u64]` each, then, when segments were deleted, `[log starts u32]` and `[partition
    /// u64][start u64]` each, then, when any partition deduplicates or stored a producer's
    /// batch, `[windows u32]` and `[partition u64][window]` each and `[tables u32]` and
    /// `[partition u64][producer table]` each (`DedupWindow::encode`,
    /// `ProducerTable::encode`) and `[reports u32]`, `[partition u64][replicas u64]` each
    /// (the replicas that reported an empty copy of a partition not recorded yet); a
    /// snapshot without those parts is one taken before they existed, or of a state
    /// without them.
    fn snapshot(&self) -> Vec<u8> {
        let mut out = (self.next_offsets.len() as u32).to_le_bytes().to_vec();
        for (partition, next) in &self.next_offsets {
            out.extend_from_slice(&partition.to_le_bytes());
            out.extend_from_slice(&next.to_le_bytes());
        }
        out.extend_from_slice(&(self.consumer_offsets.len() as u32).to_le_bytes());
        for ((partition, (kind, id)), offset) in &self.consumer_offsets {
            out.extend_from_slice(&partition.to_le_bytes());
            out.push(*kind);
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
        }
        let once = !self.once.is_empty() || !self.empty_reports.is_empty();
        for (present, map) in [
            (once || !self.incarnations.is_empty() || !self.log_starts.is_empty(), &self.incarnations),
            (once || !self.log_starts.is_empty(), &self.log_starts),
        ] {
            if present {
                out.extend_from_slice(&(map.len() as u32).to_le_bytes());
                for (partition, value) in map {
                    out.extend_from_slice(&partition.to_le_bytes());
                    out.extend_from_slice(&value.to_le_bytes());
                }
            }
        }
        if once {
            self.once.encode(&mut out);
            out.extend_from_slice(&(self.empty_reports.len() as u32).to_le_bytes());
            for (partition, reported) in &self.empty_reports {
                out.extend_from_slice(&partition.to_le_bytes());
                out.extend_from_slice(&reported.to_le_bytes());
            }
        }
        out
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), InvalidSnapshot> {
        let partitions = word(snapshot, 0).ok_or(InvalidSnapshot)?;
        let mut at = 4;
        let mut next_offsets = BTreeMap::new();
        for _ in 0..partitions {
            next_offsets
                .insert(long(snapshot, at).ok_or(InvalidSnapshot)?, long(snapshot, at + 8).ok_or(InvalidSnapshot)?);
            at += 16;
        }
        let count = word(snapshot, at).ok_or(InvalidSnapshot)?;
        at += 4;
        let mut consumer_offsets = BTreeMap::new();
        for _ in 0..count {
            let (partition, consumer, offset) =
                parse_offset_body(snapshot.get(at..at + 21).ok_or(InvalidSnapshot)?).ok_or(InvalidSnapshot)?;
            consumer_offsets.insert((partition, consumer), offset.ok_or(InvalidSnapshot)?);
            at += 21;
        }
        let incarnations = read_pairs(snapshot, &mut at)?;
        let log_starts = read_pairs(snapshot, &mut at)?;
        let (once, empty_reports) = match snapshot.get(at..) {
            Some(rest) if !rest.is_empty() => read_tail(rest).map_err(|_| InvalidSnapshot)?,
            _ => Default::default(),
        };
        *self = Self { next_offsets, consumer_offsets, incarnations, log_starts, once, empty_reports };
        Ok(())
    }

    fn digest(&self) -> u64 {
        crate::checksum::xxh3_64(&self.snapshot())
    }
}

/// The snapshot's last sections, to its end: the once-only sends' state, then the reports
/// of empty copies (`[reports u32]`, then `[partition u64][replicas u64]` each).
fn read_tail(bytes: &[u8]) -> Result<(OnceState, BTreeMap<u64, u64>), ErrorCode> {
    let mut reader = crate::reader::Reader::new(bytes);
    let once = OnceState::decode_from(&mut reader)?;
    let mut reports = BTreeMap::new();
    for _ in 0..reader.u32()? {
        let partition = reader.u64()?;
        reports.insert(partition, reader.u64()?);
    }
    reader.finish()?;
    Ok((once, reports))
}

/// An optional snapshot section at `at`: `[count u32]` then `[partition u64][value u64]` each;
/// empty when the snapshot ends there.
fn read_pairs(snapshot: &[u8], at: &mut usize) -> Result<BTreeMap<u64, u64>, InvalidSnapshot> {
    let mut pairs = BTreeMap::new();
    if *at < snapshot.len() {
        let count = word(snapshot, *at).ok_or(InvalidSnapshot)?;
        *at += 4;
        for _ in 0..count {
            let pair = parse_reset_body(snapshot.get(*at..*at + 16).ok_or(InvalidSnapshot)?).ok_or(InvalidSnapshot)?;
            pairs.insert(pair.0, pair.1);
            *at += 16;
        }
    }
    Ok(pairs)
}

/// Body builders, for the replica plane's callers and the simulator.
pub fn send_body(partition: u64, count: u32, batch: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(SEND_PREFIX + batch.len());
    body.extend_from_slice(&partition.to_le_bytes());
    body.extend_from_slice(&count.to_le_bytes());
    body.extend_from_slice(batch);
    body
}

pub fn store_offset_body(partition: u64, consumer: ConsumerKey, offset: u64) -> Vec<u8> {
    let mut body = delete_offset_body(partition, consumer);
    body.extend_from_slice(&offset.to_le_bytes());
    body
}

pub fn reset_body(partition: u64, incarnation: u64) -> Vec<u8> {
    [partition.to_le_bytes(), incarnation.to_le_bytes()].concat()
}

/// A `DELETE_SEGMENTS` body: the offset `below` was read in the copy's `incarnation`.
pub fn delete_segments_body(partition: u64, below: u64, incarnation: u64) -> Vec<u8> {
    [partition.to_le_bytes(), below.to_le_bytes(), incarnation.to_le_bytes()].concat()
}

pub fn delete_offset_body(partition: u64, consumer: ConsumerKey) -> Vec<u8> {
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
        let mut state = PartitionGroupState::default();
        let send = |state: &mut PartitionGroupState, partition, count| {
            state.apply_op(operation::SEND_MESSAGES, &send_body(partition, count, b"batch"))
        };
        assert_eq!(
            send(&mut state, 0, 3),
            Ok(Some(Appended { partition: 0, base_offset: 0, count: 3, dropped: None }))
        );
        assert_eq!(
            send(&mut state, 1, 2),
            Ok(Some(Appended { partition: 1, base_offset: 0, count: 2, dropped: None }))
        );
        assert_eq!(
            send(&mut state, 0, 1),
            Ok(Some(Appended { partition: 0, base_offset: 3, count: 1, dropped: None }))
        );
        assert_eq!(send(&mut state, 0, 0), Err(ErrorCode::InvalidMessagesCount));
        assert_eq!(state.apply_op(operation::SEND_MESSAGES, &[0; 11]), Err(ErrorCode::InvalidFormat));
        assert_eq!(state.next_offset(0), Some(4), "failed ops change nothing");
        assert_eq!(state.next_offset(7), None, "a partition no send named");
    }

    #[test]
    fn consumer_offsets_are_stored_within_the_partition_and_deleted() {
        let mut state = PartitionGroupState::default();
        let reader = (1, 7);
        let store = operation::STORE_CONSUMER_OFFSET;
        assert_eq!(state.apply_op(store, &store_offset_body(0, reader, 4)), Ok(None));
        assert_eq!(state.apply_op(store, &store_offset_body(0, reader, 2)), Ok(None));
        assert_eq!(state.consumer_offset(0, reader), Some(2), "the last store wins");
        assert_eq!(state.consumer_offset(1, reader), None, "another partition's offsets are its own");
        assert_eq!(state.apply_op(store, &delete_offset_body(0, reader)), Err(ErrorCode::InvalidFormat));
        let delete = operation::DELETE_CONSUMER_OFFSET;
        assert_eq!(state.apply_op(delete, &delete_offset_body(0, reader)), Ok(None));
        assert_eq!(state.apply_op(delete, &delete_offset_body(0, reader)), Err(ErrorCode::ConsumerOffsetNotFound));
    }

    #[test]
    fn a_snapshot_restores_the_same_state_and_refuses_damage() {
        let mut state = PartitionGroupState::default();
        state.apply_op(operation::SEND_MESSAGES, &send_body(2, 9, b"x")).unwrap();
        state.apply_op(operation::STORE_CONSUMER_OFFSET, &store_offset_body(2, (2, 1), 8)).unwrap();
        let snapshot = state.snapshot();
        let mut copy = PartitionGroupState::default();
        copy.restore(&snapshot).unwrap();
        assert_eq!(copy, state);
        assert_eq!(copy.digest(), state.digest());
        copy.apply_op(operation::STORE_CONSUMER_OFFSET, &store_offset_body(3, (1, 4), 0)).unwrap();
        assert_eq!(copy.next_offsets().collect::<Vec<_>>(), [(2, 9)]);
        assert_eq!(copy.consumer_offsets(2).collect::<Vec<_>>(), [((2, 1), 8)]);
        assert_eq!(copy.consumer_offsets(3).collect::<Vec<_>>(), [((1, 4), 0)]);
        assert_eq!(copy.consumer_offsets(4).count(), 0);
        assert_eq!(copy.partitions_with_offsets().into_iter().collect::<Vec<_>>(), [2, 3]);
        for cut in 0..snapshot.len() {
            assert_eq!(PartitionGroupState::default().restore(&snapshot[..cut]), Err(InvalidSnapshot), "cut at {cut}");
        }
    }

    #[test]
    fn a_reset_empties_a_partition_once_per_incarnation() {
        let mut state = PartitionGroupState::default();
        let reset = operation::RESET_PARTITION;
        state.apply_op(operation::SEND_MESSAGES, &send_body(2, 5, b"x")).unwrap();
        state.apply_op(operation::SEND_MESSAGES, &send_body(3, 4, b"x")).unwrap();
        state.apply_op(operation::STORE_CONSUMER_OFFSET, &store_offset_body(2, (1, 1), 3)).unwrap();
        assert_eq!(state.apply_op(reset, &reset_body(2, 100)), Ok(None));
        assert_eq!((state.next_offset(2), state.consumer_offset(2, (1, 1)), state.incarnation(2)), (None, None, 100));
        assert_eq!(state.next_offset(3), Some(4), "another partition keeps its offsets");
        let again = state.apply_op(operation::SEND_MESSAGES, &send_body(2, 2, b"x")).unwrap();
        assert_eq!(again.map(|a| a.base_offset), Some(0), "the new incarnation starts at 0");
        for stale in [100, 99] {
            assert_eq!(state.apply_op(reset, &reset_body(2, stale)), Ok(None));
            assert_eq!(state.next_offset(2), Some(2), "a reset to incarnation {stale} changes nothing");
        }
        assert_eq!(state.apply_op(reset, &[0; 15]), Err(ErrorCode::InvalidFormat));
        let snapshot = state.snapshot();
        let mut copy = PartitionGroupState::default();
        copy.restore(&snapshot).unwrap();
        assert_eq!(copy, state);
        // Cut inside the incarnations, the snapshot is refused.
        for cut in snapshot.len() - 19..snapshot.len() {
            assert_eq!(PartitionGroupState::default().restore(&snapshot[..cut]), Err(InvalidSnapshot), "cut at {cut}");
        }
    }

    #[test]
    fn a_segment_deletion_records_the_log_start_in_its_incarnation_only() {
        let mut state = PartitionGroupState::default();
        let delete = operation::DELETE_SEGMENTS;
        state.apply_op(operation::SEND_MESSAGES, &send_body(2, 5, b"x")).unwrap();
        assert_eq!(state.apply_op(delete, &delete_segments_body(2, 3, 0)), Ok(None));
        assert_eq!((state.next_offset(2), state.log_start(2)), (Some(5), 3), "offsets go on where they were");
        assert_eq!(state.apply_op(delete, &delete_segments_body(2, 1, 0)), Ok(None));
        assert_eq!(state.log_start(2), 3, "an older deletion does not take the start back");
        assert_eq!(state.apply_op(delete, &delete_segments_body(2, 90, 0)), Ok(None));
        assert_eq!(state.log_start(2), 5, "never past the partition's end");
        assert_eq!(state.apply_op(delete, &[0; 17]), Err(ErrorCode::InvalidFormat));
        // Read before a purge that committed first: the old incarnation's offsets.
        state.apply_op(operation::RESET_PARTITION, &reset_body(2, 100)).unwrap();
        assert_eq!(state.log_start(2), 0, "a reset starts the log again");
        state.apply_op(operation::SEND_MESSAGES, &send_body(2, 4, b"x")).unwrap();
        assert_eq!(state.apply_op(delete, &delete_segments_body(2, 3, 0)), Err(ErrorCode::TransientNotAccepted));
        assert_eq!(state.log_start(2), 0);
        assert_eq!(state.apply_op(delete, &delete_segments_body(2, 3, 100)), Ok(None));
        assert_eq!(state.apply_op(delete, &reset_body(2, 4)), Ok(None), "a body from an older node");
        assert_eq!(state.log_start(2), 4);
        // The log starts survive a snapshot, with or without incarnations beside them.
        for state in [state, {
            let mut fresh = PartitionGroupState::default();
            fresh.apply_op(operation::SEND_MESSAGES, &send_body(7, 5, b"x")).unwrap();
            fresh.apply_op(delete, &delete_segments_body(7, 2, 0)).unwrap();
            fresh
        }] {
            let mut copy = PartitionGroupState::default();
            copy.restore(&state.snapshot()).unwrap();
            assert_eq!(copy, state);
        }
    }

    #[test]
    fn the_first_adoption_of_an_unrecorded_partition_becomes_its_record() {
        let mut state = PartitionGroupState::default();
        let adoption = Adoption {
            partition: 4,
            incarnation: 70,
            next_offset: 12,
            log_start: 2,
            last_timestamp: 9,
            replica: 0,
            replicas: 3,
            offsets: vec![((1, 3), 5)],
        };
        assert_eq!(state.apply_op(ADOPT_PARTITION, &adoption.encode()), Ok(None));
        let took = (state.next_offset(4), state.log_start(4), state.incarnation(4), state.consumer_offset(4, (1, 3)));
        assert_eq!(took, (Some(12), 2, 70, Some(5)));
        let other = Adoption { next_offset: 40, offsets: Vec::new(), ..adoption.clone() };
        assert!(!state.adopt(&other), "a later proposal changes nothing");
        let sent = state.apply_op(operation::SEND_MESSAGES, &send_body(4, 3, b"x")).unwrap();
        assert_eq!(sent.map(|a| a.base_offset), Some(12), "sends go on after the adopted messages");
        // A partition a send named first, or a newer incarnation, is not adopted.
        state.apply_op(operation::SEND_MESSAGES, &send_body(5, 1, b"x")).unwrap();
        assert!(!state.adopt(&Adoption { partition: 5, ..adoption.clone() }));
        state.apply_op(operation::RESET_PARTITION, &reset_body(6, 80)).unwrap();
        assert!(!state.adopt(&Adoption { partition: 6, ..adoption.clone() }), "an older incarnation");
        // Empty copies are reports: the partition is recorded empty once all three reported.
        let empty = |replica| Adoption { partition: 7, next_offset: 0, log_start: 0, replica, ..adoption.clone() };
        assert!(!state.adopt(&empty(0)) && !state.adopt(&empty(2)) && !state.adopt(&empty(2)));
        assert!(!state.records(7), "two of three replicas reported");
        let mut copy = PartitionGroupState::default();
        copy.restore(&state.snapshot()).unwrap();
        assert_eq!(copy, state, "reports under way survive a snapshot");
        assert!(!state.adopt(&empty(1)));
        assert_eq!(state.next_offset(7), Some(0), "every replica reported an empty copy");
        assert_eq!(state.apply_op(ADOPT_PARTITION, &[0; 10]), Err(ErrorCode::InvalidFormat));
        let mut copy = PartitionGroupState::default();
        copy.restore(&state.snapshot()).unwrap();
        assert_eq!(copy, state);
    }

    #[test]
    fn replies_carry_the_status_and_the_base_offset() {
        let mut state = PartitionGroupState::default();
        let reply = state.apply(1, 0, operation::SEND_MESSAGES, &send_body(5, 2, b""));
        assert_eq!(parse_send_reply(&reply), Some((5, 0)));
        let reply = state.apply(2, 0, operation::SEND_MESSAGES, &send_body(5, 2, b""));
        assert_eq!(parse_send_reply(&reply), Some((5, 2)));
        let reply = state.apply(3, 0, operation::SEND_MESSAGES, &send_body(5, 0, b""));
        assert_eq!(reply, ErrorCode::InvalidMessagesCount.code().to_le_bytes());
        assert_eq!(parse_send_reply(&reply), None);
    }
}
