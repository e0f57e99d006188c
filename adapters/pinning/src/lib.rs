//! The production `Pinning` adapter: which cores the process may use, pinning each shard's
//! thread to its core, and (with the `numa` feature, which needs libhwloc) resolving NUMA
//! `cpu_allocation` values and binding a shard's memory to its node.
//!
//! Without the feature the crate has no C dependency, and a NUMA allocation is refused at
//! start with instructions to rebuild.

mod affinity;
#[cfg_attr(not(feature = "numa"), allow(dead_code))]
mod layout;
#[cfg(feature = "numa")]
mod topology;

pub use affinity::AffinityPinning;
