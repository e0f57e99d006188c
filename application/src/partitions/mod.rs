//! The partitions a shard owns and the two ways it owns them (`owner.rs`): on its own (a
//! single node, or a cluster that replicates metadata only), or through its partition
//! group (`crate::partition_group`). The store (`store.rs`) holds the open partitions and
//! runs what touches their files on this node: opening and closing them, local operations,
//! deferred flushes, retention, the scrubber and failed-write retries.

mod flush_queue;
mod flusher;
mod local;
mod maintenance;
pub mod markers;
mod owner;
mod partition;
mod sealers;
mod store;

pub(crate) use local::{AutoCommit, io_failure};
pub use maintenance::ScrubCursor;
pub use owner::Owner;
pub use partition::{Partition, label};
pub use store::PartitionStore;
