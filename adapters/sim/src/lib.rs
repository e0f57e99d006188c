//! Simulated adapters: in-memory storage that tells written bytes from durable ones and
//! can crash, a manual clock, seeded pauses that let simulated calls interleave, fixed
//! diagnostics and host figures, an in-process shard bus, shared metadata views and
//! recorded pinning. Tests drive the use cases through these, without threads. `vsr` holds
//! the seeded network and replica storage that the VSR cluster simulation runs on.

mod bus;
mod clock;
mod diagnostics;
mod jitter;
mod metadata;
mod offload;
mod pinning;
mod storage;
pub mod vsr;

pub use bus::{LocalBus, LocalShards};
pub use clock::ManualClock;
pub use diagnostics::{SimDiagnostics, SimHostMetrics};
pub use jitter::Jitter;
pub use metadata::SimMetadata;
pub use offload::InlineOffload;
pub use pinning::SimPinning;
pub use storage::{SimFile, SimStorage, Transfer};
