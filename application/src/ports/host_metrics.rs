//! Host metrics port: the process's and the host's resource figures GET_STATS reports.
//!
//! Contract: `sample` is cheap and never blocks on IO (an adapter refreshes its figures
//! away from the shards and hands out the latest); before the first refresh the figures
//! are zero. The simulated adapter returns fixed figures, so a simulated shard stays
//! deterministic.

/// One reading of the process and its host.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostSample {
    /// CPU time the process used over the last interval, in percent of one core.
    pub cpu_usage: f32,
    /// CPU use of the whole host over the last interval, in percent.
    pub total_cpu_usage: f32,
    /// Resident memory of the process.
    pub memory_usage: u64,
    pub total_memory: u64,
    pub available_memory: u64,
    /// Bytes the process read from and wrote to storage since it started.
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub threads_count: u32,
    /// Bytes of every file under the data directory.
    pub data_directory_bytes: u64,
}

pub trait HostMetrics: Clone + 'static {
    fn sample(&self) -> HostSample;
}
