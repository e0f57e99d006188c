//! Where a connection belongs: the shard owning the partitions it keeps using. A connection
//! whose partition requests go to one other shard many times in a row is better served on
//! that shard, where its requests no longer cross the bus. A connection that spreads its
//! requests (a balanced producer, a group member with partitions on several shards) never
//! builds a run, so it stays put and never bounces between shards.

/// Partition requests in a row to one other shard before the connection moves there.
pub const MOVE_AFTER: u32 = 16;

/// The run of partition requests a connection made to one shard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Affinity {
    shard: u16,
    run: u32,
}

impl Affinity {
    /// Records a partition request of a connection served on `home` for a partition owned
    /// by `owner`; the shard to move to once the run reaches `MOVE_AFTER`.
    pub fn record(&mut self, home: u16, owner: u16) -> Option<u16> {
        if owner == home {
            self.run = 0;
            return None;
        }
        if owner == self.shard && self.run > 0 {
            self.run = self.run.saturating_add(1);
        } else {
            *self = Affinity { shard: owner, run: 1 };
        }
        (self.run >= MOVE_AFTER).then_some(owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_to_one_other_shard_moves_the_connection_there() {
        let mut affinity = Affinity::default();
        let moves: Vec<Option<u16>> = (0..MOVE_AFTER).map(|_| affinity.record(0, 1)).collect();
        assert!(moves[..MOVE_AFTER as usize - 1].iter().all(Option::is_none));
        assert_eq!(moves.last(), Some(&Some(1)));
    }

    #[test]
    fn spread_or_local_requests_never_move_it() {
        let mut affinity = Affinity::default();
        for round in 0..10 * MOVE_AFTER {
            assert_eq!(affinity.record(0, 1 + (round % 2) as u16), None, "alternating owners");
        }
        for round in 0..10 * MOVE_AFTER {
            let owner = if round % 4 == 0 { 0 } else { 2 };
            assert_eq!(affinity.record(0, owner), None, "a local request breaks the run");
        }
    }
}
