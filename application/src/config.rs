//! What the server needs to know that is not in its data directory: the settings the
//! composition root reads from the configuration and hands every shard.

use std::path::PathBuf;

use rill_domain::answer::NodePorts;
use rill_domain::retention::RetentionDefaults;

use crate::credentials::RootSeed;
use crate::partition::PartitionDefaults;
use crate::replication::Membership;

/// What the server needs to know that is not in its data directory.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub data_path: PathBuf,
    pub root: RootSeed,
    /// Address and ports cluster metadata advertises.
    pub advertised_ip: String,
    pub ports: NodePorts,
    pub host: HostInfo,
    pub security: SecurityConfig,
    pub data: DataConfig,
    /// This node's replica id and the cluster's size (one node by default).
    pub membership: Membership,
    /// Each roster node's client address and ports, by replica id (empty on one node).
    pub cluster_nodes: Vec<(String, NodePorts)>,
    /// `[system.encryption]`: messages are sealed at rest with this key.
    pub encryption: Option<crate::encryption::EncryptionKey>,
}

/// Limits of logins, sessions, tokens and consumer groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecurityConfig {
    pub login_max_failures: u32,
    pub login_failure_window_us: u64,
    /// How long a failed password login waits before it is answered.
    pub login_failure_delay_us: u64,
    /// How long a consumer-group partition waits for its old owner to let go.
    pub rebalancing_timeout_us: u64,
    pub token_cleaner_interval_us: u64,
    /// A connection silent for longer than this is evicted (0: never). Clients ping every
    /// few seconds, so only dead or stuck peers reach it.
    pub session_idle_limit_us: u64,
    /// Client connections served at once over the binary transports (0: no limit).
    pub max_connections: u32,
    /// How long a connection may go without a logged-in session, from connect or logout
    /// (0: no limit).
    pub login_timeout_us: u64,
    /// How long a frame's body may take to arrive once its header has (0: no limit).
    pub frame_timeout_us: u64,
    /// The largest request frame a connection may send, header included: what one
    /// connection can make the server buffer.
    pub max_frame_bytes: usize,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        Self {
            login_max_failures: 10,
            login_failure_window_us: 300_000_000,
            login_failure_delay_us: 250_000,
            rebalancing_timeout_us: 30_000_000,
            token_cleaner_interval_us: 60_000_000,
            session_idle_limit_us: 36_000_000,
            max_connections: 10_000,
            login_timeout_us: 10_000_000,
            frame_timeout_us: 30_000_000,
            max_frame_bytes: rill_domain::constants::MAX_FRAME_SIZE,
        }
    }
}

/// Static facts about the host, read once at start by the composition root.
#[derive(Debug, Clone, Default)]
pub struct HostInfo {
    pub hostname: String,
    pub os_name: String,
    pub os_version: String,
    pub kernel_version: String,
    pub total_memory: u64,
}

/// Server-wide data settings: reads, retention, scrubbing, dedup and the free-space floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataConfig {
    pub partition: PartitionDefaults,
    pub retention: RetentionDefaults,
    /// How often each shard's cleaner runs; `None` with `cleaner_enabled = false`.
    pub cleaner_interval_us: Option<u64>,
    /// Bytes of sealed segments each shard's scrubber verifies per second; `None`: off.
    pub scrub_bytes_per_second: Option<u64>,
    /// Below this much free space on the data volume, sends are refused.
    pub min_free_space: FreeSpaceFloor,
    pub space_check_interval_us: u64,
    /// Per shard, bytes of the latest direct log writes the storage keeps for polls.
    pub direct_io_cache_bytes: u64,
    /// Per shard, bytes of logs retention removed that their partitions keep to write
    /// over again (0: none); the server's budget is this times the shard count.
    pub spare_logs_bytes: u64,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            partition: PartitionDefaults::default(),
            retention: RetentionDefaults::default(),
            cleaner_interval_us: Some(60_000_000),
            scrub_bytes_per_second: Some(8 << 20),
            min_free_space: FreeSpaceFloor::Bytes(64 << 20),
            space_check_interval_us: 1_000_000,
            direct_io_cache_bytes: 256 << 20,
            spare_logs_bytes: 512 << 20,
        }
    }
}

/// A free-space floor: bytes, or hundredths of a percent of the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreeSpaceFloor {
    Bytes(u64),
    Basis(u32),
}

impl FreeSpaceFloor {
    pub fn bytes(self, total_bytes: u64) -> u64 {
        match self {
            Self::Bytes(bytes) => bytes,
            Self::Basis(basis) => (total_bytes as u128 * basis as u128 / 10_000) as u64,
        }
    }
}
