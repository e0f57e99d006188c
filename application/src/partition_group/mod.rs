//! A shard's partition group, the replicated owner of its partitions (docs/vsr.md,
//! "Partition groups"): its state (`core.rs`) behind one lock, the effects it carries out,
//! the commits it applies, ops submitted and forwarded, the copies' incarnations, state
//! transfer (gaps, repairs, deletions, offsets), and reopening after a journal failure.

mod adopt;
mod apply;
mod copies;
mod core;
mod deletions;
mod effects;
mod gaps;
mod group;
mod lanes;
mod offsets;
mod ops;
mod records;
mod reopen;
mod repairs;
mod submit;
mod unrecorded;

pub use group::PartitionGroup;
