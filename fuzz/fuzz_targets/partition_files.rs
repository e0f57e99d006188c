//! A partition's segment files on start (two segments' `.log` and `.index`, after a clean
//! or a crashed stop): recovery repairs or refuses them, never panics; every offset it
//! reports can be polled, and an append after it lands at the next offset.

#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use futures_executor::block_on;
use libfuzzer_sys::fuzz_target;
use rill_adapter_sim::SimStorage;
use rill_application::memory_pool::MemoryPool;
use rill_application::partition::{PartitionLog, PartitionSettings};
use rill_domain::batch;
use rill_fuzz::{split_files, write_file};

fn pool() -> &'static MemoryPool {
    static POOL: OnceLock<&'static MemoryPool> = OnceLock::new();
    POOL.get_or_init(|| MemoryPool::new(512 << 20, 64).expect("pool").leak())
}

/// The second segment starts at this offset (a seed's first segment holds fewer).
const SECOND_START: u64 = 1000;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, data)) = data.split_first() else { return };
    let files = split_files(data, 4);
    let storage = SimStorage::new();
    let dir = Path::new("/p");
    let names = [(0, "log"), (0, "index"), (SECOND_START, "log"), (SECOND_START, "index")];
    for ((start, extension), bytes) in names.iter().zip(&files) {
        if !bytes.is_empty() || *extension == "log" && *start == 0 {
            write_file(&storage, &dir.join(format!("{start:020}.{extension}")), bytes);
        }
    }
    let settings = PartitionSettings {
        segment_size_bytes: 1 << 20,
        messages_required_to_save: 1,
        size_required_to_save_bytes: 1 << 20,
        enforce_fsync: flags & 2 == 2,
        consumer_offset_fsync: true,
        validate_checksum: true,
        deduplication: None,
        direct_log: flags & 2 == 2,
        producer_expiry_us: 3_600_000_000,
    };
    let Ok(mut log) = block_on(PartitionLog::open(&storage, dir, 0, settings, flags & 1 == 1)) else { return };
    let (first, next) = (log.first_offset(), log.next_offset());
    assert!(first <= next, "first offset {first} past next {next}");
    let mut offset = first;
    for _ in 0..64 {
        if offset >= next {
            break;
        }
        let Ok(polled) = block_on(log.poll(offset, 100, pool())) else { return };
        if polled.messages == 0 {
            // A damaged batch stops the read (the poll names it instead of serving it), or
            // the rest is a gap with nothing readable after it.
            break;
        }
        offset += u64::from(polled.messages);
    }
    let fresh = batch::build(&[(7, b"after recovery", b"")], 1);
    if block_on(log.append(&storage, fresh.into(), 2)).is_ok() {
        assert_eq!(log.next_offset(), next + 1, "the append after recovery");
        let polled = block_on(log.poll(next, 1, pool())).expect("poll the appended message");
        assert_eq!(polled.messages, 1, "the appended message is served");
    }
});
