//! Consumer-group membership in the change feed: the groups an op may change are taken
//! before it, and compared with what they are after it, member by member (joined, left) and
//! partition by partition (handed over to another member, or to none).

use std::collections::BTreeMap;

use super::bodies::{Change, topic_key};
use crate::consumer_group::{ConsumerGroup, GroupKey};
use crate::metadata::Metadata;
use crate::reader::Put;
use crate::wire::command::MetadataOp;

const JOINED: u8 = 40;
const LEFT: u8 = 41;
const HANDED_OVER: u8 = 42;
/// Why a member left: it asked, or its session (connection, node) ended.
const LEFT_ASKED: u8 = 0;
const LEFT_SESSION_ENDED: u8 = 1;

/// The groups `op` may change, as they are before it.
pub(super) fn groups_before(before: &Metadata, op: &MetadataOp<'_>) -> Vec<(GroupKey, ConsumerGroup, u32)> {
    let keep = |key: GroupKey, group: &ConsumerGroup| {
        let partitions = before.topic_by_ids(key.stream_id, key.topic_id).map_or(0, |t| t.partitions.len() as u32);
        (key, group.clone(), partitions)
    };
    match op {
        MetadataOp::JoinGroup { group, .. }
        | MetadataOp::LeaveGroup { group, .. }
        | MetadataOp::SettleGroup { group, .. } => {
            before.group_state(*group).map(|state| vec![keep(*group, state)]).unwrap_or_default()
        }
        MetadataOp::DropMembers { .. } => {
            before.group_states().filter(|(_, group)| !group.is_empty()).map(|(key, group)| keep(key, group)).collect()
        }
        MetadataOp::CreatePartitions { topic, .. } | MetadataOp::DeletePartitions { topic, .. } => {
            match before.topic_ids(topic) {
                Ok((stream_id, topic_id)) => before
                    .group_states()
                    .filter(|(key, group)| key.stream_id == stream_id && key.topic_id == topic_id && !group.is_empty())
                    .map(|(key, group)| keep(key, group))
                    .collect(),
                Err(_) => Vec::new(),
            }
        }
        _ => Vec::new(),
    }
}

/// Which member (its connection id) reads each partition now.
fn owners(group: &ConsumerGroup, partitions: u32) -> BTreeMap<u32, u32> {
    (0..partitions)
        .filter_map(|p| group.member_ids().iter().find(|m| group.owns(m.client, p)).map(|m| (p, m.client_id)))
        .collect()
}

fn group_key(out: &mut Vec<u8>, metadata: &Metadata, key: GroupKey) -> bool {
    let Some(stream) = metadata.stream_by_id(key.stream_id) else { return false };
    let Some(topic) = stream.topics.get(&key.topic_id) else { return false };
    topic_key(out, stream, topic);
    out.put_u32(key.group_id);
    true
}

fn partition_ids(out: &mut Vec<u8>, mut ids: Vec<u32>) {
    ids.sort_unstable();
    ids.dedup();
    out.put_u32(ids.len() as u32);
    ids.iter().for_each(|id| out.put_u32(*id));
}

/// The membership records of an applied op, from the groups as they were before it.
pub(super) fn changes(
    after: &Metadata,
    op: &MetadataOp<'_>,
    before: Vec<(GroupKey, ConsumerGroup, u32)>,
) -> Vec<Change> {
    let reason = if matches!(op, MetadataOp::DropMembers { .. }) { LEFT_SESSION_ENDED } else { LEFT_ASKED };
    let mut changes = Vec::new();
    for (key, was, partitions_before) in before {
        let Some(now) = after.group_state(key) else { continue };
        let mut prefix = Vec::new();
        if !group_key(&mut prefix, after, key) {
            continue;
        }
        let count = now.member_ids().len() as u32;
        for member in was.member_ids().iter().filter(|m| !now.member_ids().iter().any(|n| n.client == m.client)) {
            let mut body = prefix.clone();
            body.put_u32(member.client_id);
            body.put_u128(member.client);
            body.put_u32(count);
            body.put_u8(reason);
            changes.push(Change { kind: LEFT, body });
        }
        let assigned: BTreeMap<u128, Vec<u32>> =
            now.member_ids().iter().zip(now.members()).map(|(id, info)| (id.client, info.partitions)).collect();
        for member in now.member_ids().iter().filter(|m| !was.member_ids().iter().any(|w| w.client == m.client)) {
            let mut body = prefix.clone();
            body.put_u32(member.client_id);
            body.put_u128(member.client);
            body.put_u32(count);
            partition_ids(&mut body, assigned.get(&member.client).cloned().unwrap_or_default());
            changes.push(Change { kind: JOINED, body });
        }
        let partitions_now = after.topic_by_ids(key.stream_id, key.topic_id).map_or(0, |t| t.partitions.len() as u32);
        let (old, new) = (owners(&was, partitions_before), owners(now, partitions_now));
        for partition in 0..partitions_before.max(partitions_now) {
            let (from, to) = (old.get(&partition), new.get(&partition));
            if from == to || (from.is_none() && partition >= partitions_now) {
                continue;
            }
            let mut body = prefix.clone();
            body.put_u32(partition);
            match to {
                Some(member) => {
                    body.put_u8(1);
                    body.put_u32(*member);
                }
                None => body.put_u8(0),
            }
            changes.push(Change { kind: HANDED_OVER, body });
        }
    }
    changes
}

/// Every member of every group, with its connection id, as current-state items.
pub(super) fn items(metadata: &Metadata) -> Vec<([u32; 4], Vec<u8>)> {
    let mut items = Vec::new();
    for (key, group) in metadata.group_states() {
        let mut prefix = Vec::new();
        if !group_key(&mut prefix, metadata, key) {
            continue;
        }
        for (member, info) in group.member_ids().iter().zip(group.members()) {
            let mut body = prefix.clone();
            body.put_u32(member.client_id);
            body.put_u128(member.client);
            partition_ids(&mut body, info.partitions);
            items.push(([key.stream_id, key.topic_id, key.group_id, member.client_id], body));
        }
    }
    items.sort_by_key(|(key, _)| *key);
    items
}
