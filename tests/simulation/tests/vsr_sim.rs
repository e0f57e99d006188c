//! Deterministic simulation of VSR clusters of 1, 3 and 5 replicas on the simulated network and
//! storage: seeded latency, loss, duplication, reordering and partitions; delayed writes,
//! crashes of single replicas and of the whole cluster that lose writes in flight and tear the
//! last one, misdirected journal writes, bit flips on read; seeded client workloads. Faults are drawn per seed; after they
//! heal the cluster must converge, and the checks of `rill_simulation::cluster` must hold
//! throughout. The named scenarios are in `vsr_sim/scenarios.rs`.
//!
//! `VSR_SEEDS` (default 200) seeds run from `VSR_SEED_START` (default 0); `VSR_SEED=<n>` replays
//! one seed: `just sim <n>`. `just sim` runs 50,000 seeds in release.

#[path = "vsr_sim/scenarios.rs"]
mod scenarios;

use rill_simulation::runner::{Totals, run_partition_seed, run_seed, seeds_from_env};

#[test]
fn random_clusters_survive_faults_and_converge() {
    let seeds = seeds_from_env(200);
    // Wall time is only reported; nothing in the simulation reads it.
    let started = std::time::Instant::now();
    let mut totals = Totals::default();
    for seed in seeds.clone() {
        totals.add(&run_seed(seed));
    }
    let Totals { seeds: count, ops, views, crashes, cluster_crashes, corruptions, misdirects, ticks } = totals;
    eprintln!(
        "seeds {seeds:?}: {ops} ops committed, {views} views, {crashes} crashes ({cluster_crashes} of whole \
         clusters), {corruptions} corrupt reads, {misdirects} misdirected writes"
    );
    eprintln!("{count} seeds run, {ticks} ticks simulated, wall time {:.1?}", started.elapsed());
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in [3, 4, 5] {
        let (first, second) = (run_seed(seed), run_seed(seed));
        assert_eq!(first.trace, second.trace, "seed {seed} is not deterministic");
        assert!(!first.committed.is_empty());
    }
}

/// Partition groups: the same faults, the partition group's state machine (offsets assigned
/// at apply, consumer offsets) and its checks, each seed's group with its primary offset.
/// `PARTITION_SEEDS` (default 100) seeds from `VSR_SEED_START`; `VSR_SEED` replays one.
#[test]
fn partition_groups_survive_faults_and_converge() {
    let seeds = match std::env::var("VSR_SEED") {
        Ok(_) => seeds_from_env(1),
        Err(_) => {
            let count = std::env::var("PARTITION_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
            let start = std::env::var("VSR_SEED_START").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
            start..start + count
        }
    };
    let started = std::time::Instant::now();
    let mut totals = Totals::default();
    let mut sends = 0;
    for seed in seeds.clone() {
        let sim = run_partition_seed(seed);
        sends += sim.replicas.iter().flatten().next().map_or(0, |node| node.state_machine().batches.len());
        totals.add(&sim);
    }
    let Totals { seeds: count, ops, views, crashes, cluster_crashes, .. } = totals;
    eprintln!(
        "partition groups, seeds {seeds:?}: {ops} ops committed ({sends} batches appended), {views} views, \
         {crashes} crashes ({cluster_crashes} of whole clusters); {count} seeds, wall time {:.1?}",
        started.elapsed()
    );
}
