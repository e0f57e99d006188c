//! Viewstamped Replication (VSR Revisited, Liskov and Cowling 2012) as a sans-IO replica.
//!
//! The replica is a plain state machine: the caller hands it requests, protocol messages, ticks
//! and IO completions, and it answers by pushing [`Effect`]s into a caller-owned buffer. It never
//! reads a clock (`now` is an argument), never draws randomness (a seed is an argument) and never
//! touches a disk or a socket. `docs/vsr.md` describes the message flow and the invariants.

mod client_table;
mod codec;
mod entry;
mod log;
mod message;
mod normal;
mod options;
mod recovery;
mod repair;
mod replica;
mod state_machine;
mod superblock;
mod view_change;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_faults;
#[cfg(test)]
mod tests_restart;

pub use codec::{MESSAGE_MAX, MessageError, decode_message, encode_message, frame_len};
pub use entry::{Checkpoint, ENTRY_BODY_MAX, Entry, EntryError, ROOT_CHECKSUM};
pub use message::{Durable, Effect, LogSuffix, Message, Superblock};
pub use options::{Options, REPLICAS_MAX};
pub use replica::{Replica, Status};
pub use state_machine::{InvalidSnapshot, StateMachine};
