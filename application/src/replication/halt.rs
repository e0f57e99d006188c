//! Replicas halted by a journal that could not be written (a full disk, a device error):
//! the metadata's and each partition group's stop being driven and take no requests; once
//! the disk works they open again from their files, as a start opens them, and recover from
//! their peers with a fresh nonce. A replica that halted itself (an invariant a handler
//! broke, a committed op its state machine could not apply) stays halted until a restart:
//! only that replica stops, never the process.

/// Why a replica (a partition group's, or the metadata's) is not driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halt {
    /// A journal, superblock or checkpoint write failed: the replica opens again once the
    /// disk works.
    Journal,
    /// Until a restart: a partition holds messages its group has no record of, and only an
    /// operator can say which copy is right; or the metadata journal, opened again, holds
    /// less than the node applied.
    UntilRestart,
    /// Until a restart: the replica halted itself, for this reason (a peer's message or a
    /// bug broke one of its invariants, or its state machine could not apply a committed
    /// op). A restart opens it from its files and it catches up from its peers.
    Broken(&'static str),
}

/// What the operator reads when a replica halts itself: what still works and how to bring
/// it back.
pub const BROKEN_REPLICA_RECOVERY: &str = "restart the node: the replica opens again from its journal and \
    checkpoint and catches up from its peers; one that halts again at the same place has damaged files: \
    restore the data directory from a backup";

/// A seed for a reopening: differs from the last one, so the recovery's nonce does too.
pub fn reopening_seed(last: u64, now_us: u64) -> u64 {
    (last ^ now_us.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1)
}
