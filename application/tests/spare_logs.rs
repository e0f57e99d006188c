//! Spare logs on simulated storage: a new log (direct, or a new partition's first buffered
//! one) written over a removed partition's file reads back only its own batches after a
//! crash, even when the old file holds batches of the same shape at the same positions,
//! carrying the very offsets that come next. A new log that finds no spare gets half of
//! what another has of one past its end.

mod common;

use std::path::Path;
use std::rc::Rc;

use common::shards::{self, Client, SimEnv, create_stream, create_stream_and_topic, numeric, poll, send};
use futures_executor::block_on;
use rill_adapter_sim::{Jitter, ManualClock, SimStorage};
use rill_application::Shard;
use rill_application::memory_pool::PoolSlice;
use rill_application::partition::{PartitionLog, SpareLogs};
use rill_application::ports::{Storage, StorageFile};
use rill_domain::batch;
use rill_domain::segment::{floor_file_name, log_file_name};
use rill_domain::wire::codes::operation;

/// A batch of one message `m<n>` padded with dots to make the batch `length` bytes long.
fn batch_of_length(n: u64, length: usize) -> PoolSlice {
    let overhead = batch::build(&[(1, b"x", b"")], 1000).len() - 1;
    let mut payload = format!("m{n:06}").into_bytes();
    payload.resize(length - overhead, b'.');
    let stored: PoolSlice = batch::build(&[(u128::from(n) + 1, &payload, b"")], 1000).into();
    assert_eq!(stored.len(), length);
    stored
}

fn open(storage: &SimStorage, dir: &str, spares: Option<Rc<SpareLogs>>, clean: bool) -> PartitionLog<SimStorage> {
    let settings = common::settings(1 << 30, true, 1);
    block_on(PartitionLog::open_with(storage, Path::new(dir), 0, settings, clean, spares, None)).unwrap()
}

fn spares() -> Rc<SpareLogs> {
    Rc::new(SpareLogs::new("/spares".into(), 1 << 30, Default::default()))
}

/// A partition at `/old` with `batches` batches of `length` bytes, removed with its log
/// kept as a spare.
fn removed_partition(storage: &SimStorage, spares: &Rc<SpareLogs>, batches: u64, length: usize) -> usize {
    let mut old = open(storage, "/old", Some(spares.clone()), true);
    for n in 0..batches {
        block_on(old.append(storage, batch_of_length(n, length), 10 + n)).unwrap();
    }
    block_on(old.keep_as_spares(storage));
    block_on(storage.remove_dir_all(Path::new("/old"))).unwrap();
    assert_eq!(spares.count(), 1, "the removed log is a spare");
    storage.paths().iter().filter(|p| p.starts_with("/spares")).map(|p| storage.file_len(p).unwrap()).sum()
}

/// The payloads' message numbers read back from the start.
fn numbers(log: &PartitionLog<SimStorage>) -> Vec<u64> {
    let (read, damaged) = common::read(log, 0, 1000);
    assert_eq!(damaged, None);
    read.iter().map(|(_, payload)| payload[1..7].parse().unwrap()).collect()
}

#[test]
fn a_log_written_over_a_spare_reads_back_only_its_own_batches_after_a_crash() {
    let new_log = Path::new("/new").join(log_file_name(0));
    // A batch of whole blocks ends each append on a block boundary; one 100 bytes short
    // leaves less than a batch header of padding; one of 50,000 bytes ends anywhere.
    for length in [64 << 10, (64 << 10) - 100, 50_000] {
        let storage = SimStorage::new();
        let spares = spares();
        let old_bytes = removed_partition(&storage, &spares, 40, length);
        let mut new = open(&storage, "/new", Some(spares.clone()), true);
        assert_eq!(spares.count(), 0, "length {length}: the spare is taken");
        for n in 0..10 {
            block_on(new.append(&storage, batch_of_length(100 + n, length), 500 + n)).unwrap();
        }
        assert_eq!(storage.file_len(&new_log), Some(old_bytes), "length {length}: written over, the old bytes after");
        assert_eq!(numbers(&new), (100..110).collect::<Vec<_>>());
        drop(new);
        storage.crash(0);
        let recovered = open(&storage, "/new", None, false);
        assert_eq!(recovered.next_offset(), 10, "length {length}: no old batch taken for a new one");
        assert_eq!(numbers(&recovered), (100..110).collect::<Vec<_>>(), "length {length}");
        assert!(storage.file_len(&new_log).unwrap() < old_bytes, "recovery cut the old bytes");
    }
}

#[test]
fn a_spare_taken_and_never_written_recovers_empty() {
    let storage = SimStorage::new();
    let spares = spares();
    removed_partition(&storage, &spares, 40, 64 << 10);
    drop(open(&storage, "/new", Some(spares), true));
    storage.crash(0);
    let recovered = open(&storage, "/new", None, false);
    assert_eq!(recovered.next_offset(), 0, "the old first batch is not the new log's");
}

#[test]
fn a_graceful_stop_cuts_a_reused_log_to_its_last_batch() {
    let storage = SimStorage::new();
    let spares = spares();
    removed_partition(&storage, &spares, 40, 50_000);
    let mut new = open(&storage, "/new", Some(spares), true);
    for n in 0..3 {
        block_on(new.append(&storage, batch_of_length(100 + n, 50_000), 500 + n)).unwrap();
    }
    block_on(new.sync_active()).unwrap();
    assert_eq!(storage.file_len(&Path::new("/new").join(log_file_name(0))), Some(150_000));
    drop(new);
    let reopened = open(&storage, "/new", None, true);
    assert_eq!(numbers(&reopened), vec![100, 101, 102]);
}

#[test]
fn small_logs_buffered_logs_and_logs_past_the_budget_are_not_kept() {
    let storage = SimStorage::new();
    let budget = Rc::new(SpareLogs::new("/spares".into(), 3 << 20, Default::default()));
    let mut small = open(&storage, "/small", Some(budget.clone()), true);
    block_on(small.append(&storage, batch_of_length(0, 50_000), 1)).unwrap();
    block_on(small.keep_as_spares(&storage));
    assert_eq!(budget.count(), 0, "under 1 MiB: removed as before");
    let buffered = common::settings(1 << 30, false, 1);
    let mut log = block_on(PartitionLog::open_with(
        &storage,
        Path::new("/buf"),
        0,
        buffered,
        true,
        Some(budget.clone()),
        Some(1),
    ))
    .unwrap();
    for n in 0..40 {
        block_on(log.append(&storage, batch_of_length(n, 50_000), 1 + n)).unwrap();
    }
    block_on(log.flush(&storage, true)).unwrap();
    block_on(log.keep_as_spares(&storage));
    assert_eq!(budget.count(), 0, "buffered spares not allowed: a buffered log is removed as before");
    let logs: Vec<_> = ["/a", "/b"].map(|dir| open(&storage, dir, Some(budget.clone()), true)).into();
    for mut log in logs {
        for n in 0..40 {
            block_on(log.append(&storage, batch_of_length(n, 50_000), 1 + n)).unwrap();
        }
        block_on(log.keep_as_spares(&storage));
        assert_eq!(budget.count(), 1, "2 MB each: a budget of 3 MiB keeps one");
    }
    assert!(storage.paths().iter().any(|p| p == &Path::new("/b").join(log_file_name(0))), "not kept: left in place");
}

#[test]
fn a_segment_deleted_from_a_partition_is_the_log_its_next_roll_writes_over() {
    let storage = SimStorage::new();
    let spares = spares();
    // 2 MiB segments of 32 batches of 64 KiB: the first deletion frees a whole one.
    let settings = common::settings(2 << 20, true, 1);
    let dir = Path::new("/p");
    let mut log =
        block_on(PartitionLog::open_with(&storage, dir, 0, settings, true, Some(spares.clone()), None)).unwrap();
    for n in 0..80 {
        block_on(log.append(&storage, batch_of_length(n, 64 << 10), 1 + n)).unwrap();
    }
    assert_eq!(log.segments_count(), 3);
    let detached = block_on(log.delete_segments(&storage, 1)).unwrap();
    assert_eq!((detached.segments, spares.count()), (1, 1), "the deleted segment's log is a spare");
    // The active segment holds 16 batches: 16 more fill it, the 17th rolls over the spare.
    for n in 80..100 {
        block_on(log.append(&storage, batch_of_length(n, 64 << 10), 1 + n)).unwrap();
    }
    assert_eq!((log.segments_count(), spares.count()), (3, 0), "the roll took the spare");
    let third = dir.join(log_file_name(96));
    assert_eq!(storage.file_len(&third), Some(32 * (64 << 10)), "written over the deleted segment's file");
    drop(log);
    storage.crash(0);
    let recovered = open(&storage, "/p", None, false);
    assert_eq!((recovered.first_offset(), recovered.next_offset()), (32, 100));
    let (read, damaged) = common::read(&recovered, 32, 1000);
    assert_eq!(damaged, None);
    let numbers: Vec<u64> = read.iter().map(|(_, payload)| payload[1..7].parse().unwrap()).collect();
    assert_eq!(numbers, (32..100).collect::<Vec<_>>());
}

#[test]
fn a_volume_short_of_free_space_holds_no_spares() {
    let storage = SimStorage::new();
    let spares = spares();
    removed_partition(&storage, &spares, 40, 64 << 10);
    // The budget is 1 GiB: 1 GiB over a 64 MiB floor is what the spares may take.
    block_on(spares.fit_to_space(&storage, (1 << 30) + (64 << 20), 64 << 20));
    assert_eq!(spares.count(), 1, "room enough: kept");
    block_on(spares.fit_to_space(&storage, 1 << 30, 64 << 20));
    assert_eq!(spares.count(), 0, "short: removed");
    assert!(!storage.paths().iter().any(|p| p.starts_with("/spares")), "and their files with them");
    let mut log = open(&storage, "/again", Some(spares.clone()), true);
    for n in 0..40 {
        block_on(log.append(&storage, batch_of_length(n, 64 << 10), 1 + n)).unwrap();
    }
    block_on(log.keep_as_spares(&storage));
    assert_eq!(spares.count(), 0, "none kept while short");
    block_on(spares.fit_to_space(&storage, 2 << 30, 64 << 20));
    block_on(log.keep_as_spares(&storage));
    assert_eq!(spares.count(), 1, "kept again once there is room");
}

#[test]
fn a_restart_takes_up_the_spares_left_and_removes_what_is_not_one() {
    let storage = SimStorage::new();
    let spares = spares();
    removed_partition(&storage, &spares, 40, 64 << 10);
    let stray = Path::new("/spares/notes.txt");
    block_on(storage.open(stray)).unwrap();
    // The next start: a new shard's spares, the same directory.
    let restarted = Rc::new(SpareLogs::new("/spares".into(), 1 << 30, Default::default()));
    block_on(restarted.recover(&storage)).unwrap();
    assert_eq!((restarted.count(), restarted.held_bytes()), (1, 40 * (64 << 10)));
    assert!(!storage.paths().iter().any(|p| p == stray), "not a spare: removed");
    let mut new = open(&storage, "/new", Some(restarted.clone()), true);
    assert_eq!(restarted.count(), 0, "taken");
    for n in 0..3 {
        block_on(new.append(&storage, batch_of_length(100 + n, 64 << 10), 500 + n)).unwrap();
    }
    drop(new);
    storage.crash(0);
    assert_eq!(numbers(&open(&storage, "/new", None, false)), vec![100, 101, 102]);
    // A smaller budget keeps none of them.
    let mut again = open(&storage, "/again", None, true);
    for n in 0..40 {
        block_on(again.append(&storage, batch_of_length(n, 64 << 10), 1 + n)).unwrap();
    }
    let kept = Rc::new(SpareLogs::new("/spares".into(), 1 << 30, Default::default()));
    drop(again);
    let again = open(&storage, "/again", Some(kept.clone()), true);
    block_on(again.keep_as_spares(&storage));
    let small = SpareLogs::new("/spares".into(), 1 << 20, Default::default());
    block_on(small.recover(&storage)).unwrap();
    assert_eq!(small.count(), 0, "over the budget: removed");
    assert!(!storage.paths().iter().any(|p| p.starts_with("/spares")));
}

fn buffered_spares() -> Rc<SpareLogs> {
    let spares = spares();
    spares.allow_buffered();
    spares
}

/// A buffered log at `dir`, each batch flushed as it comes; `fresh_at_us` as a shard passes
/// it for a partition it just created.
fn open_buffered(
    storage: &SimStorage,
    dir: &str,
    spares: Option<Rc<SpareLogs>>,
    clean: bool,
    fresh_at_us: Option<u64>,
) -> PartitionLog<SimStorage> {
    let settings = common::settings(1 << 30, false, 1);
    block_on(PartitionLog::open_with(storage, Path::new(dir), 0, settings, clean, spares, fresh_at_us)).unwrap()
}

/// A buffered partition at `/old` with `batches` batches of `length` bytes stamped from 10
/// on, synced (so a crash later finds them on disk), removed with its log kept as a spare.
fn removed_buffered_partition(storage: &SimStorage, spares: &Rc<SpareLogs>, batches: u64, length: usize) -> u64 {
    let mut old = open_buffered(storage, "/old", Some(spares.clone()), true, Some(1));
    for n in 0..batches {
        block_on(old.append(storage, batch_of_length(n, length), 10 + n)).unwrap();
    }
    block_on(old.flush(storage, true)).unwrap();
    block_on(old.keep_as_spares(storage));
    block_on(storage.remove_dir_all(Path::new("/old"))).unwrap();
    assert_eq!(spares.count(), 1, "the removed buffered log is a spare");
    batches * length as u64
}

#[test]
fn a_new_buffered_partition_written_over_a_deleted_ones_log_never_recovers_its_batches() {
    let new_log = Path::new("/new").join(log_file_name(0));
    for length in [64 << 10, 50_000] {
        let storage = SimStorage::new();
        let spares = buffered_spares();
        let old_bytes = removed_buffered_partition(&storage, &spares, 40, length);
        let mut new = open_buffered(&storage, "/new", Some(spares.clone()), true, Some(500));
        assert_eq!(spares.count(), 0, "length {length}: the spare is taken");
        assert!(storage.paths().contains(&Path::new("/new").join(floor_file_name(0))), "its floor recorded");
        for n in 0..5 {
            block_on(new.append(&storage, batch_of_length(100 + n, length), 500 + n)).unwrap();
        }
        block_on(new.flush(&storage, true)).unwrap();
        for n in 5..10 {
            block_on(new.append(&storage, batch_of_length(100 + n, length), 500 + n)).unwrap();
        }
        assert_eq!(storage.file_len(&new_log), Some(old_bytes as usize), "written over, the old bytes after");
        assert_eq!(numbers(&new), (100..110).collect::<Vec<_>>());
        drop(new);
        // The unsynced half is gone: the disk holds the old batches from the sixth on, the
        // same shapes at the same places, with the offsets that come next.
        storage.crash(0);
        let recovered = open_buffered(&storage, "/new", None, false, None);
        assert_eq!(recovered.next_offset(), 5, "length {length}: no old batch taken for a new one");
        assert_eq!(numbers(&recovered), (100..105).collect::<Vec<_>>(), "length {length}");
    }
}

#[test]
fn a_buffered_spare_taken_and_never_written_recovers_empty_and_a_stop_cuts_its_old_bytes() {
    let storage = SimStorage::new();
    let spares = buffered_spares();
    removed_buffered_partition(&storage, &spares, 40, 64 << 10);
    drop(open_buffered(&storage, "/new", Some(spares.clone()), true, Some(500)));
    storage.crash(0);
    assert_eq!(open_buffered(&storage, "/new", None, false, None).next_offset(), 0, "the old batches are not its");
    let spares = buffered_spares();
    removed_buffered_partition(&storage, &spares, 40, 50_000);
    let mut new = open_buffered(&storage, "/again", Some(spares), true, Some(500));
    for n in 0..3 {
        block_on(new.append(&storage, batch_of_length(100 + n, 50_000), 500 + n)).unwrap();
    }
    block_on(new.sync_active()).unwrap();
    assert_eq!(storage.file_len(&Path::new("/again").join(log_file_name(0))), Some(150_000));
    drop(new);
    assert_eq!(numbers(&open_buffered(&storage, "/again", None, true, None)), vec![100, 101, 102]);
}

#[test]
fn a_log_over_a_buffered_spare_stamps_at_or_above_its_floor_whatever_the_clock_says() {
    let storage = SimStorage::new();
    let spares = buffered_spares();
    // The spare's newest batch is stamped 49: the floor is 50.
    removed_buffered_partition(&storage, &spares, 40, 64 << 10);
    let mut new = open_buffered(&storage, "/new", Some(spares), true, Some(60));
    // A clock set back under the floor since.
    for n in 0..3 {
        block_on(new.append(&storage, batch_of_length(100 + n, 64 << 10), 20 + n)).unwrap();
    }
    block_on(new.flush(&storage, true)).unwrap();
    drop(new);
    storage.crash(0);
    let recovered = open_buffered(&storage, "/new", None, false, None);
    assert_eq!(numbers(&recovered), vec![100, 101, 102], "stamped at the floor, so kept");
    assert_eq!(recovered.offset_at_timestamp(50), Some(0));
    assert_eq!(recovered.offset_at_timestamp(51), None, "no stamp above the floor: the clock read 20-22");
}

#[test]
fn a_buffered_spare_stamped_after_the_clock_or_without_leave_is_not_used() {
    let storage = SimStorage::new();
    let spares = buffered_spares();
    removed_buffered_partition(&storage, &spares, 40, 64 << 10);
    // The spare's newest stamp (49) is not under the clock (40): a fresh file instead.
    drop(open_buffered(&storage, "/behind", Some(spares.clone()), true, Some(40)));
    assert_eq!(spares.count(), 1, "left for later");
    // Not a new partition (a start reopening one): a fresh file.
    drop(open_buffered(&storage, "/reopened", Some(spares.clone()), true, None));
    assert_eq!(spares.count(), 1);
    let files = storage.paths();
    assert!(!files.iter().any(|p| p.extension().is_some_and(|e| e == "floor")), "no floor without a spare");
    // A restart removes buffered spares: only direct ones are taken up.
    let restarted = SpareLogs::new("/spares".into(), 1 << 30, Default::default());
    block_on(restarted.recover(&storage)).unwrap();
    assert_eq!(restarted.count(), 0);
    assert!(!storage.paths().iter().any(|p| p.starts_with("/spares")));
}

#[test]
fn a_reused_segment_sealed_and_deleted_takes_its_floor_with_it() {
    let storage = SimStorage::new();
    let spares = buffered_spares();
    removed_buffered_partition(&storage, &spares, 40, 64 << 10);
    // 2 MiB segments of 32 batches of 64 KiB: the first, over the spare, seals at the 33rd.
    let settings = common::settings(2 << 20, false, 1);
    let dir = Path::new("/p");
    let mut log =
        block_on(PartitionLog::open_with(&storage, dir, 0, settings, true, Some(spares.clone()), Some(500))).unwrap();
    for n in 0..40 {
        block_on(log.append(&storage, batch_of_length(n, 64 << 10), 500 + n)).unwrap();
    }
    assert_eq!(log.segments_count(), 2);
    assert_eq!(storage.file_len(&dir.join(log_file_name(0))), Some(32 * (64 << 10)), "sealed: the old bytes cut");
    let detached = block_on(log.delete_segments(&storage, 1)).unwrap();
    assert_eq!((detached.segments, spares.count()), (1, 0), "retention keeps no buffered log");
    assert!(!storage.paths().iter().any(|p| p.starts_with(dir) && p.extension().is_some_and(|e| e == "floor")));
    drop(log);
    storage.crash(0);
    let recovered = block_on(PartitionLog::open_with(&storage, dir, 0, settings, false, None, None)).unwrap();
    // The active segment's batches were never synced: lost, as on any buffered log.
    assert_eq!((recovered.first_offset(), recovered.next_offset()), (32, 32));
}

#[test]
fn an_indexed_place_whose_write_never_reached_the_disk_is_reported_not_served_old() {
    let storage = SimStorage::new();
    let spares = buffered_spares();
    let length = 64 << 10;
    removed_buffered_partition(&storage, &spares, 40, length);
    let mut new = open_buffered(&storage, "/new", Some(spares), true, Some(500));
    for n in 0..6 {
        block_on(new.append(&storage, batch_of_length(100 + n, length), 500 + n)).unwrap();
    }
    block_on(new.sync_active()).unwrap();
    drop(new);
    // A power loss kept the index and every page but the third batch's, which still holds
    // the old log's third batch: the same offset, count and length, its checksums sound.
    let mut old_third: Vec<u8> = batch_of_length(2, length).to_vec();
    batch::stamp(&mut old_third, 0, 2, 12);
    let log = block_on(storage.open(&Path::new("/new").join(log_file_name(0)))).unwrap();
    let (written, _) = block_on(log.write_at(vec![PoolSlice::plain(old_third)], 2 * length as u64));
    written.unwrap();
    block_on(log.sync()).unwrap();
    for clean in [true, false] {
        let reopened = open_buffered(&storage, "/new", None, clean, None);
        let (read, damaged) = common::read(&reopened, 0, 1000);
        let numbers: Vec<u64> = read.iter().map(|(_, payload)| payload[1..7].parse().unwrap()).collect();
        assert_eq!(numbers, vec![100, 101], "clean {clean}: served up to the lost batch, never the old one");
        assert_eq!(damaged.map(|d| d.first_offset), Some(2), "clean {clean}: reported as damage");
    }
}

#[test]
fn a_buffered_spare_that_cannot_be_reused_leaves_a_fresh_log_and_is_not_counted_taken() {
    let storage = SimStorage::new();
    let counters = std::sync::Arc::new(rill_application::partition::SpareLogCounters::default());
    let spares = Rc::new(SpareLogs::new("/spares".into(), 1 << 30, counters.clone()));
    spares.allow_buffered();
    removed_buffered_partition(&storage, &spares, 40, 64 << 10);
    // The spare cannot be moved: the new partition gets an empty log of its own.
    storage.fail_under(Path::new("/spares"), std::io::ErrorKind::Other);
    let mut new = open_buffered(&storage, "/new", Some(spares.clone()), true, Some(500));
    storage.heal();
    assert_eq!(counters.taken.load(std::sync::atomic::Ordering::Relaxed), 0);
    for n in 0..3 {
        block_on(new.append(&storage, batch_of_length(100 + n, 64 << 10), 500 + n)).unwrap();
    }
    assert_eq!(storage.file_len(&Path::new("/new").join(log_file_name(0))), Some(3 * (64 << 10)), "a fresh file");
    block_on(new.flush(&storage, true)).unwrap();
    drop(new);
    storage.crash(0);
    assert_eq!(numbers(&open_buffered(&storage, "/new", None, false, None)), vec![100, 101, 102]);
}

#[test]
fn a_log_giving_up_half_its_spare_room_cuts_only_old_bytes_and_recovers_its_own() {
    let storage = SimStorage::new();
    let spares = buffered_spares();
    let old_bytes = removed_buffered_partition(&storage, &spares, 40, 64 << 10);
    let new_log = Path::new("/new").join(log_file_name(0));
    let mut new = open_buffered(&storage, "/new", Some(spares.clone()), true, Some(500));
    assert_eq!(new.spare_room(), old_bytes, "the whole spare lies past an empty log");
    for n in 0..5 {
        block_on(new.append(&storage, batch_of_length(100 + n, 64 << 10), 500 + n)).unwrap();
    }
    block_on(new.flush(&storage, true)).unwrap();
    let written = 5 * (64 << 10);
    let room = old_bytes - written;
    assert_eq!(new.spare_room(), room);
    assert_eq!(block_on(new.give_up_half_spare_room()).unwrap(), room / 2);
    assert_eq!(storage.file_len(&new_log), Some((old_bytes - room / 2) as usize), "the second half cut");
    assert_eq!(new.spare_room(), room - room / 2);
    for n in 5..8 {
        block_on(new.append(&storage, batch_of_length(100 + n, 64 << 10), 500 + n)).unwrap();
    }
    block_on(new.flush(&storage, true)).unwrap();
    assert_eq!(numbers(&new), (100..108).collect::<Vec<_>>(), "its own batches, before and after the cut");
    drop(new);
    // The cut was never synced: the disk may hold the whole old file again past the log.
    storage.crash(0);
    assert_eq!(numbers(&open_buffered(&storage, "/new", None, false, None)), (100..108).collect::<Vec<_>>());
}

/// One shard whose spare logs include buffered ones, as a single node runs.
fn one_shard_keeping_buffered_spares(storage: &SimStorage, clock: &ManualClock) -> Rc<Shard<SimEnv>> {
    let mut config = shards::config();
    config.data.spare_logs_bytes = 1 << 30;
    config.data.buffered_spare_logs = true;
    let (mut started, _) = shards::start_on(storage, config, clock, 1, common::pool(), Jitter::default()).unwrap();
    started.remove(0)
}

/// The log files under the shard's streams, by path, with their lengths.
fn stream_logs(storage: &SimStorage) -> Vec<(std::path::PathBuf, usize)> {
    let mut logs: Vec<_> = storage
        .paths()
        .into_iter()
        .filter(|p| p.starts_with("/data/streams") && p.extension().is_some_and(|e| e == "log"))
        .map(|p| (p.clone(), storage.file_len(&p).unwrap()))
        .collect();
    logs.sort();
    logs
}

#[test]
fn a_new_partition_that_finds_no_spare_gets_half_the_spare_room_of_one_that_did() {
    let storage = SimStorage::new();
    let clock = ManualClock::new(1_700_000_000_000_000);
    let shard = one_shard_keeping_buffered_spares(&storage, &clock);
    let mut client = Client::login(&shard);
    create_stream_and_topic(&mut client, "old", 1);
    let payload = vec![b'o'; 64 << 10];
    for _ in 0..40 {
        send(&mut client, 0, 0, &[&payload]).unwrap();
    }
    block_on(shard.flush_all()).unwrap();
    let spare_bytes = stream_logs(&storage)[0].1;
    client.call(operation::DELETE_STREAM, 0, &numeric(0)).unwrap();
    clock.advance_us(1_000);
    // Two new partitions, one spare: the first takes it, the second finds none.
    let stream = create_stream(&mut client, "new");
    let mut topic = numeric(stream);
    topic.extend_from_slice(&2u32.to_le_bytes());
    topic.extend_from_slice(&[1, b't']);
    client.call(operation::CREATE_TOPIC, 0, &topic).unwrap();
    let mut lengths: Vec<usize> = stream_logs(&storage).into_iter().map(|(_, len)| len).collect();
    lengths.sort();
    assert_eq!(lengths, vec![0, spare_bytes - spare_bytes / 2], "the spare's second half cut for the new log");
    let shared = shard.shared.telemetry.data.spare_logs.room_shared_bytes.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(shared, (spare_bytes / 2) as u64);
    for partition in 0..2 {
        send(&mut client, stream, partition, &[b"fresh", b"again"]).unwrap();
        let (count, reply) = poll(&mut client, stream, partition);
        assert_eq!(count, 2, "partition {partition}");
        assert!(reply.windows(5).any(|w| w == b"fresh") && !reply.windows(4).any(|w| w == b"oooo"));
    }
}
