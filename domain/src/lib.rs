//! Rill's pure core: the partition namespace and routing, identifiers, the Iggy 0.11 wire
//! codec, the message batch format, segments and their index, polling, the metadata state
//! machine and the VSR replica. No IO, no clock, no randomness: callers pass time and bytes in.

pub mod affinity;
pub mod answer;
pub mod batch;
pub mod change_feed;
pub mod checksum;
pub mod constants;
pub mod consumer_group;
pub mod cpu_allocation;
pub mod dedup;
pub mod error;
pub mod identifier;
pub mod metadata;
pub mod namespace;
pub mod partition_group;
pub mod permissions;
pub mod polling;
pub mod producers;
pub mod reader;
pub mod retention;
pub mod segment;
pub mod snapshot;
pub mod stream_options;
pub mod topic_options;
pub mod version;
pub mod vsr;
pub mod wire;

pub use error::ErrorCode;
pub use identifier::Identifier;
pub use namespace::Namespace;
pub use polling::PollingStrategy;
