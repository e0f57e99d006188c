//! Consumer-group use cases: membership (join, leave, sync), reads, and the pass that keeps
//! membership true to the connections (docs/consumer-groups.md). Membership is part of the
//! metadata: every change commits as a journal-only metadata operation on shard 0 (through
//! the quorum in a cluster), so every shard and every node reads the same members, owners
//! and generation from its metadata view, and a poll is gated on that view.

use rill_domain::answer::{Answer, GroupInfo};
use rill_domain::consumer_group::{ConsumerGroup, GroupKey, MemberId};
use rill_domain::error::ErrorCode;
use rill_domain::identifier::Identifier;
use rill_domain::wire::command::{MetadataOp, TopicRef};

use super::{Shard, queries};
use crate::ports::{Env, MetadataRead, ShardReply};

impl<E: Env> Shard<E> {
    pub(super) fn resolve_group(&self, topic: &TopicRef, group: &Identifier) -> Result<GroupKey, ErrorCode> {
        self.metadata.read(|m| {
            let (stream_id, topic_id, group_id) = m.group_ids(topic, group)?;
            Ok(GroupKey { stream_id, topic_id, group_id })
        })
    }

    /// Reads one group's membership from this shard's metadata view.
    pub(super) fn with_group<R>(&self, key: GroupKey, f: impl FnOnce(Option<&ConsumerGroup>) -> R) -> R {
        self.metadata.read(|m| f(m.group_state(key)))
    }

    /// This process as a member's node and start: connection ids begin again at every start.
    fn member(&self, client: u128, client_id: u32) -> MemberId {
        MemberId { client, client_id, node: self.shared.config.membership.replica_id, boot: self.boot() }
    }

    pub(super) fn boot(&self) -> u64 {
        self.shared.start_time_us.max(1)
    }

    /// Commits a membership operation (on shard 0, over the bus from any other shard).
    pub(super) async fn commit_membership(&self, op: MetadataOp<'_>) -> ShardReply {
        let (operation, body) = op.encode_internal().expect("membership operations are journal-only");
        self.execute_metadata(operation, &body, &op).await
    }

    pub fn get_consumer_group(&self, topic: &TopicRef, group: &Identifier) -> ShardReply {
        self.metadata.read(|m| m.topic_ids(topic))?;
        let Ok(key) = self.resolve_group(topic, group) else { return Ok(Answer::Group(None)) };
        Ok(Answer::Group(self.metadata.read(|m| queries::group_details(m, key))))
    }

    pub fn get_consumer_groups(&self, topic: &TopicRef) -> ShardReply {
        self.metadata.read(|m| {
            let (stream_id, topic_id) = m.topic_ids(topic)?;
            let topic = m.topic_by_ids(stream_id, topic_id).expect("resolved above");
            let groups = topic.consumer_groups.iter().map(|(&group_id, name)| GroupInfo {
                id: group_id,
                partitions_count: topic.partitions.len() as u32,
                members_count: topic.memberships.get(&group_id).map_or(0, |g| g.member_ids().len() as u32),
                name: name.clone(),
            });
            Ok(Answer::Groups(groups.collect()))
        })
    }

    /// JOIN_CONSUMER_GROUP: idempotent, so a member already in commits nothing.
    pub async fn join_consumer_group(
        &self,
        client: u128,
        client_id: u32,
        topic: &TopicRef,
        group: &Identifier,
    ) -> ShardReply {
        let key = self.resolve_group(topic, group)?;
        if self.with_group(key, |g| g.is_some_and(|g| g.assignment(client).is_some())) {
            return Ok(Answer::Done);
        }
        self.commit_membership(MetadataOp::JoinGroup { group: key, member: self.member(client, client_id) }).await
    }

    pub async fn leave_consumer_group(&self, client: u128, topic: &TopicRef, group: &Identifier) -> ShardReply {
        let key = self.resolve_group(topic, group)?;
        self.commit_membership(MetadataOp::LeaveGroup { group: key, client }).await
    }

    /// SYNC_CONSUMER_GROUP: a member that held partitions on their way to others lets them
    /// go first (a committed hand-over), then reads its generation and partitions.
    pub async fn sync_consumer_group(&self, client: u128, topic: &TopicRef, group: &Identifier) -> ShardReply {
        let key = self.resolve_group(topic, group)?;
        if self.with_group(key, |g| g.is_some_and(|g| g.revoking(client))) {
            let timeout_us = self.shared.config.security.rebalancing_timeout_us;
            self.commit_membership(MetadataOp::SettleGroup { group: key, synced: client, timeout_us }).await?;
        }
        Ok(Answer::Synced(self.with_group(key, |g| g.and_then(|g| g.assignment(client)))))
    }

    /// Whether `client` may poll `partition` through the group now.
    pub(super) fn owns_group_partition(&self, key: GroupKey, client: u128, partition: u32) -> bool {
        self.with_group(key, |g| g.is_some_and(|g| g.owns(client, partition)))
    }

    /// The groups a connection of this process is a member of.
    pub(super) fn memberships(&self, client_id: u32) -> Vec<GroupKey> {
        let me = self.member(0, client_id);
        self.metadata.read(|m| {
            m.group_states()
                .filter(|(_, g)| {
                    g.member_ids().iter().any(|id| (id.node, id.boot, id.client_id) == (me.node, me.boot, client_id))
                })
                .map(|(key, _)| key)
                .collect()
        })
    }

    /// A closed connection leaves every group it was in. A failure here (a backup, a view
    /// change) is left to shard 0's membership pass, which finds the member again.
    pub async fn on_disconnect(&self, client_id: u32) {
        let sessions = &self.shared.sessions;
        if let Some((_, session)) = sessions.clients.entry(client_id).and_then(|entry| entry.session) {
            sessions.retained.release(session, client_id, self.now_us());
        }
        sessions.clients.disconnect(client_id);
        if !self.memberships(client_id).is_empty() {
            let (node, boot) = (self.shared.config.membership.replica_id, self.boot());
            let _ = self.commit_membership(MetadataOp::DropMembers { node, boot, connection: Some(client_id) }).await;
        }
    }
}

impl<E: Env> Shard<E> {
    /// Shard 0, about once a second: keeps the committed membership true to the
    /// connections. Members of this node from an earlier process start, or whose connection
    /// is gone (its disconnect could not commit: a backup, a view change), are dropped. On
    /// the metadata primary, hand-overs whose grace ended are settled, and the members of a
    /// node unreachable for longer than the rebalancing timeout are dropped (they cannot
    /// poll through it, and would hold their partitions forever). A backup hands its
    /// operations to the primary. `unreachable` remembers since when each node was lost.
    pub async fn membership_pass(&self, unreachable: &mut std::collections::BTreeMap<u8, u64>) {
        let Some(role) = self.replica_role() else { return };
        let (now, me, boot) = (self.now_us(), self.shared.config.membership.replica_id, self.boot());
        let timeout_us = self.shared.config.security.rebalancing_timeout_us;
        let (mut stale, mut gone, mut overdue, mut nodes) = (false, Vec::new(), Vec::new(), Vec::new());
        self.metadata.read(|m| {
            for (key, group) in m.group_states() {
                if group.overdue(now, timeout_us) {
                    overdue.push(key);
                }
                for member in group.member_ids() {
                    match (member.node == me, member.boot == boot) {
                        (true, false) => stale = true,
                        (true, true) if self.shared.sessions.clients.get(member.client_id).is_none() => {
                            gone.push(member.client_id)
                        }
                        (false, _) => nodes.push(member.node),
                        _ => {}
                    }
                }
            }
        });
        gone.sort_unstable();
        gone.dedup();
        let mut ops: Vec<MetadataOp<'_>> = Vec::new();
        if stale {
            ops.push(MetadataOp::DropMembers { node: me, boot, connection: None });
        }
        ops.extend(gone.into_iter().map(|id| MetadataOp::DropMembers { node: me, boot, connection: Some(id) }));
        let primary = role.normal && role.primary == me;
        // Only the primary times nodes out, from when it first saw them lost as primary.
        if !primary {
            unreachable.clear();
        }
        if primary {
            ops.extend(overdue.into_iter().map(|group| MetadataOp::SettleGroup { group, synced: 0, timeout_us }));
            unreachable.retain(|node, _| !self.shared.replica.peer_connected(*node));
            for node in nodes.into_iter().filter(|node| !self.shared.replica.peer_connected(*node)) {
                let since = *unreachable.entry(node).or_insert(now);
                if now.saturating_sub(since) >= timeout_us {
                    tracing::warn!(node, "dropping the consumer-group members of an unreachable node");
                    ops.push(MetadataOp::DropMembers { node, boot: 0, connection: None });
                }
            }
        }
        for op in ops {
            let (operation, body) = op.encode_internal().expect("membership operations are journal-only");
            if primary {
                let _ = self.commit_metadata(operation, &body).await;
            } else {
                self.forward_metadata(operation, body).await;
            }
        }
    }
}
