//! The metadata change feed protocol 0.12's GET_METADATA_CHANGES (17) reads: a record for
//! each stream, topic, partition count, consumer group, group member, partition handover,
//! user and token change, kept in op
//! order beside the metadata state machine, and pages of the current state.
//!
//! Guarantees: records are derived only from committed ops, so every replica and every
//! replay of the journal derives the same records with the same checksums. The feed holds
//! every record of the ops above its floor (the op before the first one applied since the
//! state was loaded, raised as the oldest records are dropped past `RECORDS_MAX`); a cursor
//! below the floor is answered "expired", one that names no retained record "reset", one
//! past the head "behind". Sessions are not in the feed (they are not metadata here): group
//! 8 answers no records and no items.

mod bodies;
mod items;
mod members;
mod query;

use std::collections::VecDeque;

pub use bodies::{Change, group_of};
pub use query::{ChangesQuery, Cursor, LIMIT_MAX, PageToken, Start};

use crate::checksum::xxh3_128_parts;
use crate::consumer_group::{ConsumerGroup, GroupKey};
use crate::error::ErrorCode;
use crate::metadata::Applied;
use crate::metadata::Metadata;
use crate::reader::Put;
use crate::wire::command::MetadataOp;
use query::mask_bit;

/// Names this log in every cursor. One value for every data directory: a cursor from
/// another one is told apart by the checksum of the record it names.
pub const LOG_ID: u128 = 0x7269_6c6c_2d6d_6574_612d_6c6f_6731;

/// Records kept in memory; older ones are dropped and their ops fall below the floor.
pub const RECORDS_MAX: usize = 16_384;

const STATUS_OK: u8 = 0;
const STATUS_BEHIND: u8 = 1;
const STATUS_EXPIRED: u8 = 2;
const STATUS_RESET: u8 = 3;
const PHASE_CHANGES: u8 = 0;
const PHASE_CURRENT: u8 = 1;

/// What an op's records need from the state before it: the records of what it removes
/// (taken before it is gone) and the consumer groups whose membership it may change.
#[derive(Debug, Default)]
pub struct Before {
    removed: Vec<Change>,
    groups: Vec<(GroupKey, ConsumerGroup, u32)>,
}

/// Takes what `op`'s records need from the state `before` it.
pub fn before_apply(before: &Metadata, op: &MetadataOp<'_>) -> Before {
    Before { removed: bodies::removed_by(before, op), groups: members::groups_before(before, op) }
}

/// The records of an applied op, given what `before_apply` took from the state before it.
pub fn after_apply(after: &Metadata, op: &MetadataOp<'_>, applied: &Applied, before: Before) -> Vec<Change> {
    let Before { removed, groups } = before;
    let mut changes = bodies::op_changes(after, op, applied, removed);
    changes.extend(members::changes(after, op, groups));
    changes
}

/// One change as the feed keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub op: u64,
    pub ordinal: u32,
    pub checksum: u128,
    pub timestamp: u64,
    pub group: u8,
    pub kind: u8,
    pub body: Vec<u8>,
}

impl Record {
    fn cursor(&self) -> Cursor {
        Cursor { log_id: LOG_ID, op: self.op, checksum: self.checksum, ordinal: self.ordinal }
    }

    /// `[op][ordinal][checksum u128][timestamp][actor: absent][group][kind][len u32][body]`.
    fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.op);
        out.put_u32(self.ordinal);
        out.put_u128(self.checksum);
        out.put_u64(self.timestamp);
        out.put_u8(0);
        out.put_u8(self.group);
        out.put_u8(self.kind);
        out.put_u32(self.body.len() as u32);
        out.extend_from_slice(&self.body);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeFeed {
    records: VecDeque<Record>,
    capacity: usize,
    first_applied: Option<u64>,
    dropped_through: u64,
}

impl Default for ChangeFeed {
    fn default() -> Self {
        Self::new(RECORDS_MAX)
    }
}

/// What a page says besides its records or items.
struct Page {
    status: u8,
    phase: u8,
    next: Option<Cursor>,
    has_more: bool,
    records: Vec<u8>,
    records_count: u32,
    items: Vec<u8>,
    items_count: u32,
    token: Option<PageToken>,
}

impl Page {
    fn status(status: u8) -> Self {
        Self {
            status,
            phase: PHASE_CHANGES,
            next: None,
            has_more: false,
            records: Vec::new(),
            records_count: 0,
            items: Vec::new(),
            items_count: 0,
            token: None,
        }
    }
}

impl ChangeFeed {
    pub fn new(capacity: usize) -> Self {
        Self { records: VecDeque::new(), capacity: capacity.max(1), first_applied: None, dropped_through: 0 }
    }

    /// Forgets every record (the state was replaced whole): the floor starts again at the
    /// next op applied.
    pub fn clear(&mut self) {
        *self = Self::new(self.capacity);
    }

    /// Keeps the changes committed op `op` made (none for a refused op or one that changes
    /// nothing the feed shows).
    pub fn record(&mut self, op: u64, timestamp: u64, changes: Vec<Change>) {
        self.first_applied.get_or_insert(op);
        for (ordinal, change) in changes.into_iter().enumerate() {
            let (ordinal, group) = (ordinal as u32, group_of(change.kind));
            let checksum = xxh3_128_parts(&[
                &op.to_le_bytes(),
                &ordinal.to_le_bytes(),
                &timestamp.to_le_bytes(),
                &[group, change.kind],
                &change.body,
            ]);
            self.records.push_back(Record {
                op,
                ordinal,
                checksum,
                timestamp,
                group,
                kind: change.kind,
                body: change.body,
            });
        }
        while self.records.len() > self.capacity {
            let Some(dropped) = self.records.pop_front() else { break };
            self.dropped_through = dropped.op;
            // An op's records go together: a cursor inside a half-dropped op means nothing.
            while self.records.front().is_some_and(|r| r.op == dropped.op) {
                self.records.pop_front();
            }
        }
    }

    /// Every record of every op above this one is retained.
    fn floor(&self, head: u64) -> u64 {
        self.dropped_through.max(self.first_applied.map_or(head, |op| op - 1)).min(head)
    }

    fn floor_cursor(&self, head: u64) -> Cursor {
        Cursor { log_id: LOG_ID, op: self.floor(head), checksum: 0, ordinal: 0 }
    }

    fn newest_cursor(&self, head: u64) -> Cursor {
        self.records.back().map_or_else(|| self.floor_cursor(head), Record::cursor)
    }

    /// Why the records after `cursor` cannot be read, if they cannot.
    fn refusal(&self, cursor: &Cursor, head: u64) -> Option<u8> {
        let floor = self.floor(head);
        if cursor.log_id != LOG_ID {
            return Some(STATUS_RESET);
        }
        if cursor.op > head {
            return Some(STATUS_BEHIND);
        }
        if cursor.op < floor {
            return Some(STATUS_EXPIRED);
        }
        let at = self.records.partition_point(|r| (r.op, r.ordinal) < (cursor.op, cursor.ordinal));
        let named = self.records.get(at).filter(|r| r.op == cursor.op && r.ordinal == cursor.ordinal);
        let known = cursor.op == floor || named.is_some_and(|r| r.checksum == cursor.checksum);
        (!known).then_some(STATUS_RESET)
    }

    /// The reply body for `query`, with `head` the newest committed op.
    pub fn page(&self, query: &ChangesQuery, metadata: &Metadata, head: u64) -> Result<Vec<u8>, ErrorCode> {
        let page = match &query.start {
            Start::Current(token) => self.current(query, token.as_ref(), metadata, head)?,
            _ => self.changes(query, head),
        };
        Ok(self.encode(page, head))
    }

    fn changes(&self, query: &ChangesQuery, head: u64) -> Page {
        let mut page = Page::status(STATUS_OK);
        let (mut next, from) = match &query.start {
            Start::Latest => {
                page.next = Some(self.newest_cursor(head));
                return page;
            }
            Start::After(cursor) => match self.refusal(cursor, head) {
                Some(status) => return Page::status(status),
                None => (*cursor, self.records.partition_point(|r| (r.op, r.ordinal) <= (cursor.op, cursor.ordinal))),
            },
            _ => (self.floor_cursor(head), 0),
        };
        for record in self.records.range(from..) {
            if query.until.is_some_and(|until| record.timestamp > until) {
                break;
            }
            let wanted = query.groups_mask & mask_bit(record.group) != 0
                && query.since.is_none_or(|since| record.timestamp >= since);
            if wanted {
                if page.records_count == query.limit {
                    page.has_more = true;
                    break;
                }
                record.encode(&mut page.records);
                page.records_count += 1;
            }
            next = record.cursor();
        }
        page.next = Some(next);
        page
    }

    fn current(
        &self,
        query: &ChangesQuery,
        token: Option<&PageToken>,
        metadata: &Metadata,
        head: u64,
    ) -> Result<Page, ErrorCode> {
        if token.is_some_and(|t| t.anchor.log_id != LOG_ID) {
            return Ok(Page::status(STATUS_RESET));
        }
        let anchor = token.map_or_else(|| self.newest_cursor(head), |t| t.anchor);
        let required_head = token.map_or(head, |t| t.required_head);
        let resume = match token {
            Some(t) => Some((t.group, items::parse_key(t.group, &t.last_key).ok_or(ErrorCode::InvalidFormat)?)),
            None => None,
        };
        let mut page = Page { phase: PHASE_CURRENT, next: Some(anchor), ..Page::status(STATUS_OK) };
        let mut last = None;
        'groups: for group in query::GROUPS.filter(|g| query.groups_mask & mask_bit(*g) != 0) {
            if resume.as_ref().is_some_and(|(g, _)| group < *g) {
                continue;
            }
            for (key, body) in items::of_group(metadata, group) {
                if resume.as_ref().is_some_and(|(g, k)| group == *g && key <= *k) {
                    continue;
                }
                if page.items_count == query.limit {
                    let (group, key) = last.take().unwrap_or((group, key));
                    let last_key = items::key_bytes(group, &key);
                    page.token =
                        Some(PageToken { anchor, required_head, groups_mask: query.groups_mask, group, last_key });
                    break 'groups;
                }
                page.items.put_u8(group);
                page.items.put_u32(body.len() as u32);
                page.items.extend_from_slice(&body);
                page.items_count += 1;
                last = Some((group, key));
            }
        }
        Ok(page)
    }

    fn encode(&self, page: Page, head: u64) -> Vec<u8> {
        let mut out = vec![page.status, page.phase, 1];
        out.put_u128(LOG_ID);
        out.put_u64(self.floor(head) + 1);
        out.put_u64(self.records.front().map_or(0, |r| r.timestamp));
        out.put_u64(head);
        match page.next {
            Some(cursor) => {
                out.put_u8(1);
                cursor.encode(&mut out);
            }
            None => out.put_u8(0),
        }
        out.put_u8(page.has_more as u8);
        out.put_u32(page.records_count);
        out.extend_from_slice(&page.records);
        out.put_u32(page.items_count);
        out.extend_from_slice(&page.items);
        match &page.token {
            Some(token) => {
                out.put_u16(token.encoded_len() as u16);
                token.encode(&mut out);
            }
            None => out.put_u16(0),
        }
        out
    }
}

#[cfg(test)]
mod tests;
