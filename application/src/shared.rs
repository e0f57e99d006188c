//! State every shard sees: the client registry, login limiting, consumer-group membership,
//! session numbering, the commit number, and the partition table (owner shard and live
//! counters of every partition). Everything here is `Send + Sync`; nothing here is on a shard's hot path
//! except lock-free reads of the partition table.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rill_domain::Namespace;
use rill_domain::wire::response::Usage;

use crate::groups::Groups;
use crate::login_guard::LoginGuard;
use crate::memory_pool::MemoryPool;
use crate::system::{ClientRegistry, SystemConfig};

/// Live counters of one partition, written by its owner and read by any shard.
#[derive(Debug)]
pub struct PartitionStats {
    pub shard: u16,
    size_bytes: AtomicU64,
    messages_count: AtomicU64,
    segments_count: AtomicU32,
    current_offset: AtomicU64,
}

impl PartitionStats {
    pub fn new(shard: u16) -> Self {
        Self {
            shard,
            size_bytes: AtomicU64::new(0),
            messages_count: AtomicU64::new(0),
            segments_count: AtomicU32::new(0),
            current_offset: AtomicU64::new(0),
        }
    }

    pub fn set(&self, usage: Usage, segments_count: u32, current_offset: u64) {
        self.size_bytes.store(usage.size_bytes, Ordering::Relaxed);
        self.messages_count.store(usage.messages_count, Ordering::Relaxed);
        self.segments_count.store(segments_count, Ordering::Relaxed);
        self.current_offset.store(current_offset, Ordering::Relaxed);
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

pub struct Shared {
    pub config: SystemConfig,
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
    pub pool: MemoryPool,
}

impl Shared {
    pub fn new(config: SystemConfig, shard_count: u16, commit: u64, start_time_us: u64, pool: MemoryPool) -> Self {
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
    pub fn set_role(&self, role: crate::system::ReplicaRole) {
        let packed = u64::from(role.view) << 32 | u64::from(role.primary) << 8 | u64::from(role.normal);
        self.role.store(packed, Ordering::Release);
    }

    pub fn role(&self) -> crate::system::ReplicaRole {
        let packed = self.role.load(Ordering::Acquire);
        crate::system::ReplicaRole {
            view: (packed >> 32) as u32,
            primary: (packed >> 8) as u8,
            normal: packed & 1 == 1,
        }
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
