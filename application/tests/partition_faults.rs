//! Partition writes under storage faults: every mutating storage call of a workload is made
//! to fail in turn (a full disk, then a device error) and the partition must refuse the
//! send it could not write, keep every acknowledged message, never hand an offset out twice,
//! turn read-only while the fault lasts, and take writes again once it is gone.

mod common;

use std::io::ErrorKind;

use common::batch_of;
use futures_executor::block_on;
use rill_adapter_sim::SimStorage;
use rill_application::partition::*;

fn settings(segment_size_bytes: u64, enforce_fsync: bool) -> PartitionSettings {
    common::settings(segment_size_bytes, enforce_fsync, 4)
}

/// Every stored message from offset 0: (offset, payload).
fn stored(log: &PartitionLog<SimStorage>) -> Vec<(u64, String)> {
    let (messages, damaged) = common::read(log, 0, u32::MAX);
    assert_eq!(damaged, None);
    messages
}

fn open(storage: &SimStorage, settings: PartitionSettings) -> PartitionLog<SimStorage> {
    common::open(storage, settings, false)
}

/// Sends 2-message batches `from..to` (batch numbers); returns the acknowledged messages.
fn send(storage: &SimStorage, log: &mut PartitionLog<SimStorage>, batches: std::ops::Range<u32>) -> Vec<(u64, String)> {
    let mut acked = Vec::new();
    for i in batches {
        let before = log.next_offset();
        match block_on(log.append(storage, batch_of(i * 2, 2), 1 + i as u64)) {
            Ok(appended) => {
                assert_eq!(appended.base_offset, before, "offsets follow on without a gap");
                acked.push((before, format!("message-{:04}", i * 2)));
                acked.push((before + 1, format!("message-{:04}", i * 2 + 1)));
            }
            Err(_) => {
                assert_eq!(log.next_offset(), before, "a refused batch takes no offset");
                assert!(log.write_failure().is_some(), "a failed write leaves the partition read-only");
            }
        }
    }
    acked
}

/// Payloads only: offsets of batches sent after a failure follow the acknowledged ones.
fn payloads(messages: &[(u64, String)]) -> Vec<&str> {
    messages.iter().map(|(_, p)| p.as_str()).collect()
}

/// How long an injected fault lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// One call fails; the cut after it succeeds.
    Once,
    /// Every call from the failing one on fails, until healed.
    Lasting,
}

fn sweep(enforce_fsync: bool, kind: ErrorKind, fault: Fault) {
    let batch_len = batch_of(0, 2).len() as u64;
    let calls = {
        let storage = SimStorage::new();
        let mut log = open(&storage, settings(batch_len * 3, enforce_fsync));
        let before = storage.mutating_calls();
        send(&storage, &mut log, 0..10);
        storage.mutating_calls() - before
    };
    assert!(calls > 20, "the workload makes many write calls ({calls})");
    for failing in 0..calls {
        let storage = SimStorage::new();
        let mut log = open(&storage, settings(batch_len * 3, enforce_fsync));
        let first = storage.mutating_calls() + failing;
        let last = if fault == Fault::Once { first + 1 } else { u64::MAX };
        storage.fail_calls(first..last, kind);
        let mut acked = send(&storage, &mut log, 0..10);
        let while_failing = stored(&log);
        assert_eq!(while_failing, acked, "call {failing}: reads serve exactly what was acknowledged");
        storage.heal();
        if enforce_fsync {
            // Power lost while the disk was failing: everything acknowledged was on disk.
            storage.crash(0);
            log = open(&storage, settings(batch_len * 3, enforce_fsync));
            let survived = stored(&log);
            assert!(survived.starts_with(&acked), "call {failing}: acknowledged means durable");
            if fault == Fault::Once {
                assert_eq!(survived, acked, "call {failing}: a refused batch never turns up");
            }
            acked = survived;
        }
        let after = send(&storage, &mut log, 10..14);
        assert_eq!(after.len(), 8, "call {failing}: sends succeed again without a restart");
        assert_eq!(log.write_failure(), None);
        acked.extend(after);
        block_on(log.flush(&storage, true)).unwrap();
        storage.crash(0);
        let reopened = open(&storage, settings(batch_len * 3, enforce_fsync));
        let survived = stored(&reopened);
        assert_eq!(payloads(&survived), payloads(&acked), "call {failing}: every acknowledged message, once");
        assert_eq!(survived, acked, "call {failing}: at the offsets they were given");
    }
}

#[test]
fn every_write_call_failing_with_a_full_disk_loses_nothing_acknowledged() {
    for fault in [Fault::Once, Fault::Lasting] {
        sweep(true, ErrorKind::StorageFull, fault);
        sweep(false, ErrorKind::StorageFull, fault);
    }
}

#[test]
fn every_write_call_failing_with_an_io_error_loses_nothing_acknowledged() {
    for fault in [Fault::Once, Fault::Lasting] {
        sweep(true, ErrorKind::Other, fault);
        sweep(false, ErrorKind::Other, fault);
    }
}

#[test]
fn a_full_disk_refuses_sends_until_space_is_freed() {
    let storage = SimStorage::new();
    let mut log = open(&storage, settings(1 << 20, true));
    let batch_len = batch_of(0, 2).len() as u64;
    storage.set_capacity(Some(batch_len * 5 + batch_len / 2));
    let acked = send(&storage, &mut log, 0..8);
    assert!(acked.len() < 16 && !acked.is_empty(), "some sends fit, then the disk is full ({})", acked.len());
    assert!(log.write_failure().is_some());
    assert_eq!(stored(&log), acked);
    let refused = block_on(log.append(&storage, batch_of(100, 2), 50));
    assert_eq!(refused.map(|a| a.base_offset).map_err(|e| e.kind()), Err(ErrorKind::StorageFull));
    storage.set_capacity(None);
    let more = send(&storage, &mut log, 8..10);
    assert_eq!(more.len(), 4, "space freed: sends succeed without a restart");
    assert_eq!(more[0].0, acked.len() as u64, "offsets continue after the acknowledged ones");
    storage.crash(0);
    let reopened = open(&storage, settings(1 << 20, true));
    assert_eq!(stored(&reopened).len(), acked.len() + 4);
}

#[test]
fn acknowledged_journal_batches_wait_for_the_disk_and_are_then_written() {
    let storage = SimStorage::new();
    // Not fsynced: batches are acknowledged from the journal and flushed every 4 messages.
    let mut log = open(&storage, settings(1 << 20, false));
    storage.fail_from(storage.mutating_calls(), ErrorKind::StorageFull);
    let first = block_on(log.append(&storage, batch_of(0, 2), 1)).expect("below the threshold: journaled");
    assert_eq!(first.base_offset, 0);
    assert!(block_on(log.append(&storage, batch_of(2, 2), 2)).is_err(), "the flush at the threshold fails");
    assert_eq!(log.unsaved_messages(), 2, "the acknowledged batch stays journaled");
    assert!(block_on(log.flush(&storage, true)).is_err());
    storage.heal();
    block_on(log.flush(&storage, true)).expect("the pending batch is written once the disk has room");
    assert_eq!(log.write_failure(), None);
    storage.crash(0);
    let reopened = open(&storage, settings(1 << 20, false));
    assert_eq!(payloads(&stored(&reopened)), vec!["message-0000", "message-0001"]);
}

#[test]
fn a_persisted_send_whose_fsync_fails_is_not_acknowledged() {
    // The property the partition simulation checks, pinned on the one call that matters:
    // the batch is written, its fsync fails, and the send must not be acknowledged.
    let storage = SimStorage::new();
    let mut log = open(&storage, settings(1 << 20, true));
    block_on(log.append(&storage, batch_of(0, 2), 1)).unwrap();
    // The next append writes the log (one call), then fsyncs it (the next): only that fails.
    let call = storage.mutating_calls();
    storage.fail_calls(call + 1..call + 2, ErrorKind::Other);
    let refused = block_on(log.append(&storage, batch_of(2, 2), 2));
    assert!(refused.is_err(), "acknowledged without reaching the disk: {refused:?}");
    storage.heal();
    let next = block_on(log.append(&storage, batch_of(4, 2), 3)).expect("writes resume");
    storage.crash(0);
    let log = open(&storage, settings(1 << 20, true));
    let messages = stored(&log);
    assert!(messages.iter().any(|(offset, _)| *offset == next.base_offset), "the acknowledged batch survives");
    assert_eq!(messages.first().map(|(offset, _)| *offset), Some(0));
}

/// A purge whose old files went but whose new ones could not be made (the call after the
/// removal fails) must not leave the log writing into the removed segment: the next write
/// finishes the purge first, and what is acknowledged then is there after a reopen.
#[test]
fn a_purge_that_fails_after_removing_the_files_finishes_before_the_next_write() {
    let storage = SimStorage::new();
    let settings = settings(1 << 20, true);
    let mut log = open(&storage, settings);
    send(&storage, &mut log, 0..3);
    // The purge's first call (removing the directory) goes through, the next one fails.
    let next = storage.mutating_calls();
    storage.fail_calls(next + 1..next + 2, ErrorKind::Other);
    assert!(block_on(log.purge(&storage)).is_err(), "the purge reports the failure");
    assert!(log.write_failure().is_some(), "read-only until the purge is finished");
    // The next send finishes the purge, and is the first of the new log.
    let appended = block_on(log.append(&storage, batch_of(20, 2), 20)).expect("the disk works again");
    assert_eq!(appended.base_offset, 0, "the purged log starts again at offset 0");
    let acked = vec![(0, "message-0020".to_owned()), (1, "message-0021".to_owned())];
    assert_eq!(stored(&log), acked);
    drop(log);
    assert_eq!(stored(&open(&storage, settings)), acked, "after a reopen");
}
