//! Replica tuning (pipeline depth, checkpoint interval, table bounds, timeouts counted in ticks),
//! the seeded PRNG behind timeout jitter and nonces, and the tick-counted timeout itself.

/// Replica ids are bits of a `u32` mask in the vote sets.
pub const REPLICAS_MAX: u8 = 31;
/// Entries one `Repair` message carries at most (the asked entry and its ancestors).
pub(super) const REPAIR_BATCH: usize = 16;
/// Committed entries one `NewState` message carries at most.
pub(super) const STATE_BATCH: usize = 64;
/// Entry body bytes one `Repair` or `NewState` message carries at most (at least one entry
/// goes whatever its size): with partition batches as bodies, the entry counts alone would
/// let one message reach gigabytes.
pub(super) const MESSAGE_BODY_BUDGET: usize = 32 << 20;
/// Repair rounds without progress on the same hole before asking for a state transfer.
pub(super) const REPAIR_ATTEMPTS_MAX: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Prepared but uncommitted ops the primary allows at once.
    pub pipeline_max: u64,
    /// A checkpoint is taken after every this many committed ops.
    pub checkpoint_interval: u64,
    /// Client sessions kept for de-duplication; the oldest is evicted when full.
    pub client_table_max: usize,
    /// Primary: ticks between `Commit` heartbeats.
    pub heartbeat_ticks: u64,
    /// Primary: ticks before unacknowledged prepares are sent again.
    pub prepare_timeout_ticks: u64,
    /// Backup: ticks without a word from the primary before starting a view change.
    pub view_change_timeout_ticks: u64,
    /// Ticks a view change may take before the next view is tried.
    pub view_change_status_timeout_ticks: u64,
    /// Ticks between re-sends of view change and recovery messages.
    pub resend_ticks: u64,
    /// Ticks between repair rounds for missing entries.
    pub repair_timeout_ticks: u64,
    /// Upper bound of the random extra ticks added to each timeout, so that replicas whose
    /// timers started together do not fire together (dueling view changes).
    pub jitter_ticks: u64,
    /// Which replica leads view 0: the primary of view `v` is `(v + primary_offset) mod n`.
    /// Every replica of a group uses the same value; groups that share nodes (partition
    /// groups) use different ones, so their primaries start on different nodes.
    pub primary_offset: u8,
    /// Primary: tell the backups of every commit at once (a `Commit` message), instead of
    /// with the next prepare or heartbeat, so they apply within a round trip. Partition
    /// groups want it: a node that forwarded a send serves polls from its own copy.
    pub commit_eagerly: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            pipeline_max: 8,
            checkpoint_interval: 64,
            client_table_max: 1024,
            heartbeat_ticks: 4,
            prepare_timeout_ticks: 8,
            view_change_timeout_ticks: 24,
            view_change_status_timeout_ticks: 40,
            resend_ticks: 6,
            repair_timeout_ticks: 6,
            jitter_ticks: 8,
            primary_offset: 0,
            commit_eagerly: false,
        }
    }
}

impl Options {
    /// Entries the log (and the stash beside it) holds at most: the ops since the checkpoint
    /// before last plus room for a pipeline that runs ahead of the commit.
    pub fn log_capacity(&self) -> usize {
        (2 * self.checkpoint_interval + 4 * self.pipeline_max) as usize
    }

    pub(super) fn check(&self) {
        assert!(self.pipeline_max >= 1 && self.checkpoint_interval >= 2 * self.pipeline_max);
        assert!(self.client_table_max >= 1);
        assert!(self.heartbeat_ticks >= 1 && self.heartbeat_ticks < self.view_change_timeout_ticks);
        assert!(self.prepare_timeout_ticks >= 1 && self.resend_ticks >= 1 && self.repair_timeout_ticks >= 1);
        assert!(self.view_change_status_timeout_ticks > self.resend_ticks);
    }
}

/// Cuts `entries` after the first one that reaches [`MESSAGE_BODY_BUDGET`] body bytes.
pub(super) fn within_body_budget(entries: &mut Vec<super::entry::Entry>) {
    let mut bytes = 0;
    let keep = entries
        .iter()
        .position(|entry| {
            bytes += entry.body.len();
            bytes >= MESSAGE_BODY_BUDGET
        })
        .map_or(entries.len(), |at| at + 1);
    entries.truncate(keep);
}

/// splitmix64: tiny, seedable and good enough for jitter and nonces.
#[derive(Debug, Clone)]
pub(super) struct Prng {
    state: u64,
}

impl Prng {
    pub(super) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`; `bound` must be positive.
    pub(super) fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0);
        self.next_u64() % bound
    }
}

/// A timeout counted in ticks of the replica's own tick counter.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeout {
    ticks: u64,
    deadline: Option<u64>,
}

impl Timeout {
    pub(super) fn new(ticks: u64) -> Self {
        Self { ticks, deadline: None }
    }

    /// (Re)arms the timeout `ticks + jitter` ticks after `now_tick`.
    pub(super) fn start(&mut self, now_tick: u64, jitter: u64) {
        self.deadline = Some(now_tick + self.ticks + jitter);
    }

    pub(super) fn stop(&mut self) {
        self.deadline = None;
    }

    pub(super) fn fired(&self, now_tick: u64) -> bool {
        self.deadline.is_some_and(|deadline| now_tick >= deadline)
    }
}
