//! Deferred flushes on a simulated shard: with its flusher running, a send that reaches a
//! flush threshold of a topic without fsync is acknowledged before its batch is written and
//! the flusher writes it next; a deferred flush that fails leaves the batches journaled and
//! the partition refusing sends until a write succeeds, and loses no acknowledged message;
//! a journal far past its thresholds is flushed by the send itself; a send that arrives
//! during a deferred flush waits for one chunk of it, not all; persisted topics never defer.

mod common;

use std::cell::Cell;
use std::rc::Rc;

use common::shards::*;
use futures_executor::{LocalPool, block_on};
use futures_util::task::LocalSpawnExt;
use rill_adapter_sim::SimStorage;
use rill_application::memory_pool::PoolBuf;
use rill_domain::wire::codes::operation;

/// More messages than the default threshold (1,024): every such send reaches it.
const PAST_THRESHOLD: usize = 1_100;

fn big_send(client: &mut Client, stream: u32) -> Result<Vec<u8>, u32> {
    let payloads: Vec<&[u8]> = vec![b"m"; PAST_THRESHOLD];
    send(client, stream, 0, &payloads)
}

/// Bytes in the partition logs on the simulated disk (written, synced or not).
fn logged_bytes(storage: &SimStorage) -> usize {
    storage
        .paths()
        .iter()
        .filter(|path| path.extension().is_some_and(|e| e == "log") && path.to_string_lossy().contains("partitions"))
        .filter_map(|path| storage.file_len(path))
        .sum()
}

/// One shard with its flusher spawned on `pool` (and started: it waits for work).
fn shard_with_flusher(storage: &SimStorage, pool: &mut LocalPool) -> Client {
    let (shards, _) = start_shards(storage, 1);
    let flusher = shards[0].clone();
    pool.spawner().spawn_local(async move { flusher.run_flusher().await }).expect("spawn the flusher");
    pool.run_until_stalled();
    Client::login(&shards[0])
}

#[test]
fn a_send_past_the_threshold_is_acknowledged_before_the_flusher_writes_it() {
    let storage = SimStorage::new();
    let mut pool = LocalPool::new();
    let mut client = shard_with_flusher(&storage, &mut pool);
    create_stream_and_topic(&mut client, "events", 1);
    big_send(&mut client, 0).expect("acknowledged");
    assert_eq!(logged_bytes(&storage), 0, "acknowledged from the journal, not yet written");
    assert_eq!(poll(&mut client, 0, 0).0, 100, "polls serve the journal meanwhile");
    pool.run_until_stalled();
    assert!(logged_bytes(&storage) > PAST_THRESHOLD, "the flusher wrote the batch");
    assert_eq!(poll(&mut client, 0, 0).0, 100);
}

#[test]
fn a_failed_deferred_flush_refuses_sends_until_the_disk_heals_and_loses_nothing_acknowledged() {
    let storage = SimStorage::new();
    let mut pool = LocalPool::new();
    {
        let mut client = shard_with_flusher(&storage, &mut pool);
        create_stream_and_topic(&mut client, "events", 1);
        big_send(&mut client, 0).expect("acknowledged");
        storage.fail_from(storage.mutating_calls(), std::io::ErrorKind::Other);
        pool.run_until_stalled();
        assert_eq!(logged_bytes(&storage), 0);
        assert!(big_send(&mut client, 0).is_err(), "read-only after the failed flush");
        storage.heal();
        big_send(&mut client, 0).expect("the disk takes writes again");
        pool.run_until_stalled();
        block_on(client.system.flush_all()).expect("a clean stop");
        block_on(client.system.mark_clean_shutdown()).expect("the clean marker");
    }
    let (shards, _) = start_shards(&storage, 1);
    let mut client = Client::login(&shards[0]);
    let body = poll_body(0, 0, 0, 10_000);
    let reply = client.call(
        rill_domain::wire::codes::operation::NON_REPLICATED,
        rill_domain::wire::codes::code::POLL_MESSAGES,
        &body,
    );
    let count = u32::from_le_bytes(reply.expect("poll")[12..16].try_into().unwrap());
    assert_eq!(count as usize, 2 * PAST_THRESHOLD, "both acknowledged sends, not the refused one");
}

#[test]
fn a_journal_far_past_its_thresholds_is_flushed_by_the_send() {
    let storage = SimStorage::new();
    let mut pool = LocalPool::new();
    let mut client = shard_with_flusher(&storage, &mut pool);
    create_stream_and_topic(&mut client, "events", 1);
    // The flusher never runs again: sends defer until the journal holds twice a threshold.
    big_send(&mut client, 0).expect("acknowledged");
    assert_eq!(logged_bytes(&storage), 0);
    big_send(&mut client, 0).expect("acknowledged");
    assert!(logged_bytes(&storage) >= 2 * PAST_THRESHOLD, "the second send wrote the journal itself");
}

#[test]
fn a_send_during_a_deferred_flush_waits_for_one_chunk_not_the_whole_journal() {
    let storage = SimStorage::new();
    let mut pool = LocalPool::new();
    let mut client = shard_with_flusher(&storage, &mut pool);
    create_stream_and_topic(&mut client, "events", 1);
    // Two 600 KB batches: together past the 1 MiB size threshold, each a chunk of its own.
    let payload = vec![b'x'; 600 << 10];
    send(&mut client, 0, 0, &[&payload]).expect("journaled");
    send(&mut client, 0, 0, &[&payload]).expect("acknowledged, its flush left to the flusher");
    storage.hold_writes();
    pool.run_until_stalled();
    assert_eq!(logged_bytes(&storage), 0, "the flusher's first chunk is in flight");
    // A third send arrives while it is: it waits for the partition.
    let mut other = Client::login(&client.system);
    let frame = other.frame(operation::SEND_MESSAGES, 0, &send_body(0, 0, &[&payload]).0);
    let answered_at: Rc<Cell<Option<usize>>> = Rc::default();
    let (answered, disk) = (answered_at.clone(), storage.clone());
    pool.spawner()
        .spawn_local(async move {
            let reply = reply_of(other.system.handle(&other.connection, PoolBuf::plain(frame)).await);
            reply.expect("the third send is acknowledged");
            answered.set(Some(logged_bytes(&disk)));
        })
        .expect("spawn the send");
    pool.run_until_stalled();
    assert_eq!(answered_at.get(), None, "waiting while the chunk is written");
    storage.release_writes();
    pool.run_until_stalled();
    let logged_then = answered_at.get().expect("answered");
    assert!(
        logged_then > payload.len() && logged_then < 2 * payload.len(),
        "answered after the first chunk, before the second ({logged_then} bytes logged)"
    );
    assert!(logged_bytes(&storage) > 2 * payload.len(), "the flusher wrote the second chunk after it");
    assert_eq!(poll(&mut client, 0, 0).0, 3, "all three sends are served");
}

#[test]
fn persisted_topics_never_defer() {
    let storage = SimStorage::new();
    let mut pool = LocalPool::new();
    let mut client = shard_with_flusher(&storage, &mut pool);
    create_persisted_topic(&mut client, "orders", 1);
    send(&mut client, 0, 0, &[b"durable"]).expect("acknowledged");
    assert!(logged_bytes(&storage) > 0, "written (and fsynced) before the acknowledgement");
}
