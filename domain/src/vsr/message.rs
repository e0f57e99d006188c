//! The protocol messages replicas exchange, the effects a replica asks its caller to carry out,
//! and the durable state a restarted replica is opened from.

use super::entry::{Checkpoint, Entry};

/// A replica's log as carried by `DoViewChange`, `StartView` and `RecoveryResponse`: the head
/// `(op, op_checksum)` and the contiguous, hash-chained entries the sender holds below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSuffix {
    pub op: u64,
    pub op_checksum: u128,
    /// The highest op the sender knows to be committed.
    pub commit: u64,
    pub entries: Vec<Entry>,
}

impl LogSuffix {
    /// Well-formed: a valid chain of at most `entries_max` entries that ends at the head.
    pub(super) fn is_valid(&self, entries_max: usize) -> bool {
        chain_is_valid(&self.entries, entries_max)
            && self.entries.last().is_none_or(|last| last.op == self.op && last.checksum == self.op_checksum)
    }
}

/// Whether `entries` are at most `entries_max` checksum-valid entries with consecutive ops, each
/// the parent of the next.
pub(super) fn chain_is_valid(entries: &[Entry], entries_max: usize) -> bool {
    entries.len() <= entries_max
        && entries.iter().all(Entry::verify)
        && entries.windows(2).all(|pair| pair[1].op == pair[0].op + 1 && pair[1].parent == pair[0].checksum)
        && entries.first().is_none_or(|first| first.op >= 1)
}

/// Messages between replicas. Names follow the VSR Revisited paper; `RequestPrepare`/`Repair`
/// fetch one entry (and its ancestors) by checksum from whichever peer holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Prepare {
        view: u32,
        commit: u64,
        entry: Entry,
    },
    /// The sender holds every op up to `op` durably; it vouches for all of them at once.
    PrepareOk {
        view: u32,
        replica: u8,
        op: u64,
        checksum: u128,
    },
    /// The primary's heartbeat, carrying its commit number.
    Commit {
        view: u32,
        commit: u64,
    },
    StartViewChange {
        view: u32,
        replica: u8,
    },
    DoViewChange {
        view: u32,
        replica: u8,
        log_view: u32,
        log: LogSuffix,
    },
    StartView {
        view: u32,
        log: LogSuffix,
    },
    /// A replica that saw traffic from a view it never started asks that view's primary.
    RequestStartView {
        view: u32,
        replica: u8,
    },
    Recovery {
        replica: u8,
        nonce: u64,
    },
    /// `log` is present only in the response of the primary of `view`.
    RecoveryResponse {
        view: u32,
        replica: u8,
        nonce: u64,
        log: Option<LogSuffix>,
    },
    RequestPrepare {
        replica: u8,
        op: u64,
        checksum: u128,
    },
    /// The asked entry followed by as many of its ancestors as the sender holds (descending).
    Repair {
        replica: u8,
        entries: Vec<Entry>,
    },
    /// State transfer: the sender has applied every op up to `commit`.
    GetState {
        view: u32,
        replica: u8,
        commit: u64,
    },
    /// Committed state: a checkpoint when the asker is behind the sender's log, then committed
    /// entries in ascending order.
    NewState {
        view: u32,
        replica: u8,
        checkpoint: Option<Checkpoint>,
        entries: Vec<Entry>,
    },
    /// A client request a backup forwards to the primary (a node submits for its own
    /// clients; the primary treats it as `on_request`).
    Request {
        client_id: u128,
        request_number: u64,
        operation: u8,
        body: Vec<u8>,
    },
    /// The primary's reply to a forwarded request, for the node that forwarded it. The
    /// replica ignores it: it is for the caller, who waits for it.
    Reply {
        client_id: u128,
        request_number: u64,
        reply: Vec<u8>,
    },
    /// Partition-group state transfer of partition data: `replica` lacks the stored batches
    /// of `partition` from `from_offset` up to `to_offset` (its log is behind the group's
    /// state after a `NewState`, or below a committed send). The replica ignores it: the
    /// shard that owns the partition answers with `Batches`.
    /// `incarnation` is the one the asker's copy is in: batches of another (a purge or a
    /// recreation either side has not applied yet) must not fill it.
    RequestBatches {
        replica: u8,
        partition: u64,
        incarnation: u64,
        from_offset: u64,
        to_offset: u64,
    },
    /// Whole stored batches of `partition` from `from_offset` on, end to end, as the sender
    /// stores them in `incarnation` (none when it has none from there, or its copy is in
    /// another incarnation). `log_start` is the sender's first stored offset in that
    /// incarnation (0 when its copy is in another): above `from_offset`, a deletion removed
    /// what was asked for. The replica ignores it.
    Batches {
        replica: u8,
        partition: u64,
        incarnation: u64,
        from_offset: u64,
        log_start: u64,
        batches: Vec<u8>,
    },
}

/// The superblock: what a replica must not forget across a restart besides its journal. With
/// it, the journal names the log this replica would offer in a view change: the entries chained
/// below `(head_op, head_checksum)`, then the entries prepared in `log_view` above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Superblock {
    /// The highest view the replica promised to (sent `DoViewChange` for, or started).
    pub view: u32,
    /// The latest view whose log this replica holds durably from `head` up (at most `view`).
    pub log_view: u32,
    /// The commit number known when the superblock was written (a lower bound only).
    pub commit: u64,
    /// The head of the log when `log_view` began; every entry above it in that view's log was
    /// prepared in `log_view`. Op 0 (with [`super::ROOT_CHECKSUM`]) for a fresh replica.
    pub head_op: u64,
    pub head_checksum: u128,
    /// The journal may lack entries this replica acknowledged (a corrupt entry was cut from it):
    /// the log named above must not be offered in a view change. An adapter that cuts a
    /// corrupt entry sets it, durably, before cutting; the replica clears it once it has adopted
    /// a peer's log and made it durable.
    pub damaged: bool,
}

/// What an adapter read back after a restart, handed to [`super::Replica::open`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Durable {
    pub superblock: Superblock,
    /// The latest durable checkpoint, if any.
    pub checkpoint: Option<Checkpoint>,
    /// Every journal entry that decoded, in the order written (a later copy of an op wins).
    pub entries: Vec<Entry>,
}

/// What the replica asks its caller to do. The caller drains the buffer after every call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Send {
        to: u8,
        message: Message,
    },
    /// Write and fsync the entry to the journal, then call `on_prepare_persisted(op, checksum)`.
    Persist {
        entry: Entry,
    },
    /// Write and fsync the superblock, then call `on_view_persisted(superblock.view)`. The
    /// replica keeps at most one superblock write in flight.
    PersistView {
        superblock: Superblock,
    },
    /// `op` was applied to the state machine (in op order, once per op per replica lifetime).
    Commit {
        op: u64,
        entry: Entry,
    },
    /// The primary's reply to a client (also a cached reply re-sent for a duplicate request).
    Reply {
        client_id: u128,
        request_number: u64,
        reply: Vec<u8>,
    },
    /// A backup received a request: the client should ask `primary`.
    NotPrimary {
        client_id: u128,
        request_number: u64,
        primary: u8,
    },
    /// Store the checkpoint durably. Journal entries at or below `checkpoint.op` may be
    /// dropped once it is durable. A checkpoint taken locally may be stored later than asked
    /// (the journal keeps the ops it covers meanwhile, and a restart replays them); one
    /// `installed` by state transfer may not: the journal never held the ops it covers, and
    /// the replica vouches at once for entries above it, so it must be durable before any
    /// effect after it is carried out.
    Checkpoint {
        checkpoint: Checkpoint,
        installed: bool,
    },
}
