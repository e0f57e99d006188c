//! The current state as GET_METADATA_CHANGES items, group by group in key order, and the
//! keys a page token resumes after.

use super::bodies::{self, CONSUMER_GROUPS, MEMBERS, PARTITIONS, STREAMS, TOKENS, TOPICS, USERS};
use crate::metadata::Metadata;
use crate::reader::{Put, Reader};

/// An item's place in its group: stream, topic, group and member ids, or a user id and a
/// token name; unused parts are zero or empty. Ordered as the items are listed.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ItemKey([u32; 4], String);

fn ids(a: u32, b: u32, c: u32) -> ItemKey {
    ItemKey([a, b, c, 0], String::new())
}

/// Every item of `group` with its key, in key order (none for sessions).
pub(super) fn of_group(metadata: &Metadata, group: u8) -> Vec<(ItemKey, Vec<u8>)> {
    let topics = || metadata.streams().flat_map(|s| s.topics.values().map(move |t| (s, t)));
    match group {
        STREAMS => metadata.streams().map(|s| (ids(s.id, 0, 0), bodies::stream_body(s))).collect(),
        TOPICS => topics().map(|(s, t)| (ids(s.id, t.id, 0), bodies::topic_body(s, t, false))).collect(),
        PARTITIONS => topics().map(|(s, t)| (ids(s.id, t.id, 0), bodies::partitions_item(s, t))).collect(),
        CONSUMER_GROUPS => topics()
            .flat_map(|(s, t)| {
                t.consumer_groups
                    .iter()
                    .map(move |(id, name)| (ids(s.id, t.id, *id), bodies::group_body(s, t, (*id, name), None, false)))
            })
            .collect(),
        MEMBERS => {
            super::members::items(metadata).into_iter().map(|(key, body)| (ItemKey(key, String::new()), body)).collect()
        }
        USERS => metadata.users().map(|u| (ids(u.id, 0, 0), bodies::user_body(u))).collect(),
        TOKENS => metadata
            .users()
            .flat_map(|u| {
                u.tokens.iter().map(move |(name, token)| {
                    (ItemKey([u.id, 0, 0, 0], name.clone()), bodies::token_body(u, name, token.expiry_at))
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// How many ids a key of `group` has: 1 for streams, users and tokens (with a name), 2
/// for topics, partitions and sessions, 3 for groups, 4 for members.
fn ids_in(group: u8) -> usize {
    match group {
        STREAMS | USERS | TOKENS => 1,
        CONSUMER_GROUPS => 3,
        MEMBERS => 4,
        _ => 2,
    }
}

/// A key as a page token carries it: its ids (4 bytes each), and a token's name.
pub(super) fn key_bytes(group: u8, key: &ItemKey) -> Vec<u8> {
    let mut out = Vec::new();
    key.0[..ids_in(group)].iter().for_each(|id| out.put_u32(*id));
    if group == TOKENS {
        out.put_name(&key.1);
    }
    out
}

/// The key a page token carries, if it has the length its group's keys have.
pub(super) fn parse_key(group: u8, bytes: &[u8]) -> Option<ItemKey> {
    let mut reader = Reader::new(bytes);
    let mut ids = [0u32; 4];
    for id in ids.iter_mut().take(ids_in(group)) {
        *id = reader.u32().ok()?;
    }
    let name = if group == TOKENS { reader.name().ok()? } else { String::new() };
    reader.finish().ok()?;
    Some(ItemKey(ids, name))
}
