//! Pinning port: which cores shards may use and pinning a shard's thread to its core.
//!
//! Contract: `available_cores` lists the cores this process may run on, ascending.
//! `numa_cores` resolves a NUMA allocation against the machine's topology to one core per
//! shard, or explains why it cannot (including "this build has no NUMA support").
//! `pin_current_thread` pins the calling thread (and, where the adapter can, its memory) to
//! one core; it is called once, first thing, on each shard's thread.

use rill_domain::cpu_allocation::CpuAllocation;

pub trait Pinning {
    fn available_cores(&self) -> std::io::Result<Vec<usize>>;
    fn numa_cores(&self, allocation: &CpuAllocation) -> Result<Vec<usize>, String>;
    fn pin_current_thread(&self, core: usize) -> std::io::Result<()>;
}

/// The cores to run shards on: one shard per returned core, shard `i` on `cores[i]`.
pub fn shard_cores(pinning: &dyn Pinning, allocation: &CpuAllocation, value: &str) -> Result<Vec<usize>, String> {
    if allocation.is_numa() {
        return pinning.numa_cores(allocation);
    }
    let available =
        pinning.available_cores().map_err(|error| format!("cannot read this process's CPU affinity: {error}"))?;
    allocation.cores(&available, value).map_err(|error| error.to_string())
}
