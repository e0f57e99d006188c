//! The ports the use cases drive. Adapters implement them; nothing here names a runtime.

pub mod bus;
pub mod clock;
pub mod diagnostics;
pub mod gateway;
pub mod host_metrics;
pub mod metadata_view;
pub mod offload;
pub mod pinning;
pub mod replica_network;
pub mod reply_socket;
pub mod session_ledger;
pub mod storage;

pub use bus::{
    BusReply, ConnectionHandoff, Delivery, DirectReply, Inbox, PartitionOp, Reply, Responder, ShardBus, ShardReply,
    ShardRequest,
};
pub use clock::Clock;
pub use diagnostics::Diagnostics;
pub use gateway::Gateway;
pub use host_metrics::{HostMetrics, HostSample};
pub use metadata_view::{MetadataPublish, MetadataRead};
pub use offload::Offload;
pub use pinning::Pinning;
pub use replica_network::ReplicaNetwork;
pub use reply_socket::ReplySocket;
pub use session_ledger::{SessionLedger, VolatileLedger};
pub use storage::{Space, Storage, StorageFile};

/// Bundles the ports so one type parameter threads through a shard.
pub trait Env: 'static {
    type Storage: Storage + Clone;
    type Clock: Clock + Clone;
    /// Carries requests between shards and moves connections to the shard they belong on.
    type Bus: ShardBus + ConnectionHandoff;
    type MetadataReader: MetadataRead;
    type MetadataPublisher: MetadataPublish;
    type Offload: Offload;
    type Diagnostics: Diagnostics;
    type HostMetrics: HostMetrics;
}
