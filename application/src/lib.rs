//! Rill's use cases and the ports they drive: partitions (journal, segments, offsets),
//! metadata journaling, sessions, and request dispatch for the Iggy 0.11 protocol.

pub mod partition;
pub mod ports;
