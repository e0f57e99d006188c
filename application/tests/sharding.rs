//! A three-shard server in one thread, on simulated adapters: metadata operations sent to a
//! peer shard are committed by shard 0, partition operations travel to their owners and
//! back, and a crash of the simulated disk loses nothing that was acknowledged as durable.

mod common;

use common::shards::*;
use futures_executor::block_on;
use rill_adapter_sim::SimStorage;
use rill_application::memory_pool::{PoolBuf, PoolSlice};
use rill_application::replication::VsrJournal;
use rill_domain::Namespace;
use rill_domain::vsr::Checkpoint;
use rill_domain::wire::codes::operation;
use std::sync::atomic::Ordering::Relaxed;

#[test]
fn metadata_from_a_peer_shard_is_committed_by_shard_zero() {
    let storage = SimStorage::new();
    let (shards, calls) = start(&storage);
    let mut client = Client::login(&shards[2]);
    create_stream_and_topic(&mut client, "orders", 6);
    assert!(calls[2].borrow().iter().any(|(to, kind)| *to == 0 && *kind == "metadata"));
    assert_eq!(shards[2].shared().telemetry.bus.metadata_forwarded.load(std::sync::atomic::Ordering::Relaxed), 2);
    // Shard 0 opened each partition on its owner.
    for partition in 0..6 {
        let owner = Namespace::new(0, 0, partition).unwrap().shard(SHARDS);
        let stats = shards[1].shared().partitions.stats(Namespace::new(0, 0, partition).unwrap()).expect("registered");
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
    let forwarded = shards[1].shared().telemetry.bus.forwarded.load(std::sync::atomic::Ordering::Relaxed);
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

/// A failed metadata journal write halts metadata changes (data traffic goes on); the
/// every-second retry opens the journal again once the disk works, and what was committed
/// before and after survives a crash.
#[test]
fn a_failed_journal_write_stops_metadata_changes_until_the_disk_works_and_data_goes_on() {
    let storage = SimStorage::new();
    let (shards, _) = start(&storage);
    let mut client = Client::login(&shards[1]);
    create_stream_and_topic(&mut client, "orders", 2);
    send(&mut client, 0, 0, &[b"before"]).expect("send");
    // Every write of the metadata journal fails, until the disk heals.
    storage.fail_under(
        &storage.paths().into_iter().find(|p| p.ends_with("metadata/journal.wal")).unwrap(),
        std::io::ErrorKind::StorageFull,
    );
    let denied = [6, b'd', b'e', b'n', b'i', b'e', b'd'];
    assert_eq!(client.call(operation::CREATE_STREAM, 0, &denied), Err(13000), "IoError, and no exit");
    let halted = |shards: &[std::rc::Rc<rill_application::Shard<SimEnv>>]| {
        shards[0].shared().telemetry.metadata_halted.load(Relaxed)
    };
    assert!(halted(&shards));
    block_on(shards[0].retry_failed_writes());
    assert_eq!(client.call(operation::CREATE_STREAM, 0, &denied), Err(13000), "halted while the disk fails");
    send(&mut client, 0, 1, &[b"after"]).expect("data traffic goes on");
    assert_eq!(poll(&mut client, 0, 0).0, 1);
    assert_eq!(poll(&mut client, 0, 1).0, 1);

    storage.heal();
    block_on(shards[0].retry_failed_writes());
    assert!(!halted(&shards), "the journal opened again");
    let taken = [5, b't', b'a', b'k', b'e', b'n'];
    client.call(operation::CREATE_STREAM, 0, &taken).expect("metadata changes are taken again");
    client.call(operation::CREATE_STREAM, 0, &denied).expect("the refused one too");
    block_on(shards[0].flush_all()).expect("flush all shards");
    drop(client);
    drop(shards);
    storage.crash(0);
    let (shards, _) = start(&storage);
    let names = shards[0].metadata_view(|m| m.streams().map(|s| s.name.clone()).collect::<Vec<_>>());
    assert_eq!(names, ["orders", "taken", "denied"], "committed before and after the failure, once each");
    let mut client = Client::login(&shards[1]);
    assert_eq!(poll(&mut client, 0, 1).0, 1, "the data sent while halted");
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
    let read_only = shards[1].shared().partitions.stats(Namespace::new(0, 0, 0).unwrap()).unwrap().read_only();
    assert!(read_only, "partition 0 is read-only");
    for partition in 1..3 {
        send(&mut client, 0, partition, &[b"second"]).expect("the other partitions take sends");
        assert_eq!(poll(&mut client, 0, partition).0, 2);
    }
    assert_eq!(poll(&mut client, 0, 0).0, 1, "partition 0 still serves what it stored");
    send(&mut client, 0, 0, &[b"retried"]).expect("the next write succeeds");
    assert_eq!(poll(&mut client, 0, 0).0, 2);
    assert!(!shards[1].shared().partitions.stats(Namespace::new(0, 0, 0).unwrap()).unwrap().read_only());
}

/// Stores the offset of consumer 1 on partition 0 of topic 0 of stream 0.
fn store_offset(client: &mut Client, offset: u64) -> Result<Vec<u8>, u32> {
    use rill_domain::identifier::Identifier;
    use rill_domain::wire::command::{Command, Consumer, TopicRef};
    let topic = TopicRef { stream: Identifier::Numeric(0), topic: Identifier::Numeric(0) };
    let command = Command::StoreConsumerOffset {
        consumer: Consumer::Single(Identifier::Numeric(1)),
        topic,
        partition_id: Some(0),
        offset,
    };
    let encoded = command.encode().unwrap();
    client.call(encoded.operation, encoded.code, &encoded.body)
}

fn stored_offset(client: &mut Client) -> Option<u64> {
    use rill_domain::identifier::Identifier;
    use rill_domain::wire::command::{Command, Consumer, TopicRef};
    let topic = TopicRef { stream: Identifier::Numeric(0), topic: Identifier::Numeric(0) };
    let command =
        Command::GetConsumerOffset { consumer: Consumer::Single(Identifier::Numeric(1)), topic, partition_id: Some(0) };
    let encoded = command.encode().unwrap();
    let body = client.call(encoded.operation, encoded.code, &encoded.body).expect("get offset");
    (body.len() >= 20).then(|| u64::from_le_bytes(body[12..20].try_into().unwrap()))
}

#[test]
fn a_stored_offset_read_after_a_clean_stop_survives_a_later_power_loss() {
    // Found by the shard simulation (seed 41): a store whose fsync failed left its value
    // written but not durable; a clean restart read it back and reported it, and a later
    // power loss took it back to the value before. A clean stop now fsyncs such files.
    let storage = SimStorage::new();
    {
        let (shards, _) = start_shards(&storage, 1);
        let mut client = Client::login(&shards[0]);
        create_stream(&mut client, "orders");
        let mut body = numeric(0);
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&[1, b't']);
        let kind = rill_domain::wire::tlv::KIND_STRING;
        rill_domain::wire::tlv::put(&mut body, "consumer_offset_durability", kind, b"persisted");
        client.call(operation::CREATE_TOPIC, 0, &body).expect("a topic whose offset stores fsync");
        store_offset(&mut client, 6).expect("a durable store");
        // The store's write goes through; its fsync (the next mutating call) fails.
        let next = storage.mutating_calls();
        storage.fail_calls(next + 1..next + 2, std::io::ErrorKind::Other);
        assert!(store_offset(&mut client, 8).is_err(), "the failed fsync is reported");
        storage.heal();
        block_on(shards[0].flush_all()).expect("a clean stop");
        block_on(shards[0].mark_clean_shutdown()).expect("the clean marker");
    }
    let reported = {
        let (shards, _) = start_shards(&storage, 1);
        stored_offset(&mut Client::login(&shards[0]))
    };
    storage.crash(0);
    let (shards, _) = start_shards(&storage, 1);
    let after_power_loss = stored_offset(&mut Client::login(&shards[0]));
    assert!(reported.is_some());
    assert_eq!(after_power_loss, reported, "a reported offset never goes back");
}

#[test]
fn encrypted_messages_are_sealed_on_disk_and_served_plain_on_every_shard() {
    let storage = SimStorage::new();
    let clock = rill_adapter_sim::ManualClock::new(1_700_000_000_000_000);
    let pool = rill_application::memory_pool::MemoryPool::new(512 << 20, 64).expect("pool").leak();
    let mut sealed = config();
    sealed.encryption = Some(rill_application::encryption::EncryptionKey([9; 32]));
    let (shards, _) = start_on(&storage, sealed, &clock, SHARDS, pool, Default::default()).expect("start");
    let mut client = Client::login(&shards[1]);
    create_persisted_topic(&mut client, "secrets", 3);
    for partition in 0..3 {
        send(&mut client, 0, partition, &[b"top-secret-payload", b"another-secret"]).expect("send");
        let (count, reply) = poll(&mut client, 0, partition);
        assert_eq!(count, 2);
        let served = common::messages(&reply[16..]);
        assert_eq!(served[0].1, "top-secret-payload", "served in clear");
        assert_eq!(served[1].1, "another-secret");
    }
    block_on(shards[0].flush_all()).expect("flush");
    let logs: Vec<_> = storage.paths().into_iter().filter(|p| p.extension().is_some_and(|e| e == "log")).collect();
    assert_eq!(logs.len(), 3);
    for path in logs {
        let bytes = storage.contents(&path).unwrap();
        assert!(bytes.len() > 256, "{} holds the batch", path.display());
        assert!(!bytes.windows(6).any(|w| w == b"secret"), "{} holds plain text", path.display());
    }
}

/// Runs every shard's failed-write retry once (the server runs it every second).
fn retry_everywhere(shards: &[std::rc::Rc<rill_application::Shard<SimEnv>>]) {
    for shard in shards {
        block_on(shard.retry_failed_writes());
    }
}

#[test]
fn a_partition_that_could_not_be_created_opens_once_the_disk_works() {
    let storage = SimStorage::new();
    let (shards, _) = start(&storage);
    let mut client = Client::login(&shards[1]);
    let stream = create_stream(&mut client, "orders");
    // Partition 1's directory cannot be made while the topic is created.
    storage.fail_under(std::path::Path::new("/data/streams/0/topics/0/partitions/1"), std::io::ErrorKind::Other);
    let mut body = numeric(stream);
    body.extend_from_slice(&3u32.to_le_bytes());
    body.extend_from_slice(&[1, b't']);
    assert_eq!(client.call(operation::CREATE_TOPIC, 0, &body).map(drop), Err(13000), "the failure is reported");
    for partition in [0, 2] {
        send(&mut client, 0, partition, &[b"served"]).expect("the other partitions serve");
    }
    create_stream(&mut client, "metadata goes on");
    assert_eq!(send(&mut client, 0, 1, &[b"refused"]).map(drop), Err(13000), "partition 1 is not open");
    retry_everywhere(&shards);
    assert_eq!(send(&mut client, 0, 1, &[b"refused"]).map(drop), Err(13000), "nor while the disk fails");
    storage.heal();
    retry_everywhere(&shards);
    send(&mut client, 0, 1, &[b"opened"]).expect("partition 1 takes sends once opened");
    for partition in 0..3 {
        assert_eq!(poll(&mut client, 0, partition).0, 1, "partition {partition}");
    }
}

#[test]
fn a_partition_that_cannot_open_at_start_leaves_the_others_serving() {
    let storage = SimStorage::new();
    {
        let (shards, _) = start(&storage);
        let mut client = Client::login(&shards[1]);
        create_stream_and_topic(&mut client, "orders", 3);
        for partition in 0..3 {
            send(&mut client, 0, partition, &[b"kept"]).expect("send");
        }
        block_on(shards[0].flush_all()).expect("flush all shards");
    }
    // Partition 2 lost its `created_at` marker, which the next start writes again, and every
    // mutating call under its directory fails then.
    let dir = std::path::Path::new("/data/streams/0/topics/0/partitions/2");
    block_on(rill_application::ports::Storage::remove_file(&storage, &dir.join("created_at"))).expect("marker");
    storage.fail_under(dir, std::io::ErrorKind::Other);
    let (shards, _) = start(&storage);
    let mut client = Client::login(&shards[1]);
    for partition in 0..2 {
        assert_eq!(poll(&mut client, 0, partition).0, 1, "partition {partition} serves");
    }
    assert_eq!(send(&mut client, 0, 2, &[b"refused"]).map(drop), Err(13000), "partition 2 is not open");
    assert!(storage.failed_calls() > 0, "its opening failed");
    storage.heal();
    retry_everywhere(&shards);
    assert_eq!(poll(&mut client, 0, 2).0, 1, "partition 2 once the disk works");
}

/// A client socket as an owner shard sees it: records what it takes, at most `room` bytes a
/// call, or fails every write.
#[derive(Debug)]
struct RecordingSocket {
    taken: std::sync::Mutex<Vec<u8>>,
    room: usize,
    broken: bool,
}

impl rill_application::ports::ReplySocket for RecordingSocket {
    fn try_send(&self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.broken {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        let taken = bytes.len().min(self.room);
        self.taken.lock().unwrap().extend_from_slice(&bytes[..taken]);
        Ok(taken)
    }
}

/// A send to a partition on another shard is answered by that shard on the client's socket:
/// the connection's shard has nothing left to write. What the socket does not take (a full
/// send buffer, a broken socket) comes back to the connection's shard, which writes it after
/// what was taken, so the client reads one whole reply either way. A send to a partition of
/// the connection's own shard is answered as before.
#[test]
fn the_owner_of_a_partition_on_another_shard_writes_a_sends_reply_to_the_socket() {
    let storage = SimStorage::new();
    let (shards, _) = start(&storage);
    let mut client = Client::login(&shards[1]);
    create_stream_and_topic(&mut client, "orders", 6);
    let owner = |p: u32| Namespace::new(0, 0, p).unwrap().shard(SHARDS);
    let remote = (0..6).find(|&p| owner(p) != 1).expect("a partition on another shard");
    let local = (0..6).find(|&p| owner(p) == 1).expect("a partition on shard 1");
    for (room, broken, label) in [(usize::MAX, false, "whole"), (100, false, "cut"), (usize::MAX, true, "broken")] {
        let socket = std::sync::Arc::new(RecordingSocket { taken: Default::default(), room, broken });
        let plain = std::mem::replace(&mut client.connection, rill_application::Connection::new(0));
        client.connection = plain.with_reply_socket(socket.clone());
        for (partition, crossing) in [(remote, true), (local, false)] {
            let frame = client.frame(operation::SEND_MESSAGES, 0, &send_body(0, partition, &[label.as_bytes()]).0);
            let outcome = block_on(shards[1].handle(&client.connection, PoolBuf::plain(frame)));
            let rill_application::Outcome::Reply(rest) = outcome else { panic!("{label}: an eviction") };
            let mut whole = std::mem::take(&mut *socket.taken.lock().unwrap());
            assert_eq!(crossing && !broken, !whole.is_empty(), "{label}, partition {partition}: written by the owner");
            whole.extend_from_slice(&rest);
            let body = reply_of(rill_application::Outcome::Reply(PoolSlice::plain(whole))).expect("a success");
            let (count, _) = poll(&mut client, 0, partition);
            assert!(count > 0 && !body.is_empty(), "{label}, partition {partition}: stored and confirmed");
        }
    }
    let direct =
        shards[owner(remote) as usize].shared().telemetry.bus.direct_replies.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(direct, 1, "one reply went out whole from the owner");
}

/// A SEND_MESSAGES body for topic 0 of stream 0 with `partitioning` (`[kind][len][value]`)
/// and one message in a batch of producer 7 at sequence 0 (0.12's idempotent producers).
fn producer_send_body(partitioning: &[u8]) -> Vec<u8> {
    let mut batch = rill_domain::batch::build(&[(1, &b"once"[..], &b""[..])], 5);
    batch[52] = 1;
    batch[56..64].copy_from_slice(&7u64.to_le_bytes());
    let checksum = rill_domain::batch::compute_checksum(&batch);
    batch[40..48].copy_from_slice(&checksum.to_le_bytes());
    let mut metadata = numeric(0);
    metadata.extend_from_slice(&numeric(0));
    metadata.extend_from_slice(partitioning);
    metadata.extend_from_slice(&1u32.to_le_bytes());
    let mut body = (metadata.len() as u32).to_le_bytes().to_vec();
    body.extend_from_slice(&metadata);
    body.extend_from_slice(&batch);
    body
}

#[test]
fn a_producer_batch_must_name_its_partition() {
    let storage = SimStorage::new();
    let (shards, _) = start(&storage);
    let mut client = Client::login(&shards[1]);
    create_stream_and_topic(&mut client, "orders", 2);
    let balanced = producer_send_body(&[1, 0]);
    assert_eq!(client.call(operation::SEND_MESSAGES, 0, &balanced), Err(95), "a producer counts per partition");
    let keyed = producer_send_body(&[3, 3, b'k', b'e', b'y']);
    assert_eq!(client.call(operation::SEND_MESSAGES, 0, &keyed), Err(95));
    assert_eq!(poll(&mut client, 0, 0).0 + poll(&mut client, 0, 1).0, 0, "nothing was stored");
    let named = producer_send_body(&[2, 4, 1, 0, 0, 0]);
    client.call(operation::SEND_MESSAGES, 0, &named).expect("a producer batch for partition 1");
    assert_eq!(poll(&mut client, 0, 1).0, 1);
}

/// A metadata checkpoint whose checksum holds but whose state this version cannot restore
/// (a damaged one, or a newer version's) refuses the start with the file and the reason,
/// where the process used to abort: the node serves no metadata view it could not rebuild.
#[test]
fn a_metadata_checkpoint_that_does_not_restore_refuses_the_start_naming_it() {
    let storage = SimStorage::new();
    {
        let (shards, _) = start(&storage);
        create_stream_and_topic(&mut Client::login(&shards[0]), "orders", 1);
    }
    let journal = storage.paths().into_iter().find(|path| path.ends_with("metadata/journal.wal"));
    let dir = journal.and_then(|path| path.parent().map(std::path::Path::to_path_buf)).expect("the metadata journal");
    block_on(async {
        let (mut journal, _) = VsrJournal::open(&storage, &dir, false).await.expect("the journal opens");
        let checkpoint = Checkpoint { op: 1, checksum: 7, timestamp: 1, state: b"no state of this version".to_vec() };
        journal.write_checkpoint(&storage, &checkpoint).await.expect("written");
    });
    let clock = rill_adapter_sim::ManualClock::new(1_700_000_000_000_000);
    let pool = rill_application::memory_pool::MemoryPool::new(512 << 20, 64).expect("pool").leak();
    let refused = start_on(&storage, config(), &clock, SHARDS, pool, rill_adapter_sim::Jitter::default()).err();
    let error = refused.expect("the start is refused");
    assert!(error.contains("does not restore") && error.contains(&dir.display().to_string()), "{error}");
}
