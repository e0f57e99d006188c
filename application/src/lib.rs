//! Rill's use cases and the ports they drive: partitions (journal, segments, offsets),
//! the metadata journal, the root account, sessions, and request dispatch for the Iggy 0.11
//! protocol.

pub mod authz;
pub mod credentials;
pub mod dispatch;
pub mod encryption;
pub mod inbox;
pub mod latency;
pub mod login;
pub mod login_guard;
pub mod memory_pool;
pub mod partition;
pub mod ports;
pub mod replication;
pub mod shard;
pub mod shared;
pub mod tracing_target;
pub mod yield_now;

pub use dispatch::{BoundSession, Connection, ConnectionState, Outcome};
pub use shard::{HostInfo, MetadataWriter, ServerConfig, Shard, ShardParts, Transport};
pub use shared::{GatewayContext, Shared};
