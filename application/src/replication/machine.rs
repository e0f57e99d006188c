//! The metadata state machine as the VSR replica drives it: committed ops are decoded and
//! applied with the primary's timestamp; what each changed is kept for the caller, which
//! mirrors it in partition storage and in every shard's read view.

use std::collections::VecDeque;

use rill_domain::change_feed::{self, ChangeFeed};
use rill_domain::checksum::xxh3_64;
use rill_domain::error::ErrorCode;
use rill_domain::metadata::{Applied, Metadata};
use rill_domain::reader::Reader;
use rill_domain::vsr::{InvalidSnapshot, StateMachine};
use rill_domain::wire::command::MetadataOp;

/// Outcomes waiting for the caller; more than this many unread means the caller stopped
/// draining, and the oldest are dropped rather than growing without bound.
const APPLIED_MAX: usize = 4096;

/// One committed op's outcome: what changed, or why the state machine refused it (every
/// replica refuses it the same way, so a refusal changes nothing anywhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub op: u64,
    pub operation: u8,
    pub timestamp: u64,
    pub body: Vec<u8>,
    pub result: Result<Applied, ErrorCode>,
}

#[derive(Debug, Default)]
pub struct MetadataMachine {
    metadata: Metadata,
    outcomes: VecDeque<Outcome>,
    /// What each committed op changed, for GET_METADATA_CHANGES.
    feed: ChangeFeed,
    /// Set when state transfer replaced the whole state; the caller republishes it.
    restored: bool,
}

impl MetadataMachine {
    pub fn new(metadata: Metadata) -> Self {
        Self { metadata, outcomes: VecDeque::new(), feed: ChangeFeed::default(), restored: false }
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    pub fn feed(&self) -> &ChangeFeed {
        &self.feed
    }

    /// The outcome of `op`, once it is committed (outcomes before it are discarded).
    pub fn take_outcome(&mut self, op: u64) -> Option<Outcome> {
        while let Some(front) = self.outcomes.front() {
            if front.op >= op {
                break;
            }
            self.outcomes.pop_front();
        }
        self.outcomes.front().is_some_and(|front| front.op == op).then(|| self.outcomes.pop_front()).flatten()
    }

    /// Whether state transfer replaced the state since the last call.
    pub fn take_restored(&mut self) -> bool {
        std::mem::take(&mut self.restored)
    }
}

/// The reply a committed op carries in the client table: its status code (0 = applied).
fn status_reply(result: &Result<Applied, ErrorCode>) -> Vec<u8> {
    result.as_ref().map_or_else(|code| code.code(), |_| 0).to_le_bytes().to_vec()
}

impl StateMachine for MetadataMachine {
    fn apply(&mut self, op: u64, timestamp: u64, operation: u8, body: &[u8]) -> Vec<u8> {
        let mut reader = Reader::new(body);
        let result = match MetadataOp::decode(operation, &mut reader) {
            Ok(Some(decoded)) => {
                let removed = change_feed::before_apply(&self.metadata, &decoded);
                let result = self.metadata.apply(&decoded, op, timestamp);
                let changes = match &result {
                    Ok(applied) => change_feed::after_apply(&self.metadata, &decoded, applied, removed),
                    Err(_) => Vec::new(),
                };
                self.feed.record(op, timestamp, changes);
                result
            }
            _ => Err(ErrorCode::InvalidFormat),
        };
        let reply = status_reply(&result);
        if self.outcomes.len() == APPLIED_MAX {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back(Outcome { op, operation, timestamp, body: body.to_vec(), result });
        reply
    }

    fn snapshot(&self) -> Vec<u8> {
        self.metadata.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), InvalidSnapshot> {
        self.metadata = Metadata::from_snapshot(snapshot).map_err(|_| InvalidSnapshot)?;
        self.outcomes.clear();
        self.feed.clear();
        self.restored = true;
        Ok(())
    }

    fn digest(&self) -> u64 {
        xxh3_64(&self.metadata.snapshot())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_domain::wire::codes::operation;

    #[test]
    fn applies_ops_keeps_outcomes_and_restores_snapshots() {
        let mut machine = MetadataMachine::default();
        let body = [6u8, b'o', b'r', b'd', b'e', b'r', b's'];
        assert_eq!(machine.apply(1, 10, operation::CREATE_STREAM, &body), vec![0, 0, 0, 0]);
        let duplicate = machine.apply(2, 11, operation::CREATE_STREAM, &body);
        assert_eq!(duplicate, ErrorCode::StreamNameAlreadyExists.code().to_le_bytes().to_vec());
        assert_eq!(machine.take_outcome(1).map(|o| o.result), Some(Ok(Applied::StreamCreated { stream_id: 0 })));
        assert_eq!(machine.take_outcome(2).map(|o| o.result), Some(Err(ErrorCode::StreamNameAlreadyExists)));
        assert_eq!(machine.take_outcome(3), None);

        let snapshot = machine.snapshot();
        let mut other = MetadataMachine::default();
        assert!(other.restore(&snapshot).is_ok());
        assert!(other.take_restored());
        assert_eq!(other.digest(), machine.digest());
        assert!(other.restore(b"garbage").is_err());
        assert_eq!(other.digest(), machine.digest(), "a bad snapshot leaves the state unchanged");
    }
}
