//! Running one seed: its configuration is drawn from the seed (swarm testing: cluster size,
//! fault mix, workload), faults and workload run for `FAULT_TICKS`, then everything heals and
//! the cluster must converge within `CONVERGE_TICKS` and pass the final checks. A failure
//! prints the seed and the command that replays it.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use rill_adapter_sim::vsr::{NetworkFaults, Prng};
use rill_domain::vsr::Options;

use crate::cluster::{Config, Faults, Sim};
use crate::model::Model;
use crate::partition_model::PartitionModel;

/// Ticks of faults and workload per seed.
pub const FAULT_TICKS: u64 = 2_000;
/// Ticks the cluster gets to converge once the faults heal.
pub const CONVERGE_TICKS: u64 = 3_000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|value| value.parse().unwrap_or_else(|_| panic!("{name} must be a number")))
}

/// The seeds to run: `VSR_SEED` alone, or `VSR_SEEDS` (default `default_count`) seeds from
/// `VSR_SEED_START` (default 0).
pub fn seeds_from_env(default_count: u64) -> Range<u64> {
    match env_u64("VSR_SEED") {
        Some(seed) => seed..seed + 1,
        None => {
            let start = env_u64("VSR_SEED_START").unwrap_or(0);
            start..start + env_u64("VSR_SEEDS").unwrap_or(default_count)
        }
    }
}

/// The configuration of a seed: cluster size, fault mix and workload (swarm testing).
pub fn swarm(seed: u64) -> Config {
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
        misdirect_ppm: prng.pick(&[0, 0, 2_000, 10_000]),
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
    Config { seed, replica_count, clients: prng.range(1, 6) as usize, options, faults, request_ppm, forward: false }
}

/// Faults and workload, then healing, then convergence and the final checks.
pub fn run<M: Model>(config: Config) -> Sim<M> {
    let mut sim = Sim::new(config);
    for _ in 0..FAULT_TICKS {
        sim.step(true, true);
    }
    sim.heal();
    converge(&mut sim);
    sim
}

/// Steps without faults or new requests until the cluster has converged, then checks it.
pub fn converge<M: Model>(sim: &mut Sim<M>) {
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

/// A partition group's configuration for a seed: the swarm's, with the group's primary
/// offset drawn too, as groups sharing nodes have theirs spread over the nodes.
pub fn partition_swarm(seed: u64) -> Config {
    let mut config = swarm(seed);
    config.options.primary_offset = (seed / 3 % u64::from(config.replica_count)) as u8;
    // Half the seeds run as the server's groups do: backups forward requests to the primary.
    config.forward = seed.is_multiple_of(2);
    config.options.commit_eagerly = seed % 4 < 2;
    config
}

/// Runs a partition group's seed; a failure names the seed and how to replay it.
pub fn run_partition_seed(seed: u64) -> Sim<PartitionModel> {
    match catch_unwind(AssertUnwindSafe(|| run(partition_swarm(seed)))) {
        Ok(sim) => sim,
        Err(panic) => {
            eprintln!("partition group simulation failed for seed {seed} ({:?})", partition_swarm(seed));
            eprintln!("replay: just sim-groups {seed}");
            eprintln!("    (VSR_SEED={seed} cargo test --release -p rill-simulation --test vsr_sim partition_groups)");
            resume_unwind(panic)
        }
    }
}

/// Runs a seed; a failure names the seed and how to replay it.
pub fn run_seed(seed: u64) -> Sim {
    match catch_unwind(AssertUnwindSafe(|| run(swarm(seed)))) {
        Ok(sim) => sim,
        Err(panic) => {
            eprintln!("VSR simulation failed for seed {seed} ({:?})", swarm(seed));
            eprintln!("replay: just sim {seed}");
            eprintln!("    (VSR_SEED={seed} cargo test --release -p rill-simulation --test vsr_sim random_clusters)");
            resume_unwind(panic)
        }
    }
}

/// What a run of many seeds did, for the closing report.
#[derive(Debug, Default)]
pub struct Totals {
    pub seeds: u64,
    pub ops: u64,
    pub views: u64,
    pub crashes: u64,
    pub cluster_crashes: u64,
    pub corruptions: u64,
    pub misdirects: u64,
    pub ticks: u64,
}

impl Totals {
    pub fn add<M: Model>(&mut self, sim: &Sim<M>) {
        self.seeds += 1;
        self.ops += sim.committed.len() as u64;
        self.views += sim.replicas.iter().flatten().map(|node| u64::from(node.view())).max().unwrap_or(0);
        self.crashes += sim.crashes;
        self.cluster_crashes += sim.cluster_crashes;
        self.corruptions += sim.corruptions;
        self.misdirects += sim.misdirects;
        self.ticks += sim.tick;
    }
}
