//! A partition group's state on one node, as plain fields behind `&mut self`: its replica
//! and journal, the sends waiting for their commits, the commits waiting for their
//! partitions, the copies' incarnations, the gaps and repairs under way. One lock (the
//! group's pump) holds it; every call into the replica and every effect it asks for runs
//! under that lock, in order.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use futures_channel::oneshot;
use rill_domain::Namespace;
use rill_domain::error::ErrorCode;
use rill_domain::partition_group;
use rill_domain::vsr::{Effect, Entry, Message, Replica};

use super::records::{Copies, Gaps, Repairs};
use crate::partition::ConsumerKey;
use crate::partitions::PartitionStore;
use crate::ports::{Env, ReplicaNetwork};
use crate::replication::{GroupMachine, Halt, Membership, VsrJournal};

/// The outcome a waiting op gets: a send's base offset, nothing for another op.
pub(super) type OpResult = Result<Option<u64>, ErrorCode>;

pub(super) struct Waiter {
    pub request_number: u64,
    pub since_tick: u64,
    pub operation: u8,
    pub body: Vec<u8>,
    /// The view the request was last handed to a primary in (none yet: no view was normal).
    pub sent_in: Option<u32>,
    /// The tick it was last handed on: unanswered for `RESEND_TICKS`, it goes again (the
    /// message, or the primary's answer, may have been lost with a connection).
    pub sent_tick: u64,
    pub reply: oneshot::Sender<OpResult>,
    /// The primary's answer to a forwarded op and the tick it came: the client gets it once
    /// this node applied the op too (so a poll here right after sees the send), or after
    /// `HOLD_TICKS` when this copy lags.
    pub held: Option<(OpResult, u64)>,
}

/// What a committed op asks of its partition on this node.
#[derive(Debug, Clone)]
pub(super) enum Applying {
    /// A send the group gave this partition key and base offset, in an incarnation, with
    /// the messages it dropped as duplicates when it dropped some.
    Send(u64, u64, u64, Option<std::rc::Rc<[bool]>>),
    /// A consumer offset stored or deleted, in an incarnation.
    Offset(u64),
    /// A reset that started the partition again.
    Reset,
    /// Sealed segments ending at or below an offset go, in an incarnation.
    DeleteSegments(u64),
    /// A copy proposed to the group was committed as its partition's record (true), or a
    /// later proposal changed nothing (false).
    Adopt(bool),
    Nothing,
}

/// A committed op waiting for its partition, with what it asks of it.
pub(super) struct Blocked {
    pub entry: Entry,
    pub applying: Applying,
    pub since_tick: u64,
}

/// What the group reaches outside its state: the shard's open partitions, the replica
/// plane, and this node's place in the cluster.
pub(super) struct Reach<'a, E: Env> {
    pub store: &'a PartitionStore<E>,
    pub network: &'a dyn ReplicaNetwork,
    pub membership: Membership,
}

impl<E: Env> Reach<'_, E> {
    pub fn group(&self) -> u16 {
        self.store.shard_id()
    }
}

/// One node's state of its shard's partition group.
pub(super) struct GroupCore<E: Env> {
    pub replica: Replica<GroupMachine>,
    pub journal: VsrJournal<E::Storage>,
    pub waiters: BTreeMap<u128, Waiter>,
    pub next_request: u64,
    pub ticks: u64,
    /// Committed sends whose partition is not open here yet, oldest first: later commits
    /// wait behind them, so each partition's batches are written in commit order.
    pub blocked: VecDeque<Blocked>,
    /// Partitions written since the last checkpoint.
    pub dirty: BTreeSet<Namespace>,
    /// Partitions whose logs lack batches the group committed, being fetched from peers.
    pub gaps: Gaps,
    /// Partitions whose stored consumer offsets a committed op could not change here (a disk
    /// error): made what the group's state says again every second until it works.
    pub unsynced_offsets: BTreeSet<Namespace>,
    /// Damaged stored batches whose intact copies are asked of peers.
    pub repairs: Repairs,
    /// Why the replica is not driven.
    pub halted: Option<Halt>,
    /// The seed of the replica's last opening; a reopening derives a new one from it.
    pub seed: u64,
    /// Which incarnation each of this node's copies is in, and which one it must reach.
    pub copies: Copies,
    /// This node's copies that hold messages the group has no record of, to be proposed to
    /// it (`adopt.rs`); sends to them wait until one adoption commits.
    pub unadopted: BTreeSet<Namespace>,
    /// When this node's replica of the group was first created (its `born_at` marker; 0 for
    /// a group from before the marker): partitions created before it may hold messages on
    /// some node that the group has not recorded yet.
    pub born_at: u64,
    /// Partitions whose empty copy here was reported to the group.
    pub reported_empty: BTreeSet<Namespace>,
}

/// Which node a lane's client id belongs to.
pub(super) fn lane_node(client_id: u128) -> u8 {
    (client_id >> 8) as u8
}

impl<E: Env> GroupCore<E> {
    pub fn new(replica: Replica<GroupMachine>, journal: VsrJournal<E::Storage>, seed: u64) -> Self {
        Self {
            replica,
            journal,
            waiters: BTreeMap::new(),
            next_request: 0,
            ticks: 0,
            blocked: VecDeque::new(),
            dirty: BTreeSet::new(),
            gaps: Gaps::new(),
            unsynced_offsets: BTreeSet::new(),
            repairs: Repairs::new(),
            halted: None,
            seed,
            copies: Copies::default(),
            unadopted: BTreeSet::new(),
            born_at: 0,
            reported_empty: BTreeSet::new(),
        }
    }

    pub fn answer(&mut self, client_id: u128, request_number: u64, result: OpResult) {
        if self.waiters.get(&client_id).is_some_and(|w| w.request_number == request_number)
            && let Some(waiter) = self.waiters.remove(&client_id)
        {
            // A commit here that lost its outcome (a restored checkpoint) does not undo the
            // primary's answer.
            let result = match (waiter.held, result) {
                (Some((held, _)), Err(_)) => held,
                (_, result) => result,
            };
            let _ = waiter.reply.send(result);
        }
    }

    /// Keeps the primary's successful answer until this node's own commit answers it.
    pub fn hold(&mut self, client_id: u128, request_number: u64, result: OpResult) {
        let ticks = self.ticks;
        if let Some(waiter) = self.waiters.get_mut(&client_id).filter(|w| w.request_number == request_number) {
            waiter.held.get_or_insert((result, ticks));
        }
    }

    /// Marks a waiting request as not handed to any primary, so the next tick sends it.
    pub fn resend_later(&mut self, client_id: u128, request_number: u64) {
        if let Some(waiter) = self.waiters.get_mut(&client_id).filter(|w| w.request_number == request_number) {
            waiter.sent_in = None;
        }
    }

    /// Answers every waiter `keep` refuses: with `code`, or with the primary's answer when
    /// one is held (the op committed).
    pub fn fail_waiters(&mut self, code: ErrorCode, keep: impl Fn(&Waiter) -> bool) {
        let failed: Vec<u128> = self.waiters.iter().filter(|(_, w)| !keep(w)).map(|(c, _)| *c).collect();
        for client_id in failed {
            if let Some(waiter) = self.waiters.remove(&client_id) {
                let _ = waiter.reply.send(waiter.held.map_or(Err(code), |(result, _)| result));
            }
        }
    }

    /// The peer to ask on attempt `attempts`: the primary first, then each other one in turn.
    pub fn peer_to_ask(&self, membership: Membership, attempts: u32) -> Option<u8> {
        let (me, count) = (membership.replica_id, membership.replica_count);
        let primary = self.replica.primary_index(self.replica.view());
        let peers: Vec<u8> = (0..count).map(|i| (primary + i) % count).filter(|&peer| peer != me).collect();
        peers.get(attempts as usize % peers.len().max(1)).copied()
    }

    /// What `parse` reads from the bodies of the `operation` entries in the group's journal
    /// above what its replica applied (after a restart: committed, but not known to be yet).
    pub fn journaled<T, C: FromIterator<T>>(&self, operation: u8, parse: impl Fn(&[u8]) -> Option<T>) -> C {
        let replica = &self.replica;
        let entries = (replica.commit() + 1..=replica.op()).filter_map(|op| replica.log_entry(op));
        entries.filter(|entry| entry.operation == operation).filter_map(|entry| parse(&entry.body)).collect()
    }
}

/// Sends the prepares among `effects` first: the primary's own journal write then overlaps
/// the backups' (it counts its own vote once written). Every other effect keeps its order
/// (a view-change message must follow the superblock write before it).
pub(super) fn send_prepares_first(network: &dyn ReplicaNetwork, effects: &mut VecDeque<Effect>) {
    let sends =
        |kind: fn(&Message) -> bool| effects.iter().any(|e| matches!(e, Effect::Send { message, .. } if kind(message)));
    // A new primary's prepares follow its StartView, or backups would ask for the view.
    if !sends(|m| matches!(m, Message::Prepare { .. })) || sends(|m| matches!(m, Message::StartView { .. })) {
        return;
    }
    effects.retain(|effect| match effect {
        Effect::Send { to, message: message @ Message::Prepare { .. } } => {
            network.send(*to, message.clone());
            false
        }
        _ => true,
    });
}

/// What a group reply says: a send's base offset, nothing for another op that succeeded, or
/// the error its status names (of the few a group's reply carries).
pub(super) fn reply_result(reply: &[u8]) -> OpResult {
    if let Some((_, base_offset)) = partition_group::parse_send_reply(reply) {
        return Ok(Some(base_offset));
    }
    let status = reply.first_chunk::<4>().map(|b| u32::from_le_bytes(*b));
    if status == Some(0) {
        return Ok(None);
    }
    let known = [
        ErrorCode::TransientNotAccepted,
        ErrorCode::InvalidFormat,
        ErrorCode::InvalidCommand,
        ErrorCode::ConsumerOffsetNotFound,
    ];
    Err(known.into_iter().find(|code| Some(code.code()) == status).unwrap_or(ErrorCode::InvalidMessagesCount))
}

/// A consumer key as the group's ops name it: kind 1 a consumer, 2 a consumer group.
pub(super) fn consumer_kind(key: ConsumerKey) -> (u8, u32) {
    match key {
        ConsumerKey::Consumer(id) => (1, id),
        ConsumerKey::Group(id) => (2, id),
    }
}

/// The consumer key a group op's `(kind, id)` names.
pub(super) fn consumer_key_of((kind, id): (u8, u32)) -> ConsumerKey {
    if kind == 2 { ConsumerKey::Group(id) } else { ConsumerKey::Consumer(id) }
}

/// The partition a group op names, from the key its body starts with.
pub(super) fn op_partition(body: &[u8]) -> Option<Namespace> {
    Namespace::from_packed(u64::from_le_bytes(body.get(..8)?.try_into().ok()?))
}
