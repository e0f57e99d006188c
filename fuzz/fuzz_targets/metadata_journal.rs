//! The metadata replica's files on start: superblock, checkpoint and journal, opened from
//! simulated storage. Damage is refused or cut, never a panic; what opens verifies.

#![no_main]

use std::path::Path;

use futures_executor::block_on;
use libfuzzer_sys::fuzz_target;
use rill_adapter_sim::SimStorage;
use rill_application::replication::VsrJournal;
use rill_fuzz::{split_files, write_file};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, data)) = data.split_first() else { return };
    let files = split_files(data, 3);
    let storage = SimStorage::new();
    let dir = Path::new("/meta");
    for (name, bytes) in ["superblock", "checkpoint", "journal.wal"].iter().zip(&files) {
        if !bytes.is_empty() {
            write_file(&storage, &dir.join(name), bytes);
        }
    }
    if let Ok((_, durable)) = block_on(VsrJournal::open(&storage, dir, flags & 1 == 1)) {
        for entry in &durable.entries {
            assert!(entry.verify(), "an entry the scan kept does not verify");
        }
    }
});
