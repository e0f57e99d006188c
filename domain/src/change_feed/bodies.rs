//! What each applied metadata op says in the change feed, and the current state as items,
//! in protocol 0.12's body layouts. A deletion's body is taken from the state before the
//! op (what it removed); every other body from the state after it.

use crate::metadata::{Applied, Metadata, Stream, Topic, User};
use crate::reader::Put;
use crate::wire::command::{MetadataOp, ResourceTarget};

/// Group codes.
pub const STREAMS: u8 = 1;
pub const TOPICS: u8 = 2;
pub const PARTITIONS: u8 = 3;
pub const CONSUMER_GROUPS: u8 = 4;
pub const MEMBERS: u8 = 5;
pub const USERS: u8 = 6;
pub const TOKENS: u8 = 7;

/// One change an op made: its kind code and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: u8,
    pub body: Vec<u8>,
}

/// The group a kind code belongs to (kinds are numbered by tens per group).
pub fn group_of(kind: u8) -> u8 {
    match kind {
        1..=3 => STREAMS,
        10..=12 => TOPICS,
        20 => PARTITIONS,
        30 | 31 => CONSUMER_GROUPS,
        40..=42 => MEMBERS,
        50..=54 => USERS,
        60 | 61 => TOKENS,
        _ => 8,
    }
}

fn stream_key(out: &mut Vec<u8>, stream: &Stream) {
    out.put_u32(stream.id);
    out.put_u64(stream.created_op);
}

pub(super) fn topic_key(out: &mut Vec<u8>, stream: &Stream, topic: &Topic) {
    stream_key(out, stream);
    out.put_u32(topic.id);
    out.put_u64(topic.created_op);
}

fn user_key(out: &mut Vec<u8>, user: &User) {
    out.put_u32(user.id);
    out.put_u64(user.created_at);
}

/// Readable options: `[0][explicit len u32][TLV][derived len u32][TLV]`.
fn options(out: &mut Vec<u8>, explicit: &[u8], derived: &[u8]) {
    out.put_u8(0);
    for block in [explicit, derived] {
        out.put_u32(block.len() as u32);
        out.extend_from_slice(block);
    }
}

/// No `requested_op`: every deletion here completes in the op that asked for it.
const NOT_DEFERRED: u8 = 0;

pub(crate) fn stream_body(stream: &Stream) -> Vec<u8> {
    let mut out = Vec::new();
    stream_key(&mut out, stream);
    out.put_u64(stream.created_at);
    out.put_name(&stream.name);
    let envelope = crate::stream_options::stored_envelope(&stream.options).ok().flatten();
    options(&mut out, &[], &crate::stream_options::derived_options(envelope));
    out
}

fn stream_deleted(stream: &Stream) -> Vec<u8> {
    let mut out = Vec::new();
    stream_key(&mut out, stream);
    out.put_u64(stream.created_at);
    out.put_name(&stream.name);
    out.put_u8(NOT_DEFERRED);
    out
}

/// A topic as a change (`with_partitions`) or as a current item (partitions are items of
/// their own group there).
pub(crate) fn topic_body(stream: &Stream, topic: &Topic, with_partitions: bool) -> Vec<u8> {
    let mut out = Vec::new();
    topic_key(&mut out, stream, topic);
    out.put_u64(topic.created_at);
    out.put_name(&topic.name);
    if with_partitions {
        out.put_u32(topic.partitions.len() as u32);
    }
    options(&mut out, &topic.settings.explicit, &topic.settings.derived_options());
    out
}

fn topic_deleted(stream: &Stream, topic: &Topic) -> Vec<u8> {
    let mut out = Vec::new();
    topic_key(&mut out, stream, topic);
    out.put_u64(topic.created_at);
    out.put_name(&topic.name);
    out.put_u8(NOT_DEFERRED);
    out
}

fn partitions_changed(stream: &Stream, topic: &Topic, removed: std::ops::Range<u32>) -> Vec<u8> {
    let mut out = Vec::new();
    topic_key(&mut out, stream, topic);
    out.put_u32(topic.partitions.len() as u32);
    out.put_u32(removed.len() as u32);
    removed.for_each(|id| out.put_u32(id));
    out.put_u8(NOT_DEFERRED);
    out
}

pub(crate) fn partitions_item(stream: &Stream, topic: &Topic) -> Vec<u8> {
    let mut out = Vec::new();
    topic_key(&mut out, stream, topic);
    out.put_u32(topic.partitions.len() as u32);
    out
}

/// A consumer group: created (`count` after), deleted (`count` after, not deferred) or a
/// current item (no count).
pub(crate) fn group_body(
    stream: &Stream,
    topic: &Topic,
    group: (u32, &str),
    count: Option<u32>,
    deleted: bool,
) -> Vec<u8> {
    let mut out = Vec::new();
    topic_key(&mut out, stream, topic);
    out.put_u32(group.0);
    out.put_name(group.1);
    if let Some(count) = count {
        out.put_u32(count);
    }
    if deleted {
        out.put_u8(NOT_DEFERRED);
    }
    out
}

fn put_permissions(out: &mut Vec<u8>, user: &User) {
    match &user.permissions {
        None => out.put_u8(0),
        Some(permissions) => {
            out.put_u8(1);
            permissions.encode(out);
        }
    }
}

pub(crate) fn user_body(user: &User) -> Vec<u8> {
    let mut out = Vec::new();
    user_key(&mut out, user);
    out.put_name(&user.username);
    out.put_u8(user.status);
    put_permissions(&mut out, user);
    options(&mut out, &[], &[]);
    out
}

fn user_identity(user: &User) -> Vec<u8> {
    let mut out = Vec::new();
    user_key(&mut out, user);
    out.put_name(&user.username);
    out
}

fn user_permissions(user: &User) -> Vec<u8> {
    let mut out = user_identity(user);
    put_permissions(&mut out, user);
    out.put_u8(0); // reason: updated
    out
}

pub(crate) fn token_body(user: &User, name: &str, expiry_at: u64) -> Vec<u8> {
    let mut out = Vec::new();
    user_key(&mut out, user);
    out.put_name(name);
    out.put_u64(expiry_at);
    out
}

fn token_deleted(user: &User, name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    user_key(&mut out, user);
    out.put_name(name);
    out.put_u8(0); // reason: deleted
    out
}

fn change(kind: u8, body: Vec<u8>) -> Vec<Change> {
    vec![Change { kind, body }]
}

/// The records of a deletion, from the state before the op removes what it names.
pub(super) fn removed_by(before: &Metadata, op: &MetadataOp<'_>) -> Vec<Change> {
    match op {
        MetadataOp::DeleteStream { stream } => {
            before.stream(stream).map(|s| change(3, stream_deleted(s))).unwrap_or_default()
        }
        MetadataOp::DeleteTopic(topic) => match before.topic_ids(topic) {
            Ok((s, t)) => before
                .stream_by_id(s)
                .map(|stream| change(12, topic_deleted(stream, &stream.topics[&t])))
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        },
        MetadataOp::DeleteUser { user } => before
            .user_id(user)
            .ok()
            .and_then(|id| before.user(id))
            .map(|u| change(52, user_identity(u)))
            .unwrap_or_default(),
        MetadataOp::RemoveToken { user_id, name } => {
            before.user(*user_id).map(|u| change(61, token_deleted(u, name))).unwrap_or_default()
        }
        MetadataOp::DeleteConsumerGroup { topic, group } => match before.group_ids(topic, group) {
            Ok((s, t, g)) => before
                .topic_by_ids(s, t)
                .zip(before.stream_by_id(s))
                .and_then(|(topic, stream)| {
                    let remaining = Some(topic.consumer_groups.len() as u32 - 1);
                    Some(change(31, group_body(stream, topic, (g, topic.consumer_groups.get(&g)?), remaining, true)))
                })
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// The records of an applied op besides membership, given what `removed_by` took before it.
pub(super) fn op_changes(after: &Metadata, op: &MetadataOp<'_>, applied: &Applied, before: Vec<Change>) -> Vec<Change> {
    let topic = |s: u32, t: u32| after.stream_by_id(s).and_then(|stream| Some((stream, stream.topics.get(&t)?)));
    match *applied {
        Applied::StreamCreated { stream_id } | Applied::StreamUpdated { stream_id } => {
            let kind = if matches!(applied, Applied::StreamCreated { .. }) { 1 } else { 2 };
            after.stream_by_id(stream_id).map(|s| change(kind, stream_body(s))).unwrap_or_default()
        }
        Applied::TopicCreated { stream_id, topic_id } | Applied::TopicUpdated { stream_id, topic_id } => {
            let kind = if matches!(applied, Applied::TopicCreated { .. }) { 10 } else { 11 };
            topic(stream_id, topic_id).map(|(s, t)| change(kind, topic_body(s, t, true))).unwrap_or_default()
        }
        Applied::PartitionsCreated { stream_id, topic_id, .. } => {
            topic(stream_id, topic_id).map(|(s, t)| change(20, partitions_changed(s, t, 0..0))).unwrap_or_default()
        }
        Applied::PartitionsDeleted { stream_id, topic_id, first, count } => topic(stream_id, topic_id)
            .map(|(s, t)| change(20, partitions_changed(s, t, first..first + count)))
            .unwrap_or_default(),
        Applied::GroupCreated { stream_id, topic_id, group_id } => topic(stream_id, topic_id)
            .and_then(|(s, t)| {
                let name = t.consumer_groups.get(&group_id)?;
                Some(change(30, group_body(s, t, (group_id, name), Some(t.consumer_groups.len() as u32), false)))
            })
            .unwrap_or_default(),
        Applied::UserChanged { user_id } => user_changes(after, op, user_id, before),
        Applied::StreamDeleted { .. } | Applied::TopicDeleted { .. } | Applied::GroupDeleted { .. } => before,
        Applied::StreamPurged { .. } | Applied::TopicPurged { .. } | Applied::MembershipChanged => Vec::new(),
    }
}

fn user_changes(after: &Metadata, op: &MetadataOp<'_>, user_id: u32, before: Vec<Change>) -> Vec<Change> {
    if matches!(op, MetadataOp::DeleteUser { .. } | MetadataOp::RemoveToken { .. }) {
        return before;
    }
    let Some(user) = after.user(user_id) else { return Vec::new() };
    match op {
        MetadataOp::InsertUser { .. } => change(50, user_body(user)),
        MetadataOp::UpdateUser { .. } | MetadataOp::UpdateResource { target: ResourceTarget::User(_), .. } => {
            change(51, user_body(user))
        }
        MetadataOp::SetPassword { .. } => change(53, user_identity(user)),
        MetadataOp::UpdatePermissions { .. } => change(54, user_permissions(user)),
        MetadataOp::InsertToken { name, expiry_at, .. } => change(60, token_body(user, name, *expiry_at)),
        _ => Vec::new(),
    }
}
