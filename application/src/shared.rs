//! State every shard sees: the client registry, login limiting, consumer-group membership,
//! session numbering, the commit number, and the partition table (owner shard and live
//! counters of every partition). Everything here is `Send + Sync`; nothing here is on a shard's hot path
//! except lock-free reads of the partition table.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use rill_domain::Namespace;
use rill_domain::wire::response::Usage;

use crate::groups::Groups;
use crate::login_guard::LoginGuard;
use crate::memory_pool::MemoryPool;
use crate::shard::{ClientRegistry, ServerConfig};

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
        }
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
}

pub struct Shared {
    pub config: ServerConfig,
    pub shard_count: u16,
    pub clients: ClientRegistry,
    pub login_guard: LoginGuard,
    pub groups: Groups,
    next_session: AtomicU64,
    commit: AtomicU64,
    /// The replica's view, primary and status, packed (see `set_role`), for cluster metadata.
    role: AtomicU64,
    pub start_time_us: u64,
    /// Namespace to owner shard and counters; lock-free for readers.
    pub partitions: papaya::HashMap<Namespace, Arc<PartitionStats>>,
    pub bus: BusCounters,
    /// Request latency by transport family and request, for `/metrics`.
    pub latency: crate::latency::RequestLatency,
    /// Buffers for request bodies, reply frames and journaled batches.
    pub pool: &'static MemoryPool,
    pub data: DataCounters,
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
        assert!(shard_count > 0, "at least one shard");
        let security = config.security;
        Self {
            login_guard: LoginGuard::new(security.login_max_failures, security.login_failure_window_us),
            groups: Groups::new(security.rebalancing_timeout_us),
            config,
            shard_count,
            clients: ClientRegistry::default(),
            next_session: AtomicU64::new(1),
            commit: AtomicU64::new(commit),
            role: AtomicU64::new(1),
            start_time_us,
            partitions: papaya::HashMap::new(),
            bus: BusCounters::default(),
            latency: crate::latency::RequestLatency::default(),
            pool,
            data: DataCounters::default(),
            clean_start: false,
        }
    }

    /// Sessions are strictly increasing and never zero.
    pub fn next_session(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    pub fn commit(&self) -> u64 {
        self.commit.load(Ordering::Acquire)
    }

    pub fn set_commit(&self, commit: u64) {
        self.commit.fetch_max(commit, Ordering::Release);
    }

    /// Records the replica's view, its primary and whether it is in normal status.
    pub fn set_role(&self, role: crate::shard::ReplicaRole) {
        let packed = u64::from(role.view) << 32 | u64::from(role.primary) << 8 | u64::from(role.normal);
        self.role.store(packed, Ordering::Release);
    }

    pub fn role(&self) -> crate::shard::ReplicaRole {
        let packed = self.role.load(Ordering::Acquire);
        crate::shard::ReplicaRole { view: (packed >> 32) as u32, primary: (packed >> 8) as u8, normal: packed & 1 == 1 }
    }

    /// The owner of a partition: looked up in the partition table, lock-free; a partition
    /// not registered yet (being created) falls back to the rule the table was built with,
    /// Murmur3 over the packed namespace.
    pub fn owner(&self, namespace: Namespace) -> u16 {
        match self.partitions.pin().get(&namespace) {
            Some(stats) => stats.shard,
            None => namespace.shard(self.shard_count),
        }
    }

    pub fn stats(&self, namespace: Namespace) -> Option<Arc<PartitionStats>> {
        self.partitions.pin().get(&namespace).cloned()
    }
}
