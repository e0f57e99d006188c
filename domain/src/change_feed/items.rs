//! The current state as GET_METADATA_CHANGES items, group by group in key order, and the
//! keys a page token resumes after.

use super::bodies::{self, CONSUMER_GROUPS, PARTITIONS, STREAMS, TOKENS, TOPICS, USERS};
use crate::metadata::Metadata;
use crate::reader::{Put, Reader};

/// An item's place in its group: stream, topic and group ids, or a user id and a token
/// name; unused parts are zero or empty. Ordered as the metadata iterates them.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ItemKey(u32, u32, u32, String);

/// Every item of `group` with its key, in key order (none for members and sessions).
pub(super) fn of_group(metadata: &Metadata, group: u8) -> Vec<(ItemKey, Vec<u8>)> {
    let topics = || metadata.streams().flat_map(|s| s.topics.values().map(move |t| (s, t)));
    match group {
        STREAMS => metadata.streams().map(|s| (ItemKey(s.id, 0, 0, String::new()), bodies::stream_body(s))).collect(),
        TOPICS => {
            topics().map(|(s, t)| (ItemKey(s.id, t.id, 0, String::new()), bodies::topic_body(s, t, false))).collect()
        }
        PARTITIONS => {
            topics().map(|(s, t)| (ItemKey(s.id, t.id, 0, String::new()), bodies::partitions_item(s, t))).collect()
        }
        CONSUMER_GROUPS => topics()
            .flat_map(|(s, t)| {
                t.consumer_groups.iter().map(move |(id, name)| {
                    (ItemKey(s.id, t.id, *id, String::new()), bodies::group_body(s, t, (*id, name), None, false))
                })
            })
            .collect(),
        USERS => metadata.users().map(|u| (ItemKey(u.id, 0, 0, String::new()), bodies::user_body(u))).collect(),
        TOKENS => metadata
            .users()
            .flat_map(|u| {
                u.tokens.iter().map(move |(name, token)| {
                    (ItemKey(u.id, 0, 0, name.clone()), bodies::token_body(u, name, token.expiry_at))
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A key as a page token carries it: 4 bytes for streams and users, 8 for topics and
/// partitions, 12 for groups, a user id and a name for tokens.
pub(super) fn key_bytes(group: u8, key: &ItemKey) -> Vec<u8> {
    let mut out = Vec::new();
    let ids: &[u32] = match group {
        STREAMS | USERS | TOKENS => &[key.0],
        TOPICS | PARTITIONS => &[key.0, key.1],
        _ => &[key.0, key.1, key.2],
    };
    ids.iter().for_each(|id| out.put_u32(*id));
    if group == TOKENS {
        out.put_name(&key.3);
    }
    out
}

/// The key a page token carries, if it has the length its group's keys have.
pub(super) fn parse_key(group: u8, bytes: &[u8]) -> Option<ItemKey> {
    let mut reader = Reader::new(bytes);
    let mut ids = [0u32; 3];
    let (count, named) = match group {
        STREAMS | USERS => (1, false),
        TOKENS => (1, true),
        TOPICS | PARTITIONS | 8 => (2, false),
        CONSUMER_GROUPS => (3, false),
        _ => (4, false),
    };
    for id in ids.iter_mut().take(count.min(3)) {
        *id = reader.u32().ok()?;
    }
    if count == 4 {
        reader.u32().ok()?;
    }
    let name = if named { reader.name().ok()? } else { String::new() };
    reader.finish().ok()?;
    Some(ItemKey(ids[0], ids[1], ids[2], name))
}
