//! Consumer-group membership: who is in each group and which partitions each member may
//! read. Members are sessions (the request header's `client` id), so membership ends with
//! the connection and is never journaled. Rebalancing is cooperative: a partition moving
//! from one member to another stays with its old owner until that owner syncs (or the
//! rebalancing timeout passes), so no partition is ever served to two members at once.

use std::collections::BTreeMap;
use std::sync::Mutex;

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

#[derive(Debug, Default)]
struct GroupState {
    generation: u64,
    /// In join order; the target assignment is round-robin over this order.
    members: Vec<Member>,
    partitions_count: u32,
    /// Current owner of each assigned partition.
    owner: BTreeMap<u32, u128>,
    /// Partitions waiting for their old owner to let go: (new owner, since µs).
    pending: BTreeMap<u32, (u128, u64)>,
}

impl GroupState {
    fn target(&self, partition: u32) -> Option<u128> {
        let n = self.members.len() as u32;
        (n > 0).then(|| self.members[(partition % n) as usize].client)
    }

    fn is_member(&self, client: u128) -> bool {
        self.members.iter().any(|m| m.client == client)
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

    /// The partitions assigned to `client` once the rebalance settles: what sync and the
    /// group details report. Polls are gated on `owner`, which follows once old owners let go.
    fn assigned_to(&self, client: u128) -> Vec<u32> {
        (0..self.partitions_count).filter(|&p| self.target(p) == Some(client)).collect()
    }
}

/// What get_consumer_group reports about one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    pub client_id: u32,
    pub partitions: Vec<u32>,
}

#[derive(Debug, Default)]
pub struct Groups {
    rebalancing_timeout_us: u64,
    groups: Mutex<BTreeMap<GroupKey, GroupState>>,
}

impl Groups {
    pub fn new(rebalancing_timeout_us: u64) -> Self {
        Self { rebalancing_timeout_us, groups: Mutex::new(BTreeMap::new()) }
    }

    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<GroupKey, GroupState>) -> R) -> R {
        // Every update below is complete before it returns, so a poisoned lock still holds
        // consistent data.
        f(&mut self.groups.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    fn refresh(&self, state: &mut GroupState, partitions_count: u32, synced: Option<u128>, now_us: u64) {
        if state.partitions_count != partitions_count {
            state.partitions_count = partitions_count;
            state.rebalance(now_us);
        }
        state.settle(synced, now_us, self.rebalancing_timeout_us);
    }

    /// Adds a member (idempotent for a member already in).
    pub fn join(&self, key: GroupKey, client: u128, client_id: u32, partitions_count: u32, now_us: u64) {
        self.with(|groups| {
            let state = groups.entry(key).or_default();
            if state.is_member(client) {
                return;
            }
            state.members.push(Member { client, client_id });
            state.partitions_count = partitions_count;
            state.rebalance(now_us);
        });
    }

    /// Removes a member; false when it was not one.
    pub fn leave(&self, key: GroupKey, client: u128, now_us: u64) -> bool {
        self.with(|groups| {
            let Some(state) = groups.get_mut(&key) else { return false };
            let before = state.members.len();
            state.members.retain(|m| m.client != client);
            if state.members.len() == before {
                return false;
            }
            state.rebalance(now_us);
            true
        })
    }

    /// Drops every membership of a closed connection.
    pub fn drop_connection(&self, client_id: u32, now_us: u64) {
        self.with(|groups| {
            for state in groups.values_mut() {
                let before = state.members.len();
                state.members.retain(|m| m.client_id != client_id);
                if state.members.len() != before {
                    state.rebalance(now_us);
                }
            }
        });
    }

    pub fn remove_group(&self, key: GroupKey) {
        self.with(|groups| groups.remove(&key));
    }

    /// The generation and the caller's partitions, or `None` for a non-member.
    pub fn sync(&self, key: GroupKey, client: u128, partitions_count: u32, now_us: u64) -> Option<(u64, Vec<u32>)> {
        self.with(|groups| {
            let state = groups.get_mut(&key)?;
            if !state.is_member(client) {
                return None;
            }
            self.refresh(state, partitions_count, Some(client), now_us);
            Some((state.generation, state.assigned_to(client)))
        })
    }

    /// Whether `client` may read `partition` through the group right now.
    pub fn owns(&self, key: GroupKey, client: u128, partition: u32, partitions_count: u32, now_us: u64) -> bool {
        self.with(|groups| {
            let Some(state) = groups.get_mut(&key) else { return false };
            self.refresh(state, partitions_count, None, now_us);
            state.owner.get(&partition) == Some(&client)
        })
    }

    pub fn members(&self, key: GroupKey) -> Vec<MemberInfo> {
        self.with(|groups| {
            let Some(state) = groups.get(&key) else { return Vec::new() };
            state
                .members
                .iter()
                .map(|m| MemberInfo { client_id: m.client_id, partitions: state.assigned_to(m.client) })
                .collect()
        })
    }

    /// The groups a connection is a member of.
    pub fn memberships(&self, client_id: u32) -> Vec<GroupKey> {
        self.with(|groups| {
            groups.iter().filter(|(_, s)| s.members.iter().any(|m| m.client_id == client_id)).map(|(k, _)| *k).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: GroupKey = GroupKey { stream_id: 0, topic_id: 0, group_id: 0 };
    const TIMEOUT: u64 = 30_000_000;

    fn assignment(groups: &Groups, clients: &[u128]) -> Vec<Vec<u32>> {
        clients.iter().map(|&c| groups.sync(KEY, c, 6, 0).map(|(_, p)| p).unwrap_or_default()).collect()
    }

    /// Who may poll each partition right now; never more than one member.
    fn owners(groups: &Groups, clients: &[u128]) -> Vec<Vec<u128>> {
        (0..6).map(|p| clients.iter().copied().filter(|&c| groups.owns(KEY, c, p, 6, 0)).collect()).collect()
    }

    #[test]
    fn partitions_spread_round_robin_and_never_overlap() {
        let groups = Groups::new(TIMEOUT);
        groups.join(KEY, 1, 10, 6, 0);
        assert_eq!(assignment(&groups, &[1]), vec![vec![0, 1, 2, 3, 4, 5]]);
        groups.join(KEY, 2, 20, 6, 0);
        // Member 1 may still poll everything until it syncs; only then do 1, 3, 5 move.
        assert!(groups.owns(KEY, 1, 1, 6, 0) && !groups.owns(KEY, 2, 1, 6, 0));
        assert_eq!(assignment(&groups, &[2, 1]), vec![vec![1, 3, 5], vec![0, 2, 4]]);
        assert!(groups.owns(KEY, 2, 1, 6, 0) && !groups.owns(KEY, 1, 1, 6, 0));
        groups.join(KEY, 3, 30, 6, 0);
        for round in 0..3 {
            let owners = owners(&groups, &[1, 2, 3]);
            assert!(owners.iter().all(|o| o.len() <= 1), "round {round}: {owners:?}");
            assignment(&groups, &[1, 2, 3]);
        }
        assert_eq!(owners(&groups, &[1, 2, 3]), vec![vec![1], vec![2], vec![3], vec![1], vec![2], vec![3]]);
    }

    #[test]
    fn leaving_and_disconnecting_hand_partitions_over() {
        let groups = Groups::new(TIMEOUT);
        groups.join(KEY, 1, 10, 6, 0);
        groups.join(KEY, 2, 20, 6, 0);
        assignment(&groups, &[1, 2]);
        assert!(groups.leave(KEY, 2, 1));
        assert!(!groups.leave(KEY, 2, 1));
        assert_eq!(assignment(&groups, &[1]), vec![vec![0, 1, 2, 3, 4, 5]]);
        groups.join(KEY, 3, 30, 6, 2);
        groups.drop_connection(10, 3);
        assert_eq!(groups.sync(KEY, 3, 6, 3), Some((groups.sync(KEY, 3, 6, 3).unwrap().0, vec![0, 1, 2, 3, 4, 5])));
        assert_eq!(groups.sync(KEY, 1, 6, 3), None);
    }

    #[test]
    fn a_silent_old_owner_loses_partitions_after_the_timeout() {
        let groups = Groups::new(TIMEOUT);
        groups.join(KEY, 1, 10, 2, 0);
        groups.join(KEY, 2, 20, 2, 0);
        assert!(!groups.owns(KEY, 2, 1, 2, TIMEOUT - 1));
        assert!(groups.owns(KEY, 2, 1, 2, TIMEOUT));
        assert!(!groups.owns(KEY, 1, 1, 2, TIMEOUT));
    }
}
