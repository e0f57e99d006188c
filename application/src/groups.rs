//! Consumer-group membership shared by every shard: each group's pure state
//! (`rill_domain::consumer_group`) behind its own lock, found through a lock-free map, so
//! polls of different groups never wait on each other. Membership lives with the sessions
//! and is never journaled.

use std::sync::Mutex;

pub use rill_domain::consumer_group::{ConsumerGroup, GroupKey, MemberInfo};

#[derive(Debug, Default)]
pub struct Groups {
    rebalancing_timeout_us: u64,
    groups: papaya::HashMap<GroupKey, Mutex<ConsumerGroup>>,
}

/// Runs `f` on a group's state. Every update is complete before it returns, so a poisoned
/// lock still holds consistent data.
fn with<R>(group: &Mutex<ConsumerGroup>, f: impl FnOnce(&mut ConsumerGroup) -> R) -> R {
    f(&mut group.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
}

impl Groups {
    pub fn new(rebalancing_timeout_us: u64) -> Self {
        Self { rebalancing_timeout_us, groups: papaya::HashMap::new() }
    }

    fn existing<R>(&self, key: GroupKey, f: impl FnOnce(&mut ConsumerGroup) -> R) -> Option<R> {
        self.groups.pin().get(&key).map(|group| with(group, f))
    }

    /// Adds a member (idempotent for a member already in).
    pub fn join(&self, key: GroupKey, client: u128, client_id: u32, partitions_count: u32, now_us: u64) {
        let groups = self.groups.pin();
        let group = groups.get_or_insert_with(key, Mutex::default);
        with(group, |group| group.join(client, client_id, partitions_count, now_us));
    }

    /// Removes a member; false when it was not one.
    pub fn leave(&self, key: GroupKey, client: u128, now_us: u64) -> bool {
        self.existing(key, |group| group.leave(client, now_us)).unwrap_or(false)
    }

    /// Drops every membership of a closed connection.
    pub fn drop_connection(&self, client_id: u32, now_us: u64) {
        for (_, group) in self.groups.pin().iter() {
            with(group, |group| group.drop_connection(client_id, now_us));
        }
    }

    pub fn remove_group(&self, key: GroupKey) {
        self.groups.pin().remove(&key);
    }

    /// The generation and the caller's partitions, or `None` for a non-member.
    pub fn sync(&self, key: GroupKey, client: u128, partitions_count: u32, now_us: u64) -> Option<(u64, Vec<u32>)> {
        let timeout_us = self.rebalancing_timeout_us;
        self.existing(key, |group| group.sync(client, partitions_count, now_us, timeout_us)).flatten()
    }

    /// Whether `client` may read `partition` through the group right now.
    pub fn owns(&self, key: GroupKey, client: u128, partition: u32, partitions_count: u32, now_us: u64) -> bool {
        let timeout_us = self.rebalancing_timeout_us;
        self.existing(key, |group| group.owns(client, partition, partitions_count, now_us, timeout_us)).unwrap_or(false)
    }

    pub fn members(&self, key: GroupKey) -> Vec<MemberInfo> {
        self.existing(key, |group| group.members()).unwrap_or_default()
    }

    /// The groups a connection is a member of.
    pub fn memberships(&self, client_id: u32) -> Vec<GroupKey> {
        let groups = self.groups.pin();
        groups
            .iter()
            .filter(|(_, group)| with(group, |group| group.has_connection(client_id)))
            .map(|(key, _)| *key)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_kept_apart_and_a_closed_connection_leaves_all_of_them() {
        let groups = Groups::new(1_000);
        let (first, second) =
            (GroupKey { stream_id: 1, topic_id: 1, group_id: 1 }, GroupKey { stream_id: 1, topic_id: 1, group_id: 2 });
        groups.join(first, 1, 10, 2, 0);
        groups.join(second, 2, 10, 2, 0);
        groups.join(second, 3, 20, 2, 0);
        assert_eq!(groups.sync(first, 1, 2, 0).map(|(_, partitions)| partitions), Some(vec![0, 1]));
        assert!(groups.owns(first, 1, 1, 2, 0) && !groups.owns(second, 1, 1, 2, 0));
        assert_eq!(groups.memberships(10).len(), 2);
        groups.drop_connection(10, 5);
        assert!(groups.memberships(10).is_empty());
        assert_eq!(groups.members(second), vec![MemberInfo { client_id: 20, partitions: vec![0, 1] }]);
        groups.remove_group(second);
        assert!(groups.members(second).is_empty() && !groups.leave(second, 3, 6));
    }
}
