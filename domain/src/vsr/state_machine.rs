//! The application state machine the replica drives: applied from committed ops only, in op
//! order, with the primary's timestamp as its only source of time.

/// A snapshot handed to [`StateMachine::restore`] that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidSnapshot;

/// What the replica needs from the state it replicates.
pub trait StateMachine {
    /// Applies one committed operation and returns the reply for its client. It must be
    /// deterministic: every replica applies the same ops with the same arguments.
    fn apply(&mut self, op: u64, timestamp: u64, operation: u8, body: &[u8]) -> Vec<u8>;
    /// The whole state as bytes, taken at a checkpoint and shipped by state transfer.
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the whole state with a snapshot; on error the state is left unchanged.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), InvalidSnapshot>;
    /// A digest of the state, for tests that compare replicas.
    fn digest(&self) -> u64;
    /// Why the last `apply` could not be carried out, when it could not (the state can no
    /// longer be the one its peers hold): the replica then halts instead of applying more.
    /// Checked after every `apply`.
    fn unapplied(&self) -> Option<&'static str> {
        None
    }
}
