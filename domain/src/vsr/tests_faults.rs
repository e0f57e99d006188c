//! Unit tests of the fault paths: recovery after a restart, repair of a missing entry and of an
//! entry whose checksum the chain does not vouch for, a torn journal tail, and state transfer for
//! a replica that fell behind a checkpoint; a replica halted by a broken invariant.

use super::tests::{Harness, commit_ops, options};
use super::*;

fn is_recovery(message: &Message) -> bool {
    matches!(message, Message::Recovery { .. })
}

#[test]
fn recovery_needs_a_quorum_of_answers_including_the_primary() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 3);
    let journal = harness.journal[2].clone();
    harness.restart(2, journal);
    assert_eq!(harness.replicas[2].status(), Status::Recovering);
    assert_eq!(harness.sent(is_recovery), 2);
    let nonce = match &harness.messages[0].2 {
        Message::Recovery { nonce, .. } => *nonce,
        _ => unreachable!("only recovery messages are queued"),
    };
    // An answer to another nonce (an earlier incarnation's) counts for nothing.
    let mut effects = Vec::new();
    let stale = Message::RecoveryResponse { view: 0, replica: 1, nonce: nonce ^ 2, log: None };
    harness.replicas[2].on_message(harness.now, stale, &mut effects);
    // The backup's answer alone is not enough: it is one answer, and it carries no log.
    harness.messages.retain(|(_, to, _)| *to == 1);
    harness.deliver();
    assert_eq!(harness.replicas[2].status(), Status::Recovering);
    // The primary answers the re-sent Recovery: now f + 1 answers include the primary's.
    harness.tick(options().resend_ticks);
    let replica = &harness.replicas[2];
    assert_eq!((replica.status(), replica.op(), replica.commit_max()), (Status::Normal, 3, 3));
    harness.tick(options().heartbeat_ticks);
    assert_eq!(harness.replicas[2].state_machine().total, 3);
    assert!(harness.writes.is_empty(), "its journal held every entry: nothing rewritten");
}

#[test]
fn recovering_replica_repairs_a_torn_journal_tail() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 4);
    // The adapter reads frames until one fails to decode: the last write was torn.
    let mut bytes: Vec<u8> = harness.journal[2].iter().flat_map(Entry::encode).collect();
    bytes.truncate(bytes.len() - 7);
    let mut entries = Vec::new();
    let mut at = 0;
    while let Ok((entry, used)) = Entry::decode_prefix(&bytes[at..]) {
        entries.push(entry);
        at += used;
    }
    assert_eq!(entries.len(), 3);
    harness.restart(2, entries);
    harness.tick(options().resend_ticks + options().heartbeat_ticks);
    let replica = &harness.replicas[2];
    assert_eq!((replica.status(), replica.commit()), (Status::Normal, 4));
    assert_eq!(harness.journal[2].last(), harness.journal[0].last(), "op 4 was written again");
}

#[test]
fn backup_repairs_a_missing_prepare_before_acknowledging() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 1);
    harness.request(0, 2, 1, 1);
    harness.messages.retain(|(_, to, _)| *to != 2);
    harness.settle();
    harness.request(0, 3, 1, 1);
    harness.messages.retain(|(_, to, _)| *to == 2);
    harness.deliver_one();
    // Op 3 arrived, op 2 did not: replica 2 asks its peers for op 2 by the checksum op 3 names.
    let expected = harness.replicas[0].log_entry(2).expect("primary holds op 2").checksum;
    let asks = harness
        .messages
        .iter()
        .filter(|(_, _, m)| matches!(m, Message::RequestPrepare { op: 2, checksum, .. } if *checksum == expected));
    assert_eq!(asks.count(), 2);
    assert_eq!(harness.replicas[2].op(), 1);
    harness.settle();
    assert_eq!(harness.replicas[2].op(), 3);
    assert_eq!(harness.replicas[2].log_entry(2), harness.replicas[0].log_entry(2));
    assert_eq!(harness.replicas[0].commit(), 3);
}

#[test]
fn recovered_replica_repairs_an_entry_the_chain_does_not_vouch_for() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 4);
    // On disk, op 2 is a different (well-formed) entry: stale, or corrupt in a way its own
    // checksum does not catch. Op 3 is flipped and fails its checksum.
    let mut journal = harness.journal[2].clone();
    journal[1].body = 99u64.to_le_bytes().to_vec();
    journal[1] = journal[1].clone().seal();
    journal[2].body[0] ^= 1;
    harness.restart(2, journal);
    let nonce = match &harness.messages[0].2 {
        Message::Recovery { nonce, .. } => *nonce,
        _ => unreachable!("only recovery messages are queued"),
    };
    harness.messages.clear();
    // The primary answers with a log that starts at op 4 (as after trimming), so ops 2 and 3
    // must come from a peer by checksum.
    let primary = &harness.replicas[0];
    let log = LogSuffix {
        op: 4,
        op_checksum: primary.log_entry(4).expect("op 4").checksum,
        commit: 4,
        entries: vec![primary.log_entry(4).expect("op 4").clone()],
    };
    let answers = [
        Message::RecoveryResponse { view: 0, replica: 1, nonce, log: None },
        Message::RecoveryResponse { view: 0, replica: 0, nonce, log: Some(log) },
    ];
    for answer in answers {
        let mut effects = Vec::new();
        harness.replicas[2].on_message(harness.now, answer, &mut effects);
        harness.absorb(2, effects);
    }
    assert_eq!(harness.replicas[2].status(), Status::Normal);
    let op3 = harness.replicas[0].log_entry(3).expect("op 3").checksum;
    let asks = |m: &Message| matches!(m, Message::RequestPrepare { op: 3, .. });
    assert_eq!(harness.sent(asks), 2, "asks for op 3 with checksum {op3}");
    harness.settle();
    for op in 1..=4 {
        assert_eq!(harness.replicas[2].log_entry(op), harness.replicas[0].log_entry(op));
    }
    assert_eq!(harness.replicas[2].commit(), 4);
    assert_eq!(harness.replicas[2].state_machine().total, 4);
}

#[test]
fn state_transfer_installs_a_checkpoint_for_a_replica_behind_the_trimmed_log() {
    let mut harness = Harness::new(3, options());
    harness.isolated[2] = true;
    commit_ops(&mut harness, 1, 40);
    assert_eq!(harness.replicas[0].checkpoint().map(|c| c.op), Some(32));
    assert!(harness.replicas[0].log_entry(1).is_none(), "trimmed");
    harness.isolated[2] = false;
    harness.tick(options().heartbeat_ticks + options().repair_timeout_ticks);
    let (behind, primary) = (&harness.replicas[2], &harness.replicas[0]);
    assert_eq!(harness.checkpoints[2].as_ref().map(|c| c.op), Some(32), "installed and handed to the adapter");
    assert_eq!(behind.commit(), 40);
    assert_eq!(behind.state_machine().digest(), primary.state_machine().digest());
    assert_eq!(behind.client_reply(1), primary.client_reply(1), "the client table travels with the state");
}

#[test]
fn state_transfer_sends_the_committed_suffix_when_the_log_still_has_it() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 2);
    harness.isolated[2] = true;
    commit_ops(&mut harness, 1, 6);
    harness.isolated[2] = false;
    harness.tick(options().heartbeat_ticks + options().repair_timeout_ticks);
    assert!(harness.checkpoints[2].is_none());
    assert_eq!(harness.replicas[2].commit(), 8);
    assert_eq!(harness.replicas[2].state_machine().total, 8);
}

#[test]
fn a_handler_that_breaks_an_invariant_halts_the_replica_and_takes_back_its_effects() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 3);
    harness.may_halt = true;
    let applied = harness.replicas[2].commit();
    assert!(applied >= 2);
    // Backup 2's state as no correct handler leaves it: applied beyond the commit it knows.
    harness.replicas[2].commit_max = 1;
    let mut effects = Vec::new();
    // A heartbeat that names an earlier commit leaves it so; the handler's check finds it.
    harness.replicas[2].on_message(harness.now, Message::Commit { view: 0, commit: 1 }, &mut effects);
    assert_eq!(harness.replicas[2].halted(), Some("applied beyond the known commit"));
    assert!(effects.is_empty(), "a halting handler asks for nothing: {effects:?}");
    // Halted, it takes nothing more and asks for nothing, while the others commit on.
    harness.replicas[2].tick(harness.now, &mut effects);
    harness.replicas[2].on_prepare_persisted(3, 0, &mut effects);
    assert!(effects.is_empty());
    commit_ops(&mut harness, 1, 3);
    assert_eq!(harness.replicas[0].commit(), 6, "the primary commits with backup 1 alone");
    assert_eq!(harness.replicas[2].commit(), applied, "the halted replica applied nothing more");
}
