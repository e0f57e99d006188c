//! A three-shard server in one thread, on simulated adapters: metadata operations sent to a
//! peer shard are committed by shard 0, partition operations travel to their owners and
//! back, and a crash of the simulated disk loses nothing that was acknowledged as durable.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use futures_executor::block_on;
use rill_adapter_sim::{
    InlineOffload, LocalBus, LocalShards, ManualClock, SimDiagnostics, SimHostMetrics, SimMetadata, SimStorage,
};
use rill_application::credentials::RootSeed;
use rill_application::memory_pool::{MemoryPool, PoolBuf};
use rill_application::ports::Env;
use rill_application::shard::recover;
use rill_application::{Connection, MetadataWriter, Outcome, ServerConfig, Shard, ShardParts, Shared};
use rill_domain::Namespace;
use rill_domain::batch;
use rill_domain::wire::codes::{code, operation};
use rill_domain::wire::header::RequestHeader;

struct SimEnv;

impl Env for SimEnv {
    type Storage = SimStorage;
    type Clock = ManualClock;
    type Bus = LocalBus<SimEnv>;
    type MetadataReader = SimMetadata;
    type MetadataPublisher = SimMetadata;
    type Offload = InlineOffload;
    type Diagnostics = SimDiagnostics;
    type HostMetrics = SimHostMetrics;
}

const SHARDS: u16 = 3;

/// The calls one shard's bus handle made.
type CallLog = Rc<std::cell::RefCell<Vec<(u16, &'static str)>>>;

fn config() -> ServerConfig {
    ServerConfig {
        data_path: PathBuf::from("/data"),
        root: RootSeed { username: "iggy".into(), password: "iggy".into(), generated: false },
        advertised_ip: "127.0.0.1".into(),
        ports: Default::default(),
        host: Default::default(),
        security: Default::default(),
        data: Default::default(),
        membership: Default::default(),
        cluster_nodes: Vec::new(),
    }
}

/// Builds the shards on `storage`, each with its own bus handle, sharing one metadata view.
fn start(storage: &SimStorage) -> (Vec<Rc<Shard<SimEnv>>>, Vec<CallLog>) {
    let config = config();
    let clock = ManualClock::new(1_700_000_000_000_000);
    let recovered = block_on(recover(storage, &config, 1_700_000_000_000_000, 7)).expect("recover");
    let pool = MemoryPool::new(512 << 20, 64).expect("pool").leak();
    let shared = Arc::new(Shared::new(config, SHARDS, recovered.commit(), 0, pool));
    let view = SimMetadata::new(recovered.metadata());
    let shards = Rc::new(LocalShards::default());
    let mut writer = Some(MetadataWriter::<SimEnv>::new(recovered.replication, view.clone(), None, 99));
    let (mut systems, mut calls) = (Vec::new(), Vec::new());
    for shard_id in 0..SHARDS {
        let bus = LocalBus::new(shard_id, SHARDS, shards.clone());
        calls.push(bus.calls.clone());
        let parts = ShardParts {
            storage: storage.clone(),
            clock: clock.clone(),
            shared: shared.clone(),
            metadata: view.clone(),
            bus,
            offload: InlineOffload,
            diagnostics: SimDiagnostics,
            host_metrics: SimHostMetrics,
            writer: if shard_id == 0 { writer.take() } else { None },
        };
        let system = Rc::new(Shard::new(parts));
        shards.register(&system);
        systems.push(system);
    }
    for system in &systems {
        block_on(system.open_owned_partitions()).expect("open partitions");
    }
    (systems, calls)
}

/// A logged-in connection on `system` and a way to send requests on it.
struct Client {
    system: Rc<Shard<SimEnv>>,
    connection: Connection,
    request: u64,
}

impl Client {
    fn login(system: &Rc<Shard<SimEnv>>) -> Self {
        let client_id =
            system.shared.clients.connect("sim".into(), rill_application::Transport::Tcp, system.shard_id());
        let mut client = Self { system: system.clone(), connection: Connection::new(client_id), request: 0 };
        let mut body = vec![0x00, 0x2c, 0x00, 0x00, 3, b's', b'i', b'm', 1, b'1'];
        body.extend_from_slice(b"\x04iggy\x04iggy\x00\x00\x00\x00");
        client.call(operation::REGISTER, 0, &body).expect("login");
        client
    }

    /// Sends one request; returns the reply body or the status.
    fn call(&mut self, op: u8, nr_code: u32, body: &[u8]) -> Result<Vec<u8>, u32> {
        let session = self.connection.bound().map_or(0, |b| b.session);
        let request = if op == operation::REGISTER { 0 } else { self.request + 1 };
        self.request = request;
        let header = RequestHeader {
            size: 0,
            client: 7,
            request_checksum: 0,
            timestamp: 0,
            request,
            operation: op,
            session,
            code: nr_code,
        };
        let mut frame = header.encode(body.len()).to_vec();
        frame.extend_from_slice(body);
        match block_on(self.system.handle(&self.connection, PoolBuf::plain(frame))) {
            Outcome::Reply(frame) => {
                let status = u32::from_le_bytes(frame[216..220].try_into().unwrap());
                if status == 0 { Ok(frame[256..].to_vec()) } else { Err(status) }
            }
            Outcome::Evict(frame) => Err(1000 + frame[255] as u32),
        }
    }
}

fn numeric(id: u32) -> Vec<u8> {
    let mut out = vec![1, 4];
    out.extend_from_slice(&id.to_le_bytes());
    out
}

fn create_stream_and_topic(client: &mut Client, name: &str, partitions: u32) {
    let mut body = vec![name.len() as u8];
    body.extend_from_slice(name.as_bytes());
    let reply = client.call(operation::CREATE_STREAM, 0, &body).expect("create stream");
    let stream_id = u32::from_le_bytes(reply[4..8].try_into().unwrap());
    let mut body = numeric(stream_id);
    body.extend_from_slice(&partitions.to_le_bytes());
    body.extend_from_slice(&[1, b't']);
    client.call(operation::CREATE_TOPIC, 0, &body).expect("create topic");
}

fn send(client: &mut Client, stream: u32, partition: u32, payloads: &[&[u8]]) -> Result<Vec<u8>, u32> {
    let messages: Vec<(u128, &[u8], &[u8])> =
        payloads.iter().enumerate().map(|(i, p)| (i as u128 + 1, *p, &b""[..])).collect();
    let mut metadata = numeric(stream);
    metadata.extend_from_slice(&numeric(0));
    metadata.extend_from_slice(&[2, 4]);
    metadata.extend_from_slice(&partition.to_le_bytes());
    metadata.extend_from_slice(&(payloads.len() as u32).to_le_bytes());
    let mut body = (metadata.len() as u32).to_le_bytes().to_vec();
    body.extend_from_slice(&metadata);
    body.extend_from_slice(&batch::build(&messages, 5));
    client.call(operation::SEND_MESSAGES, 0, &body)
}

/// Polls from offset 0; returns (messages count, the payload bytes of the whole reply).
fn poll(client: &mut Client, stream: u32, partition: u32) -> (u32, Vec<u8>) {
    let mut body = vec![1];
    body.extend_from_slice(&numeric(1));
    body.extend_from_slice(&numeric(stream));
    body.extend_from_slice(&numeric(0));
    body.push(1);
    body.extend_from_slice(&partition.to_le_bytes());
    body.push(1);
    body.extend_from_slice(&0u64.to_le_bytes());
    body.extend_from_slice(&100u32.to_le_bytes());
    body.push(0);
    let reply = client.call(operation::NON_REPLICATED, code::POLL_MESSAGES, &body).expect("poll");
    (u32::from_le_bytes(reply[12..16].try_into().unwrap()), reply)
}

#[test]
fn metadata_from_a_peer_shard_is_committed_by_shard_zero() {
    let storage = SimStorage::new();
    let (shards, calls) = start(&storage);
    let mut client = Client::login(&shards[2]);
    create_stream_and_topic(&mut client, "orders", 6);
    assert!(calls[2].borrow().iter().any(|(to, kind)| *to == 0 && *kind == "metadata"));
    assert_eq!(shards[2].shared.bus.metadata_forwarded.load(std::sync::atomic::Ordering::Relaxed), 2);
    // Shard 0 opened each partition on its owner.
    for partition in 0..6 {
        let owner = Namespace::new(0, 0, partition).unwrap().shard(SHARDS);
        let stats = shards[1].shared.stats(Namespace::new(0, 0, partition).unwrap()).expect("registered");
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
    let forwarded = shards[1].shared.bus.forwarded.load(std::sync::atomic::Ordering::Relaxed);
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
    let mut body = vec![7];
    body.extend_from_slice(b"durable");
    client.call(operation::CREATE_STREAM, 0, &body).expect("create stream");
    // A persisted topic (durability = persisted), so every send writes.
    let mut body = numeric(0);
    body.extend_from_slice(&3u32.to_le_bytes());
    body.extend_from_slice(&[1, b't']);
    body.extend_from_slice(&[2, 10, 0, 0, 0]);
    body.extend_from_slice(b"durability");
    body.extend_from_slice(&[2, 9, 0, 0, 0]);
    body.extend_from_slice(b"persisted");
    client.call(operation::CREATE_TOPIC, 0, &body).expect("create topic");
    for partition in 0..3 {
        send(&mut client, 0, partition, &[b"first"]).expect("send");
    }
    // The next write (partition 0's log) fails: that send alone is refused.
    storage.fail_calls(storage.mutating_calls()..storage.mutating_calls() + 1, std::io::ErrorKind::StorageFull);
    assert_eq!(send(&mut client, 0, 0, &[b"refused"]), Err(4006));
    let read_only = shards[1].shared.stats(Namespace::new(0, 0, 0).unwrap()).unwrap().read_only();
    assert!(read_only, "partition 0 is read-only");
    for partition in 1..3 {
        send(&mut client, 0, partition, &[b"second"]).expect("the other partitions take sends");
        assert_eq!(poll(&mut client, 0, partition).0, 2);
    }
    assert_eq!(poll(&mut client, 0, 0).0, 1, "partition 0 still serves what it stored");
    send(&mut client, 0, 0, &[b"retried"]).expect("the next write succeeds");
    assert_eq!(poll(&mut client, 0, 0).0, 2);
    assert!(!shards[1].shared.stats(Namespace::new(0, 0, 0).unwrap()).unwrap().read_only());
}
