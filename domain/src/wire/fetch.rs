//! Protocol 0.12's FETCH_MESSAGES (109): one read of up to 1,000 partitions of a topic,
//! which may wait for `min_count` messages over all of them, and its reply: a table of one
//! 56-byte section header per partition read, then each section's batches in table order.

use crate::constants::MAX_PARTITIONS_PER_REQUEST;
use crate::error::ErrorCode;
use crate::polling::PollingStrategy;
use crate::reader::Reader;
use crate::wire::command::{Consumer, TopicRef};
use crate::wire::decode::{DeferredLimits, consumer, topic_ref};

/// One partition of a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchTarget {
    pub partition_id: u32,
    /// An offset, or the one after the consumer's stored offset.
    pub strategy: PollingStrategy,
    /// Caps this partition's batches, at most the request's `max_bytes`.
    pub max_bytes: u32,
    /// The history the client read the partition in (0: any).
    pub incarnation: u64,
    pub owner_generation: u64,
}

/// `[consumer][stream][topic][wait_us u64][request_timeout_us u64][min_count u32][count u32]
/// [max_bytes u32][auto_commit u8][targets_count u32]` then per target `[partition_id u32]
/// [strategy 9][max_bytes u32][incarnation u64][owner_generation u64]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub consumer: Consumer,
    pub topic: TopicRef,
    pub wait_us: u64,
    pub request_timeout_us: u64,
    /// The wait ends once the targets hold this many messages (1 to `count`).
    pub min_count: u32,
    /// Caps the messages of the whole reply.
    pub count: u32,
    /// Caps the batches of all sections together.
    pub max_bytes: u32,
    pub auto_commit: bool,
    pub targets: Vec<FetchTarget>,
}

const TARGET_SIZE: usize = 4 + 9 + 4 + 8 + 8;
/// A section header: `[partition_id u32][status u32][current_offset u64][messages_count u32]
/// [incarnation u64][owner_generation u64][metadata_op u64][next_offset u64][records_len u32]`.
pub const SECTION_HEADER_SIZE: usize = 56;

/// One section of a fetch reply; `status` 0 is a partition read, any other value the error
/// code that refused it (with no batches).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SectionHeader {
    pub partition_id: u32,
    pub status: u32,
    pub current_offset: u64,
    pub messages_count: u32,
    pub context: crate::answer::PartitionContext,
    /// Where the next fetch of the partition starts, also after an empty section.
    pub next_offset: u64,
    pub records_len: u32,
}

impl SectionHeader {
    pub fn encode(&self, out: &mut [u8]) {
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(&self.partition_id.to_le_bytes());
        put(&self.status.to_le_bytes());
        put(&self.current_offset.to_le_bytes());
        put(&self.messages_count.to_le_bytes());
        put(&self.context.incarnation.to_le_bytes());
        put(&self.context.owner_generation.to_le_bytes());
        put(&self.context.metadata_op.to_le_bytes());
        put(&self.next_offset.to_le_bytes());
        put(&self.records_len.to_le_bytes());
    }
}

/// Decodes and checks a fetch as the 0.12 client checks it before sending: timers within
/// the deferred limits (a zero wait needs the reply margin too), `min_count` in 1..=`count`,
/// byte budgets of at least the smallest reply, 1 to 1,000 targets of distinct partitions,
/// each starting at an offset or at the next one.
pub fn decode_fetch(reader: &mut Reader<'_>) -> Result<FetchRequest, ErrorCode> {
    let consumer = consumer(reader)?;
    let topic = topic_ref(reader)?;
    let (wait_us, request_timeout_us) = (reader.u64()?, reader.u64()?);
    let (min_count, count, max_bytes) = (reader.u32()?, reader.u32()?, reader.u32()?);
    let auto_commit = reader.u8()? != 0;
    let targets_count = reader.u32()?;
    if targets_count == 0
        || targets_count > MAX_PARTITIONS_PER_REQUEST
        || reader.remaining() != targets_count as usize * TARGET_SIZE
    {
        return Err(ErrorCode::InvalidFormat);
    }
    let limits = DeferredLimits::CLIENT;
    let valid = limits.timers_valid(wait_us, request_timeout_us, true)
        && (1..=count).contains(&min_count)
        && max_bytes >= limits.min_max_bytes;
    if !valid {
        return Err(ErrorCode::InvalidFormat);
    }
    let mut targets = Vec::with_capacity(targets_count as usize);
    for _ in 0..targets_count {
        let target = FetchTarget {
            partition_id: reader.u32()?,
            strategy: PollingStrategy::decode(reader)?,
            max_bytes: reader.u32()?,
            incarnation: reader.u64()?,
            owner_generation: reader.u64()?,
        };
        let start_ok = matches!(target.strategy, PollingStrategy::Offset(_) | PollingStrategy::Next);
        let bytes_ok = (limits.min_max_bytes..=max_bytes).contains(&target.max_bytes);
        if !start_ok || !bytes_ok || targets.iter().any(|t: &FetchTarget| t.partition_id == target.partition_id) {
            return Err(ErrorCode::InvalidFormat);
        }
        targets.push(target);
    }
    Ok(FetchRequest { consumer, topic, wait_us, request_timeout_us, min_count, count, max_bytes, auto_commit, targets })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fetch body as the 0.12 client lays it out: consumer 1 (numeric), stream 1, topic 2.
    fn body(min_count: u32, count: u32, targets: &[(u32, u8, u32)]) -> Vec<u8> {
        let mut out = vec![1, 1, 4];
        out.extend_from_slice(&1u32.to_le_bytes());
        for id in [1u32, 2] {
            out.extend_from_slice(&[1, 4]);
            out.extend_from_slice(&id.to_le_bytes());
        }
        out.extend_from_slice(&1_000_000u64.to_le_bytes());
        out.extend_from_slice(&2_000_000u64.to_le_bytes());
        for value in [min_count, count, 1 << 20] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        out.push(1);
        out.extend_from_slice(&(targets.len() as u32).to_le_bytes());
        for &(partition, kind, max_bytes) in targets {
            out.extend_from_slice(&partition.to_le_bytes());
            out.push(kind);
            out.extend_from_slice(&7u64.to_le_bytes());
            out.extend_from_slice(&max_bytes.to_le_bytes());
            out.extend_from_slice(&3u64.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<FetchRequest, ErrorCode> {
        decode_fetch(&mut Reader::new(bytes))
    }

    #[test]
    fn a_fetch_decodes_with_its_targets_and_terms() {
        let request = decode(&body(2, 10, &[(0, 1, 4096), (2, 5, 4096)])).unwrap();
        assert_eq!(
            (request.wait_us, request.request_timeout_us, request.min_count, request.count),
            (1_000_000, 2_000_000, 2, 10)
        );
        assert!(request.auto_commit);
        assert_eq!(request.targets.len(), 2);
        assert_eq!(request.targets[0].strategy, PollingStrategy::Offset(7));
        assert_eq!((request.targets[1].partition_id, request.targets[1].strategy), (2, PollingStrategy::Next));
        assert_eq!(request.targets[1].incarnation, 3);
    }

    #[test]
    fn fetches_the_client_would_not_send_are_refused() {
        let refused = [
            body(1, 10, &[]),
            body(0, 10, &[(0, 1, 4096)]),
            body(11, 10, &[(0, 1, 4096)]),
            body(1, 10, &[(0, 3, 4096)]),
            body(1, 10, &[(0, 1, 100)]),
            body(1, 10, &[(0, 1, 2 << 20)]),
            body(1, 10, &[(0, 1, 4096), (0, 5, 4096)]),
        ];
        for bytes in refused {
            assert_eq!(decode(&bytes), Err(ErrorCode::InvalidFormat));
        }
        let mut truncated = body(1, 10, &[(0, 1, 4096)]);
        truncated.pop();
        assert!(decode(&truncated).is_err());
    }

    #[test]
    fn a_section_header_is_56_bytes_in_the_client_order() {
        let header = SectionHeader {
            partition_id: 1,
            status: 2,
            current_offset: 3,
            messages_count: 4,
            next_offset: 8,
            records_len: 9,
            ..Default::default()
        };
        let mut out = [0u8; SECTION_HEADER_SIZE];
        header.encode(&mut out);
        assert_eq!(u32::from_le_bytes(out[..4].try_into().unwrap()), 1);
        assert_eq!(u64::from_le_bytes(out[8..16].try_into().unwrap()), 3);
        assert_eq!(u64::from_le_bytes(out[44..52].try_into().unwrap()), 8);
        assert_eq!(u32::from_le_bytes(out[52..56].try_into().unwrap()), 9);
    }
}
