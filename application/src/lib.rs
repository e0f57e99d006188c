//! Rill's use cases and the ports they drive: partitions (journal, segments, offsets),
//! the metadata journal, the root account, sessions, and request dispatch for the Iggy 0.11
//! protocol.

pub mod credentials;
pub mod dispatch;
pub mod journal;
pub mod partition;
pub mod ports;
pub mod system;

pub use dispatch::{BoundSession, Connection, Outcome};
pub use system::{HostInfo, System, SystemConfig, Transport};
