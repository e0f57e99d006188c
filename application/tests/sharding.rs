//! A three-shard server in one thread, on simulated adapters: metadata operations sent to a
//! peer shard are committed by shard 0, partition operations travel to their owners and
//! back, and a crash of the simulated disk loses nothing that was acknowledged as durable.

mod common;

use common::shards::*;
use futures_executor::block_on;
use rill_adapter_sim::SimStorage;
use rill_domain::Namespace;
use rill_domain::wire::codes::operation;

#[test]
fn metadata_from_a_peer_shard_is_committed_by_shard_zero() {
    let storage = SimStorage::new();
    let (shards, calls) = start(&storage);
    let mut client = Client::login(&shards[2]);
    create_stream_and_topic(&mut client, "orders", 6);
    assert!(calls[2].borrow().iter().any(|(to, kind)| *to == 0 && *kind == "metadata"));
    assert_eq!(shards[2].shared.telemetry.bus.metadata_forwarded.load(std::sync::atomic::Ordering::Relaxed), 2);
    // Shard 0 opened each partition on its owner.
    for partition in 0..6 {
        let owner = Namespace::new(0, 0, partition).unwrap().shard(SHARDS);
        let stats = shards[1].shared.partitions.stats(Namespace::new(0, 0, partition).unwrap()).expect("registered");
        assert_eq!(stats.shard, owner);
    }
}

#[test]
fn partition_requests_are_forwarded_to_owners_and_answered() {
    let storage = SimStorage::new();
    let (shards, _) = start(&storage);
    let mut client = Client::login(&shards[1]);
    create_stream_and_topic(&mut client, "orders", 6);
    let remote: Vec<u32> = (0..6).filter(|&p| Namespace::new(0, 0, p).unwrap().shard(SHARDS) != 1).collect();
    assert!(!remote.is_empty(), "some partition must live on another shard");
    for partition in 0..6 {
        send(&mut client, 0, partition, &[b"a", b"bb"]).expect("send");
        let (count, reply) = poll(&mut client, 0, partition);
        assert_eq!(count, 2, "partition {partition}");
        assert!(reply.windows(2).any(|w| w == b"bb"));
    }
    let forwarded = shards[1].shared.telemetry.bus.forwarded.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(forwarded as usize, remote.len() * 2, "one send and one poll per remote partition");
    assert_eq!(send(&mut client, 0, 6, &[b"x"]), Err(3007));
}

#[test]
fn a_crash_keeps_acknowledged_durable_messages_on_every_shard() {
    let storage = SimStorage::new();
    {
        let (shards, _) = start(&storage);
        let mut client = Client::login(&shards[1]);
        create_stream_and_topic(&mut client, "orders", 4);
        for partition in 0..4 {
            send(&mut client, 0, partition, &[b"kept"]).expect("send");
        }
        block_on(shards[0].flush_all()).expect("flush all shards");
    }
    storage.crash(0);
    let (shards, _) = start(&storage);
    let mut client = Client::login(&shards[2]);
    for partition in 0..4 {
        assert_eq!(poll(&mut client, 0, partition).0, 1, "partition {partition} after the crash");
    }
}

#[test]
fn a_failed_journal_write_stops_metadata_changes_and_data_goes_on() {
    let storage = SimStorage::new();
    let (shards, _) = start(&storage);
    let mut client = Client::login(&shards[1]);
    create_stream_and_topic(&mut client, "orders", 2);
    send(&mut client, 0, 0, &[b"before"]).expect("send");
    // The next write call of the metadata journal fails, once.
    storage.fail_calls(storage.mutating_calls()..storage.mutating_calls() + 1, std::io::ErrorKind::Other);
    let body = [6, b'd', b'e', b'n', b'i', b'e', b'd'];
    assert_eq!(client.call(operation::CREATE_STREAM, 0, &body), Err(13000), "IoError, and no exit");
    storage.heal();
    assert_eq!(client.call(operation::CREATE_STREAM, 0, &body), Err(13000), "halted until a restart");
    send(&mut client, 0, 1, &[b"after"]).expect("data traffic goes on");
    assert_eq!(poll(&mut client, 0, 0).0, 1);
    assert_eq!(poll(&mut client, 0, 1).0, 1);
}

#[test]
fn one_failing_partition_leaves_the_others_serving() {
    let storage = SimStorage::new();
    let (shards, _) = start(&storage);
    let mut client = Client::login(&shards[1]);
    // A persisted topic (durability = persisted), so every send writes.
    create_persisted_topic(&mut client, "durable", 3);
    for partition in 0..3 {
        send(&mut client, 0, partition, &[b"first"]).expect("send");
    }
    // The next write (partition 0's log) fails: that send alone is refused.
    storage.fail_calls(storage.mutating_calls()..storage.mutating_calls() + 1, std::io::ErrorKind::StorageFull);
    assert_eq!(send(&mut client, 0, 0, &[b"refused"]), Err(4006));
    let read_only = shards[1].shared.partitions.stats(Namespace::new(0, 0, 0).unwrap()).unwrap().read_only();
    assert!(read_only, "partition 0 is read-only");
    for partition in 1..3 {
        send(&mut client, 0, partition, &[b"second"]).expect("the other partitions take sends");
        assert_eq!(poll(&mut client, 0, partition).0, 2);
    }
    assert_eq!(poll(&mut client, 0, 0).0, 1, "partition 0 still serves what it stored");
    send(&mut client, 0, 0, &[b"retried"]).expect("the next write succeeds");
    assert_eq!(poll(&mut client, 0, 0).0, 2);
    assert!(!shards[1].shared.partitions.stats(Namespace::new(0, 0, 0).unwrap()).unwrap().read_only());
}
