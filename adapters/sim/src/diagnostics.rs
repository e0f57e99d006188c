//! Diagnostics and host metrics for simulation: each snapshot part is a fixed text naming
//! itself, and the host figures are fixed, so what a simulated shard reports is the same on
//! every run.

use rill_application::ports::{Diagnostics, HostMetrics, HostSample};
use rill_domain::snapshot::SnapshotType;

#[derive(Debug, Clone, Copy, Default)]
pub struct SimDiagnostics;

impl Diagnostics for SimDiagnostics {
    fn collect(&self, part: SnapshotType) -> Vec<u8> {
        format!("simulated {}\n", part.file_name()).into_bytes()
    }
}

/// Fixed host figures: a small, idle machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimHostMetrics;

impl HostMetrics for SimHostMetrics {
    fn sample(&self) -> HostSample {
        HostSample {
            cpu_usage: 1.5,
            total_cpu_usage: 3.0,
            memory_usage: 64 << 20,
            total_memory: 8 << 30,
            available_memory: 6 << 30,
            read_bytes: 0,
            written_bytes: 0,
            threads_count: 4,
            data_directory_bytes: 0,
        }
    }
}
