//! Simulated infrastructure for clusters of VSR replicas (`rill_domain::vsr`): a seeded network
//! with latency, loss, duplication and partitions, seeded replica storage with delayed writes,
//! crashes that tear the last write, misdirected writes and bit flips on read, and the seeded
//! PRNG with named streams behind both. No clock, no thread and no global randomness: a seed
//! replays a run.

mod network;
mod prng;
mod storage;

pub use network::{Network, NetworkFaults, Packet, Payload};
pub use prng::Prng;
pub use storage::{ReplicaStorage, StorageWrite};
