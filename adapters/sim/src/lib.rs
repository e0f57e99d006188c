//! Simulated adapters: in-memory storage that tells written bytes from durable ones and
//! can crash, and a manual clock. Tests drive the use cases through these, without threads.

mod clock;
mod pinning;
mod storage;

pub use clock::ManualClock;
pub use pinning::SimPinning;
pub use storage::{SimFile, SimStorage};
