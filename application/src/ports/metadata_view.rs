//! Metadata view ports: every shard reads the committed metadata through its own reader,
//! without locks; shard 0 alone publishes committed operations to all readers.
//!
//! Contract: after `publish` returns, every reader on every shard observes the operation.
//! `read` never blocks on a writer.

use rill_domain::metadata::Metadata;

/// Cloneable: each shard's partition store reads through a copy of its shard's reader.
pub trait MetadataRead: Clone {
    fn read<R>(&self, f: impl FnOnce(&Metadata) -> R) -> R;
}

pub trait MetadataPublish {
    /// Applies committed op `op` (journaled as `operation`, `timestamp`, `body`) to the
    /// readers' copies and makes it visible.
    fn publish(&mut self, op: u64, operation: u8, timestamp: u64, body: &[u8]);

    /// Replaces the readers' copies with `metadata` whole (after a state transfer, when no
    /// op-by-op history exists to publish).
    fn replace(&mut self, metadata: &Metadata);
}

/// Applies a journaled operation to a metadata copy. The operation was validated when it
/// was committed, so a refusal here means the copies diverged: a bug.
pub fn apply_committed(metadata: &mut Metadata, op_number: u64, operation: u8, timestamp: u64, body: &[u8]) {
    use rill_domain::wire::command::MetadataOp;
    let mut reader = rill_domain::reader::Reader::new(body);
    match MetadataOp::decode(operation, &mut reader) {
        Ok(Some(op)) => {
            let result = metadata.apply(&op, op_number, timestamp);
            assert!(result.is_ok(), "a committed metadata operation was refused by a replica copy: {result:?}");
        }
        other => panic!("a committed metadata operation does not decode: {other:?}"),
    }
}
