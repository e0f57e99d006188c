//! Rill's use cases and the ports they drive: partitions (journal, segments, offsets),
//! the metadata journal, the root account, sessions, and request dispatch for the Iggy 0.11
//! protocol.

pub mod authz;
pub mod clients;
pub mod config;
pub mod connection;
pub mod credentials;
pub mod dispatch;
pub mod encryption;
pub mod inbox;
pub mod latency;
pub mod login;
pub mod login_guard;
pub mod memory_pool;
pub mod partition;
pub mod partition_group;
pub mod partitions;
pub mod ports;
pub mod replication;
pub mod retained_sessions;
pub mod session_replies;
pub mod shard;
pub mod shared;
pub mod stream_keys;
pub mod tracing_target;
pub mod yield_now;

pub use clients::Transport;
pub use config::{HostInfo, ServerConfig};
pub use connection::{BoundSession, Connection, ConnectionState, Outcome};
pub use shard::{MetadataWriter, Shard, ShardParts};
pub use shared::{GatewayContext, Shared};
