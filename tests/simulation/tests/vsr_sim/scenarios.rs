//! Named scenarios: a calm network and no random faults, each scripting one fault at a chosen
//! moment (a primary crash mid-prepare, a torn journal tail, corrupt entries, a misdirected
//! write, a partitioned primary, a whole-cluster power loss, a state machine that cannot apply
//! an op) and checking its outcome as well as the usual checks.

use rill_adapter_sim::vsr::NetworkFaults;
use rill_domain::vsr::{Options, Status};
use rill_simulation::cluster::{Config, Faults, Sim};
use rill_simulation::runner::converge;

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
        misdirect_ppm: 0,
        storage_delay_max_ticks: 3,
    };
    let options = Options { checkpoint_interval: 16, pipeline_max: 4, ..Options::default() };
    Config { seed, replica_count, clients: 1, options, faults, request_ppm: 0, forward: false }
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
fn scenario_a_misdirected_write_is_repaired_from_a_peer() {
    let mut sim = Sim::new(calm(16, 3));
    commit_requests(&mut sim, 3);
    // A view change, so that the superblocks name a head above op 0 (op 3).
    sim.crash(0, 10_000);
    commit_requests(&mut sim, 2);
    sim.restart(0);
    steps_until(&mut sim, 2_000, Sim::converged);
    assert_eq!(sim.storage[1].superblock().head_op, 3);
    // Replica 1's next journal write (op 6) lands on its frame of op 2; the write completes.
    sim.misdirect(1, 2);
    commit_requests(&mut sim, 1);
    assert_eq!(sim.misdirects, 1);
    let lost = sim.committed[&2].checksum;
    assert!(!sim.storage[1].holds(2, lost), "the frame of op 2 is gone");
    // On restart the chain below the named head is broken: the journal is damaged, and replica
    // 1 learns the log from its peers instead of trusting it.
    sim.crash(1, 10_000);
    sim.restart(1);
    assert!(sim.replicas[1].as_ref().is_some_and(|node| node.is_damaged()));
    commit_requests(&mut sim, 2);
    converge(&mut sim);
    assert_eq!(sim.committed.len(), 8);
    // Converged: replica 1 applied all 8 ops again, from the log it learned.
    let repaired = sim.replicas[1].as_ref().expect("up");
    assert_eq!(repaired.commit(), 8);
    for (op, entry) in &sim.committed {
        assert!(repaired.log_entry(*op).is_none_or(|held| held == entry), "op {op}");
    }
    assert!(!sim.storage[1].damaged(), "declared whole once the learned log was durable");
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

#[test]
fn scenario_a_replica_that_cannot_apply_a_committed_op_halts_alone() {
    let mut sim = Sim::new(calm(16, 3));
    commit_requests(&mut sim, 4);
    // Backup 1's state machine cannot apply op 6 (a disk it cannot write, a state that
    // diverged): it must stop there, not abort the process and not apply past the hole.
    sim.replicas[1].as_mut().expect("up").state_machine_mut().cannot_apply = Some(6);
    sim.may_halt[1] = true;
    commit_requests(&mut sim, 6);
    let halted = sim.replicas[1].as_ref().expect("halted, not gone");
    assert_eq!(halted.halted(), Some("the scenario's state machine cannot apply this op"));
    assert_eq!(halted.commit(), 5, "nothing is applied past the op it could not apply");
    for other in [0, 2] {
        let node = sim.replicas[other].as_ref().expect("up");
        assert!(node.halted().is_none() && node.commit() == 10, "replica {other} went on with the majority");
    }
    // A halted replica takes no input: ticks and messages leave it where it stopped.
    for _ in 0..200 {
        sim.step(false, false);
    }
    assert_eq!(sim.replicas[1].as_ref().map(|node| node.commit()), Some(5));
    // Its operator restarts it: it opens from its journal and catches up with its peers.
    sim.crash(1, 0);
    sim.restart(1);
    converge(&mut sim);
    assert!(sim.replicas[1].as_ref().is_some_and(|node| node.halted().is_none() && node.commit() == 10));
}
