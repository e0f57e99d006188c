//! Diagnostics port: gathers the troubleshooting files a snapshot (GET_SNAPSHOT_FILE) packs.
//!
//! Contract: `collect` returns one part's bytes, whole; it may block on files and `/proc`,
//! so the use case calls it on the offload thread, never on a shard's event loop. A part
//! that cannot be read comes back as a text saying why, so one unreadable file never costs
//! the operator the rest of the snapshot.

use rill_domain::snapshot::SnapshotType;

pub trait Diagnostics: Clone + Send + 'static {
    fn collect(&self, part: SnapshotType) -> Vec<u8>;
}
