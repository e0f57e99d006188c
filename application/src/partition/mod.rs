//! One partition's storage: its log (the journal of batches not yet written and the
//! segments on disk), its polls, retention, recovery, stored consumer offsets and spare
//! logs. Polls read disk and journal as one sequence, checking every stored batch.

mod log;
mod maintenance;
pub mod markers;
mod offsets;
mod poll;
mod producers;
mod recovery;
mod segment;
mod settings;
mod spares;

pub use log::{Appended, PartitionLog};
pub use maintenance::{Detached, ScrubChunk, SpareCandidate, remove_detached};
pub use offsets::{ConsumerKey, ConsumerOffsets};
pub use poll::{
    MAX_POLL_BYTES, POLL_PREFIX_SIZE, PollLimit, PollPlan, Polled, REPLY_ROOM, note_resolved_start, poll_frame_for,
    resolved_start,
};
pub use producers::{Admitted, PRODUCERS_MARKER};
pub use recovery::{LoadMode, Recovery};
pub use segment::{DELETED_SUFFIX, DamagedBatch, Segment, batch_matches, within_frame};
pub use settings::{DedupSettings, DirectIo, PartitionDefaults, PartitionSettings};
pub use spares::{MAX_SPARES_PER_PARTITION, MIN_SPARE_BYTES, OwnSpares, SPARE_SUFFIX, SpareBudget, SpareLogCounters};
