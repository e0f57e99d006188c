//! Unit tests of restarts beyond the recovery budget: a whole cluster restarted at once agrees
//! on a view from its durable logs and keeps every committed op; the log a restart rebuilds
//! ignores stale entries above the head its log view began with; a damaged journal never votes
//! and is declared in the superblock until a peer's log replaces it; a recovering replica asks
//! a primary it hears for its log; a restarted replica never votes in a view it promised
//! before; and a backup acknowledges in a new view only once its superblock names that view's
//! durable log.

use super::tests::{Counter, Harness, commit_ops, options};
use super::*;

/// Restarts every replica from what its completed writes left behind.
fn restart_all(harness: &mut Harness) {
    for replica in 0..harness.replicas.len() as u8 {
        let journal = harness.journal[usize::from(replica)].clone();
        harness.restart(replica, journal);
    }
}

/// The normal primary of the highest view.
fn primary(harness: &Harness) -> u8 {
    let normal = harness.replicas.iter().filter(|r| r.status() == Status::Normal && r.is_primary());
    normal.max_by_key(|r| r.view()).expect("a normal primary").replica()
}

#[test]
fn whole_cluster_restart_converges_and_keeps_every_committed_op() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 5);
    let committed: Vec<Entry> = (1..=5).map(|op| harness.replicas[0].log_entry(op).expect("op").clone()).collect();
    // Op 6 is prepared, but only the primary's own write completes before the power goes.
    harness.request(0, 1, 6, 1);
    harness.messages.clear();
    let primary_write = harness.writes.remove(0);
    harness.writes.clear();
    harness.writes.push(primary_write);
    harness.persist();
    restart_all(&mut harness);
    assert!(harness.replicas.iter().all(|r| r.status() == Status::Recovering));
    // Each hears the others' Recovery: a quorum is recovering, so nobody can answer. They start
    // view 1 with their durable logs instead.
    harness.settle();
    let primary = primary(&harness);
    assert_eq!(harness.replicas[usize::from(primary)].view(), 1);
    harness.tick(options().heartbeat_ticks);
    for replica in &harness.replicas {
        assert_eq!((replica.status(), replica.view()), (Status::Normal, 1), "replica {}", replica.replica());
        for entry in &committed {
            assert_eq!(replica.log_entry(entry.op), Some(entry), "op {} kept", entry.op);
        }
        assert!(replica.commit() >= 5);
    }
    // The cluster goes on: the total counts every op, the uncommitted op 6 at most once.
    commit_ops(&mut harness, 2, 2);
    let total = harness.replicas[usize::from(primary)].state_machine().total;
    assert!(total == 7 || total == 8, "total {total}");
    harness.tick(options().heartbeat_ticks);
    assert!(harness.replicas.iter().all(|r| r.state_machine().total == total));
}

#[test]
fn a_restart_offers_the_log_of_its_log_view_not_stale_entries_above_it() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 2);
    // Primary 0 prepares op 3 in view 0; only its own copy becomes durable.
    harness.request(0, 1, 3, 100);
    harness.messages.clear();
    harness.persist();
    let stale = harness.replicas[0].log_entry(3).expect("op 3 at the old primary").clone();
    // Replicas 1 and 2 start view 1 without it; replica 0 rejoins, keeping stale op 3 on disk.
    harness.isolated[0] = true;
    harness.tick(options().view_change_timeout_ticks + options().view_change_status_timeout_ticks);
    assert_eq!((harness.replicas[1].status(), harness.replicas[1].view()), (Status::Normal, 1));
    harness.isolated[0] = false;
    harness.tick(options().heartbeat_ticks);
    assert_eq!((harness.replicas[0].log_view(), harness.replicas[0].op()), (1, 2));
    assert_eq!(harness.superblocks[0].log_view, 1, "replica 0 named view 1's log");
    // View 1 commits a different op 3 with replica 2 only.
    harness.isolated[0] = true;
    commit_ops(&mut harness, 2, 1);
    let committed = harness.replicas[1].log_entry(3).expect("op 3 of view 1").clone();
    assert_ne!(committed.checksum, stale.checksum);
    // Replica 1 is gone for good; 0 and 2 restart. Replica 0's journal holds the stale op 3 at
    // the same op as replica 2's head: offering it with log view 1 would win the tie.
    harness.isolated = vec![false, true, false];
    for replica in [0, 2] {
        let journal = harness.journal[usize::from(replica)].clone();
        harness.restart(replica, journal);
    }
    assert_eq!(harness.replicas[0].op(), 2, "the stale op 3 is only a candidate");
    harness.tick(options().view_change_status_timeout_ticks + options().view_change_timeout_ticks);
    for replica in [0, 2] {
        let replica = &harness.replicas[replica];
        assert_eq!(replica.status(), Status::Normal);
        assert_eq!(replica.log_entry(3), Some(&committed), "replica {} kept the committed op", replica.replica());
    }
}

#[test]
fn a_damaged_journal_waits_for_a_peers_log_instead_of_voting() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 4);
    restart_all(&mut harness);
    // Replica 2's journal had a corrupt frame in the middle, which its adapter cut after
    // declaring the journal damaged: it may lack an op it acknowledged.
    let superblock = Superblock { damaged: true, ..harness.superblocks[2] };
    let entries = harness.journal[2].iter().filter(|entry| entry.op < 2).cloned().collect();
    let durable = Durable { superblock, checkpoint: None, entries };
    let mut effects = Vec::new();
    harness.replicas[2] = Replica::open(2, 3, 5, options(), Counter::default(), durable, &mut effects);
    harness.absorb(2, effects);
    assert!(harness.replicas[2].is_damaged());
    harness.settle();
    // Replicas 0 and 1 start view 1 between them; replica 2 never sent a DoViewChange.
    assert_eq!(primary(&harness), 1);
    assert_eq!(harness.replicas[2].status(), Status::Normal, "the StartView ended its recovery");
    assert!(!harness.replicas[2].is_damaged());
    harness.tick(options().heartbeat_ticks + options().repair_timeout_ticks);
    assert_eq!(harness.replicas[2].log_entry(2), harness.replicas[1].log_entry(2), "op 2 repaired");
    assert_eq!(harness.replicas[2].state_machine().total, 4);
    assert!(!harness.superblocks[2].damaged, "declared whole once the adopted log was durable");
}

#[test]
fn a_gap_in_the_rebuilt_log_is_declared_in_the_superblock() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 4);
    // The superblock names op 4 as the head of its log, but op 2 is missing below it: a frame
    // the adapter did not report. (A gap above the named head looks like a lost tail.)
    let head = harness.journal[2].iter().find(|entry| entry.op == 4).expect("op 4").checksum;
    harness.superblocks[2] = Superblock { head_op: 4, head_checksum: head, ..harness.superblocks[2] };
    let journal = harness.journal[2].iter().filter(|entry| entry.op != 2).cloned().collect();
    harness.isolated[2] = true;
    harness.restart(2, journal);
    assert!(harness.replicas[2].is_damaged());
    harness.persist();
    assert!(harness.superblocks[2].damaged, "a later restart must know it too");
    // Cut off, it times out but never starts a view change with that log.
    harness.tick(3 * options().view_change_status_timeout_ticks);
    assert_eq!(harness.replicas[2].status(), Status::Recovering);
}

#[test]
fn a_restarted_replica_votes_only_above_the_view_it_promised() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 2);
    let superblock = Superblock { view: 5, ..harness.superblocks[2] };
    let durable = Durable { superblock, checkpoint: None, entries: harness.journal[2].clone() };
    let mut effects = Vec::new();
    let mut replica = Replica::open(2, 3, 5, options(), Counter::default(), durable, &mut effects);
    for (view, joins) in [(4, false), (5, false), (6, true)] {
        replica.on_message(harness.now, Message::StartViewChange { view, replica: 0 }, &mut effects);
        let joined = replica.status() == Status::ViewChange && replica.view() == view;
        assert_eq!(joined, joins, "view {view}");
    }
    // It promises view 6 before its DoViewChange, which carries the log view it holds durably.
    let promise = effects.iter().find_map(|effect| match effect {
        Effect::PersistView { superblock } => Some(*superblock),
        _ => None,
    });
    assert_eq!(promise.map(|sb| (sb.view, sb.log_view)), Some((6, 0)));
    assert!(!effects.iter().any(|effect| matches!(effect, Effect::Send { message: Message::DoViewChange { .. }, .. })));
    replica.on_view_persisted(6, &mut effects);
    let vote = effects.iter().find_map(|effect| match effect {
        Effect::Send { message: Message::DoViewChange { view: 6, log_view, log, .. }, .. } => Some((*log_view, log.op)),
        _ => None,
    });
    assert_eq!(vote, Some((0, 2)));
}

#[test]
fn a_backup_acknowledges_in_a_new_view_only_once_its_superblock_names_the_view() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 2);
    // Op 3 reaches replica 2 only; replica 0 goes silent and view 1 starts with op 3.
    harness.request(0, 1, 3, 1);
    harness.messages.retain(|(_, to, _)| *to == 2);
    harness.settle();
    harness.isolated[0] = true;
    let mut acked_before_named = false;
    for _ in 0..options().view_change_timeout_ticks + options().view_change_status_timeout_ticks {
        harness.now += 10;
        for replica in 1..3 {
            let mut effects = Vec::new();
            harness.replicas[replica].tick(harness.now, &mut effects);
            harness.absorb(replica as u8, effects);
        }
        while !harness.messages.is_empty() || !harness.writes.is_empty() || !harness.view_writes.is_empty() {
            while let Some((from, _, message)) = harness.messages.front() {
                if let Message::PrepareOk { view: 1, .. } = message {
                    acked_before_named |= harness.superblocks[usize::from(*from)].log_view != 1;
                }
                harness.deliver_one();
            }
            harness.persist();
        }
    }
    assert_eq!((harness.replicas[1].view(), harness.replicas[1].commit()), (1, 3));
    assert!(!acked_before_named, "a PrepareOk in view 1 left before the superblock named view 1");
    let named = harness.superblocks[2];
    assert_eq!((named.view, named.log_view, named.head_op), (1, 1, 3));
}

#[test]
fn a_recovering_replica_asks_a_primary_it_hears_for_its_log() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 3);
    // Replica 1 is gone, so no quorum of normal replicas can answer a recovery; replica 2's
    // journal is damaged, so it may not start a view change either.
    harness.isolated[1] = true;
    let superblock = Superblock { damaged: true, ..harness.superblocks[2] };
    let durable = Durable { superblock, checkpoint: None, entries: harness.journal[2].clone() };
    let mut effects = Vec::new();
    harness.replicas[2] = Replica::open(2, 3, 5, options(), Counter::default(), durable, &mut effects);
    harness.absorb(2, effects);
    // The primary's heartbeat reaches it: it asks for the view's log and adopts it.
    harness.tick(options().heartbeat_ticks);
    let replica = &harness.replicas[2];
    assert_eq!((replica.status(), replica.view(), replica.commit()), (Status::Normal, 0, 3));
    assert!(!replica.is_damaged());
    harness.tick(1);
    assert!(!harness.superblocks[2].damaged);
}

#[test]
fn a_journal_longer_than_the_log_restarts_whole_and_applies_its_bottom() {
    let capacity = options().log_capacity() as u64;
    let pipeline = options().pipeline_max;
    // A whole log's worth too: kept as it was, a view change would spread a full run, and a
    // hole below it could never be repaired (seed 12886 of the partition-group simulation).
    for ops in [capacity, capacity + 12] {
        restart_a_long_journal(ops, pipeline);
    }
}

fn restart_a_long_journal(ops: u64, pipeline: u64) {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, ops);
    // The caller made no checkpoint durable (as a partition group does while a copy waits for
    // a peer's batches), so every journal still holds every op, more than the log can.
    harness.checkpoints = vec![None; 3];
    restart_all(&mut harness);
    for replica in &harness.replicas {
        assert!(!replica.is_damaged(), "replica {} reopened whole", replica.replica());
        // The chain is applied up to `pipeline_max` below its top: those ops were committed
        // before the top was prepared. The log keeps the rest, with room.
        assert_eq!(replica.commit(), ops - pipeline, "replica {} of {ops} ops", replica.replica());
        assert_eq!(replica.op(), ops);
    }
    // Every replica applied every op once; each took the checkpoints it passed again.
    harness.settle();
    harness.tick(options().view_change_status_timeout_ticks + options().heartbeat_ticks);
    for replica in &harness.replicas {
        assert_eq!(replica.status(), Status::Normal, "replica {}", replica.replica());
        assert_eq!(replica.state_machine().total, ops, "replica {}", replica.replica());
    }
    let interval = options().checkpoint_interval;
    let last = (ops - pipeline) / interval * interval;
    assert!(harness.checkpoints.iter().all(|checkpoint| checkpoint.as_ref().is_some_and(|c| c.op >= last)));
    commit_ops(&mut harness, 2, 3);
    harness.tick(options().heartbeat_ticks);
    assert!(harness.replicas.iter().all(|r| r.state_machine().total == ops + 3));
}
