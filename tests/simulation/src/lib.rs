//! Deterministic simulation of VSR clusters: `rill_domain::vsr` replicas run on the simulated
//! network and storage of `rill_adapter_sim::vsr`, with seeded faults and client workloads.
//! `cluster` steps a cluster one tick at a time and checks it as it goes, `model` is what a
//! cluster replicates (the counters, and the `Model` trait), `partition_model` a partition
//! group's state and its checks (`once_model` those of its once-only sends), and `runner` draws a seed's configuration, runs it to
//! convergence and names the seed when it fails. The runs are in `tests/vsr_sim.rs`.

pub mod cluster;
pub mod model;
pub mod once_model;
pub mod partition_model;
pub mod runner;
