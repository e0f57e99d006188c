//! Unit tests of the VSR replica, one per protocol path, driven through a tiny hand-cranked
//! harness: messages wait in a queue until a test delivers them, and journal and superblock
//! writes wait until a test completes them, so each step of a path can be observed.

use std::collections::VecDeque;

use super::*;

/// A counter: each op adds the `u64` in its body; the reply is the new total and the op.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Counter {
    pub(super) total: u64,
}

impl StateMachine for Counter {
    fn apply(&mut self, op: u64, _timestamp: u64, _operation: u8, body: &[u8]) -> Vec<u8> {
        let delta = body.get(..8).map_or(0, |bytes| u64::from_le_bytes(bytes.try_into().expect("eight bytes")));
        self.total = self.total.wrapping_add(delta);
        [self.total.to_le_bytes(), op.to_le_bytes()].concat()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.total.to_le_bytes().to_vec()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), InvalidSnapshot> {
        self.total = u64::from_le_bytes(snapshot.try_into().map_err(|_| InvalidSnapshot)?);
        Ok(())
    }

    fn digest(&self) -> u64 {
        self.total
    }
}

pub(super) fn options() -> Options {
    Options { checkpoint_interval: 16, pipeline_max: 4, jitter_ticks: 0, ..Options::default() }
}

/// Replicas, a message queue, pending writes and what the replicas told the outside world.
pub(super) struct Harness {
    pub(super) replicas: Vec<Replica<Counter>>,
    pub(super) now: u64,
    pub(super) messages: VecDeque<(u8, u8, Message)>,
    pub(super) writes: Vec<(u8, Entry)>,
    pub(super) view_writes: Vec<(u8, Superblock)>,
    /// Every entry whose write completed, per replica, in write order: the journal.
    pub(super) journal: Vec<Vec<Entry>>,
    /// Each replica's superblock as its last completed write left it.
    pub(super) superblocks: Vec<Superblock>,
    pub(super) checkpoints: Vec<Option<Checkpoint>>,
    pub(super) replies: Vec<(u8, u128, u64, Vec<u8>)>,
    pub(super) not_primary: Vec<(u8, u128, u8)>,
    /// Replicas that neither send nor receive.
    pub(super) isolated: Vec<bool>,
    /// A test that breaks a replica on purpose sets this; otherwise a halt fails the test.
    pub(super) may_halt: bool,
}

impl Harness {
    pub(super) fn new(replica_count: u8, options: Options) -> Self {
        let replicas =
            (0..replica_count).map(|r| Replica::new(r, replica_count, 7, options, Counter::default())).collect();
        let count = usize::from(replica_count);
        Self {
            replicas,
            now: 1_000,
            messages: VecDeque::new(),
            writes: Vec::new(),
            view_writes: Vec::new(),
            journal: vec![Vec::new(); count],
            superblocks: vec![Superblock::default(); count],
            checkpoints: vec![None; count],
            replies: Vec::new(),
            not_primary: Vec::new(),
            isolated: vec![false; count],
            may_halt: false,
        }
    }

    /// Routes one replica's effects into the queues. A replica that halted fails the test
    /// (unless it halted on purpose, which the test then checks itself).
    pub(super) fn absorb(&mut self, from: u8, effects: Vec<Effect>) {
        if let Some(reason) = self.replicas[usize::from(from)].halted()
            && !self.may_halt
        {
            panic!("replica {from} halted: {reason}");
        }
        for effect in effects {
            match effect {
                Effect::Send { to, message } => {
                    if !self.isolated[usize::from(from)] && !self.isolated[usize::from(to)] {
                        self.messages.push_back((from, to, message));
                    }
                }
                Effect::Persist { entry } => self.writes.push((from, entry)),
                Effect::PersistView { superblock } => self.view_writes.push((from, superblock)),
                Effect::Commit { .. } => {}
                Effect::Reply { client_id, request_number, reply } => {
                    self.replies.push((from, client_id, request_number, reply))
                }
                Effect::NotPrimary { client_id, primary, .. } => self.not_primary.push((from, client_id, primary)),
                Effect::Checkpoint { checkpoint, .. } => self.checkpoints[usize::from(from)] = Some(checkpoint),
            }
        }
    }

    pub(super) fn request(&mut self, replica: u8, client_id: u128, request_number: u64, delta: u64) {
        let mut effects = Vec::new();
        let body = delta.to_le_bytes().to_vec();
        self.replicas[usize::from(replica)].on_request(self.now, client_id, request_number, 0, body, &mut effects);
        self.absorb(replica, effects);
    }

    /// Delivers queued messages (and whatever they cause) until the queue is empty.
    pub(super) fn deliver(&mut self) {
        while !self.messages.is_empty() {
            self.deliver_one();
        }
    }

    /// Delivers the oldest queued message.
    pub(super) fn deliver_one(&mut self) {
        let Some((from, to, message)) = self.messages.pop_front() else { return };
        if self.isolated[usize::from(from)] || self.isolated[usize::from(to)] {
            return;
        }
        let mut effects = Vec::new();
        self.replicas[usize::from(to)].on_message(self.now, message, &mut effects);
        self.absorb(to, effects);
    }

    /// Completes every pending journal and superblock write.
    pub(super) fn persist(&mut self) {
        for (replica, entry) in std::mem::take(&mut self.writes) {
            let mut effects = Vec::new();
            self.journal[usize::from(replica)].push(entry.clone());
            self.replicas[usize::from(replica)].on_prepare_persisted(entry.op, entry.checksum, &mut effects);
            self.absorb(replica, effects);
        }
        for (replica, superblock) in std::mem::take(&mut self.view_writes) {
            let mut effects = Vec::new();
            self.superblocks[usize::from(replica)] = superblock;
            self.replicas[usize::from(replica)].on_view_persisted(superblock.view, &mut effects);
            self.absorb(replica, effects);
        }
    }

    /// Delivers and persists until nothing is left to do.
    pub(super) fn settle(&mut self) {
        self.settle_losing(&|_, _| false);
    }

    /// Like `settle`, but drops every message `lost` matches (by sender).
    fn settle_losing(&mut self, lost: &impl Fn(u8, &Message) -> bool) {
        while !self.messages.is_empty() || !self.writes.is_empty() || !self.view_writes.is_empty() {
            while !self.messages.is_empty() {
                self.messages.retain(|(from, _, message)| !lost(*from, message));
                self.deliver_one();
            }
            self.persist();
        }
    }

    pub(super) fn tick(&mut self, ticks: u64) {
        self.tick_losing(ticks, |_, _| false);
    }

    /// Like `tick`, but drops every message `lost` matches (by sender).
    pub(super) fn tick_losing(&mut self, ticks: u64, lost: impl Fn(u8, &Message) -> bool) {
        for _ in 0..ticks {
            self.now += 10;
            for replica in 0..self.replicas.len() {
                let mut effects = Vec::new();
                self.replicas[replica].tick(self.now, &mut effects);
                self.absorb(replica as u8, effects);
            }
            self.settle_losing(&lost);
        }
    }

    /// Restarts a replica from its journal, superblock and checkpoint.
    pub(super) fn restart(&mut self, replica: u8, entries: Vec<Entry>) {
        let index = usize::from(replica);
        let (superblock, checkpoint) = (self.superblocks[index], self.checkpoints[index].clone());
        let durable = Durable { superblock, checkpoint, entries };
        let mut effects = Vec::new();
        let count = self.replicas.len() as u8;
        self.replicas[index] = Replica::open(replica, count, 99, options(), Counter::default(), durable, &mut effects);
        self.writes.retain(|(r, _)| *r != replica);
        self.view_writes.retain(|(r, _)| *r != replica);
        self.absorb(replica, effects);
    }

    pub(super) fn sent(&self, kind: fn(&Message) -> bool) -> usize {
        self.messages.iter().filter(|(_, _, message)| kind(message)).count()
    }
}

fn entry(op: u64, parent: u128, body: &[u8]) -> Entry {
    let body = body.to_vec();
    Entry { op, view: 3, timestamp: 5, client_id: 9, request_number: 2, operation: 1, parent, body, checksum: 0 }.seal()
}

#[test]
fn entry_codec_round_trips_and_rejects_torn_or_flipped_frames() {
    let original = entry(4, 77, b"hello");
    assert!(original.verify());
    let bytes = original.encode();
    assert_eq!(Entry::decode(&bytes), Ok(original.clone()));
    let mut journal = bytes.clone();
    journal.extend_from_slice(&entry(5, original.checksum, b"").encode());
    let (first, used) = Entry::decode_prefix(&journal).expect("first frame");
    assert_eq!((first, used), (original, bytes.len()));
    assert!(Entry::decode_prefix(&journal[used..]).is_ok());
    assert_eq!(Entry::decode(&bytes[..bytes.len() - 1]), Err(EntryError::Truncated));
    assert_eq!(Entry::decode(&bytes[..3]), Err(EntryError::Truncated));
    for bit in [8 * 4, 8 * 25, 8 * (bytes.len() - 1)] {
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1;
        assert_eq!(Entry::decode(&flipped), Err(EntryError::Checksum), "bit {bit}");
    }
    let mut huge = bytes.clone();
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(Entry::decode(&huge), Err(EntryError::TooLarge));
}

#[test]
fn checkpoint_codec_round_trips_and_rejects_flips() {
    let checkpoint = Checkpoint { op: 64, checksum: 3, timestamp: 11, state: vec![1, 2, 3] };
    let bytes = checkpoint.encode();
    assert_eq!(Checkpoint::decode(&bytes), Ok(checkpoint));
    let mut flipped = bytes.clone();
    flipped[30] ^= 4;
    assert_eq!(Checkpoint::decode(&flipped), Err(EntryError::Checksum));
    assert_eq!(Checkpoint::decode(&bytes[..bytes.len() - 2]), Err(EntryError::Truncated));
}

#[test]
fn normal_operation_prepares_acknowledges_commits_and_replies() {
    let mut harness = Harness::new(3, options());
    harness.request(0, 1, 1, 5);
    // The primary writes and sends; nothing is acknowledged or replied yet.
    assert_eq!(harness.writes.len(), 1);
    assert_eq!(harness.sent(|m| matches!(m, Message::Prepare { .. })), 2);
    harness.deliver();
    assert_eq!(harness.writes.len(), 3, "each backup writes the prepare");
    assert_eq!(harness.sent(|m| matches!(m, Message::PrepareOk { .. })), 0, "no vote before the write completes");
    assert!(harness.replies.is_empty());
    harness.persist();
    assert_eq!(harness.sent(|m| matches!(m, Message::PrepareOk { .. })), 2);
    harness.deliver();
    assert_eq!(harness.replicas[0].commit(), 1);
    assert_eq!(harness.replies, vec![(0, 1, 1, [5u64.to_le_bytes(), 1u64.to_le_bytes()].concat())]);
    // Backups learn the commit from the next heartbeat.
    assert_eq!(harness.replicas[1].commit(), 0);
    harness.tick(options().heartbeat_ticks);
    for replica in &harness.replicas {
        assert_eq!((replica.commit(), replica.state_machine().total), (1, 5));
    }
}

#[test]
fn primary_votes_for_its_own_prepare_only_after_its_write_completes() {
    let mut harness = Harness::new(3, options());
    harness.request(0, 1, 1, 5);
    let primary_write = harness.writes.remove(0);
    harness.deliver();
    harness.persist();
    // One backup's vote is not a quorum of three without the primary's own durable copy.
    harness.messages.retain(|(from, _, _)| *from == 1);
    harness.deliver();
    assert_eq!(harness.replicas[0].commit_max(), 0);
    harness.writes.push(primary_write);
    harness.persist();
    assert_eq!(harness.replicas[0].commit_max(), 1);
}

#[test]
fn backups_commit_from_the_next_prepare() {
    let mut harness = Harness::new(3, options());
    harness.request(0, 1, 1, 5);
    harness.settle();
    harness.request(0, 2, 1, 7);
    harness.deliver();
    // The second prepare carries the first op's commit.
    assert_eq!(harness.replicas[1].commit(), 1);
    assert_eq!(harness.replicas[2].commit(), 1);
}

#[test]
fn duplicate_request_executes_once_and_returns_the_cached_reply() {
    let mut harness = Harness::new(3, options());
    harness.request(0, 1, 1, 5);
    // A retry while the first is in flight is dropped, not prepared twice.
    harness.request(0, 1, 1, 5);
    assert_eq!(harness.writes.len(), 1);
    harness.settle();
    harness.request(0, 1, 1, 5);
    harness.settle();
    assert_eq!(harness.replicas[0].op(), 1);
    assert_eq!(harness.replies.len(), 2);
    assert_eq!(harness.replies[0], harness.replies[1]);
    assert_eq!(harness.replicas[0].state_machine().total, 5);
    // An older request number gets nothing.
    harness.request(0, 1, 0, 5);
    assert_eq!(harness.replies.len(), 2);
}

#[test]
fn client_table_evicts_the_oldest_client_when_full() {
    let options = Options { client_table_max: 2, ..options() };
    let mut harness = Harness::new(1, options);
    for client in 1..=3 {
        harness.request(0, client, 1, 1);
        harness.settle();
    }
    let primary = &harness.replicas[0];
    assert!(primary.client_reply(1).is_none());
    assert!(primary.client_reply(2).is_some() && primary.client_reply(3).is_some());
}

#[test]
fn request_to_a_backup_names_the_primary() {
    let mut harness = Harness::new(3, options());
    harness.request(2, 1, 1, 5);
    assert_eq!(harness.not_primary, vec![(2, 1, 0)]);
    assert!(harness.writes.is_empty() && harness.messages.is_empty());
}

#[test]
fn a_primary_offset_moves_every_view_s_primary_over_by_as_many() {
    let offset = Options { primary_offset: 2, ..options() };
    let mut harness = Harness::new(3, offset);
    assert!(harness.replicas[2].is_primary() && !harness.replicas[0].is_primary(), "replica 2 leads view 0");
    assert_eq!(harness.replicas[0].primary_index(1), 0, "and replica 0 view 1");
    harness.request(0, 1, 1, 5);
    assert_eq!(harness.not_primary, vec![(0, 1, 2)], "a backup names the offset primary");
    harness.request(2, 1, 1, 5);
    harness.settle();
    assert_eq!(harness.replicas[2].commit(), 1, "the offset primary commits");
}

#[test]
fn malformed_messages_are_dropped() {
    let mut harness = Harness::new(3, options());
    let mut bad = entry(1, ROOT_CHECKSUM, b"x");
    bad.body[0] ^= 1;
    let messages = [
        Message::Prepare { view: 0, commit: 0, entry: bad.clone() },
        Message::PrepareOk { view: 0, replica: 200, op: 1, checksum: 0 },
        Message::StartViewChange { view: 1, replica: 1 },
        Message::Repair { replica: 2, entries: vec![bad.clone()] },
        Message::StartView { view: 4, log: LogSuffix { op: 9, op_checksum: 1, commit: 9, entries: vec![bad] } },
        Message::Commit { view: 0, commit: u64::MAX },
    ];
    for message in messages {
        let mut effects = Vec::new();
        harness.replicas[1].on_message(harness.now, message, &mut effects);
    }
    assert_eq!((harness.replicas[1].view(), harness.replicas[1].op()), (0, 0));
}

#[test]
fn single_replica_commits_alone_and_reopens_from_its_journal() {
    let mut harness = Harness::new(1, options());
    for request in 1..=3 {
        harness.request(0, 1, request, 2);
        harness.settle();
    }
    assert_eq!(harness.replicas[0].commit(), 3);
    let journal = harness.journal[0].clone();
    harness.restart(0, journal);
    let replica = &harness.replicas[0];
    assert_eq!((replica.status(), replica.commit(), replica.state_machine().total), (Status::Normal, 3, 6));
}

/// Brings a cluster to `ops` committed ops from one client.
pub(super) fn commit_ops(harness: &mut Harness, client_id: u128, ops: u64) {
    for _ in 0..ops {
        let primaries = harness.replicas.iter().filter(|r| r.is_primary() && r.status() == Status::Normal);
        let primary = primaries.max_by_key(|r| r.view()).expect("a normal primary").replica();
        let next = harness.replicas[usize::from(primary)].client_reply(client_id).map_or(1, |(number, _)| number + 1);
        harness.request(primary, client_id, next, 1);
        harness.settle();
    }
}

#[test]
fn view_change_steps_and_the_best_log_wins() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 2);
    // Op 3 reaches only replica 2 before the primary goes silent.
    harness.request(0, 1, 3, 1);
    harness.messages.retain(|(_, to, _)| *to == 2);
    harness.deliver();
    harness.persist();
    harness.messages.clear();
    harness.isolated[0] = true;
    // Backups time out and start view 1; the first StartViewChange they see gives each its f = 1.
    let mut effects = Vec::new();
    for _ in 0..=options().view_change_timeout_ticks {
        harness.replicas[1].tick(harness.now, &mut effects);
    }
    assert_eq!((harness.replicas[1].view(), harness.replicas[1].status()), (1, Status::ViewChange));
    harness.absorb(1, effects);
    assert_eq!(harness.sent(|m| matches!(m, Message::StartViewChange { view: 1, .. })), 1, "to replica 2 only");
    harness.deliver();
    // Replica 2 joined and its StartViewChange gave replica 1 its f = 1 too: both persist view 1
    // before anything else, and nobody sends DoViewChange yet.
    assert_eq!(harness.replicas[2].status(), Status::ViewChange);
    assert_eq!(harness.sent(|m| matches!(m, Message::DoViewChange { .. })), 0);
    let views: Vec<(u8, u32)> = harness.view_writes.iter().map(|(replica, sb)| (*replica, sb.view)).collect();
    assert_eq!(views, vec![(2, 1), (1, 1)]);
    let primary_view_write = harness.view_writes.pop().expect("replica 1's superblock write");
    harness.persist();
    assert_eq!(harness.sent(|m| matches!(m, Message::DoViewChange { .. })), 1);
    harness.deliver();
    // The new primary needs its own DoViewChange too, which waits for its durable view.
    assert_eq!(harness.replicas[1].status(), Status::ViewChange);
    harness.view_writes.push(primary_view_write);
    harness.settle();
    let primary = &harness.replicas[1];
    assert_eq!((primary.status(), primary.is_primary(), primary.view()), (Status::Normal, true, 1));
    assert_eq!(primary.op(), 3, "the log holding op 3 wins");
    assert_eq!(primary.log_entry(3), harness.replicas[2].log_entry(3));
    assert_eq!(primary.commit(), 3, "op 3 commits in the new view");
    harness.tick(options().heartbeat_ticks);
    assert_eq!(harness.replicas[2].commit(), 3);
}

#[test]
fn a_partitioned_old_primary_rejoins_the_new_view() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 2);
    harness.isolated[0] = true;
    harness.request(0, 1, 3, 1);
    harness.tick(options().view_change_timeout_ticks + options().view_change_status_timeout_ticks);
    assert_eq!(harness.replicas[1].status(), Status::Normal);
    let view = harness.replicas[1].view();
    commit_ops(&mut harness, 2, 2);
    harness.isolated[0] = false;
    harness.tick(2 * options().heartbeat_ticks);
    let old = &harness.replicas[0];
    assert_eq!((old.view(), old.status(), old.commit()), (view, Status::Normal, 4));
    assert!(!old.is_primary());
    assert_eq!(old.log_entry(3), harness.replicas[1].log_entry(3), "the uncommitted op 3 was replaced");
}

#[test]
fn a_backup_that_knows_more_commits_than_the_new_primary_still_votes() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 3);
    // Op 4 commits at primary 0; the backups hold it but do not hear of the commit.
    harness.request(0, 1, 4, 1);
    harness.settle();
    assert_eq!(harness.replicas[0].commit(), 4);
    assert!(harness.replicas[1..].iter().all(|r| r.commit_max() == 3 && r.op() == 4));
    // Replicas 1 and 2 start view 1 without replica 0, so its primary knows commit 3 only,
    // and replica 2's votes are lost from now on.
    let votes_of_2 = |from: u8, message: &Message| from == 2 && matches!(message, Message::PrepareOk { .. });
    harness.isolated[0] = true;
    let view_change = options().view_change_timeout_ticks + options().view_change_status_timeout_ticks;
    harness.tick_losing(view_change, votes_of_2);
    assert_eq!((harness.replicas[1].status(), harness.replicas[1].view()), (Status::Normal, 1));
    assert_eq!(harness.replicas[1].commit_max(), 3);
    // Replica 0, which knows op 4 committed, joins view 1: its vote is the one the primary
    // can get for op 4.
    harness.isolated[0] = false;
    harness.tick_losing(options().view_change_timeout_ticks, votes_of_2);
    assert_eq!((harness.replicas[0].status(), harness.replicas[0].view()), (Status::Normal, 1));
    assert_eq!(harness.replicas[1].commit(), 4, "the primary commits op 4 with replica 0's vote");
}

/// Entries `ops` chained onto `parent`, prepared in `view`, with distinct bodies per `tag`.
fn chain(ops: std::ops::RangeInclusive<u64>, view: u32, mut parent: u128, tag: u8) -> Vec<Entry> {
    let mut entries = Vec::new();
    for op in ops {
        let body = [tag; 8].to_vec();
        let entry = Entry {
            op,
            view,
            timestamp: op,
            client_id: 5,
            request_number: op,
            operation: 0,
            parent,
            body,
            checksum: 0,
        };
        let entry = entry.seal();
        parent = entry.checksum;
        entries.push(entry);
    }
    entries
}

#[test]
fn new_primary_prefers_the_latest_log_view_over_the_longest_log() {
    let mut harness = Harness::new(3, options());
    commit_ops(&mut harness, 1, 2);
    let prefix: Vec<Entry> = (1..=2).map(|op| harness.replicas[0].log_entry(op).expect("committed").clone()).collect();
    let top = prefix[1].checksum;
    // Replica 0 was normal last in view 0 with a longer log; replica 1 in view 1 with op 3 only.
    let longer = [prefix.clone(), chain(3..=5, 0, top, 0xAA)].concat();
    let later = [prefix, chain(3..=3, 1, top, 0xBB)].concat();
    let suffix = |entries: &[Entry]| {
        let head = entries.last().expect("non-empty");
        LogSuffix { op: head.op, op_checksum: head.checksum, commit: 2, entries: entries.to_vec() }
    };
    let votes = [
        Message::DoViewChange { view: 2, replica: 0, log_view: 0, log: suffix(&longer) },
        Message::DoViewChange { view: 2, replica: 1, log_view: 1, log: suffix(&later) },
    ];
    for vote in votes {
        let mut effects = Vec::new();
        harness.replicas[2].on_message(harness.now, vote, &mut effects);
        harness.absorb(2, effects);
    }
    // Replica 2 (primary of view 2) votes for itself once its view is durable, then starts.
    assert_eq!(harness.replicas[2].status(), Status::ViewChange);
    harness.messages.clear();
    harness.persist();
    let primary = &harness.replicas[2];
    assert_eq!((primary.status(), primary.view(), primary.op()), (Status::Normal, 2, 3));
    assert_eq!(primary.log_entry(3), later.last());
    assert_eq!(harness.sent(|m| matches!(m, Message::StartView { view: 2, .. })), 2);
}
