//! Consumer-group assignment, as pure state: who is in one group and which partitions each
//! member may read. The state is part of the metadata: every change is a journaled
//! operation applied with the primary's timestamp, so every node of a cluster holds the same
//! membership, owners and generation. Members are sessions (the request header's `client`
//! id) and carry the node, process start and connection they belong to. Rebalancing is
//! cooperative: a partition moving from one member to another stays with its old owner until
//! that owner syncs or `timeout_us` passes (each a committed operation), so no partition is
//! ever served to two members at once; the old owner's next poll of it asks it to sync.
//! Time comes in as microseconds.

use std::collections::BTreeMap;

use crate::error::ErrorCode;
use crate::reader::{Put, Reader};

/// A consumer group, by ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub stream_id: u32,
    pub topic_id: u32,
    pub group_id: u32,
}

/// Who a member is: its session, and the connection of which node and process start it
/// came on (connection ids start again at every start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberId {
    pub client: u128,
    pub client_id: u32,
    pub node: u8,
    pub boot: u64,
}

impl MemberId {
    /// Encoded size: client u128, client_id u32, node u8, boot u64.
    pub const SIZE: usize = 29;

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u128(self.client);
        out.put_u32(self.client_id);
        out.put_u8(self.node);
        out.put_u64(self.boot);
    }

    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, ErrorCode> {
        Ok(Self { client: reader.u128()?, client_id: reader.u32()?, node: reader.u8()?, boot: reader.u64()? })
    }
}

/// What get_consumer_group reports about one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    pub client_id: u32,
    pub partitions: Vec<u32>,
}

/// One group's membership and assignment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerGroup {
    generation: u64,
    /// In join order; the target assignment is round-robin over this order.
    members: Vec<MemberId>,
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

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every member, in join order.
    pub fn member_ids(&self) -> &[MemberId] {
        &self.members
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

    /// Hands over the partitions whose old owner is `synced`, and those whose grace period
    /// ended by `now_us`; true when any moved.
    pub fn settle(&mut self, synced: Option<u128>, now_us: u64, timeout_us: u64) -> bool {
        let due: Vec<u32> = self
            .pending
            .iter()
            .filter(|(p, (_, since))| {
                synced.is_some_and(|c| self.owner.get(p) == Some(&c)) || now_us.saturating_sub(*since) >= timeout_us
            })
            .map(|(p, _)| *p)
            .collect();
        for partition in &due {
            if let Some((target, _)) = self.pending.remove(partition) {
                self.owner.insert(*partition, target);
            }
        }
        !due.is_empty()
    }

    /// Whether `client` is the old owner of a partition on its way to another member.
    pub fn revoking(&self, client: u128) -> bool {
        self.pending.keys().any(|p| self.owner.get(p) == Some(&client))
    }

    /// Whether a hand-over's grace period has ended by `now_us`.
    pub fn overdue(&self, now_us: u64, timeout_us: u64) -> bool {
        self.pending.values().any(|(_, since)| now_us.saturating_sub(*since) >= timeout_us)
    }

    /// Follows a changed partition count of the topic.
    pub fn set_partitions_count(&mut self, partitions_count: u32, now_us: u64) {
        if self.partitions_count != partitions_count {
            self.partitions_count = partitions_count;
            self.rebalance(now_us);
        }
    }

    /// The partitions assigned to `client` once the rebalance settles: what sync and the
    /// group details report. Polls are gated on `owner`, which follows once old owners let go.
    fn assigned_to(&self, client: u128) -> Vec<u32> {
        (0..self.partitions_count).filter(|&p| self.target(p) == Some(client)).collect()
    }

    /// Adds a member; false for a session already in.
    pub fn join(&mut self, member: MemberId, partitions_count: u32, now_us: u64) -> bool {
        if self.is_member(member.client) {
            return false;
        }
        self.members.push(member);
        self.partitions_count = partitions_count;
        self.rebalance(now_us);
        true
    }

    /// Removes a member; false when it was not one.
    pub fn leave(&mut self, client: u128, now_us: u64) -> bool {
        self.drop_where(|m| m.client == client, now_us)
    }

    /// Removes every member `gone` picks; true when any went.
    pub fn drop_where(&mut self, gone: impl Fn(&MemberId) -> bool, now_us: u64) -> bool {
        let before = self.members.len();
        self.members.retain(|m| !gone(m));
        if self.members.len() == before {
            return false;
        }
        self.rebalance(now_us);
        true
    }

    /// The generation and the caller's partitions, or `None` for a non-member.
    pub fn assignment(&self, client: u128) -> Option<(u64, Vec<u32>)> {
        self.is_member(client).then(|| (self.generation, self.assigned_to(client)))
    }

    /// Whether `client` may read `partition` through the group now. A partition on its way
    /// to another member is read by nobody: its old owner is told to re-sync (which hands it
    /// over at once) instead of reading on until the timeout.
    pub fn owns(&self, client: u128, partition: u32) -> bool {
        self.owner.get(&partition) == Some(&client) && !self.pending.contains_key(&partition)
    }

    pub fn members(&self) -> Vec<MemberInfo> {
        self.members
            .iter()
            .map(|m| MemberInfo { client_id: m.client_id, partitions: self.assigned_to(m.client) })
            .collect()
    }

    /// The state as bytes, for metadata snapshots: equal states give equal bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.generation);
        out.put_u32(self.partitions_count);
        out.put_u32(self.members.len() as u32);
        for member in &self.members {
            member.encode(out);
        }
        out.put_u32(self.owner.len() as u32);
        for (partition, owner) in &self.owner {
            out.put_u32(*partition);
            out.put_u128(*owner);
        }
        out.put_u32(self.pending.len() as u32);
        for (partition, (target, since)) in &self.pending {
            out.put_u32(*partition);
            out.put_u128(*target);
            out.put_u64(*since);
        }
    }

    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, ErrorCode> {
        let mut group = Self { generation: reader.u64()?, partitions_count: reader.u32()?, ..Self::default() };
        for _ in 0..bounded(reader, MemberId::SIZE)? {
            group.members.push(MemberId::decode(reader)?);
        }
        for _ in 0..bounded(reader, 20)? {
            group.owner.insert(reader.u32()?, reader.u128()?);
        }
        for _ in 0..bounded(reader, 28)? {
            group.pending.insert(reader.u32()?, (reader.u128()?, reader.u64()?));
        }
        Ok(group)
    }
}

/// A count of records of at least `min_record` bytes each, never more than the bytes left.
fn bounded(reader: &mut Reader<'_>, min_record: usize) -> Result<usize, ErrorCode> {
    let count = reader.u32()? as usize;
    if count.saturating_mul(min_record) > reader.remaining() { Err(ErrorCode::InvalidFormat) } else { Ok(count) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: u64 = 30_000_000;

    fn member(client: u128) -> MemberId {
        MemberId { client, client_id: client as u32 * 10, node: 0, boot: 1 }
    }

    /// What each client's sync reports, the sync handing over what it let go first.
    fn sync_all(group: &mut ConsumerGroup, clients: &[u128]) -> Vec<Vec<u32>> {
        clients
            .iter()
            .map(|&c| {
                if group.revoking(c) {
                    group.settle(Some(c), 0, TIMEOUT);
                }
                group.assignment(c).map(|(_, p)| p).unwrap_or_default()
            })
            .collect()
    }

    /// Who may poll each partition right now; never more than one member.
    fn owners(group: &ConsumerGroup, clients: &[u128]) -> Vec<Vec<u128>> {
        (0..6).map(|p| clients.iter().copied().filter(|&c| group.owns(c, p)).collect()).collect()
    }

    #[test]
    fn partitions_spread_round_robin_and_never_overlap() {
        let mut group = ConsumerGroup::default();
        assert!(group.join(member(1), 6, 0));
        assert!(!group.join(member(1), 6, 0), "joining twice changes nothing");
        assert_eq!(sync_all(&mut group, &[1]), vec![vec![0, 1, 2, 3, 4, 5]]);
        group.join(member(2), 6, 0);
        // Partitions 1, 3, 5 are on their way to member 2: nobody reads them until member 1
        // syncs (its poll of one asks it to); member 1 keeps reading 0, 2, 4.
        assert!(!group.owns(1, 1) && !group.owns(2, 1));
        assert!(group.owns(1, 0) && group.revoking(1) && !group.revoking(2));
        assert_eq!(sync_all(&mut group, &[2, 1]), vec![vec![1, 3, 5], vec![0, 2, 4]]);
        assert!(group.owns(2, 1) && !group.owns(1, 1));
        group.join(member(3), 6, 0);
        for round in 0..3 {
            let owners = owners(&group, &[1, 2, 3]);
            assert!(owners.iter().all(|o| o.len() <= 1), "round {round}: {owners:?}");
            sync_all(&mut group, &[1, 2, 3]);
        }
        assert_eq!(owners(&group, &[1, 2, 3]), vec![vec![1], vec![2], vec![3], vec![1], vec![2], vec![3]]);
    }

    #[test]
    fn leaving_and_dropping_a_connection_hand_partitions_over() {
        let mut group = ConsumerGroup::default();
        group.join(member(1), 6, 0);
        group.join(member(2), 6, 0);
        sync_all(&mut group, &[1, 2]);
        assert!(group.leave(2, 1));
        assert!(!group.leave(2, 1));
        assert_eq!(sync_all(&mut group, &[1]), vec![vec![0, 1, 2, 3, 4, 5]]);
        group.join(member(3), 6, 2);
        assert!(group.drop_where(|m| m.client_id == 10, 3));
        assert!(!group.drop_where(|m| m.client_id == 10, 3));
        let generation = group.assignment(3).expect("a member").0;
        assert_eq!(group.assignment(3), Some((generation, vec![0, 1, 2, 3, 4, 5])));
        assert_eq!(group.assignment(1), None);
    }

    #[test]
    fn a_silent_old_owner_loses_partitions_after_the_timeout() {
        let mut group = ConsumerGroup::default();
        group.join(member(1), 2, 0);
        group.join(member(2), 2, 0);
        assert!(!group.overdue(TIMEOUT - 1, TIMEOUT) && !group.settle(None, TIMEOUT - 1, TIMEOUT));
        assert!(!group.owns(2, 1));
        assert!(group.overdue(TIMEOUT, TIMEOUT) && group.settle(None, TIMEOUT, TIMEOUT));
        assert!(group.owns(2, 1) && !group.owns(1, 1));
    }

    #[test]
    fn a_changed_partition_count_rebalances_and_the_state_round_trips() {
        let mut group = ConsumerGroup::default();
        group.join(member(1), 2, 0);
        group.join(member(2), 2, 5);
        let before = group.generation();
        group.set_partitions_count(4, 9);
        assert!(group.generation() > before);
        assert_eq!(group.assignment(2).map(|(_, p)| p), Some(vec![1, 3]));
        group.set_partitions_count(4, 10);
        let mut bytes = Vec::new();
        group.encode(&mut bytes);
        let decoded = ConsumerGroup::decode(&mut Reader::new(&bytes)).expect("decodes");
        assert_eq!(decoded, group);
        for len in 0..bytes.len() {
            let mut reader = Reader::new(&bytes[..len]);
            assert!(ConsumerGroup::decode(&mut reader).and_then(|_| reader.finish()).is_err(), "cut at {len}");
        }
    }
}
