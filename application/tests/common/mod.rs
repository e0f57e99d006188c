//! Helpers the partition tests share: settings, batches and reading back what was stored.

#![allow(dead_code)]

pub mod shards;

use std::path::Path;

use std::sync::OnceLock;

use futures_executor::block_on;
use rill_adapter_sim::SimStorage;
use rill_application::memory_pool::{MemoryPool, PoolSlice};
use rill_application::partition::{DamagedBatch, PartitionLog, PartitionSettings, REPLY_ROOM};
use rill_domain::batch::{self, BatchHeader};

/// The simulations' seeded generator (xorshift64): small, fast and the same everywhere.
pub struct Rng(pub u64);

impl Rng {
    /// A generator from a seed; any seed, 0 included, gives a working state.
    pub fn seeded(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One small pool for every test of a test binary.
pub fn pool() -> &'static MemoryPool {
    static POOL: OnceLock<&'static MemoryPool> = OnceLock::new();
    POOL.get_or_init(|| MemoryPool::new(512 << 20, 64).expect("pool").leak())
}

/// Fsync as the topic says, flush every `messages_required_to_save` messages, verify reads.
pub fn settings(segment_size_bytes: u64, enforce_fsync: bool, messages_required_to_save: u32) -> PartitionSettings {
    PartitionSettings {
        segment_size_bytes,
        messages_required_to_save,
        size_required_to_save_bytes: 1 << 20,
        enforce_fsync,
        consumer_offset_fsync: true,
        validate_checksum: true,
        deduplication: None,
        // As the server's default: persisted topics write their logs direct.
        direct_log: enforce_fsync,
        producer_expiry_us: 3_600_000_000,
    }
}

/// `count` messages `message-<n>` from `first`, with ids `first + 1`, ...
pub fn batch_of(first: u32, count: u32) -> PoolSlice {
    let payloads: Vec<Vec<u8>> = (first..first + count).map(|i| format!("message-{i:04}").into_bytes()).collect();
    let messages: Vec<(u128, &[u8], &[u8])> =
        payloads.iter().enumerate().map(|(i, p)| (first as u128 + i as u128 + 1, p.as_slice(), &b""[..])).collect();
    batch::build(&messages, 1000).into()
}

/// The messages of poll records: (offset, payload); every record must verify.
pub fn messages(records: &[u8]) -> Vec<(u64, String)> {
    let mut messages = Vec::new();
    let mut position = 0;
    while position < records.len() {
        let header = BatchHeader::read(&records[position..]);
        let record = &records[position..position + header.batch_length as usize];
        assert!(batch::verify_stored(record), "a served record verifies");
        for frame in batch::frames(record) {
            let len = u32::from_le_bytes(record[frame.start + 36..frame.start + 40].try_into().unwrap()) as usize;
            let payload = String::from_utf8(record[frame.start + 48..frame.start + 48 + len].to_vec()).unwrap();
            messages.push((header.base_offset + frame.offset_delta as u64, payload));
        }
        position += header.batch_length as usize;
    }
    messages
}

/// Reads up to `count` messages from `start`: what came back, and the damaged batch the
/// read stopped at.
pub fn read(log: &PartitionLog<SimStorage>, start: u64, count: u32) -> (Vec<(u64, String)>, Option<DamagedBatch>) {
    let polled = block_on(log.poll(start, count, pool())).unwrap();
    let read = messages(&polled.frame[REPLY_ROOM..]);
    assert_eq!(read.len() as u32, polled.messages);
    (read, polled.damaged)
}

/// Opens `/p`; `clean` says the last stop was graceful.
pub fn open(storage: &SimStorage, settings: PartitionSettings, clean: bool) -> PartitionLog<SimStorage> {
    block_on(PartitionLog::open(storage, Path::new("/p"), 0, settings, clean)).unwrap()
}
