//! Spare logs on simulated storage: a partition keeps the logs of its own direct segments
//! that retention removed, in its own directory, and its next rolls write over them; after
//! a crash it reads back only its own new batches, whatever the old file holds past them.
//! No file ever goes to another partition: a deleted topic's files are gone, and a new
//! topic's files hold none of its bytes, across a crash.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use common::shards::{self, Client, create_persisted_topic, numeric, poll, send};
use futures_executor::block_on;
use rill_adapter_sim::{Jitter, ManualClock, SimStorage};
use rill_application::memory_pool::PoolSlice;
use rill_application::partition::{PartitionLog, SPARE_SUFFIX, SpareBudget, SpareLogCounters};
use rill_domain::batch;
use rill_domain::segment::log_file_name;
use rill_domain::wire::codes::operation;

const BATCH: usize = 64 << 10;

/// A batch of one message `m<n>` padded with dots to make the batch `length` bytes long.
fn batch_of_length(n: u64, length: usize) -> PoolSlice {
    let overhead = batch::build(&[(1, b"x", b"")], 1000).len() - 1;
    let mut payload = format!("m{n:06}").into_bytes();
    payload.resize(length - overhead, b'.');
    let stored: PoolSlice = batch::build(&[(u128::from(n) + 1, &payload, b"")], 1000).into();
    assert_eq!(stored.len(), length);
    stored
}

fn budget(bytes: u64) -> (SpareBudget, Arc<SpareLogCounters>) {
    let counters = Arc::new(SpareLogCounters::default());
    (SpareBudget::new(bytes, counters.clone()), counters)
}

/// A direct (persisted) partition at `dir` with segments of `segment_bytes`.
fn open(
    storage: &SimStorage,
    dir: &str,
    segment_bytes: u64,
    spares: Option<SpareBudget>,
    clean: bool,
) -> PartitionLog<SimStorage> {
    let settings = common::settings(segment_bytes, true, 1);
    block_on(PartitionLog::open_with(storage, Path::new(dir), 0, settings, clean, spares)).unwrap()
}

fn append(storage: &SimStorage, log: &mut PartitionLog<SimStorage>, numbers: std::ops::Range<u64>, length: usize) {
    for n in numbers {
        block_on(log.append(storage, batch_of_length(n, length), 1 + n)).unwrap();
    }
}

/// The payloads' message numbers read back from `start`.
fn numbers(log: &PartitionLog<SimStorage>, start: u64) -> Vec<u64> {
    let (read, damaged) = common::read(log, start, 1000);
    assert_eq!(damaged, None);
    read.iter().map(|(_, payload)| payload[1..7].parse().unwrap()).collect()
}

fn spares_in(storage: &SimStorage, dir: &str) -> Vec<PathBuf> {
    storage.paths().into_iter().filter(|p| p.starts_with(dir) && p.to_string_lossy().ends_with(SPARE_SUFFIX)).collect()
}

#[test]
fn a_segment_deleted_from_a_partition_is_the_log_its_next_roll_writes_over() {
    let storage = SimStorage::new();
    let (spares, counters) = budget(1 << 30);
    // 2 MiB segments of 32 batches of 64 KiB: the first deletion frees a whole one.
    let mut log = open(&storage, "/p", 2 << 20, Some(spares), true);
    append(&storage, &mut log, 0..80, BATCH);
    assert_eq!(log.segments_count(), 3);
    let detached = block_on(log.delete_segments(&storage, 1)).unwrap();
    assert_eq!((detached.segments, log.spare_count()), (1, 1), "the deleted segment's log is its spare");
    assert_eq!(spares_in(&storage, "/p"), vec![Path::new("/p").join(format!("{:020}{SPARE_SUFFIX}", 0))]);
    assert_eq!(counters.bytes.load(Relaxed), 32 * BATCH as u64);
    // The active segment holds 16 batches: 16 more fill it, the 17th rolls over the spare.
    append(&storage, &mut log, 80..100, BATCH);
    assert_eq!((log.segments_count(), log.spare_count()), (3, 0), "the roll took the spare");
    assert_eq!(counters.taken.load(Relaxed), 1);
    let third = Path::new("/p").join(log_file_name(96));
    assert_eq!(storage.file_len(&third), Some(32 * BATCH), "written over the deleted segment's file");
    drop(log);
    storage.crash(0);
    let recovered = open(&storage, "/p", 2 << 20, None, false);
    assert_eq!((recovered.first_offset(), recovered.next_offset()), (32, 100));
    assert_eq!(numbers(&recovered, 32), (32..100).collect::<Vec<_>>());
}

#[test]
fn a_log_written_over_its_own_spare_reads_back_only_its_new_batches_after_a_crash() {
    // A batch of whole blocks ends each append on a block boundary; one 100 bytes short
    // leaves less than a batch header of padding; one of 50,000 bytes ends anywhere.
    for length in [BATCH, BATCH - 100, 50_000] {
        let storage = SimStorage::new();
        let (spares, _) = budget(1 << 30);
        // Segments of 40 batches: the first is sealed by the 41st and deleted at once.
        let segment_bytes = 40 * length as u64;
        let mut log = open(&storage, "/p", segment_bytes, Some(spares), true);
        append(&storage, &mut log, 0..41, length);
        block_on(log.delete_segments(&storage, 1)).unwrap();
        assert_eq!(log.spare_count(), 1, "length {length}");
        // 39 more fill the active segment; the next roll writes 10 batches over the spare.
        append(&storage, &mut log, 41..90, length);
        assert_eq!(log.spare_count(), 0, "length {length}: the roll took it");
        let reused = Path::new("/p").join(log_file_name(80));
        assert_eq!(storage.file_len(&reused), Some(40 * length), "length {length}: the old bytes after");
        drop(log);
        storage.crash(0);
        let recovered = open(&storage, "/p", segment_bytes, None, false);
        assert_eq!(recovered.next_offset(), 90, "length {length}: no old batch taken for a new one");
        assert_eq!(numbers(&recovered, 80), (80..90).collect::<Vec<_>>(), "length {length}");
        assert_eq!(storage.file_len(&reused), Some(10 * length), "length {length}: recovery cut the old bytes");
    }
}

#[test]
fn a_graceful_stop_cuts_a_reused_log_to_its_last_batch() {
    let storage = SimStorage::new();
    let (spares, _) = budget(1 << 30);
    let mut log = open(&storage, "/p", 40 * 50_000, Some(spares), true);
    append(&storage, &mut log, 0..41, 50_000);
    block_on(log.delete_segments(&storage, 1)).unwrap();
    append(&storage, &mut log, 41..83, 50_000);
    block_on(log.sync_active()).unwrap();
    assert_eq!(storage.file_len(&Path::new("/p").join(log_file_name(80))), Some(150_000));
    drop(log);
    assert_eq!(numbers(&open(&storage, "/p", 40 * 50_000, None, true), 80), vec![80, 81, 82]);
}

#[test]
fn small_logs_buffered_logs_and_logs_past_the_budget_are_not_kept() {
    let storage = SimStorage::new();
    let (spares, counters) = budget(3 << 20);
    // Segments of 10 batches of 50,000 bytes: under 1 MiB, removed as before.
    let mut small = open(&storage, "/small", 500_000, Some(spares.clone()), true);
    append(&storage, &mut small, 0..11, 50_000);
    block_on(small.delete_segments(&storage, 1)).unwrap();
    assert_eq!(small.spare_count(), 0, "under 1 MiB: removed");
    // A buffered log keeps none.
    let buffered = common::settings(2 << 20, false, 1);
    let mut log =
        block_on(PartitionLog::open_with(&storage, Path::new("/buf"), 0, buffered, true, Some(spares.clone())))
            .unwrap();
    append(&storage, &mut log, 0..33, BATCH);
    block_on(log.delete_segments(&storage, 1)).unwrap();
    assert_eq!(log.spare_count(), 0, "a buffered log is removed as before");
    // 2 MiB each: a budget of 3 MiB keeps one, whichever partition asks.
    let mut logs: Vec<_> = ["/a", "/b"].map(|dir| open(&storage, dir, 2 << 20, Some(spares.clone()), true)).into();
    let mut kept = Vec::new();
    for log in &mut logs {
        append(&storage, log, 0..33, BATCH);
        block_on(log.delete_segments(&storage, 1)).unwrap();
        kept.push(log.spare_count());
    }
    assert_eq!(kept, vec![1, 0]);
    assert_eq!((counters.files.load(Relaxed), counters.kept.load(Relaxed)), (1, 1));
    assert!(spares_in(&storage, "/b").is_empty(), "not kept: removed");
}

#[test]
fn a_partition_keeps_at_most_two_spares() {
    let storage = SimStorage::new();
    let (spares, counters) = budget(1 << 30);
    let mut log = open(&storage, "/p", 2 << 20, Some(spares), true);
    append(&storage, &mut log, 0..130, BATCH);
    assert_eq!(log.segments_count(), 5);
    block_on(log.delete_segments(&storage, 3)).unwrap();
    assert_eq!(log.spare_count(), 2);
    assert_eq!((counters.files.load(Relaxed), spares_in(&storage, "/p").len()), (2, 2));
    drop(log);
    assert_eq!(counters.files.load(Relaxed), 0, "a dropped log gives its spares' budget back");
}

#[test]
fn a_volume_short_of_free_space_holds_no_spares() {
    let storage = SimStorage::new();
    let (spares, counters) = budget(1 << 30);
    let mut log = open(&storage, "/p", 2 << 20, Some(spares.clone()), true);
    append(&storage, &mut log, 0..100, BATCH);
    block_on(log.delete_segments(&storage, 1)).unwrap();
    // The budget is 1 GiB: 1 GiB over a 64 MiB floor is what the spares may take.
    assert!(!spares.note_space((1 << 30) + (64 << 20), 64 << 20), "room enough");
    assert!(spares.note_space(1 << 30, 64 << 20), "short");
    block_on(log.remove_spares(&storage));
    assert_eq!((log.spare_count(), counters.bytes.load(Relaxed)), (0, 0));
    assert!(spares_in(&storage, "/p").is_empty(), "and their files with them");
    block_on(log.delete_segments(&storage, 1)).unwrap();
    assert_eq!(log.spare_count(), 0, "none kept while short");
    assert!(!spares.note_space(2 << 30, 64 << 20));
    block_on(log.delete_segments(&storage, 1)).unwrap();
    assert_eq!(log.spare_count(), 1, "kept again once there is room");
}

#[test]
fn a_restart_takes_up_the_partitions_spares_unless_it_keeps_none() {
    let storage = SimStorage::new();
    let (spares, _) = budget(1 << 30);
    let mut log = open(&storage, "/p", 2 << 20, Some(spares), true);
    append(&storage, &mut log, 0..100, BATCH);
    block_on(log.delete_segments(&storage, 2)).unwrap();
    block_on(log.sync_active()).unwrap();
    drop(log);
    let (restarted, counters) = budget(1 << 30);
    let log = open(&storage, "/p", 2 << 20, Some(restarted), true);
    assert_eq!((log.spare_count(), counters.bytes.load(Relaxed)), (2, 64 * BATCH as u64));
    assert_eq!(numbers(&log, 64), (64..100).collect::<Vec<_>>());
    drop(log);
    // A start that keeps no spares (a budget of 0) removes them.
    drop(open(&storage, "/p", 2 << 20, None, true));
    assert!(spares_in(&storage, "/p").is_empty());
}

#[test]
fn a_purge_takes_the_spares_with_the_messages() {
    let storage = SimStorage::new();
    let (spares, counters) = budget(1 << 30);
    let mut log = open(&storage, "/p", 2 << 20, Some(spares), true);
    append(&storage, &mut log, 0..100, BATCH);
    block_on(log.delete_segments(&storage, 1)).unwrap();
    block_on(log.purge(&storage)).unwrap();
    assert_eq!((log.spare_count(), counters.files.load(Relaxed)), (0, 0));
    assert!(spares_in(&storage, "/p").is_empty());
    append(&storage, &mut log, 0..40, BATCH);
    assert_eq!(counters.taken.load(Relaxed), 0, "the roll after the purge made a fresh log");
}

/// One shard keeping spares, as a single node runs.
fn one_shard(storage: &SimStorage, clock: &ManualClock) -> std::rc::Rc<rill_application::Shard<shards::SimEnv>> {
    let mut config = shards::config();
    config.data.spare_logs_bytes = 1 << 30;
    let (mut started, _) = shards::start_on(storage, config, clock, 1, common::pool(), Jitter::default()).unwrap();
    started.remove(0)
}

/// Whether any file under the data directory holds `needle`, durable bytes or not.
fn files_holding(storage: &SimStorage, needle: &[u8]) -> Vec<PathBuf> {
    storage
        .paths()
        .into_iter()
        .filter(|p| storage.contents(p).is_some_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle)))
        .collect()
}

#[test]
fn a_deleted_topics_bytes_are_in_no_file_of_the_topic_created_after_it_across_a_crash() {
    let storage = SimStorage::new();
    let clock = ManualClock::new(1_700_000_000_000_000);
    let shard = one_shard(&storage, &clock);
    let mut client = Client::login(&shard);
    let old = create_persisted_topic(&mut client, "old", 2);
    let secret = b"old-stream-secret-".repeat(3_000);
    for partition in 0..2 {
        for _ in 0..40 {
            send(&mut client, old, partition, &[&secret]).unwrap();
        }
    }
    assert!(!files_holding(&storage, &secret[..54]).is_empty(), "the old topic's logs hold its messages");
    client.call(operation::DELETE_STREAM, 0, &numeric(old)).unwrap();
    assert_eq!(files_holding(&storage, &secret[..54]), Vec::<PathBuf>::new(), "deleted: in no file");
    clock.advance_us(1_000);
    let new = create_persisted_topic(&mut client, "new", 2);
    for partition in 0..2 {
        for _ in 0..10 {
            send(&mut client, new, partition, &[b"new-stream-message"]).unwrap();
        }
    }
    assert_eq!(files_holding(&storage, &secret[..54]), Vec::<PathBuf>::new(), "the new topic's files hold none");
    assert_eq!(shard.shared().telemetry.data.spare_logs.taken.load(Relaxed), 0);
    drop(client);
    drop(shard);
    storage.crash(0);
    assert_eq!(files_holding(&storage, &secret[..54]), Vec::<PathBuf>::new(), "nor after a crash");
    let shard = one_shard(&storage, &clock);
    let mut client = Client::login(&shard);
    for partition in 0..2 {
        let (count, reply) = poll(&mut client, new, partition);
        assert_eq!(count, 10, "partition {partition}: exactly its own messages");
        assert!(!reply.windows(18).any(|w| w == b"old-stream-secret-"));
    }
}
