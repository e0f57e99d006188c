//! Consumer-group assignment, as pure state: who is in one group and which partitions each
//! member may read. Members are sessions (the request header's `client` id) and carry the
//! connection id they belong to. Rebalancing is cooperative: a partition moving from one member
//! to another stays with its old owner until that owner syncs or `timeout_us` passes, so no
//! partition is ever served to two members at once; the old owner's next poll of it asks it
//! to sync. Time comes in as microseconds.

use std::collections::BTreeMap;

/// A consumer group, by ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub stream_id: u32,
    pub topic_id: u32,
    pub group_id: u32,
}

#[derive(Debug, Clone)]
struct Member {
    client: u128,
    client_id: u32,
}

/// What get_consumer_group reports about one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    pub client_id: u32,
    pub partitions: Vec<u32>,
}

/// One group's membership and assignment.
#[derive(Debug, Default)]
pub struct ConsumerGroup {
    generation: u64,
    /// In join order; the target assignment is round-robin over this order.
    members: Vec<Member>,
    partitions_count: u32,
    /// Current owner of each assigned partition.
    owner: BTreeMap<u32, u128>,
    /// Partitions waiting for their old owner to let go: (new owner, since µs).
    pending: BTreeMap<u32, (u128, u64)>,
}

impl ConsumerGroup {
    fn target(&self, partition: u32) -> Option<u128> {
        let n = self.members.len() as u32;
        (n > 0).then(|| self.members[(partition % n) as usize].client)
    }

    fn is_member(&self, client: u128) -> bool {
        self.members.iter().any(|m| m.client == client)
    }

    /// Whether a member belongs to connection `client_id`.
    pub fn has_connection(&self, client_id: u32) -> bool {
        self.members.iter().any(|m| m.client_id == client_id)
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Recomputes the assignment after a membership or partition-count change.
    fn rebalance(&mut self, now_us: u64) {
        self.generation += 1;
        self.owner.retain(|&p, owner| p < self.partitions_count && self.members.iter().any(|m| m.client == *owner));
        self.pending.clear();
        for partition in 0..self.partitions_count {
            let Some(target) = self.target(partition) else { continue };
            match self.owner.get(&partition) {
                None => {
                    self.owner.insert(partition, target);
                }
                Some(&current) if current != target => {
                    self.pending.insert(partition, (target, now_us));
                }
                Some(_) => {}
            }
        }
    }

    /// Hands over partitions whose old owner synced or whose grace period ended.
    fn settle(&mut self, synced: Option<u128>, now_us: u64, timeout_us: u64) {
        let due: Vec<u32> = self
            .pending
            .iter()
            .filter(|(p, (_, since))| {
                synced.is_some_and(|c| self.owner.get(p) == Some(&c)) || now_us.saturating_sub(*since) >= timeout_us
            })
            .map(|(p, _)| *p)
            .collect();
        for partition in due {
            if let Some((target, _)) = self.pending.remove(&partition) {
                self.owner.insert(partition, target);
            }
        }
    }

    fn refresh(&mut self, partitions_count: u32, synced: Option<u128>, now_us: u64, timeout_us: u64) {
        if self.partitions_count != partitions_count {
            self.partitions_count = partitions_count;
            self.rebalance(now_us);
        }
        self.settle(synced, now_us, timeout_us);
    }

    /// The partitions assigned to `client` once the rebalance settles: what sync and the
    /// group details report. Polls are gated on `owner`, which follows once old owners let go.
    fn assigned_to(&self, client: u128) -> Vec<u32> {
        (0..self.partitions_count).filter(|&p| self.target(p) == Some(client)).collect()
    }

    /// Adds a member (idempotent for a member already in).
    pub fn join(&mut self, client: u128, client_id: u32, partitions_count: u32, now_us: u64) {
        if self.is_member(client) {
            return;
        }
        self.members.push(Member { client, client_id });
        self.partitions_count = partitions_count;
        self.rebalance(now_us);
    }

    /// Removes a member; false when it was not one.
    pub fn leave(&mut self, client: u128, now_us: u64) -> bool {
        let before = self.members.len();
        self.members.retain(|m| m.client != client);
        if self.members.len() == before {
            return false;
        }
        self.rebalance(now_us);
        true
    }

    /// Drops every member of a closed connection.
    pub fn drop_connection(&mut self, client_id: u32, now_us: u64) {
        let before = self.members.len();
        self.members.retain(|m| m.client_id != client_id);
        if self.members.len() != before {
            self.rebalance(now_us);
        }
    }

    /// The generation and the caller's partitions, or `None` for a non-member.
    pub fn sync(
        &mut self,
        client: u128,
        partitions_count: u32,
        now_us: u64,
        timeout_us: u64,
    ) -> Option<(u64, Vec<u32>)> {
        if !self.is_member(client) {
            return None;
        }
        self.refresh(partitions_count, Some(client), now_us, timeout_us);
        Some((self.generation, self.assigned_to(client)))
    }

    /// Whether `client` may read `partition` through the group right now. A partition on its
    /// way to another member is read by nobody: its old owner is told to re-sync (which hands
    /// it over at once) instead of reading on until the timeout.
    pub fn owns(&mut self, client: u128, partition: u32, partitions_count: u32, now_us: u64, timeout_us: u64) -> bool {
        self.refresh(partitions_count, None, now_us, timeout_us);
        self.owner.get(&partition) == Some(&client) && !self.pending.contains_key(&partition)
    }

    pub fn members(&self) -> Vec<MemberInfo> {
        self.members
            .iter()
            .map(|m| MemberInfo { client_id: m.client_id, partitions: self.assigned_to(m.client) })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: u64 = 30_000_000;

    fn assignment(group: &mut ConsumerGroup, clients: &[u128]) -> Vec<Vec<u32>> {
        clients.iter().map(|&c| group.sync(c, 6, 0, TIMEOUT).map(|(_, p)| p).unwrap_or_default()).collect()
    }

    /// Who may poll each partition right now; never more than one member.
    fn owners(group: &mut ConsumerGroup, clients: &[u128]) -> Vec<Vec<u128>> {
        (0..6).map(|p| clients.iter().copied().filter(|&c| group.owns(c, p, 6, 0, TIMEOUT)).collect()).collect()
    }

    #[test]
    fn partitions_spread_round_robin_and_never_overlap() {
        let mut group = ConsumerGroup::default();
        group.join(1, 10, 6, 0);
        assert_eq!(assignment(&mut group, &[1]), vec![vec![0, 1, 2, 3, 4, 5]]);
        group.join(2, 20, 6, 0);
        // Partitions 1, 3, 5 are on their way to member 2: nobody reads them until member 1
        // syncs (its poll of one asks it to); member 1 keeps reading 0, 2, 4.
        assert!(!group.owns(1, 1, 6, 0, TIMEOUT) && !group.owns(2, 1, 6, 0, TIMEOUT));
        assert!(group.owns(1, 0, 6, 0, TIMEOUT));
        assert_eq!(assignment(&mut group, &[2, 1]), vec![vec![1, 3, 5], vec![0, 2, 4]]);
        assert!(group.owns(2, 1, 6, 0, TIMEOUT) && !group.owns(1, 1, 6, 0, TIMEOUT));
        group.join(3, 30, 6, 0);
        for round in 0..3 {
            let owners = owners(&mut group, &[1, 2, 3]);
            assert!(owners.iter().all(|o| o.len() <= 1), "round {round}: {owners:?}");
            assignment(&mut group, &[1, 2, 3]);
        }
        assert_eq!(owners(&mut group, &[1, 2, 3]), vec![vec![1], vec![2], vec![3], vec![1], vec![2], vec![3]]);
    }

    #[test]
    fn leaving_and_disconnecting_hand_partitions_over() {
        let mut group = ConsumerGroup::default();
        group.join(1, 10, 6, 0);
        group.join(2, 20, 6, 0);
        assignment(&mut group, &[1, 2]);
        assert!(group.leave(2, 1));
        assert!(!group.leave(2, 1));
        assert_eq!(assignment(&mut group, &[1]), vec![vec![0, 1, 2, 3, 4, 5]]);
        group.join(3, 30, 6, 2);
        group.drop_connection(10, 3);
        assert!(!group.has_connection(10) && group.has_connection(30));
        let generation = group.sync(3, 6, 3, TIMEOUT).expect("a member").0;
        assert_eq!(group.sync(3, 6, 3, TIMEOUT), Some((generation, vec![0, 1, 2, 3, 4, 5])));
        assert_eq!(group.sync(1, 6, 3, TIMEOUT), None);
    }

    #[test]
    fn a_silent_old_owner_loses_partitions_after_the_timeout() {
        let mut group = ConsumerGroup::default();
        group.join(1, 10, 2, 0);
        group.join(2, 20, 2, 0);
        assert!(!group.owns(2, 1, 2, TIMEOUT - 1, TIMEOUT));
        assert!(group.owns(2, 1, 2, TIMEOUT, TIMEOUT));
        assert!(!group.owns(1, 1, 2, TIMEOUT, TIMEOUT));
    }
}
