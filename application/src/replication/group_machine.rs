//! A partition group's state machine as a shard drives it: the domain's
//! `PartitionGroupState` (offsets assigned at apply), plus what each committed op assigned,
//! kept for the shard, which writes the batch into its partition log at that offset.

use std::collections::VecDeque;

use rill_domain::error::ErrorCode;
use rill_domain::partition_group::{self, PartitionGroupState};
use rill_domain::vsr::{InvalidSnapshot, StateMachine};
use rill_domain::wire::codes::operation;

/// Outcomes waiting for the shard; more unread than this means it stopped draining.
const OUTCOMES_MAX: usize = 1024;

/// What one committed op did: for a send, the partition key and the base offset it got;
/// for a reset, whether it started the partition again (a reset to an incarnation the
/// partition has already changes nothing); and the incarnation of the partition the op
/// names, as the group's state had it once the op was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOutcome {
    pub op: u64,
    pub result: Result<Option<(u64, u64)>, ErrorCode>,
    pub reset: bool,
    pub incarnation: u64,
    /// A send's messages to store (0: every one was a duplicate, or a producer's retry
    /// answered with its first offsets), and which it dropped as duplicates when some were.
    pub stored: u32,
    pub dropped: Option<Vec<bool>>,
    /// An adoption that became its partition's record (a later one changes nothing).
    pub adopted: bool,
}

#[derive(Debug, Default)]
pub struct GroupMachine {
    state: PartitionGroupState,
    outcomes: VecDeque<GroupOutcome>,
    /// A checkpoint replaced the state (at open, or by state transfer) since the shard last
    /// looked: its partition logs and offset files may be behind the state.
    restored: bool,
}

impl GroupMachine {
    pub fn state(&self) -> &PartitionGroupState {
        &self.state
    }

    /// The outcome of `op`, once it is committed (outcomes before it are discarded).
    pub fn take_outcome(&mut self, op: u64) -> Option<GroupOutcome> {
        while self.outcomes.front().is_some_and(|front| front.op < op) {
            self.outcomes.pop_front();
        }
        self.outcomes.front().is_some_and(|front| front.op == op).then(|| self.outcomes.pop_front()).flatten()
    }

    /// Whether a checkpoint replaced the state since the last call.
    pub fn take_restored(&mut self) -> bool {
        std::mem::take(&mut self.restored)
    }
}

impl StateMachine for GroupMachine {
    fn apply(&mut self, op: u64, timestamp: u64, operation: u8, body: &[u8]) -> Vec<u8> {
        let reset_partition = (operation == operation::RESET_PARTITION)
            .then(|| partition_group::parse_reset_body(body))
            .flatten()
            .map(|(partition, _)| partition);
        let before = reset_partition.map(|partition| self.state.incarnation(partition));
        let adopting = (operation == partition_group::ADOPT_PARTITION)
            .then(|| body.get(..8).and_then(|key| key.try_into().ok()).map(u64::from_le_bytes))
            .flatten()
            .filter(|partition| !self.state.records(*partition));
        let (result, reply) = self.state.apply_with_reply(operation, timestamp, body);
        let (stored, dropped) = match &result {
            Ok(Some(appended)) => (appended.count, appended.dropped.clone()),
            _ => (0, None),
        };
        let result = result.map(|appended| appended.map(|a| (a.partition, a.base_offset)));
        let reset = reset_partition.map(|partition| self.state.incarnation(partition)) != before;
        // Every op's body starts with the packed partition key it names.
        let named = body.get(..8).and_then(|key| key.try_into().ok()).map(u64::from_le_bytes);
        let incarnation = named.map_or(0, |partition| self.state.incarnation(partition));
        if self.outcomes.len() == OUTCOMES_MAX {
            self.outcomes.pop_front();
        }
        let adopted = result.is_ok() && adopting.is_some_and(|partition| self.state.records(partition));
        self.outcomes.push_back(GroupOutcome { op, result, reset, incarnation, stored, dropped, adopted });
        reply
    }

    fn snapshot(&self) -> Vec<u8> {
        self.state.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), InvalidSnapshot> {
        self.state.restore(snapshot)?;
        self.outcomes.clear();
        self.restored = true;
        Ok(())
    }

    fn digest(&self) -> u64 {
        self.state.digest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_carry_the_assigned_offsets_in_commit_order() {
        let mut machine = GroupMachine::default();
        machine.apply(1, 5, operation::SEND_MESSAGES, &partition_group::send_body(9, 3, b"abc"));
        machine.apply(2, 6, operation::SEND_MESSAGES, &partition_group::send_body(9, 2, b"de"));
        machine.apply(3, 7, operation::SEND_MESSAGES, &partition_group::send_body(9, 0, b""));
        assert_eq!(machine.take_outcome(2).map(|o| o.result), Some(Ok(Some((9, 3)))), "op 1's outcome is skipped");
        assert_eq!(machine.take_outcome(3).map(|o| o.result), Some(Err(ErrorCode::InvalidMessagesCount)));
        assert_eq!(machine.take_outcome(3), None);
        assert_eq!(machine.state().next_offset(9), Some(5));
        machine.apply(4, 8, operation::RESET_PARTITION, &partition_group::reset_body(9, 70));
        machine.apply(5, 9, operation::RESET_PARTITION, &partition_group::reset_body(9, 70));
        assert_eq!(machine.take_outcome(4).map(|o| o.reset), Some(true), "the first reset starts it again");
        assert_eq!(machine.take_outcome(5).map(|o| o.reset), Some(false), "the same incarnation again: nothing");
        assert_eq!(machine.state().next_offset(9), None);
    }

    #[test]
    fn outcomes_carry_the_incarnation_their_partition_was_in() {
        let mut machine = GroupMachine::default();
        machine.apply(1, 5, operation::SEND_MESSAGES, &partition_group::send_body(9, 1, b"a"));
        machine.apply(2, 6, operation::RESET_PARTITION, &partition_group::reset_body(9, 70));
        machine.apply(3, 7, operation::SEND_MESSAGES, &partition_group::send_body(9, 1, b"b"));
        machine.apply(4, 8, operation::SEND_MESSAGES, &partition_group::send_body(4, 1, b"c"));
        let incarnations: Vec<u64> = (1..=4).filter_map(|op| machine.take_outcome(op)).map(|o| o.incarnation).collect();
        assert_eq!(incarnations, [0, 70, 70, 0], "before the reset, the reset, after it, another partition");
    }
}
