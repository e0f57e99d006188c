//! The production adapters, bundled as the application's `Env`: the one place that picks
//! them.

use rill_adapter_bus_crossfire::CrossfireBus;
use rill_adapter_clock::SystemClock;
use rill_adapter_diagnostics::{HostDiagnostics, HostStats};
use rill_adapter_metadata_leftright::{LeftRightPublisher, LeftRightReader};
use rill_adapter_storage_uring::{CompioOffload, UringStorage};
use rill_application::Shard;
use rill_application::ports::Env;

/// The production adapters.
pub struct ProductionEnv;

impl Env for ProductionEnv {
    type Storage = UringStorage;
    type Clock = SystemClock;
    type Bus = CrossfireBus;
    type MetadataReader = LeftRightReader;
    type MetadataPublisher = LeftRightPublisher;
    type Offload = CompioOffload;
    type Diagnostics = HostDiagnostics;
    type HostMetrics = HostStats;
}

pub(crate) type ProductionShard = Shard<ProductionEnv>;
