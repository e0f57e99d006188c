//! Simulated adapters: in-memory storage that tells written bytes from durable ones and
//! can crash, a manual clock, an in-process shard bus, shared metadata views and recorded
//! pinning. Tests drive the use cases through these, without threads.

mod bus;
mod clock;
mod metadata;
mod offload;
mod pinning;
mod storage;

pub use bus::{LocalBus, LocalShards};
pub use clock::ManualClock;
pub use metadata::SimMetadata;
pub use offload::InlineOffload;
pub use pinning::SimPinning;
pub use storage::{SimFile, SimStorage};
