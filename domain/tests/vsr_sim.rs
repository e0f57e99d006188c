//! Deterministic simulation of VSR clusters of 1, 3 and 5 replicas: a seeded network (latency,
//! loss, duplication, reordering, partitions), seeded storage (delayed writes, crashes that lose
//! writes in flight and tear the last one, bit flips on read) and seeded client workloads. Faults
//! are drawn per seed; after they heal the cluster must converge, and the checks in
//! `vsr_sim/cluster.rs` must hold throughout.
//!
//! `VSR_SEEDS` (default 200) seeds run from `VSR_SEED_START` (default 0); `VSR_SEED=<n>` replays
//! one seed: `VSR_SEED=<n> cargo test -p rill-domain --test vsr_sim random_clusters`.

#[path = "vsr_sim/cluster.rs"]
mod cluster;
#[path = "vsr_sim/model.rs"]
mod model;
#[path = "vsr_sim/network.rs"]
mod network;
#[path = "vsr_sim/prng.rs"]
mod prng;
#[path = "vsr_sim/storage.rs"]
mod storage;

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use cluster::{Config, Faults, Sim};
use network::NetworkFaults;
use prng::Prng;
use rill_domain::vsr::{Options, Status};

/// Ticks of faults and workload per seed.
const FAULT_TICKS: u64 = 2_000;
/// Ticks the cluster gets to converge once the faults heal.
const CONVERGE_TICKS: u64 = 3_000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|value| value.parse().unwrap_or_else(|_| panic!("{name} must be a number")))
}

/// The configuration of a seed: cluster size, fault mix and workload (swarm testing).
fn swarm(seed: u64) -> Config {
    let mut prng = Prng::stream(seed, "swarm");
    let network = NetworkFaults {
        loss_ppm: prng.pick(&[0, 10_000, 50_000, 150_000]),
        duplicate_ppm: prng.pick(&[0, 20_000, 100_000]),
        latency_max_ticks: prng.pick(&[1, 3, 10]),
    };
    let faults = Faults {
        network,
        partition_ppm: prng.pick(&[0, 5_000, 20_000]),
        crash_ppm: prng.pick(&[0, 2_000, 10_000]),
        cluster_crash_ppm: prng.pick(&[0, 0, 300, 1_000]),
        torn_ppm: prng.pick(&[0, 500_000, 1_000_000]),
        corrupt_ppm: prng.pick(&[0, 50_000, 200_000]),
        storage_delay_max_ticks: prng.pick(&[1, 3, 8]),
    };
    let options = Options {
        checkpoint_interval: prng.pick(&[16, 64]),
        pipeline_max: prng.pick(&[1, 4, 8]),
        client_table_max: 64,
        ..Options::default()
    };
    let replica_count = [1, 3, 5][(seed % 3) as usize];
    let request_ppm = prng.pick(&[50_000, 200_000, 600_000]);
    Config { seed, replica_count, clients: prng.range(1, 6) as usize, options, faults, request_ppm }
}

/// Faults and workload, then healing, then convergence and the final checks.
fn run(config: Config) -> Sim {
    let mut sim = Sim::new(config);
    for _ in 0..FAULT_TICKS {
        sim.step(true, true);
    }
    sim.heal();
    converge(&mut sim);
    sim
}

fn converge(sim: &mut Sim) {
    let healed_at = sim.tick;
    while !sim.converged() {
        let waited = sim.tick - healed_at;
        assert!(
            waited < CONVERGE_TICKS,
            "no convergence within {CONVERGE_TICKS} ticks of healing:\n{}",
            sim.describe()
        );
        sim.step(false, false);
    }
    sim.check_final();
}

/// Runs a seed; a failure names the seed and how to replay it.
fn run_seed(seed: u64) -> Sim {
    match catch_unwind(AssertUnwindSafe(|| run(swarm(seed)))) {
        Ok(sim) => sim,
        Err(panic) => {
            eprintln!("VSR simulation failed for seed {seed} ({:?})", swarm(seed));
            eprintln!("replay: VSR_SEED={seed} cargo test -p rill-domain --test vsr_sim random_clusters");
            resume_unwind(panic)
        }
    }
}

#[test]
fn random_clusters_survive_faults_and_converge() {
    let seeds = match env_u64("VSR_SEED") {
        Some(seed) => seed..seed + 1,
        None => {
            let start = env_u64("VSR_SEED_START").unwrap_or(0);
            start..start + env_u64("VSR_SEEDS").unwrap_or(200)
        }
    };
    // Wall time is only reported; nothing in the simulation reads it.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let (mut ops, mut crashes, mut cluster_crashes, mut corruptions, mut ticks, mut views) = (0, 0, 0, 0, 0, 0);
    for seed in seeds.clone() {
        let sim = run_seed(seed);
        ops += sim.committed.len();
        (crashes, cluster_crashes) = (crashes + sim.crashes, cluster_crashes + sim.cluster_crashes);
        (corruptions, ticks) = (corruptions + sim.corruptions, ticks + sim.tick);
        views += sim.replicas.iter().flatten().map(|node| u64::from(node.view())).max().unwrap_or(0);
    }
    eprintln!(
        "seeds {seeds:?}: {ops} ops committed, {views} views, {crashes} crashes ({cluster_crashes} of whole \
         clusters), {corruptions} corrupt reads"
    );
    eprintln!("{} seeds run, {ticks} ticks simulated, wall time {:.1?}", seeds.end - seeds.start, started.elapsed());
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in [3, 4, 5] {
        let (first, second) = (run_seed(seed), run_seed(seed));
        assert_eq!(first.trace, second.trace, "seed {seed} is not deterministic");
        assert!(!first.committed.is_empty());
    }
}

/// A calm network and no random faults: the scenarios script their own.
fn calm(seed: u64, replica_count: u8) -> Config {
    let network = NetworkFaults { loss_ppm: 0, duplicate_ppm: 0, latency_max_ticks: 2 };
    let faults = Faults {
        network,
        partition_ppm: 0,
        crash_ppm: 0,
        cluster_crash_ppm: 0,
        torn_ppm: 0,
        corrupt_ppm: 0,
        storage_delay_max_ticks: 3,
    };
    let options = Options { checkpoint_interval: 16, pipeline_max: 4, ..Options::default() };
    Config { seed, replica_count, clients: 1, options, faults, request_ppm: 0 }
}

/// Submits requests from client 0 one after another until `count` got their replies.
fn commit_requests(sim: &mut Sim, count: u64) {
    for delta in 1..=count {
        sim.submit(0, (delta % 8) as u8, delta);
        steps_until(sim, 2_000, Sim::clients_idle);
    }
}

fn steps_until(sim: &mut Sim, ticks: u64, done: impl Fn(&Sim) -> bool) {
    for _ in 0..ticks {
        if done(sim) {
            return;
        }
        sim.step(false, false);
    }
    assert!(done(sim), "the condition did not hold within {ticks} ticks");
}

fn primary(sim: &Sim) -> Option<usize> {
    let normal = sim.replicas.iter().flatten().filter(|node| node.status() == Status::Normal && node.is_primary());
    normal.max_by_key(|node| node.view()).map(|node| usize::from(node.replica()))
}

#[test]
fn scenario_primary_crash_during_a_prepare() {
    let mut sim = Sim::new(calm(11, 3));
    commit_requests(&mut sim, 5);
    sim.submit(0, 1, 100);
    sim.step(false, false);
    // The prepare is in flight and the primary's own write has not completed.
    sim.crash(0, 10_000);
    steps_until(&mut sim, 2_000, Sim::clients_idle);
    let new_primary = primary(&sim).expect("a new primary");
    assert_ne!(new_primary, 0);
    sim.restart(0);
    converge(&mut sim);
    assert!(sim.replicas[0].as_ref().is_some_and(|node| node.view() > 0));
}

#[test]
fn scenario_torn_journal_tail_on_restart() {
    let mut config = calm(12, 3);
    config.faults.torn_ppm = 1_000_000;
    config.faults.storage_delay_max_ticks = 6;
    let mut sim = Sim::new(config);
    commit_requests(&mut sim, 4);
    sim.submit(0, 2, 7);
    sim.step(false, false);
    sim.step(false, false);
    // Backup 1 has the new prepare's write in flight: the crash tears it.
    sim.crash(1, 10_000);
    assert_eq!(sim.torn_writes, 1);
    sim.restart(1);
    converge(&mut sim);
    assert_eq!(sim.committed.len(), 5);
}

#[test]
fn scenario_corrupt_entries_are_repaired_from_a_peer() {
    let mut config = calm(13, 3);
    config.faults.corrupt_ppm = 1_000_000;
    let mut sim = Sim::new(config);
    commit_requests(&mut sim, 20);
    // Every entry a peer also holds reads back corrupt, so the replica must fetch them all.
    sim.crash(2, 10_000);
    sim.restart(2);
    assert!(sim.corruptions >= 4, "entries read back corrupt: {}", sim.corruptions);
    commit_requests(&mut sim, 3);
    converge(&mut sim);
    let (repaired, healthy) = (sim.replicas[2].as_ref(), sim.replicas[0].as_ref());
    let (repaired, healthy) = (repaired.expect("up"), healthy.expect("up"));
    for op in 17..=23 {
        assert_eq!(repaired.log_entry(op), healthy.log_entry(op), "op {op}");
    }
}

#[test]
fn scenario_partitioned_primary_rejoins_and_catches_up() {
    let mut sim = Sim::new(calm(14, 5));
    commit_requests(&mut sim, 3);
    // The primary ends up alone; the client stays with the majority.
    let mut side = vec![false; 6];
    side[0] = true;
    sim.network.partition(&side);
    sim.submit(0, 3, 9);
    steps_until(&mut sim, 2_000, Sim::clients_idle);
    let new_primary = primary(&sim).expect("the majority elected a primary");
    assert_ne!(new_primary, 0);
    commit_requests(&mut sim, 3);
    assert!(sim.replicas[0].as_ref().is_some_and(|node| node.commit() <= 3), "the old primary is cut off");
    sim.network.heal();
    converge(&mut sim);
    let old = sim.replicas[0].as_ref().expect("up");
    assert!(!old.is_primary() && old.commit() == 7, "the old primary caught up as a backup");
}

#[test]
fn scenario_whole_cluster_restart_keeps_every_committed_op() {
    let mut config = calm(15, 3);
    config.faults.torn_ppm = 1_000_000;
    config.faults.storage_delay_max_ticks = 6;
    let mut sim = Sim::new(config);
    commit_requests(&mut sim, 6);
    // A view change first, so that the logs carry a log view other than 0.
    sim.crash(0, 10_000);
    commit_requests(&mut sim, 4);
    sim.restart(0);
    steps_until(&mut sim, 2_000, Sim::converged);
    sim.submit(0, 3, 50);
    sim.step(false, false);
    sim.step(false, false);
    // The power goes with a prepare in flight: writes still pending are lost or torn, and the
    // replicas come back one after another, each finding its peers recovering too.
    let committed = sim.committed.len();
    let mut down = [3, 40, 90].into_iter();
    sim.crash_cluster(|_| down.next().expect("three replicas"));
    assert!(sim.replicas.iter().all(Option::is_none));
    converge(&mut sim);
    assert!(sim.committed.len() > committed, "the request in flight was retried and committed");
    let node = sim.replicas[0].as_ref().expect("up");
    assert!(node.view() >= 2 && node.status() == Status::Normal, "a view above every promised one started");
}
