//! Partition log tests on simulated storage: thresholds, rolling, reads across disk and
//! journal, recovery from crashes and torn tails, consumer offsets.

mod common;

use std::path::Path;

use common::batch_of;
use futures_executor::block_on;
use rill_adapter_sim::SimStorage;
use rill_application::partition::*;
use rill_application::ports::Storage;
use rill_domain::batch;

fn settings(segment_size_bytes: u64, enforce_fsync: bool) -> PartitionSettings {
    common::settings(segment_size_bytes, enforce_fsync, 4)
}

/// Reads everything from `start` and returns the payload strings.
fn read_all(log: &PartitionLog<SimStorage>, start: u64, count: u32) -> Vec<String> {
    let (messages, damaged) = common::read(log, start, count);
    assert_eq!(damaged, None);
    for (i, (offset, _)) in messages.iter().enumerate() {
        assert_eq!(*offset, start + i as u64);
    }
    messages.into_iter().map(|(_, payload)| payload).collect()
}

/// Opens the partition as after a crash: the active segment's tail may be torn.
fn open(storage: &SimStorage, settings: PartitionSettings) -> PartitionLog<SimStorage> {
    common::open(storage, settings, false)
}

#[test]
fn reads_span_disk_and_journal() {
    let storage = SimStorage::new();
    let mut log = open(&storage, settings(1 << 30, false));
    for i in 0..5 {
        assert_eq!(
            block_on(log.append(&storage, batch_of(i * 3, 3), 10 + i as u64)).unwrap().base_offset,
            i as u64 * 3
        );
    }
    assert_eq!(log.next_offset(), 15);
    // 4 messages trigger a flush: batches 0..=1 went to disk at the second append.
    assert!(storage.file_len(Path::new("/p/00000000000000000000.log")).unwrap() > 0);
    let all = read_all(&log, 0, 100);
    assert_eq!(all.len(), 15);
    assert_eq!(all[14], "message-0014");
    assert_eq!(read_all(&log, 4, 5), (4..9).map(|i| format!("message-{i:04}")).collect::<Vec<_>>());
    assert_eq!(log.offset_at_timestamp(12), Some(6));
    assert_eq!(log.offset_at_timestamp(14), Some(12));
    assert_eq!(log.offset_at_timestamp(99), None);
}

/// A log of 3-batch segments holding `batches` batches of two messages, flushed with
/// fsync; and a batch's length.
fn flushed_log(storage: &SimStorage, batches: u32) -> (PartitionLog<SimStorage>, u64) {
    let batch_len = batch_of(0, 2).len() as u64;
    let mut log = open(storage, settings(batch_len * 3, false));
    for i in 0..batches {
        block_on(log.append(storage, batch_of(i * 2, 2), 1)).unwrap();
    }
    block_on(log.flush(storage, true)).unwrap();
    (log, batch_len)
}

#[test]
fn segments_roll_at_the_size_limit_and_reopen() {
    let storage = SimStorage::new();
    let (log, batch_len) = flushed_log(&storage, 10);
    assert_eq!(log.segments_count(), 4);
    assert!(storage.file_len(Path::new("/p/00000000000000000006.log")).is_some());
    let reopened = open(&storage, settings(batch_len * 3, false));
    assert_eq!(reopened.next_offset(), 20);
    assert_eq!(read_all(&reopened, 0, 100).len(), 20);
    assert_eq!(read_all(&reopened, 5, 3), vec!["message-0005", "message-0006", "message-0007"]);
}

#[test]
fn crash_keeps_fsynced_batches_and_cuts_torn_tails() {
    let storage = SimStorage::new();
    let mut log = open(&storage, settings(1 << 30, true));
    for i in 0..3 {
        block_on(log.append(&storage, batch_of(i * 2, 2), 1)).unwrap();
    }
    // Unsynced bytes: write a batch without fsync, then crash with a torn tail.
    let mut unsynced = batch_of(6, 2);
    batch::stamp(&mut unsynced, 0, 6, 1);
    let file = block_on(storage.open(Path::new("/p/00000000000000000000.log"))).unwrap();
    let len = block_on(rill_application::ports::StorageFile::len(&file)).unwrap();
    let (result, _) = block_on(rill_application::ports::StorageFile::write_at(&file, vec![unsynced], len));
    result.unwrap();
    storage.crash(100);
    let mut reopened = open(&storage, settings(1 << 30, true));
    assert_eq!(reopened.next_offset(), 6, "only acknowledged messages survive");
    assert_eq!(read_all(&reopened, 0, 100).len(), 6);
    assert_eq!(
        block_on(reopened.append(&storage, batch_of(6, 1), 2)).unwrap().base_offset,
        6,
        "offsets are never reused"
    );
}

#[test]
fn corrupt_last_batch_is_cut_not_served() {
    let storage = SimStorage::new();
    let mut log = open(&storage, settings(1 << 30, true));
    for i in 0..3 {
        block_on(log.append(&storage, batch_of(i * 2, 2), 1)).unwrap();
    }
    let path = Path::new("/p/00000000000000000000.log");
    // What was written, not the file's length: a direct log runs on with padding.
    let len = log.usage().size_bytes as usize;
    storage.flip_bit(path, len - 2);
    let reopened = open(&storage, settings(1 << 30, true));
    assert_eq!(reopened.next_offset(), 4);
    assert_eq!(read_all(&reopened, 0, 100).len(), 4);
}

#[test]
fn purge_and_delete_segments() {
    let storage = SimStorage::new();
    let batch_len = batch_of(0, 2).len() as u64;
    let mut log = open(&storage, settings(batch_len, false));
    for i in 0..4 {
        block_on(log.append(&storage, batch_of(i * 2, 2), 1)).unwrap();
    }
    block_on(log.flush(&storage, false)).unwrap();
    assert_eq!(log.segments_count(), 4);
    assert_eq!(block_on(log.delete_segments(&storage, 2)).unwrap().segments, 2);
    assert_eq!(log.first_offset(), 4);
    assert_eq!(read_all(&log, 4, 100).len(), 4);
    block_on(log.purge(&storage)).unwrap();
    assert_eq!((log.first_offset(), log.next_offset()), (0, 0));
    assert_eq!(log.usage().messages_count, 0);
}

#[test]
fn consumer_offsets_survive_reopen() {
    let storage = SimStorage::new();
    let mut log = open(&storage, settings(1 << 30, false));
    block_on(log.offsets.store(&storage, ConsumerKey::Consumer(7), 42, true)).unwrap();
    block_on(log.offsets.store(&storage, ConsumerKey::Group(1), 3, true)).unwrap();
    storage.crash(0);
    let mut reopened = open(&storage, settings(1 << 30, false));
    assert_eq!(reopened.offsets.get(ConsumerKey::Consumer(7)), Some(42));
    assert_eq!(reopened.offsets.get(ConsumerKey::Group(1)), Some(3));
    assert!(block_on(reopened.offsets.delete(&storage, ConsumerKey::Consumer(7))).unwrap());
    assert!(!block_on(reopened.offsets.delete(&storage, ConsumerKey::Consumer(7))).unwrap());
}

/// Bytes the simulated disk holds beyond its files' lengths: blocks reserved past them.
fn reserved(storage: &SimStorage) -> u64 {
    let space = block_on(storage.space(Path::new("/p"))).unwrap();
    let lengths: u64 = storage.paths().iter().filter_map(|p| storage.file_len(p)).map(|len| len as u64).sum();
    space.total_bytes - space.available_bytes - lengths
}

#[test]
fn an_active_log_reserves_blocks_ahead_and_gives_them_back_when_sealed_or_stopped() {
    let storage = SimStorage::new();
    // Payloads numbered from 10,000 on are all the same length, so every batch is too.
    let first = 10_000;
    let batch_len = batch_of(first, 5000).len() as u64;
    let segment_size = batch_len * 8;
    let mut log = open(&storage, settings(segment_size, false));
    let mut next = first;
    let mut append = |log: &mut PartitionLog<SimStorage>| {
        block_on(log.append(&storage, batch_of(next, 5000), 1)).unwrap();
        next += 5000;
    };
    // Under 1 MiB nothing is reserved; past it, up to half as much again as the log holds.
    for _ in 0..3 {
        append(&mut log);
    }
    assert!(batch_len * 3 < 1 << 20);
    assert_eq!(reserved(&storage), 0);
    append(&mut log);
    let log_len = batch_len * 4;
    assert_eq!(storage.file_len(Path::new("/p/00000000000000000000.log")), Some(log_len as usize));
    assert!(reserved(&storage) > 0 && reserved(&storage) <= log_len / 2, "reserved {}", reserved(&storage));
    // The segment seals at its size: what it had reserved goes back, and the new active
    // log holds one batch, too little to reserve.
    for _ in 0..5 {
        append(&mut log);
    }
    assert_eq!(log.segments_count(), 2);
    assert_eq!(reserved(&storage), 0);
    for _ in 0..3 {
        append(&mut log);
    }
    assert!(reserved(&storage) > 0);
    // A graceful stop gives the active log's reservation back too, and nothing was lost.
    block_on(log.sync_active()).unwrap();
    assert_eq!(reserved(&storage), 0);
    let reopened = open(&storage, settings(segment_size, false));
    let count = next - first;
    assert_eq!(reopened.next_offset(), count as u64);
    let all = read_all(&reopened, 0, count);
    assert_eq!(all.len(), count as usize);
    assert_eq!(all[count as usize - 1], format!("message-{}", next - 1));
}

#[test]
fn a_disk_too_full_to_reserve_still_takes_every_append_that_fits() {
    let storage = SimStorage::new();
    let batches: Vec<_> = (0..4).map(|i| batch_of(10_000 + i * 5000, 5000)).collect();
    // Room for the four batches (their index entries are held back), not for a
    // reservation past them.
    let total: usize = batches.iter().map(|b| b.len()).sum();
    storage.set_capacity(Some(total as u64 + (1 << 12)));
    let mut log = open(&storage, settings(1 << 30, false));
    for batch in batches {
        block_on(log.append(&storage, batch, 1)).unwrap();
    }
    assert!(total >= 1 << 20);
    assert_eq!(reserved(&storage), 0);
    assert_eq!(read_all(&log, 0, 20_000).len(), 20_000);
    // The fifth does not fit: refused, as a full disk refuses it without reservations.
    assert!(block_on(log.append(&storage, batch_of(30_000, 5000), 1)).is_err());
}

#[test]
fn blocks_reserved_before_a_crash_go_back_at_the_next_graceful_stop() {
    let storage = SimStorage::new();
    let batch_len = batch_of(10_000, 5000).len() as u64;
    let mut log = open(&storage, settings(batch_len * 8, false));
    for i in 0..7 {
        block_on(log.append(&storage, batch_of(10_000 + i * 5000, 5000), 1)).unwrap();
    }
    assert!(reserved(&storage) > 0);
    // Nothing was fsynced: the crash loses the log's bytes, not the blocks reserved for it.
    storage.crash(0);
    let mut log = open(&storage, settings(batch_len * 8, false));
    assert_eq!(log.next_offset(), 0);
    assert!(reserved(&storage) > 0);
    block_on(log.append(&storage, batch_of(10_000, 5000), 1)).unwrap();
    block_on(log.sync_active()).unwrap();
    assert_eq!(reserved(&storage), 0);
}

/// One message of `payload_bytes` bytes, with id `id + 1`.
fn big_batch(id: u32, payload_bytes: usize) -> rill_application::memory_pool::PoolSlice {
    let payload = vec![b'x'; payload_bytes];
    batch::build(&[(id as u128 + 1, &payload[..], &b""[..])], 1000).into()
}

#[test]
fn a_send_far_past_the_thresholds_writes_one_chunk_and_not_what_a_flusher_took_on() {
    let storage = SimStorage::new();
    // Thresholds: 4 messages or 1 MiB; twice them, a deferring send flushes itself.
    let mut log = open(&storage, settings(1 << 30, false));
    let logged = || storage.file_len(Path::new("/p/00000000000000000000.log")).unwrap_or(0);
    let size = 900 << 10;
    let append =
        |log: &mut PartitionLog<SimStorage>, id| block_on(log.append_deferring(&storage, big_batch(id, size), 1));
    assert!(!append(&mut log, 0).unwrap().flush_due);
    assert!(append(&mut log, 1).unwrap().flush_due, "1.8 MB: past the size threshold, left to the caller");
    // A flusher takes those two on: a third batch counts only itself toward flushing in the
    // send (0.9 MB), though the journal holds 2.7 MB, past twice the threshold.
    log.take_on_deferred();
    assert!(append(&mut log, 2).unwrap().flush_due);
    assert_eq!(logged(), 0, "the send wrote nothing");
    // With no flusher's claim, the next send is far past: it writes one chunk, the oldest
    // batch, and leaves the rest, still over the threshold, to the flusher.
    log.end_deferred();
    assert!(append(&mut log, 3).unwrap().flush_due);
    assert_eq!(logged(), big_batch(0, size).len(), "one chunk, not the whole journal");
    assert_eq!(log.unsaved_messages(), 3, "three batches of one message each stay journaled");
    assert_eq!(read_all(&log, 0, 10).len(), 4);
}

#[test]
fn a_log_restarted_past_its_end_goes_on_from_there_and_keeps_its_stored_offsets() {
    let storage = SimStorage::new();
    let (mut log, batch_len) = flushed_log(&storage, 5);
    let consumer = ConsumerKey::Consumer(1);
    block_on(log.offsets.store(&storage, consumer, 3, true)).unwrap();
    assert_eq!(log.segments_count(), 2);
    // A replicated copy whose peers deleted everything it lacks (offsets 10..40).
    block_on(log.restart_at(&storage, 40)).unwrap();
    assert_eq!((log.first_offset(), log.next_offset(), log.segments_count()), (40, 40, 1));
    assert_eq!(log.offsets.get(consumer), Some(3));
    assert!(block_on(log.append_replicated(&storage, batch_of(40, 2), 40, 5)).unwrap().is_some());
    block_on(log.flush(&storage, true)).unwrap();
    assert_eq!(read_all(&log, 40, 100), vec!["message-0040", "message-0041"]);
    let reopened = open(&storage, settings(batch_len * 3, false));
    assert_eq!((reopened.first_offset(), reopened.next_offset()), (40, 42));
    assert_eq!(read_all(&reopened, 40, 100), vec!["message-0040", "message-0041"]);
    assert_eq!(reopened.offsets.get(consumer), Some(3));
    let names = block_on(storage.list_dir(Path::new("/p"))).unwrap();
    let old = ["00000000000000000000.log", "00000000000000000006.log", "00000000000000000006.index"];
    assert!(old.iter().all(|name| !names.contains(&name.to_string())), "old segments gone: {names:?}");
}

/// A restart that failed half-way (some of the old files renamed away, then a call failed)
/// is tried again and finishes: the files it renamed already are not asked for again.
#[test]
fn a_log_restart_that_failed_half_way_finishes_when_tried_again() {
    let storage = SimStorage::new();
    let (mut log, batch_len) = flushed_log(&storage, 5);
    assert_eq!(log.segments_count(), 2);
    // The first rename goes through, the second fails.
    let next = storage.mutating_calls();
    storage.fail_calls(next + 1..next + 2, std::io::ErrorKind::Other);
    assert!(block_on(log.restart_at(&storage, 40)).is_err());
    block_on(log.restart_at(&storage, 40)).expect("the retry finishes the restart");
    assert_eq!((log.first_offset(), log.next_offset(), log.segments_count()), (40, 40, 1));
    assert!(block_on(log.append_replicated(&storage, batch_of(40, 2), 40, 5)).unwrap().is_some());
    block_on(log.flush(&storage, true)).unwrap();
    let reopened = open(&storage, settings(batch_len * 3, false));
    assert_eq!((reopened.first_offset(), reopened.next_offset()), (40, 42));
    assert_eq!(read_all(&reopened, 40, 100), vec!["message-0040", "message-0041"]);
}

#[test]
fn a_poll_byte_budget_takes_whole_batches_that_fit_and_always_the_first() {
    let storage = SimStorage::new();
    let mut log = open(&storage, settings(1 << 30, false));
    for i in 0..6 {
        block_on(log.append(&storage, batch_of(i * 3, 3), 10 + i as u64)).unwrap();
    }
    // Settings flush at 4 messages: the first batches are on disk, the last in the journal.
    let batch_len = batch_of(0, 3).len();
    let budget = |batches: usize, spare: usize| (POLL_PREFIX_SIZE + batches * batch_len + spare) as u32;
    let polled = |start: u64, max_bytes: u32| {
        block_on(log.plan_poll(start, PollLimit::within(100, max_bytes), common::pool()).read()).unwrap().messages
    };
    assert_eq!(polled(0, budget(2, batch_len - 1)), 6, "a third batch does not fit");
    assert_eq!(polled(0, budget(3, 0)), 9);
    assert_eq!(polled(12, budget(1, 0)), 3, "journal batches keep to the budget too");
    assert_eq!(polled(0, 1), 3, "the first batch comes whatever the budget");
    assert_eq!(polled(0, 0), 18, "no budget: the server's cap");
}
