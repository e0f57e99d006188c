//! What a partition's log does with damaged and missing files: verified reads that never
//! serve a damaged batch, recovery that keeps rot indexed (cutting only a torn tail after a
//! crash), index files rebuilt from the log, retention that detaches segments crash-safely,
//! the scrubber's reads, and message-id deduplication across reopens.

mod common;

use std::path::{Path, PathBuf};

use common::open;
use futures_executor::block_on;
use rill_adapter_sim::SimStorage;
use rill_application::memory_pool::PoolSlice;
use rill_application::partition::*;
use rill_application::ports::{Storage, StorageFile};
use rill_domain::batch;
use rill_domain::retention::{RetentionPolicy, segments_to_delete};

fn settings(segment_size_bytes: u64) -> PartitionSettings {
    common::settings(segment_size_bytes, true, 1)
}

/// A batch of `ids` with payloads naming them.
fn batch_with_ids(ids: &[u128]) -> PoolSlice {
    let payloads: Vec<Vec<u8>> = ids.iter().map(|id| format!("payload-{id}").into_bytes()).collect();
    let messages: Vec<(u128, &[u8], &[u8])> =
        ids.iter().zip(&payloads).map(|(id, p)| (*id, p.as_slice(), &b""[..])).collect();
    batch::build(&messages, 1000).into()
}

/// Payloads from `start`, at most `count`, and the damaged batch the read stopped at.
fn read(log: &PartitionLog<SimStorage>, start: u64, count: u32) -> (Vec<String>, Option<DamagedBatch>) {
    let (messages, damaged) = common::read(log, start, count);
    (messages.into_iter().map(|(_, payload)| payload).collect(), damaged)
}

/// Twelve 3-message batches, three per segment: four segments (ids 1..=36), appended at
/// times 10, 20, ..., 120, and synced whole (every index entry on disk, as after a
/// graceful stop).
fn twelve_batches(storage: &SimStorage) -> PartitionLog<SimStorage> {
    let largest = batch_with_ids(&[10, 11, 12]).len() as u64;
    let mut log = open(storage, settings(largest * 3), false);
    for i in 0..12u128 {
        block_on(log.append(storage, batch_with_ids(&ids_of(i as usize)), 10 * (i as u64 + 1))).unwrap();
    }
    assert_eq!(log.segments_count(), 4);
    block_on(log.sync_active()).unwrap();
    log
}

fn segment_path(start: u64, extension: &str) -> PathBuf {
    PathBuf::from(format!("/p/{start:020}.{extension}"))
}

/// The ids of batch `n` of `twelve_batches`.
fn ids_of(n: usize) -> [u128; 3] {
    let first = n as u128 * 3 + 1;
    [first, first + 1, first + 2]
}

/// Where batch `n` (0-based, three per segment) of `twelve_batches` starts in its log.
fn batch_position(n: usize) -> (PathBuf, usize) {
    let first_in_segment = n / 3 * 3;
    let position = (first_in_segment..n).map(|m| batch_with_ids(&ids_of(m)).len()).sum();
    (segment_path((n / 3 * 9) as u64, "log"), position)
}

#[test]
fn damaged_batches_are_never_served_and_every_intact_one_is() {
    let storage = SimStorage::new();
    drop(twelve_batches(&storage));
    // Rot in batch 1 (a payload byte), batch 5 (the last of a sealed segment: a header
    // byte) and batch 11 (the active segment's last batch).
    for (n, at) in [(1, 300), (5, 20), (11, 310)] {
        let (path, position) = batch_position(n);
        storage.flip_bit(&path, position + at);
    }
    let log = open(&storage, settings(1 << 20), true);
    assert_eq!(log.next_offset(), 36, "after a clean stop nothing is cut: offsets are never reused");
    let mut served = Vec::new();
    let mut damaged = Vec::new();
    let mut offset = 0;
    while offset < 36 {
        let (payloads, stopped_at) = read(&log, offset, 100);
        if payloads.is_empty() {
            let batch = stopped_at.expect("an empty read names the damaged batch");
            assert_eq!(batch.first_offset, offset);
            damaged.push((batch.first_offset, batch.last_offset));
            offset = batch.last_offset + 1;
        } else {
            offset += payloads.len() as u64;
            served.extend(payloads);
        }
    }
    assert_eq!(damaged, vec![(3, 5), (15, 17), (33, 35)]);
    let expected: Vec<String> = (1..=36u128)
        .filter(|id| ![4, 5, 6, 16, 17, 18, 34, 35, 36].contains(id))
        .map(|id| format!("payload-{id}"))
        .collect();
    assert_eq!(served, expected);
    let (sliced, stopped) = read(&log, 2, 100);
    assert_eq!((sliced, stopped.map(|d| d.first_offset)), (vec!["payload-3".to_owned()], Some(3)));
}

#[test]
fn after_a_crash_only_the_active_tail_is_cut() {
    let storage = SimStorage::new();
    drop(twelve_batches(&storage));
    for n in [5, 11] {
        let (path, position) = batch_position(n);
        storage.flip_bit(&path, position + 300);
    }
    let log = open(&storage, settings(1 << 20), false);
    assert_eq!(log.next_offset(), 33, "the active segment's failing last batch may be a torn write");
    let (_, damaged) = read(&log, 15, 3);
    assert_eq!(damaged.map(|d| (d.first_offset, d.last_offset)), Some((15, 17)), "sealed rot stays, reported");
}

/// Something done to a file.
type Harm = fn(&SimStorage, &Path);

#[test]
fn a_missing_truncated_or_garbage_index_is_rebuilt_from_the_log() {
    let damage: [(&str, Harm); 3] = [
        ("missing", |storage, path| block_on(storage.remove_file(path)).unwrap()),
        ("truncated", |storage, path| {
            let file = block_on(storage.open(path)).unwrap();
            block_on(file.truncate(24 + 11)).unwrap();
        }),
        ("garbage", |storage, path| {
            let file = block_on(storage.open(path)).unwrap();
            let (result, _) = block_on(file.write_at(vec![vec![0xa5; 72].into()], 0));
            result.unwrap();
        }),
    ];
    for (what, harm) in damage {
        let storage = SimStorage::new();
        let original = twelve_batches(&storage);
        let times: Vec<Option<u64>> =
            [0, 15, 20, 61, 120, 121].iter().map(|&t| original.offset_at_timestamp(t)).collect();
        drop(original);
        for start in [0u64, 9, 18, 27] {
            harm(&storage, &segment_path(start, "index"));
        }
        let log = open(&storage, settings(1 << 20), true);
        assert_eq!(log.next_offset(), 36, "{what}");
        assert_eq!(read(&log, 0, 100).0.len(), 36, "{what}");
        assert_eq!(read(&log, 13, 2).0, vec!["payload-14", "payload-15"], "{what}");
        let rebuilt: Vec<Option<u64>> = [0, 15, 20, 61, 120, 121].iter().map(|&t| log.offset_at_timestamp(t)).collect();
        assert_eq!(rebuilt, times, "{what}: timestamp lookups");
        assert_eq!(rebuilt, vec![Some(0), Some(3), Some(3), Some(18), Some(33), None]);
        assert_eq!(storage.file_len(&segment_path(9, "index")), Some(3 * 24), "{what}: the index is rewritten");
    }
}

#[test]
fn a_missing_index_and_rot_keep_every_offset_and_report_the_damage() {
    let storage = SimStorage::new();
    drop(twelve_batches(&storage));
    block_on(storage.remove_file(&segment_path(9, "index"))).unwrap();
    block_on(storage.remove_file(&segment_path(18, "index"))).unwrap();
    // Segment 9: the middle batch's length field; segment 18: its last batch's base offset.
    let (path, position) = batch_position(4);
    storage.flip_bit(&path, position + 33);
    let (path, position) = batch_position(8);
    storage.flip_bit(&path, position + 9);
    let log = open(&storage, settings(1 << 20), true);
    assert_eq!(log.next_offset(), 36);
    assert_eq!(read(&log, 9, 3).0.len(), 3);
    assert_eq!(read(&log, 12, 3).1.map(|d| (d.first_offset, d.last_offset)), Some((12, 14)));
    assert_eq!(read(&log, 15, 3).0, vec!["payload-16", "payload-17", "payload-18"]);
    assert_eq!(read(&log, 24, 3).1.map(|d| (d.first_offset, d.last_offset)), Some((24, 26)));
    assert_eq!(read(&log, 27, 100).0.len(), 9);
}

#[test]
fn a_sealed_segment_cut_below_one_header_reports_its_offsets_as_damaged() {
    // Found by the partition_files fuzz target: the remnant was neither indexed nor cut, so
    // a poll of its offsets came back empty with no error, and a consumer stalled there.
    let storage = SimStorage::new();
    drop(twelve_batches(&storage));
    let file = block_on(storage.open(&segment_path(9, "log"))).unwrap();
    block_on(file.truncate(100)).unwrap();
    block_on(storage.remove_file(&segment_path(9, "index"))).unwrap();
    let log = open(&storage, settings(1 << 20), true);
    assert_eq!(log.next_offset(), 36);
    assert_eq!(read(&log, 9, 3).1.map(|d| (d.first_offset, d.last_offset)), Some((9, 17)));
    assert_eq!(read(&log, 18, 3).0, vec!["payload-19", "payload-20", "payload-21"]);
    assert_eq!(read(&log, 0, 100).0.len(), 9, "the batches before the remnant are served");
}

#[test]
fn a_rotten_count_in_a_rotten_batch_cannot_claim_the_next_segments_offsets() {
    // Found by the partition_files fuzz target: the entry was kept as damage with its
    // rotten count, so polls of every later offset, and of messages appended after the
    // restart, answered that damage instead of the messages.
    let storage = SimStorage::new();
    drop(twelve_batches(&storage));
    rot_index(&storage, 9, 48 + 16 + 2);
    let (path, position) = batch_position(5);
    storage.flip_bit(&path, position + 300);
    let mut log = open(&storage, settings(1 << 20), true);
    assert_eq!(read(&log, 15, 3).1.map(|d| (d.first_offset, d.last_offset)), Some((15, 17)));
    assert_eq!(read(&log, 18, 3).0, vec!["payload-19", "payload-20", "payload-21"]);
    block_on(log.append(&storage, batch_with_ids(&[99]), 500)).unwrap();
    assert_eq!(read(&log, 36, 1).0, vec!["payload-99"], "a message appended after the restart is served");
}

#[test]
fn a_message_appended_past_32_bit_relative_offsets_is_still_served() {
    // Found by the partition_files fuzz target: a rotten count in a rotten batch of the
    // active segment moved the next offset over 2^32 past the segment's start, and the
    // next message was acknowledged into an index entry that could not hold its offset.
    let storage = SimStorage::new();
    drop(twelve_batches(&storage));
    let index = block_on(storage.open(&segment_path(27, "index"))).unwrap();
    let (result, _) = block_on(index.write_at(vec![PoolSlice::plain(vec![0xfe, 0xff, 0xff, 0xff])], 24 + 16));
    result.unwrap();
    let (path, position) = batch_position(10);
    storage.flip_bit(&path, position + 300);
    let mut log = open(&storage, settings(1 << 20), true);
    let next = log.next_offset();
    assert!(next > 27 + u64::from(u32::MAX), "the rotten count is kept as damage: next offset {next}");
    let appended = block_on(log.append(&storage, batch_with_ids(&[77]), 500)).unwrap();
    assert_eq!(appended.base_offset, next);
    assert_eq!(read(&log, next, 1).0, vec!["payload-77"], "the acknowledged message is served");
}

#[test]
fn retention_detaches_whole_sealed_segments_and_a_restart_finishes_the_removal() {
    let storage = SimStorage::new();
    let mut log = twelve_batches(&storage);
    let (sealed, active_bytes) = log.sealed_for_retention();
    assert_eq!(sealed.len(), 3);
    let policy = RetentionPolicy { expiry_us: Some(50), max_partition_bytes: None };
    // At 85 the batches stamped up to 30 (segment 0) have expired; segment 9's newest is 60.
    assert_eq!(segments_to_delete(&sealed, active_bytes, 85, policy), 1);
    assert_eq!(segments_to_delete(&sealed, active_bytes, 1_000, policy), 3, "never the active one");
    let detached = block_on(log.detach_oldest(&storage, 2)).unwrap();
    assert_eq!((detached.segments, detached.messages), (2, 18));
    assert_eq!(log.first_offset(), 18);
    assert_eq!(read(&log, 0, 2).0, vec!["payload-19", "payload-20"], "a poll below the first offset starts at it");
    assert!(storage.file_len(&segment_path(0, "log")).is_none(), "renamed before anything is removed");
    // Killed before the files were removed: the restart removes them and serves from 18.
    storage.crash(0);
    let reopened = open(&storage, settings(1 << 20), false);
    assert_eq!((reopened.first_offset(), reopened.next_offset()), (18, 36));
    assert!(storage.paths().iter().all(|p| !p.to_string_lossy().ends_with(".deleted")));
    assert_eq!(read(&reopened, 0, 100).0.len(), 18);
}

#[test]
fn the_scrubber_reads_sealed_segments_and_finds_rot() {
    let storage = SimStorage::new();
    drop(twelve_batches(&storage));
    let (path, position) = batch_position(7);
    storage.flip_bit(&path, position + 280);
    let log = open(&storage, settings(1 << 20), true);
    let (mut start, mut entry, mut found, mut batches) = (0, 0, Vec::new(), 0);
    while let Some(chunk) = block_on(log.scrub_read(start, entry, 1)).unwrap() {
        batches += chunk.entries.len();
        found.extend(chunk.damaged().into_iter().map(|d| (d.first_offset, d.last_offset)));
        (start, entry) = (chunk.segment_start, chunk.next_entry);
    }
    assert_eq!(batches, 9, "sealed segments only, one batch per chunk at this size");
    assert_eq!(found, vec![(21, 23)]);
}

#[test]
fn duplicate_ids_are_stored_once_even_across_a_reopen() {
    let storage = SimStorage::new();
    let dedup = PartitionSettings {
        deduplication: Some(DedupSettings { max_entries: 100, expiry_us: 1_000_000 }),
        ..settings(1 << 20)
    };
    let mut log = open(&storage, dedup, false);
    let first = block_on(log.append(&storage, batch_with_ids(&[1, 2, 2, 0, 0]), 10)).unwrap();
    assert_eq!((first.stored, first.duplicates), (4, 1), "a repeat inside a batch; id 0 is kept twice");
    let retry = block_on(log.append(&storage, batch_with_ids(&[1, 2]), 20)).unwrap();
    assert_eq!((retry.stored, retry.duplicates, retry.base_offset), (0, 2, 4), "a retried send stores nothing");
    let mixed = block_on(log.append(&storage, batch_with_ids(&[3, 1, 0]), 30)).unwrap();
    assert_eq!((mixed.stored, mixed.duplicates, mixed.base_offset), (2, 1, 4));
    drop(log);
    let mut reopened = open(&storage, dedup, true);
    let again = block_on(reopened.append(&storage, batch_with_ids(&[3, 2, 4]), 40)).unwrap();
    assert_eq!((again.stored, again.duplicates), (1, 2), "the window is rebuilt from the log");
    let (payloads, _) = read(&reopened, 0, 100);
    assert_eq!(
        payloads,
        vec!["payload-1", "payload-2", "payload-0", "payload-0", "payload-3", "payload-0", "payload-4"]
    );
    let expired = block_on(reopened.append(&storage, batch_with_ids(&[1]), 40 + 1_000_000)).unwrap();
    assert_eq!(expired.stored, 1, "past the expiry an id is stored again");
}

/// Flips one bit of a sealed segment's index file at byte `at` (entry `at / 24`).
fn rot_index(storage: &SimStorage, start: u64, at: usize) {
    storage.flip_bit(&segment_path(start, "index"), at);
}

#[test]
fn a_rotten_index_entry_is_caught_by_the_log_and_loses_nothing() {
    // Entry fields: relative offset 0..4, position 4..8, timestamp 8..16, count 16..20,
    // length 20..24. A count of the middle entry of segment 9 (tiles, wrong), the last
    // entry's count of segment 18 (ends past the next segment), the last entry's length
    // of the active segment.
    for (what, start, at) in [("count", 9u64, 24 + 16 + 2), ("last count", 18, 48 + 16), ("length", 27, 48 + 20 + 1)] {
        let storage = SimStorage::new();
        drop(twelve_batches(&storage));
        rot_index(&storage, start, at);
        let log = open(&storage, settings(1 << 20), true);
        assert_eq!(log.next_offset(), 36, "{what}: no offset lost or handed out again");
        let (all, damaged) = read(&log, 0, 100);
        assert_eq!((all.len(), damaged), (36, None), "{what}: every message, from the log");
        assert_eq!(storage.file_len(&segment_path(start, "log")).map(|l| l > 0), Some(true));
    }
}

#[test]
fn a_poll_stopped_by_its_count_inside_a_segment_does_not_skip() {
    let storage = SimStorage::new();
    let log = twelve_batches(&storage);
    // Starting mid-batch: the first segment yields 4 (of its 9), then the count is reached.
    let (messages, _) = read(&log, 5, 4);
    assert_eq!(messages, (6..=9u128).map(|id| format!("payload-{id}")).collect::<Vec<_>>());
    let (messages, _) = read(&log, 7, 5);
    assert_eq!(messages, (8..=12u128).map(|id| format!("payload-{id}")).collect::<Vec<_>>());
}

#[test]
fn a_rotten_future_timestamp_does_not_pin_later_stamps() {
    let storage = SimStorage::new();
    drop(twelve_batches(&storage));
    // The active segment's last index entry: timestamp byte 7 (bit 59 and up).
    rot_index(&storage, 27, 48 + 8 + 7);
    let mut log = open(&storage, settings(1 << 20), true);
    block_on(log.append(&storage, batch_with_ids(&[37]), 500)).unwrap();
    assert_eq!(log.offset_at_timestamp(400), Some(36), "stamped with the clock, not the rotten stamp");
}

#[test]
fn a_purge_that_fails_leaves_a_working_partition() {
    let storage = SimStorage::new();
    let mut log = twelve_batches(&storage);
    storage.fail_from(storage.mutating_calls() + 1, std::io::ErrorKind::Other);
    assert!(block_on(log.purge(&storage)).is_err());
    assert!(log.write_failure().is_some(), "read-only after a failed purge");
    // The files are gone (the simulated disk, unlike Linux, keeps no unlinked file open):
    // reads and the scrubber answer errors, and nothing panics.
    assert!(block_on(log.poll(30, 3, common::pool())).is_err());
    assert!(block_on(log.scrub_read(0, 0, 1 << 20)).is_err());
    assert!(block_on(log.append(&storage, batch_with_ids(&[99]), 500)).is_err(), "sends refused");
    storage.heal();
    block_on(log.purge(&storage)).unwrap();
    assert_eq!((log.first_offset(), log.next_offset(), log.segments_count()), (0, 0, 1));
    assert!(block_on(log.scrub_read(0, 0, 1 << 20)).unwrap().is_none(), "no sealed segment to scrub");
}

#[test]
fn a_payload_that_looks_like_a_header_cannot_derail_the_rebuild() {
    let storage = SimStorage::new();
    let mut log = open(&storage, settings(1 << 20), false);
    // A payload with a batch header's shape: base offset 1, a length near u64::MAX, and
    // 204 reserved bytes of zero.
    let mut fake = vec![0u8; 300];
    fake[8..16].copy_from_slice(&1u64.to_le_bytes());
    fake[32..40].copy_from_slice(&(u64::MAX - 7).to_le_bytes());
    fake[48..52].copy_from_slice(&1u32.to_le_bytes());
    let first: PoolSlice = batch::build(&[(1, fake.as_slice(), &b""[..])], 1).into();
    block_on(log.append(&storage, first, 10)).unwrap();
    for id in [2u128, 3] {
        block_on(log.append(&storage, batch_with_ids(&[id]), 10 + id as u64)).unwrap();
    }
    drop(log);
    block_on(storage.remove_file(&segment_path(0, "index"))).unwrap();
    // The first batch's length field rots: the rebuild must look past it.
    storage.flip_bit(&segment_path(0, "log"), 33);
    let log = open(&storage, settings(1 << 20), true);
    assert_eq!(log.next_offset(), 3);
    assert_eq!(read(&log, 0, 10).1.map(|d| (d.first_offset, d.last_offset)), Some((0, 0)));
    assert_eq!(read(&log, 1, 10).0, vec!["payload-2", "payload-3"]);
}

#[test]
fn an_fsynced_append_survives_power_loss_though_its_index_entries_do_not() {
    let storage = SimStorage::new();
    let fsynced = common::settings(1 << 20, true, 1);
    let mut log = open(&storage, fsynced, false);
    for n in 0..4 {
        block_on(log.append(&storage, batch_with_ids(&ids_of(n)), 10)).unwrap();
    }
    drop(log);
    // Only the log is flushed per append: power loss takes the unsynced index entries.
    storage.crash(0);
    assert_eq!(storage.file_len(&segment_path(0, "index")), Some(0), "the index was never fsynced");
    let log = open(&storage, fsynced, false);
    assert_eq!(log.next_offset(), 12, "every acknowledged batch is still there");
    let (payloads, damaged) = read(&log, 0, 100);
    assert_eq!(payloads.len(), 12);
    assert_eq!(payloads.last().map(String::as_str), Some("payload-12"));
    assert_eq!(damaged, None);
}

#[test]
fn index_entries_are_written_in_runs_and_a_crash_loses_none_of_the_log() {
    let storage = SimStorage::new();
    let mut log = open(&storage, settings(1 << 30), false);
    for n in 0..100 {
        block_on(log.append(&storage, batch_with_ids(&ids_of(n)), 10)).unwrap();
    }
    let index = segment_path(0, "index");
    let entry = rill_domain::constants::INDEX_ENTRY_SIZE;
    assert_eq!(storage.file_len(&index), Some(0), "100 entries are held back, not written one by one");
    for n in 100..300 {
        block_on(log.append(&storage, batch_with_ids(&ids_of(n)), 10)).unwrap();
    }
    assert_eq!(storage.file_len(&index), Some(256 * entry), "a run is written once it is long enough");
    block_on(log.sync_active()).unwrap();
    assert_eq!(storage.file_len(&index), Some(300 * entry), "a sync writes the rest");
    for n in 300..310 {
        block_on(log.append(&storage, batch_with_ids(&ids_of(n)), 10)).unwrap();
    }
    drop(log);
    storage.crash(0);
    let log = open(&storage, settings(1 << 30), false);
    assert_eq!(log.next_offset(), 930, "every fsynced batch is found past the index's end");
    assert_eq!(read(&log, 927, 10).0, vec!["payload-928", "payload-929", "payload-930"]);
}

#[test]
fn whole_batches_through_ends_at_the_batch_holding_the_last_offset() {
    let storage = SimStorage::new();
    let log = twelve_batches(&storage);
    // Batches of three: 0..3, 3..6, ...; segments of three batches.
    assert_eq!(log.whole_batches_through(0, 0), 3);
    assert_eq!(log.whole_batches_through(3, 4), 3);
    assert_eq!(log.whole_batches_through(3, 9), 9, "the batch at 9 opens the next segment");
    assert_eq!(log.whole_batches_through(30, 100), 6, "past the end: up to the next offset");
    // A poll of that many from a batch's start serves whole batches.
    assert_eq!(read(&log, 3, log.whole_batches_through(3, 7)).0.len(), 6);
    // Batches still in the journal count the same way.
    let journal_storage = SimStorage::new();
    let mut journal = open(&journal_storage, common::settings(1 << 20, false, 1_000), false);
    for n in 0..3 {
        block_on(journal.append(&journal_storage, batch_with_ids(&ids_of(n)), 10)).unwrap();
    }
    assert_eq!(journal.whole_batches_through(0, 4), 6);
    assert_eq!(journal.whole_batches_through(3, 8), 6);
}
