//! A simulated server of several shards in one thread, for the shard-level tests: the
//! simulated adapters, the shards built on one simulated disk, and a logged-in connection
//! that speaks raw protocol frames.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use futures_executor::block_on;
use rill_adapter_sim::{
    InlineOffload, Jitter, LocalBus, LocalShards, ManualClock, SimDiagnostics, SimHostMetrics, SimMetadata, SimStorage,
};
use rill_application::credentials::RootSeed;
use rill_application::memory_pool::{MemoryPool, PoolBuf};
use rill_application::ports::Env;
use rill_application::shard::recover;
use rill_application::{Connection, MetadataWriter, Outcome, ServerConfig, Shard, ShardParts, Shared};
use rill_domain::batch;
use rill_domain::wire::codes::{code, operation};
use rill_domain::wire::header::RequestHeader;

pub struct SimEnv;

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

pub const SHARDS: u16 = 3;

/// The calls one shard's bus handle made.
pub type CallLog = Rc<std::cell::RefCell<Vec<(u16, &'static str)>>>;

/// Started shards, and each one's bus calls.
pub type Started = (Vec<Rc<Shard<SimEnv>>>, Vec<CallLog>);

pub fn config() -> ServerConfig {
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
        encryption: None,
    }
}

/// Builds `SHARDS` shards on `storage`, each with its own bus handle, sharing one metadata
/// view.
pub fn start(storage: &SimStorage) -> Started {
    start_shards(storage, SHARDS)
}

/// Builds `count` shards on `storage`.
pub fn start_shards(storage: &SimStorage, count: u16) -> Started {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let pool = MemoryPool::new(512 << 20, 64).expect("pool").leak();
    start_on(storage, config(), &clock, count, pool, Jitter::default()).expect("start")
}

/// Recovers `storage` and builds `count` shards on it with `config`, sharing `clock` and
/// `pool`; their bus pauses with `jitter`. A recovery or partition-opening failure is
/// returned, for a simulation to report with its seed.
pub fn start_on(
    storage: &SimStorage,
    config: ServerConfig,
    clock: &ManualClock,
    count: u16,
    pool: &'static MemoryPool,
    jitter: Jitter,
) -> Result<Started, String> {
    let now = rill_application::ports::Clock::now_us(clock);
    let mut recovered = block_on(recover(storage, &config, now, 7)).map_err(|e| format!("recover: {e}"))?;
    let shared = Arc::new(Shared::new(config, count, recovered.commit(), 0, pool));
    let view = SimMetadata::new(recovered.metadata());
    let pending = std::mem::take(&mut recovered.pending);
    let shards = Rc::new(LocalShards::default());
    // A new VSR client id each start, as the server draws one: the replica drops requests
    // of a known client whose numbers it has seen, and numbers start again at 1.
    static STARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let client_id = 99 + STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as u128;
    let mut writer = Some(MetadataWriter::<SimEnv>::new(recovered.replication, view.clone(), None, client_id));
    let (mut systems, mut calls) = (Vec::new(), Vec::new());
    for shard_id in 0..count {
        let bus = LocalBus::new(shard_id, count, shards.clone()).with_jitter(jitter.clone());
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
    // As the server starts: the replica's opening effects, then the partitions.
    block_on(systems[0].start_replication(pending));
    for system in &systems {
        block_on(system.open_owned_partitions());
    }
    Ok((systems, calls))
}

/// A logged-in connection on `system` and a way to send requests on it.
pub struct Client {
    pub system: Rc<Shard<SimEnv>>,
    pub connection: Connection,
    request: u64,
    /// The VSR client id its requests carry: its own per connection, as an SDK's.
    pub vsr_client: u128,
}

/// VSR client ids handed out to test connections, never twice in one process.
static NEXT_VSR_CLIENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(7);

impl Client {
    pub fn login(system: &Rc<Shard<SimEnv>>) -> Self {
        Self::register(system, b"\x04iggy\x04iggy")
    }

    /// A connection logged in as `username` with `password`.
    pub fn login_as(system: &Rc<Shard<SimEnv>>, username: &str, password: &str) -> Self {
        let mut credentials = vec![username.len() as u8];
        credentials.extend_from_slice(username.as_bytes());
        credentials.push(password.len() as u8);
        credentials.extend_from_slice(password.as_bytes());
        Self::register(system, &credentials)
    }

    /// A connection on `system` logged in with a personal access token (no password hash
    /// to check, so simulations can log in often).
    pub fn login_with_token(system: &Rc<Shard<SimEnv>>, token: &str) -> Self {
        let mut credentials = vec![token.len() as u8];
        credentials.extend_from_slice(token.as_bytes());
        Self::register(system, &credentials)
    }

    /// Connects and sends REGISTER with `credentials` (then an empty context).
    fn register(system: &Rc<Shard<SimEnv>>, credentials: &[u8]) -> Self {
        let client_id =
            system.connect("sim".into(), rill_application::Transport::Tcp).expect("under the connection limit");
        let vsr_client = u128::from(NEXT_VSR_CLIENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let mut client =
            Self { system: system.clone(), connection: Connection::new(client_id), request: 0, vsr_client };
        client.log_in(credentials).expect("login");
        client
    }

    /// A connection logged in as root in protocol 0.12 (0.12.2, with a bind secret).
    pub fn login_v12(system: &Rc<Shard<SimEnv>>) -> Self {
        let client_id =
            system.connect("sim".into(), rill_application::Transport::Tcp).expect("under the connection limit");
        let vsr_client = u128::from(NEXT_VSR_CLIENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let mut client =
            Self { system: system.clone(), connection: Connection::new(client_id), request: 0, vsr_client };
        let mut body = vec![0x02, 0x30, 0x00, 0x00, 3, b's', b'i', b'm', 1, b'1'];
        body.extend_from_slice(&[9; 32]);
        body.extend_from_slice(b"\x04iggy\x04iggy");
        body.extend_from_slice(&[0, 0, 0, 0]);
        client.call(operation::REGISTER, 0, &body).expect("a 0.12 login");
        client
    }

    /// Sends REGISTER on this connection with `credentials` (a first login, or another).
    pub fn log_in(&mut self, credentials: &[u8]) -> Result<Vec<u8>, u32> {
        let mut body = vec![0x00, 0x2c, 0x00, 0x00, 3, b's', b'i', b'm', 1, b'1'];
        body.extend_from_slice(credentials);
        body.extend_from_slice(&[0, 0, 0, 0]);
        self.call(operation::REGISTER, 0, &body)
    }

    /// Sends one request; returns the reply body or the status.
    pub fn call(&mut self, op: u8, nr_code: u32, body: &[u8]) -> Result<Vec<u8>, u32> {
        let frame = self.frame(op, nr_code, body);
        reply_of(block_on(self.system.handle(&self.connection, PoolBuf::plain(frame))))
    }

    /// The frame of the next request: header and body.
    pub fn frame(&mut self, op: u8, nr_code: u32, body: &[u8]) -> Vec<u8> {
        let session = if op == operation::REGISTER { 0 } else { self.connection.bound().map_or(0, |b| b.session) };
        let request = if op == operation::REGISTER { 0 } else { self.request + 1 };
        self.request = request;
        let header = RequestHeader {
            size: 0,
            client: self.vsr_client,
            request_checksum: 0,
            timestamp: 0,
            request,
            operation: op,
            session,
            code: nr_code,
            ..RequestHeader::default()
        };
        let mut frame = header.encode(body.len()).to_vec();
        frame.extend_from_slice(body);
        frame
    }
}

/// A reply's body, or its status (an eviction as 1000 + its reason).
pub fn reply_of(outcome: Outcome) -> Result<Vec<u8>, u32> {
    match outcome {
        Outcome::Reply(frame) => {
            let status = u32::from_le_bytes(frame[216..220].try_into().unwrap());
            if status == 0 { Ok(frame[256..].to_vec()) } else { Err(status) }
        }
        Outcome::Evict(frame) => Err(1000 + frame[255] as u32),
    }
}

pub fn numeric(id: u32) -> Vec<u8> {
    let mut out = vec![1, 4];
    out.extend_from_slice(&id.to_le_bytes());
    out
}

/// Creates a stream; returns its id.
pub fn create_stream(client: &mut Client, name: &str) -> u32 {
    let mut body = vec![name.len() as u8];
    body.extend_from_slice(name.as_bytes());
    let reply = client.call(operation::CREATE_STREAM, 0, &body).expect("create stream");
    u32::from_le_bytes(reply[4..8].try_into().unwrap())
}

pub fn create_stream_and_topic(client: &mut Client, name: &str, partitions: u32) {
    let stream_id = create_stream(client, name);
    let mut body = numeric(stream_id);
    body.extend_from_slice(&partitions.to_le_bytes());
    body.extend_from_slice(&[1, b't']);
    client.call(operation::CREATE_TOPIC, 0, &body).expect("create topic");
}

pub fn send(client: &mut Client, stream: u32, partition: u32, payloads: &[&[u8]]) -> Result<Vec<u8>, u32> {
    client.call(operation::SEND_MESSAGES, 0, &send_body(stream, partition, payloads).0)
}

/// Polls from offset 0; returns (messages count, the payload bytes of the whole reply).
pub fn poll(client: &mut Client, stream: u32, partition: u32) -> (u32, Vec<u8>) {
    let body = poll_body(stream, partition, 0, 100);
    let reply = client.call(operation::NON_REPLICATED, code::POLL_MESSAGES, &body).expect("poll");
    (u32::from_le_bytes(reply[12..16].try_into().unwrap()), reply)
}

/// A stream and one topic of `partitions` whose sends are fsynced (written at once); the
/// stream's id.
pub fn create_persisted_topic(client: &mut Client, name: &str, partitions: u32) -> u32 {
    let stream_id = create_stream(client, name);
    let mut body = numeric(stream_id);
    body.extend_from_slice(&partitions.to_le_bytes());
    body.extend_from_slice(&[1, b't']);
    body.extend_from_slice(&[2, 10, 0, 0, 0]);
    body.extend_from_slice(b"durability");
    body.extend_from_slice(&[2, 9, 0, 0, 0]);
    body.extend_from_slice(b"persisted");
    client.call(operation::CREATE_TOPIC, 0, &body).expect("create topic");
    stream_id
}

/// A SEND_MESSAGES body for topic 0 of `stream`, and where its batch starts in it.
pub fn send_body(stream: u32, partition: u32, payloads: &[&[u8]]) -> (Vec<u8>, usize) {
    let messages: Vec<(u128, &[u8], &[u8])> =
        payloads.iter().enumerate().map(|(i, p)| (i as u128 + 1, *p, &b""[..])).collect();
    let mut metadata = numeric(stream);
    metadata.extend_from_slice(&numeric(0));
    metadata.extend_from_slice(&[2, 4]);
    metadata.extend_from_slice(&partition.to_le_bytes());
    metadata.extend_from_slice(&(payloads.len() as u32).to_le_bytes());
    let mut body = (metadata.len() as u32).to_le_bytes().to_vec();
    body.extend_from_slice(&metadata);
    let batch_at = body.len();
    body.extend_from_slice(&batch::build(&messages, 5));
    (body, batch_at)
}

/// A POLL_MESSAGES body: consumer 1, topic 0 of `stream`, by offset, no auto-commit.
pub fn poll_body(stream: u32, partition: u32, offset: u64, count: u32) -> Vec<u8> {
    let mut body = vec![1];
    body.extend_from_slice(&numeric(1));
    body.extend_from_slice(&numeric(stream));
    body.extend_from_slice(&numeric(0));
    body.push(1);
    body.extend_from_slice(&partition.to_le_bytes());
    body.push(1);
    body.extend_from_slice(&offset.to_le_bytes());
    body.extend_from_slice(&count.to_le_bytes());
    body.push(0);
    body
}
