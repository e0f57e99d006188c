//! Diagnostics for simulation: each part is a fixed text naming itself, so an archive built
//! from it is the same bytes on every run.

use rill_application::ports::Diagnostics;
use rill_domain::snapshot::SnapshotType;

#[derive(Debug, Clone, Copy, Default)]
pub struct SimDiagnostics;

impl Diagnostics for SimDiagnostics {
    fn collect(&self, part: SnapshotType) -> Vec<u8> {
        format!("simulated {}\n", part.file_name()).into_bytes()
    }
}
