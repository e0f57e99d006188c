//! Consumer groups in the metadata: their ids and names (CREATE_CONSUMER_GROUP,
//! DELETE_CONSUMER_GROUP) and their membership, owners and generation, changed only by the
//! journal-only membership operations (`wire::membership`) at the op's timestamp, so every
//! replica holds the same assignment.

use super::{Applied, Metadata};
use crate::consumer_group::{ConsumerGroup, GroupKey, MemberId};
use crate::error::ErrorCode;
use crate::identifier::Identifier;
use crate::wire::command::TopicRef;

impl Metadata {
    /// `(stream_id, topic_id, group_id)` of a consumer group.
    pub fn group_ids(&self, topic: &TopicRef, group: &Identifier) -> Result<(u32, u32, u32), ErrorCode> {
        let (stream_id, topic_id) = self.topic_ids(topic)?;
        let groups = &self.streams[&stream_id].topics[&topic_id].consumer_groups;
        let group_id = match group {
            Identifier::Numeric(id) => {
                groups.contains_key(id).then_some(*id).ok_or(ErrorCode::ConsumerGroupIdNotFound)?
            }
            Identifier::Name(name) => groups
                .iter()
                .find(|(_, n)| *n == name)
                .map(|(id, _)| *id)
                .ok_or(ErrorCode::ConsumerGroupNameNotFound)?,
        };
        Ok((stream_id, topic_id, group_id))
    }

    /// A group's membership and assignment.
    pub fn group_state(&self, key: GroupKey) -> Option<&ConsumerGroup> {
        self.topic_by_ids(key.stream_id, key.topic_id)?.memberships.get(&key.group_id)
    }

    /// Every group with its membership, in key order.
    pub fn group_states(&self) -> impl Iterator<Item = (GroupKey, &ConsumerGroup)> {
        self.streams.values().flat_map(|stream| {
            stream.topics.values().flat_map(move |topic| {
                topic.memberships.iter().map(move |(group_id, group)| {
                    (GroupKey { stream_id: stream.id, topic_id: topic.id, group_id: *group_id }, group)
                })
            })
        })
    }

    fn group_state_mut(&mut self, key: GroupKey) -> Result<(&mut ConsumerGroup, u32), ErrorCode> {
        let topic = self
            .streams
            .get_mut(&key.stream_id)
            .and_then(|stream| stream.topics.get_mut(&key.topic_id))
            .ok_or(ErrorCode::ConsumerGroupIdNotFound)?;
        let partitions = topic.partitions.len() as u32;
        let group = topic.memberships.get_mut(&key.group_id).ok_or(ErrorCode::ConsumerGroupIdNotFound)?;
        Ok((group, partitions))
    }

    pub(super) fn create_group(&mut self, topic: &TopicRef, name: &str) -> Result<Applied, ErrorCode> {
        let (stream_id, topic_id) = self.topic_ids(topic)?;
        let topic = self.streams.get_mut(&stream_id).unwrap().topics.get_mut(&topic_id).unwrap();
        if topic.consumer_groups.values().any(|n| n == name) {
            return Err(ErrorCode::ConsumerGroupNameAlreadyExists);
        }
        let group_id = topic.next_group_id;
        topic.next_group_id += 1;
        topic.consumer_groups.insert(group_id, name.to_owned());
        topic.memberships.insert(group_id, ConsumerGroup::default());
        Ok(Applied::GroupCreated { stream_id, topic_id, group_id })
    }

    pub(super) fn delete_group(&mut self, topic: &TopicRef, group: &Identifier) -> Result<Applied, ErrorCode> {
        let (stream_id, topic_id, group_id) = self.group_ids(topic, group)?;
        let topic = self.streams.get_mut(&stream_id).unwrap().topics.get_mut(&topic_id).unwrap();
        topic.consumer_groups.remove(&group_id);
        topic.memberships.remove(&group_id);
        Ok(Applied::GroupDeleted { stream_id, topic_id, group_id })
    }

    pub(super) fn join_group(&mut self, key: GroupKey, member: MemberId, timestamp: u64) -> Result<Applied, ErrorCode> {
        let (group, partitions) = self.group_state_mut(key)?;
        group.join(member, partitions, timestamp);
        Ok(Applied::MembershipChanged)
    }

    pub(super) fn leave_group(&mut self, key: GroupKey, client: u128, timestamp: u64) -> Result<Applied, ErrorCode> {
        let (group, _) = self.group_state_mut(key)?;
        match group.leave(client, timestamp) {
            true => Ok(Applied::MembershipChanged),
            false => Err(ErrorCode::ConsumerGroupMemberNotFound),
        }
    }

    pub(super) fn drop_members(&mut self, node: u8, boot: u64, connection: Option<u32>, timestamp: u64) -> Applied {
        let gone = |m: &MemberId| {
            m.node == node
                && match connection {
                    Some(client_id) => m.boot == boot && m.client_id == client_id,
                    None => m.boot != boot,
                }
        };
        for stream in self.streams.values_mut() {
            for topic in stream.topics.values_mut() {
                for group in topic.memberships.values_mut() {
                    group.drop_where(gone, timestamp);
                }
            }
        }
        Applied::MembershipChanged
    }

    pub(super) fn settle_group(
        &mut self,
        key: GroupKey,
        synced: u128,
        timeout_us: u64,
        timestamp: u64,
    ) -> Result<Applied, ErrorCode> {
        let (group, _) = self.group_state_mut(key)?;
        group.settle((synced != 0).then_some(synced), timestamp, timeout_us);
        Ok(Applied::MembershipChanged)
    }

    /// A topic's partition count changed: every group of it rebalances.
    pub(super) fn rebalance_groups(&mut self, stream_id: u32, topic_id: u32, timestamp: u64) {
        if let Some(topic) = self.streams.get_mut(&stream_id).and_then(|s| s.topics.get_mut(&topic_id)) {
            let partitions = topic.partitions.len() as u32;
            for group in topic.memberships.values_mut() {
                group.set_partitions_count(partitions, timestamp);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::command::MetadataOp;

    fn member(client: u128, node: u8, boot: u64, client_id: u32) -> MemberId {
        MemberId { client, client_id, node, boot }
    }

    #[test]
    fn membership_ops_change_the_groups_the_metadata_holds() {
        let mut metadata = Metadata::default();
        let topic = TopicRef { stream: Identifier::Numeric(0), topic: Identifier::Numeric(0) };
        let key = GroupKey { stream_id: 0, topic_id: 0, group_id: 0 };
        let setup = [
            MetadataOp::CreateStream { name: "s".into(), options: &[] },
            MetadataOp::CreateTopic {
                stream: Identifier::Numeric(0),
                partitions_count: 4,
                name: "t".into(),
                options: &[],
            },
            MetadataOp::CreateConsumerGroup { topic: topic.clone(), name: "g".into() },
        ];
        for op in &setup {
            metadata.apply(op, 1, 1).expect("setup");
        }
        let missing = GroupKey { group_id: 9, ..key };
        let join = |member| MetadataOp::JoinGroup { group: key, member };
        assert_eq!(
            metadata.apply(&MetadataOp::JoinGroup { group: missing, member: member(1, 0, 1, 1) }, 2, 2),
            Err(ErrorCode::ConsumerGroupIdNotFound)
        );
        metadata.apply(&join(member(1, 0, 1, 1)), 2, 2).unwrap();
        metadata.apply(&join(member(2, 1, 5, 1)), 3, 3).unwrap();
        let group = metadata.group_state(key).unwrap();
        assert_eq!(group.assignment(2).map(|(_, p)| p), Some(vec![1, 3]));
        assert!(group.revoking(1), "member 1 holds 1 and 3 until it syncs");
        metadata.apply(&MetadataOp::SettleGroup { group: key, synced: 1, timeout_us: 100 }, 4, 4).unwrap();
        assert!(metadata.group_state(key).unwrap().owns(2, 1));
        // More partitions: both groups' members rebalance, at the op's timestamp.
        metadata.apply(&MetadataOp::CreatePartitions { topic: topic.clone(), count: 2 }, 5, 5).unwrap();
        assert_eq!(metadata.group_state(key).unwrap().assignment(1).map(|(_, p)| p), Some(vec![0, 2, 4]));
        // Node 1 restarted (boot 6): its members from boot 5 go; node 0's stay.
        metadata.apply(&MetadataOp::DropMembers { node: 1, boot: 6, connection: None }, 6, 6).unwrap();
        assert_eq!(metadata.group_state(key).unwrap().assignment(2), None);
        assert!(metadata.group_state(key).unwrap().assignment(1).is_some());
        metadata.apply(&MetadataOp::DropMembers { node: 0, boot: 1, connection: Some(1) }, 7, 7).unwrap();
        assert!(metadata.group_state(key).unwrap().is_empty());
        assert_eq!(
            metadata.apply(&MetadataOp::LeaveGroup { group: key, client: 1 }, 8, 8),
            Err(ErrorCode::ConsumerGroupMemberNotFound)
        );
        metadata.apply(&MetadataOp::DeleteConsumerGroup { topic, group: Identifier::Numeric(0) }, 9, 9).unwrap();
        assert!(metadata.group_state(key).is_none() && metadata.group_states().next().is_none());
    }
}
