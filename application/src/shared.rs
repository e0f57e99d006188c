//! State every shard sees, in named parts each used by one concern: the partition table
//! (owner shard and live counters of every partition, lock-free), the sessions (client
//! registry, login limiting, session numbering), consumer-group membership, the replica's
//! commit and role, and telemetry (bus and data counters, request latency). Everything here is
//! `Send + Sync`; on a shard's hot path only the partition table is read, without a lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use rill_domain::Namespace;
use rill_domain::answer::Usage;

use crate::clients::ClientRegistry;
use crate::config::ServerConfig;
use crate::latency::RequestLatency;
use crate::login_guard::LoginGuard;
use crate::memory_pool::MemoryPool;
use crate::partition::ConsumerKey;

/// The replica's role, for cluster metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaRole {
    pub view: u32,
    pub primary: u8,
    pub normal: bool,
}

/// Live counters of one partition, written by its owner and read by any shard.
#[derive(Debug)]
pub struct PartitionStats {
    pub shard: u16,
    size_bytes: AtomicU64,
    messages_count: AtomicU64,
    segments_count: AtomicU32,
    current_offset: AtomicU64,
    first_offset: AtomicU64,
    /// A write failed and none succeeded since: sends are refused.
    read_only: AtomicBool,
    /// Which history of the partition's ids this log holds: its creation, or the purge or
    /// reset that last started it from nothing (protocol 0.12 routes name it).
    incarnation: AtomicU64,
    /// Messages and bytes appended and served by polls since the partition was opened.
    pub appended_messages: AtomicU64,
    pub appended_bytes: AtomicU64,
    pub polled_messages: AtomicU64,
    pub polled_bytes: AtomicU64,
    /// Stored consumer and group offsets, republished when one changes (not on the send
    /// path), for the consumer-lag metric.
    stored_offsets: std::sync::Mutex<Vec<(ConsumerKey, u64)>>,
    /// Notified after every append, on whichever shard owns the partition: wakes the
    /// deferred polls waiting for its messages, on any shard.
    pub appended: event_listener::Event,
}

/// What a partition's owner publishes about it after each operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionSnapshot {
    pub usage: Usage,
    pub segments_count: u32,
    pub current_offset: u64,
    pub first_offset: u64,
    pub read_only: bool,
}

impl PartitionStats {
    pub fn new(shard: u16) -> Self {
        Self {
            shard,
            size_bytes: AtomicU64::new(0),
            messages_count: AtomicU64::new(0),
            segments_count: AtomicU32::new(0),
            current_offset: AtomicU64::new(0),
            first_offset: AtomicU64::new(0),
            read_only: AtomicBool::new(false),
            incarnation: AtomicU64::new(0),
            appended_messages: AtomicU64::new(0),
            appended_bytes: AtomicU64::new(0),
            polled_messages: AtomicU64::new(0),
            polled_bytes: AtomicU64::new(0),
            stored_offsets: std::sync::Mutex::new(Vec::new()),
            appended: event_listener::Event::new(),
        }
    }

    pub fn set_stored_offsets(&self, offsets: Vec<(ConsumerKey, u64)>) {
        *self.stored_offsets.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = offsets;
    }

    /// Every stored consumer and group offset of the partition.
    pub fn stored_offsets(&self) -> Vec<(ConsumerKey, u64)> {
        self.stored_offsets.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub fn set(&self, snapshot: PartitionSnapshot) {
        self.size_bytes.store(snapshot.usage.size_bytes, Ordering::Relaxed);
        self.messages_count.store(snapshot.usage.messages_count, Ordering::Relaxed);
        self.segments_count.store(snapshot.segments_count, Ordering::Relaxed);
        self.current_offset.store(snapshot.current_offset, Ordering::Relaxed);
        self.first_offset.store(snapshot.first_offset, Ordering::Relaxed);
        self.read_only.store(snapshot.read_only, Ordering::Relaxed);
    }

    pub fn first_offset(&self) -> u64 {
        self.first_offset.load(Ordering::Relaxed)
    }

    /// Counts an append of `messages` and wakes every poll waiting on the partition.
    pub fn note_appended(&self, messages: u64) {
        self.appended_messages.fetch_add(messages, Ordering::Relaxed);
        self.appended.notify(usize::MAX);
    }

    /// The log's incarnation; never zero once the partition is served.
    pub fn incarnation(&self) -> u64 {
        self.incarnation.load(Ordering::Relaxed)
    }

    pub(crate) fn set_incarnation(&self, incarnation: u64) {
        self.incarnation.store(incarnation.max(1), Ordering::Relaxed);
    }

    pub fn read_only(&self) -> bool {
        self.read_only.load(Ordering::Relaxed)
    }

    pub fn usage(&self) -> Usage {
        Usage {
            size_bytes: self.size_bytes.load(Ordering::Relaxed),
            messages_count: self.messages_count.load(Ordering::Relaxed),
        }
    }

    pub fn segments_count(&self) -> u32 {
        self.segments_count.load(Ordering::Relaxed)
    }

    pub fn current_offset(&self) -> u64 {
        self.current_offset.load(Ordering::Relaxed)
    }
}

/// Counters of the shard bus, for tests and stats.
#[derive(Debug, Default)]
pub struct BusCounters {
    /// Partition operations executed on a shard other than the connection's.
    pub forwarded: AtomicU64,
    /// Metadata operations forwarded to shard 0.
    pub metadata_forwarded: AtomicU64,
    /// Connections moved to the shard owning their partitions.
    pub connections_moved: AtomicU64,
    /// Crossing sends whose reply the partition's owner wrote to the client's socket whole.
    pub direct_replies: AtomicU64,
}

/// Counters of the data path: damage found, retention, scrubbing, write failures, dedup and
/// the data volume's space, for `/metrics` and stats.
#[derive(Debug, Default)]
pub struct DataCounters {
    /// Distinct damaged batches found (by polls or the scrubber), each counted once.
    pub damaged_batches: AtomicU64,
    /// Polls answered with an error because the batch they started at is damaged.
    pub damaged_reads: AtomicU64,
    pub scrub_bytes: AtomicU64,
    pub scrub_batches: AtomicU64,
    /// Damaged batches the scrubber met, repeats included.
    pub scrub_damaged: AtomicU64,
    pub scrub_passes: AtomicU64,
    pub retention_segments: AtomicU64,
    pub retention_messages: AtomicU64,
    pub retention_bytes: AtomicU64,
    /// Partition writes (appends and flushes) that failed.
    pub write_failures: AtomicU64,
    /// Sends refused: the partition was read-only, or the volume below its free-space floor.
    pub sends_refused: AtomicU64,
    /// Messages dropped by deduplication.
    pub duplicates_dropped: AtomicU64,
    pub disk_total: AtomicU64,
    pub disk_available: AtomicU64,
    pub disk_floor: AtomicU64,
    pub below_floor: AtomicBool,
    /// Whether the last free-space reading that was logged was below the floor.
    pub floor_logged: AtomicBool,
    /// Bytes under the data directory, as the host metrics last measured them.
    pub data_directory_bytes: AtomicU64,
    /// Every shard's spare logs.
    pub spare_logs: Arc<crate::partition::SpareLogCounters>,
}

/// Every partition's owner shard and live counters; lock-free for readers.
pub struct PartitionTable {
    shard_count: u16,
    partitions: papaya::HashMap<Namespace, Arc<PartitionStats>>,
}

impl PartitionTable {
    pub fn new(shard_count: u16) -> Self {
        assert!(shard_count > 0, "at least one shard");
        Self { shard_count, partitions: papaya::HashMap::new() }
    }

    pub fn shard_count(&self) -> u16 {
        self.shard_count
    }

    /// The owner of a partition: looked up in the table; a partition not registered yet
    /// (being created) falls back to the rule the table was built with, Murmur3 over the
    /// packed namespace.
    pub fn owner(&self, namespace: Namespace) -> u16 {
        match self.partitions.pin().get(&namespace) {
            Some(stats) => stats.shard,
            None => namespace.shard(self.shard_count),
        }
    }

    pub fn stats(&self, namespace: Namespace) -> Option<Arc<PartitionStats>> {
        self.partitions.pin().get(&namespace).cloned()
    }

    pub fn insert(&self, namespace: Namespace, stats: Arc<PartitionStats>) {
        self.partitions.pin().insert(namespace, stats);
    }

    pub fn remove(&self, namespace: Namespace) {
        self.partitions.pin().remove(&namespace);
    }

    /// Every registered partition matching `keep`, in order.
    pub fn namespaces(&self, keep: impl Fn(Namespace) -> bool) -> Vec<Namespace> {
        let mut found: Vec<Namespace> = self.partitions.pin().keys().copied().filter(|ns| keep(*ns)).collect();
        found.sort_unstable();
        found
    }
}

/// Who is connected and who may log in: the client registry, the failed-login limiter and
/// session numbering.
pub struct Sessions {
    pub clients: ClientRegistry,
    pub login_guard: LoginGuard,
    /// 0.12 sessions a reconnecting client may bind again.
    pub retained: crate::retained_sessions::RetainedSessions,
    next_session: AtomicU64,
    /// Numbers below this end are reserved in the ledger; past it a block more is reserved
    /// first (a small synchronous write, once per [`SESSION_BLOCK`] logins).
    reserved_end: AtomicU64,
    ledger: std::sync::Mutex<Box<dyn crate::ports::SessionLedger>>,
}

/// Session numbers reserved at a time.
pub const SESSION_BLOCK: u64 = 1 << 20;
/// Session numbers stay below this: 0.12 clients build producer ids from them with 20 bits
/// of their own, within 63 bits.
pub const SESSION_LIMIT: u64 = 1 << 43;

impl Sessions {
    /// Numbering that starts where `ledger`'s earlier runs left off; the first block is
    /// reserved before any login.
    pub fn new(login_guard: LoginGuard, ledger: Box<dyn crate::ports::SessionLedger>) -> std::io::Result<Self> {
        let first = ledger.reserved()?.max(1);
        let end = first.saturating_add(SESSION_BLOCK).min(SESSION_LIMIT);
        ledger.reserve(end)?;
        Ok(Self {
            clients: ClientRegistry::default(),
            login_guard,
            retained: Default::default(),
            next_session: AtomicU64::new(first),
            reserved_end: AtomicU64::new(end),
            ledger: std::sync::Mutex::new(ledger),
        })
    }

    /// Numbering that starts at 1 and keeps nothing (tests).
    pub fn volatile(login_guard: LoginGuard) -> Self {
        Self::new(login_guard, Box::new(crate::ports::VolatileLedger)).expect("a volatile ledger cannot fail")
    }

    /// A session number never handed out before, by this run or an earlier one on the same
    /// data: nonzero, increasing, below [`SESSION_LIMIT`]. `None` when none can be
    /// reserved (the ledger failed, or every number was used).
    pub fn next_session(&self) -> Option<u64> {
        let session = self.next_session.fetch_add(1, Ordering::Relaxed);
        if session < self.reserved_end.load(Ordering::Acquire) {
            return Some(session);
        }
        if session >= SESSION_LIMIT {
            return None;
        }
        let ledger = self.ledger.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let end = self.reserved_end.load(Ordering::Acquire);
        if session >= end {
            let next_end = session.saturating_add(SESSION_BLOCK).min(SESSION_LIMIT);
            if let Err(error) = ledger.reserve(next_end) {
                tracing::error!(%error, "cannot reserve session numbers; logins are refused until it can");
                return None;
            }
            self.reserved_end.store(next_end, Ordering::Release);
        }
        Some(session)
    }
}

/// The metadata replica as the shards see it: the commit number and the view, primary and
/// status, for stats and cluster metadata.
pub struct ReplicaState {
    commit: AtomicU64,
    /// View, primary and status, packed (see `set_role`).
    role: AtomicU64,
    /// Per replica id, the admitted connections it holds open to this node's replica plane.
    inbound: Box<[AtomicU32]>,
}

impl ReplicaState {
    pub fn new(commit: u64, replicas: u8) -> Self {
        let inbound = (0..replicas).map(|_| AtomicU32::new(0)).collect();
        Self { commit: AtomicU64::new(commit), role: AtomicU64::new(1), inbound }
    }

    /// A peer's connection to this node's replica plane was admitted (`up`) or closed.
    pub fn peer_connection(&self, replica: u8, up: bool) {
        if let Some(count) = self.inbound.get(replica as usize) {
            match up {
                true => count.fetch_add(1, Ordering::AcqRel),
                false => count.fetch_sub(1, Ordering::AcqRel),
            };
        }
    }

    /// Whether a peer holds a connection open to this node. A replica connects only to the
    /// peers it sends to: the primary to every backup, a backup to the primary, and every
    /// replica to all in a view change or recovery. So one backup may not hear from another
    /// in a quiet view, and a peer that vanishes without its kernel closing its sockets
    /// (power loss, a partition) stays counted until the connection errors (issue #13).
    pub fn peer_connected(&self, replica: u8) -> bool {
        self.inbound.get(replica as usize).is_some_and(|count| count.load(Ordering::Acquire) > 0)
    }

    pub fn commit(&self) -> u64 {
        self.commit.load(Ordering::Acquire)
    }

    pub fn set_commit(&self, commit: u64) {
        self.commit.fetch_max(commit, Ordering::Release);
    }

    /// Records the replica's view, its primary and whether it is in normal status.
    pub fn set_role(&self, role: ReplicaRole) {
        let packed = u64::from(role.view) << 32 | u64::from(role.primary) << 8 | u64::from(role.normal);
        self.role.store(packed, Ordering::Release);
    }

    pub fn role(&self) -> ReplicaRole {
        let packed = self.role.load(Ordering::Acquire);
        ReplicaRole { view: (packed >> 32) as u32, primary: (packed >> 8) as u8, normal: packed & 1 == 1 }
    }
}

/// What the server counts about itself, for stats and `/metrics`.
#[derive(Debug, Default)]
pub struct Telemetry {
    pub bus: BusCounters,
    pub data: DataCounters,
    /// Request latency by transport family and request.
    pub latency: RequestLatency,
    /// Binary-protocol replies that carried an error, by status code.
    pub errors: ErrorCounts,
    /// How long file fsyncs take (recorded by the storage adapter).
    pub fsync_latency: Arc<crate::latency::Histogram>,
    /// Where each binary request's trace goes when OpenTelemetry is on (set once at start;
    /// unset, requests are not traced and nothing is spent on it).
    pub request_traces: std::sync::OnceLock<std::sync::mpsc::SyncSender<RequestTrace>>,
    /// Whether metadata changes are refused: the journal stopped taking writes (a disk
    /// error, until it opens again), or the replica halted itself (until a restart).
    pub metadata_halted: AtomicBool,
    /// Replicas (the metadata's, a partition group's) that halted themselves since start: a
    /// broken invariant or a committed op they could not apply.
    pub replica_halts: AtomicU64,
    /// Each shard's partition group, as that shard last published it (empty without
    /// `replicate_partitions`).
    pub groups: Box<[GroupGauges]>,
}

/// One partition group's health on this node, published by the shard that drives it every
/// tick.
#[derive(Debug, Default)]
pub struct GroupGauges {
    /// Whether the shard opened its group.
    pub open: AtomicBool,
    pub view: AtomicU32,
    pub primary: AtomicU32,
    pub normal: AtomicBool,
    pub commit: AtomicU64,
    /// Whether the group refuses every send here: its journal could not be written (until it
    /// opens again), or a copy here differs from the partition the group recorded, or its
    /// replica halted itself (until a restart).
    pub halted: AtomicBool,
    /// This node's copies that lack batches the group committed, or that a purge or
    /// recreation has not emptied yet: they serve less than their peers until caught up.
    pub lagging_copies: AtomicU32,
}

/// One served binary request, for an OpenTelemetry span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTrace {
    pub command: &'static str,
    pub stream: Option<String>,
    pub topic: Option<String>,
    pub partition: Option<u32>,
    /// The reply's status (0: success); an eviction is reported as its reason plus 1000.
    pub status: u32,
    pub start_unix_us: u64,
    pub duration_us: u64,
    pub shard: u16,
}

/// Error replies by status code. Taken only on error paths, so one lock is enough.
#[derive(Debug, Default)]
pub struct ErrorCounts {
    by_code: std::sync::Mutex<std::collections::BTreeMap<u32, u64>>,
}

impl ErrorCounts {
    pub fn count(&self, code: u32) {
        *self.by_code.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(code).or_insert(0) += 1;
    }

    /// (status code, replies) for every code seen, ascending.
    pub fn snapshot(&self) -> Vec<(u32, u64)> {
        self.by_code.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().map(|(c, n)| (*c, *n)).collect()
    }
}

pub struct Shared {
    pub config: ServerConfig,
    pub shard_count: u16,
    pub partitions: PartitionTable,
    pub sessions: Sessions,
    pub replica: ReplicaState,
    pub telemetry: Telemetry,
    pub start_time_us: u64,
    /// Buffers for request bodies, reply frames and journaled batches.
    pub pool: &'static MemoryPool,
    /// The previous run stopped gracefully with everything fsynced: no segment tail can be
    /// torn, so partitions open without cutting one.
    pub clean_start: bool,
}

impl Shared {
    pub fn new(
        config: ServerConfig,
        shard_count: u16,
        commit: u64,
        start_time_us: u64,
        pool: &'static MemoryPool,
    ) -> Self {
        let security = config.security;
        let replicas = config.membership.replica_count;
        Self {
            sessions: Sessions::volatile(LoginGuard::new(
                security.login_max_failures,
                security.login_failure_window_us,
            )),
            config,
            shard_count,
            partitions: PartitionTable::new(shard_count),
            replica: ReplicaState::new(commit, replicas),
            telemetry: Telemetry {
                groups: (0..shard_count).map(|_| GroupGauges::default()).collect(),
                ..Telemetry::default()
            },
            start_time_us,
            pool,
            clean_start: false,
        }
    }
}

/// What a transport outside the shards (HTTP) uses of the shared state: login limiting, the
/// figures it reports, and where its own files live. It never sees `Shared` itself.
#[derive(Clone)]
pub struct GatewayContext(Arc<Shared>);

impl GatewayContext {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self(shared)
    }

    pub fn login_guard(&self) -> &LoginGuard {
        &self.0.sessions.login_guard
    }

    /// The pause before answering a failed login.
    pub fn login_failure_delay_us(&self) -> u64 {
        self.0.config.security.login_failure_delay_us
    }

    /// The data directory, where the transport keeps its signing secret.
    pub fn data_path(&self) -> &std::path::Path {
        &self.0.config.data_path
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.0.telemetry
    }

    /// The metadata replica's commit number and role, as the shards last published them.
    pub fn replica(&self) -> (u64, ReplicaRole) {
        (self.0.replica.commit(), self.0.replica.role())
    }

    pub fn pool_stats(&self) -> crate::memory_pool::PoolStats {
        self.0.pool.stats()
    }

    pub fn clients_count(&self) -> u32 {
        self.0.sessions.clients.count()
    }

    /// Connected clients per protocol generation.
    pub fn clients_by_protocol(&self) -> [(rill_domain::version::Dialect, u32); 2] {
        self.0.sessions.clients.count_by_protocol()
    }

    pub fn shard_count(&self) -> u16 {
        self.0.shard_count
    }

    /// Connected clients per transport (`tcp`, `quic`, `http`, `websocket`), each listed.
    pub fn connections_by_transport(&self) -> [(&'static str, u64); 4] {
        let mut counts = [("tcp", 0), ("quic", 0), ("http", 0), ("websocket", 0)];
        for client in self.0.sessions.clients.all() {
            if let Some(slot) = counts.get_mut((client.transport as usize).wrapping_sub(1)) {
                slot.1 += 1;
            }
        }
        counts
    }

    /// A partition's live counters, once its owner registered it.
    pub fn partition(&self, namespace: Namespace) -> Option<Arc<PartitionStats>> {
        self.0.partitions.stats(namespace)
    }
}
