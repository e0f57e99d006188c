//! Consumer-group use cases: membership (join, leave, sync) and reads. Creating and
//! deleting groups are metadata operations; membership lives in `Shared` and is never
//! journaled, because it ends with the session.

use rill_domain::error::ErrorCode;
use rill_domain::identifier::Identifier;
use rill_domain::wire::command::TopicRef;
use rill_domain::wire::reader::Put;

use super::{Shard, queries};
use crate::groups::GroupKey;
use crate::ports::{Env, MetadataRead, ShardReply};

impl<E: Env> Shard<E> {
    /// The group's key and its topic's partition count.
    pub(super) fn resolve_group(&self, topic: &TopicRef, group: &Identifier) -> Result<(GroupKey, u32), ErrorCode> {
        self.metadata.read(|m| {
            let (stream_id, topic_id, group_id) = m.group_ids(topic, group)?;
            let count = m.topic_by_ids(stream_id, topic_id).map_or(0, |t| t.partitions.len() as u32);
            Ok((GroupKey { stream_id, topic_id, group_id }, count))
        })
    }

    /// ConsumerGroupDetails, or an empty body when the group does not exist (a missing
    /// stream or topic is an error).
    pub fn get_consumer_group(&self, topic: &TopicRef, group: &Identifier) -> ShardReply {
        self.metadata.read(|m| m.topic_ids(topic))?;
        let Ok((key, _)) = self.resolve_group(topic, group) else { return Ok(Vec::new()) };
        Ok(self.metadata.read(|m| {
            let mut out = Vec::new();
            queries::encode_group_details(&mut out, m, &self.shared, key);
            out
        }))
    }

    pub fn get_consumer_groups(&self, topic: &TopicRef) -> ShardReply {
        self.metadata.read(|m| {
            let (stream_id, topic_id) = m.topic_ids(topic)?;
            let topic = m.topic_by_ids(stream_id, topic_id).expect("resolved above");
            let mut out = Vec::new();
            for (&group_id, name) in &topic.consumer_groups {
                let members = self.shared.groups.members(GroupKey { stream_id, topic_id, group_id }).len() as u32;
                rill_domain::wire::response::consumer_group(
                    &mut out,
                    group_id,
                    topic.partitions.len() as u32,
                    members,
                    name,
                );
            }
            Ok(out)
        })
    }

    pub fn join_consumer_group(
        &self,
        client: u128,
        client_id: u32,
        topic: &TopicRef,
        group: &Identifier,
    ) -> ShardReply {
        let (key, partitions) = self.resolve_group(topic, group)?;
        self.shared.groups.join(key, client, client_id, partitions, self.now_us());
        Ok(0u32.to_le_bytes().to_vec())
    }

    pub fn leave_consumer_group(&self, client: u128, topic: &TopicRef, group: &Identifier) -> ShardReply {
        let (key, _) = self.resolve_group(topic, group)?;
        if !self.shared.groups.leave(key, client, self.now_us()) {
            return Err(ErrorCode::ConsumerGroupMemberNotFound);
        }
        Ok(0u32.to_le_bytes().to_vec())
    }

    /// `[generation][n][partition × n]` for a member, an empty body otherwise.
    pub fn sync_consumer_group(&self, client: u128, topic: &TopicRef, group: &Identifier) -> ShardReply {
        let (key, partitions) = self.resolve_group(topic, group)?;
        let mut out = Vec::new();
        if let Some((generation, owned)) = self.shared.groups.sync(key, client, partitions, self.now_us()) {
            out.put_u64(generation);
            out.put_u32(owned.len() as u32);
            for partition in owned {
                out.put_u32(partition);
            }
        }
        Ok(out)
    }

    /// Ends every membership of a closed connection.
    pub fn on_disconnect(&self, client_id: u32) {
        self.shared.groups.drop_connection(client_id, self.now_us());
        self.shared.sessions.clients.disconnect(client_id);
    }
}
