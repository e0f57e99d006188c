//! What a partition group keeps per partition beside its replica: which incarnation each
//! copy is in, the gaps being fetched from peers, the damaged batches being repaired, and
//! the peers' answers that fill them.

use std::collections::BTreeMap;

use rill_domain::Namespace;

use crate::partition::DamagedBatch;
use crate::replication::TICK_MS;

/// Requests for a gap's batches (a minute's worth) before the sends waiting on it are given
/// up on this node: no peer has them (retention removed them), and the group's other
/// partitions must not wait forever. The gap is still asked for, every second.
pub(super) const GAP_ATTEMPTS: u32 = 60;

/// A request for batches unanswered this long (1 s) is sent again, to the next peer.
pub(super) const ASK_AGAIN_TICKS: u64 = 1_000 / TICK_MS;

/// One copy's incarnations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct CopyState {
    /// The newest incarnation this node's copy is in: its creation, or the group reset
    /// (purge) that last emptied it.
    pub incarnation: u64,
    /// The newest incarnation the metadata asked for here (its creation, or a purge this
    /// node applied): the group must know it before this node writes, so a purge whose reset
    /// timed out is submitted again by the next send or offset change.
    pub wanted: u64,
    /// The incarnation the last failed emptying was for, so its retries are logged once.
    pub failed_reset: u64,
    /// A purge this node applied whose record (`purged_at`) could not be written: written
    /// every second until it is, or until the copy is emptied into that purge.
    pub unrecorded_purge: bool,
}

/// Copies by partition: one for every partition open on this shard.
pub(super) type Copies = BTreeMap<Namespace, CopyState>;

/// A partition whose log is behind what its group assigned.
pub(super) struct Gap {
    /// The offset the log must reach.
    pub target: u64,
    pub asked_tick: u64,
    /// Requests sent so far: each retry asks the next peer.
    pub attempts: u32,
}

impl Gap {
    /// Asked of every peer long enough: sends behind it no longer wait for it.
    pub fn exhausted(&self) -> bool {
        self.attempts >= GAP_ATTEMPTS
    }
}

/// Gaps by partition.
pub(super) type Gaps = BTreeMap<Namespace, Gap>;

/// A stored batch that failed its checksums here, asked of the peers.
pub(super) struct Repair {
    pub damaged: DamagedBatch,
    pub asked_tick: u64,
    pub attempts: u32,
}

/// Repairs by partition and the damaged batch's first offset.
pub(super) type Repairs = BTreeMap<(Namespace, u64), Repair>;

/// A peer's `Batches` answer: its stored batches of a partition in an incarnation, from an
/// offset on.
#[derive(Clone, Copy)]
pub(super) struct PeerBatches<'a> {
    pub peer: u8,
    pub key: u64,
    pub incarnation: u64,
    pub from_offset: u64,
    /// The peer's first stored offset: past `from_offset`, a deletion took what was asked.
    pub log_start: u64,
    pub bytes: &'a [u8],
}

/// The requests of `asked` last sent `ASK_AGAIN_TICKS` or more before `tick`, with how
/// many times each was sent (`sent` gives a request's tick and count).
pub(super) fn unanswered<K: Copy + Ord, T>(
    asked: &BTreeMap<K, T>,
    tick: u64,
    sent: impl Fn(&T) -> (u64, u32),
) -> Vec<(K, u32)> {
    asked
        .iter()
        .map(|(key, request)| (*key, sent(request)))
        .filter(|(_, (asked_tick, _))| tick - asked_tick >= ASK_AGAIN_TICKS)
        .map(|(key, (_, attempts))| (key, attempts))
        .collect()
}
