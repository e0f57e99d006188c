//! The packed partition namespace and the rule that maps it to its owning shard.

use crate::constants::{MAX_PARTITIONS_PER_TOPIC, MAX_STREAMS, MAX_TOPICS_PER_STREAM};

const PARTITION_BITS: u32 = 20;
const TOPIC_BITS: u32 = 12;
const STREAM_BITS: u32 = 20;
const PARTITION_MASK: u64 = (1 << PARTITION_BITS) - 1;
const TOPIC_MASK: u64 = (1 << TOPIC_BITS) - 1;
const STREAM_MASK: u64 = (1 << STREAM_BITS) - 1;

const _: () = assert!(PARTITION_BITS + TOPIC_BITS + STREAM_BITS <= 64);
const _: () = assert!(MAX_STREAMS as u64 == 1 << STREAM_BITS);
const _: () = assert!(MAX_TOPICS_PER_STREAM as u64 == 1 << TOPIC_BITS);
const _: () = assert!(MAX_PARTITIONS_PER_TOPIC as u64 <= 1 << PARTITION_BITS);

/// `stream (20 bits) | topic (12 bits) | partition (20 bits)`, packed in the low 52 bits of a u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(u64);

impl Namespace {
    /// Packs the three ids; `None` when any id does not fit its field.
    pub fn new(stream_id: u32, topic_id: u32, partition_id: u32) -> Option<Self> {
        let (stream, topic, partition) = (stream_id as u64, topic_id as u64, partition_id as u64);
        if stream > STREAM_MASK || topic > TOPIC_MASK || partition > PARTITION_MASK {
            return None;
        }
        Some(Self((stream << (TOPIC_BITS + PARTITION_BITS)) | (topic << PARTITION_BITS) | partition))
    }

    pub fn from_packed(packed: u64) -> Option<Self> {
        (packed >> (STREAM_BITS + TOPIC_BITS + PARTITION_BITS) == 0).then_some(Self(packed))
    }

    pub fn packed(self) -> u64 {
        self.0
    }

    pub fn stream_id(self) -> u32 {
        ((self.0 >> (TOPIC_BITS + PARTITION_BITS)) & STREAM_MASK) as u32
    }

    pub fn topic_id(self) -> u32 {
        ((self.0 >> PARTITION_BITS) & TOPIC_MASK) as u32
    }

    pub fn partition_id(self) -> u32 {
        (self.0 & PARTITION_MASK) as u32
    }

    /// The owning shard. A topic's partitions take consecutive shards, round-robin, from a
    /// start that is Murmur3 (x86, 32-bit, seed 0) of the topic's packed value (partition
    /// bits zero) as little-endian bytes, its upper 16 bits modulo the shard count. Hashing
    /// each partition on its own left a topic's partitions where the hash fell: the four of
    /// stream 0 topic 0 all on one of two shards, so one core did a balanced producer's
    /// work while the other idled. As Kafka places replicas (a random start, then
    /// round-robin), a topic of `n` partitions now puts `n / shards` or one more on each
    /// shard, and topics still start on different shards. Deterministic across restarts and
    /// machines, so a partition never moves while the shard count stays the same.
    pub fn shard(self, shard_count: u16) -> u16 {
        assert!(shard_count > 0, "shard count must be positive");
        let topic = self.0 & !PARTITION_MASK;
        let hash = murmur3::murmur3_32(&mut &topic.to_le_bytes()[..], 0).expect("hashing a slice cannot fail");
        let start = u64::from(hash >> 16);
        ((start + self.partition_id() as u64) % u64::from(shard_count)) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_and_unpacks_at_the_limits() {
        let ns = Namespace::new(MAX_STREAMS - 1, MAX_TOPICS_PER_STREAM - 1, 999_999).unwrap();
        assert_eq!(ns.stream_id(), MAX_STREAMS - 1);
        assert_eq!(ns.topic_id(), MAX_TOPICS_PER_STREAM - 1);
        assert_eq!(ns.partition_id(), 999_999);
        assert_eq!(Namespace::from_packed(ns.packed()), Some(ns));
    }

    #[test]
    fn rejects_ids_that_overflow_their_field() {
        assert!(Namespace::new(MAX_STREAMS, 0, 0).is_none());
        assert!(Namespace::new(0, MAX_TOPICS_PER_STREAM, 0).is_none());
        assert!(Namespace::new(0, 0, 1 << 20).is_none());
        assert!(Namespace::from_packed(1 << 52).is_none());
    }

    #[test]
    fn layout_is_stream_topic_partition() {
        let ns = Namespace::new(1, 2, 3).unwrap();
        assert_eq!(ns.packed(), (1 << 32) | (2 << 20) | 3);
    }

    /// Owners for 1, 2, 3 and 8 shards, computed independently (Python: Murmur3 x86 32-bit
    /// over the packed topic's 8 little-endian bytes, seed 0, upper 16 bits plus the
    /// partition id, modulo the shard count).
    /// A change here moves partitions between shards on upgrade: never edit these lightly.
    #[test]
    fn routing_vectors() {
        let vectors: [((u32, u32, u32), [u16; 4]); 8] = [
            ((0, 0, 0), [0, 1, 1, 5]),
            ((0, 0, 1), [0, 0, 2, 6]),
            ((0, 0, 2), [0, 1, 0, 7]),
            ((1, 0, 0), [0, 0, 1, 0]),
            ((1, 2, 3), [0, 1, 0, 5]),
            ((7, 11, 13), [0, 0, 0, 6]),
            ((1000, 4095, 999_999), [0, 0, 1, 4]),
            ((1_048_575, 0, 0), [0, 1, 1, 3]),
        ];
        for ((stream, topic, partition), owners) in vectors {
            let ns = Namespace::new(stream, topic, partition).unwrap();
            let got: Vec<u16> = [1, 2, 3, 8].iter().map(|&n| ns.shard(n)).collect();
            assert_eq!(got, owners, "namespace {stream}/{topic}/{partition}");
        }
    }

    #[test]
    fn single_shard_owns_everything() {
        for p in 0..100 {
            assert_eq!(Namespace::new(0, 0, p).unwrap().shard(1), 0);
        }
    }

    #[test]
    fn a_topics_partitions_spread_evenly_over_the_shards() {
        for (stream, topic) in [(0, 0), (1, 0), (5, 17), (1000, 4095)] {
            for shards in [2u16, 3, 8] {
                for partitions in [1u32, 4, 10] {
                    let mut counts = vec![0u32; shards as usize];
                    for p in 0..partitions {
                        counts[Namespace::new(stream, topic, p).unwrap().shard(shards) as usize] += 1;
                    }
                    let (least, most) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                    assert!(most - least <= 1, "{stream}/{topic}, {partitions} partitions on {shards}: {counts:?}");
                }
            }
        }
    }

    #[test]
    fn routing_is_stable_and_spreads() {
        let mut counts = [0u32; 3];
        for p in 0..3000 {
            let ns = Namespace::new(p % 7, p % 5, p).unwrap();
            assert_eq!(ns.shard(3), ns.shard(3));
            counts[ns.shard(3) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 700), "uneven spread: {counts:?}");
    }
}
