//! The change feed against a metadata state driven op by op, as the state machine drives it.

use super::*;
use crate::identifier::Identifier;
use crate::reader::Reader;
use crate::wire::command::{MetadataOp, TopicRef};

struct Log {
    metadata: Metadata,
    feed: ChangeFeed,
    head: u64,
}

impl Log {
    fn new(capacity: usize) -> Self {
        Self { metadata: Metadata::default(), feed: ChangeFeed::new(capacity), head: 0 }
    }

    fn apply(&mut self, op: MetadataOp<'_>) {
        self.head += 1;
        let before = before_apply(&self.metadata, &op);
        let changes = match self.metadata.apply(&op, self.head, 1_000 * self.head) {
            Ok(applied) => after_apply(&self.metadata, &op, &applied, before),
            Err(_) => Vec::new(),
        };
        self.feed.record(self.head, 1_000 * self.head, changes);
    }

    fn page(&self, start: Start, limit: u32, groups_mask: u8) -> Decoded {
        let query = ChangesQuery { start, since: None, until: None, limit, groups_mask };
        decode(&self.feed.page(&query, &self.metadata, self.head).unwrap())
    }
}

fn topic() -> TopicRef {
    TopicRef { stream: Identifier::Numeric(0), topic: Identifier::Numeric(0) }
}

/// Ops 1 to 4: a stream, its topic of two partitions, a refused create, a group.
fn with_group(capacity: usize) -> Log {
    let mut log = Log::new(capacity);
    log.apply(MetadataOp::CreateStream { name: "orders".into(), options: &[] });
    log.apply(MetadataOp::CreateTopic {
        stream: Identifier::Numeric(0),
        partitions_count: 2,
        name: "eu".into(),
        options: &[],
    });
    log.apply(MetadataOp::CreateStream { name: "orders".into(), options: &[] }); // refused: a name taken
    log.apply(MetadataOp::CreateConsumerGroup { topic: topic(), name: "billing".into() });
    log
}

fn sample(capacity: usize) -> Log {
    let mut log = with_group(capacity);
    log.apply(MetadataOp::DeleteConsumerGroup { topic: topic(), group: Identifier::Name("billing".into()) });
    log.apply(MetadataOp::CreatePartitions { topic: topic(), count: 3 });
    log.apply(MetadataOp::DeletePartitions { topic: topic(), count: 2 });
    log.apply(MetadataOp::DeleteTopic(topic()));
    log
}

/// A page as the client reads it back: status, next cursor, has_more, each record's
/// `(op, ordinal, kind, body)`, each item's `(group, body)` and the token.
#[derive(Debug)]
struct Decoded {
    status: u8,
    oldest_op: u64,
    next: Option<Cursor>,
    has_more: bool,
    records: Vec<(u64, u32, u8, Vec<u8>)>,
    items: Vec<(u8, Vec<u8>)>,
    token: Option<PageToken>,
}

fn decode(bytes: &[u8]) -> Decoded {
    let mut r = Reader::new(bytes);
    let status = r.u8().unwrap();
    let _phase = r.u8().unwrap();
    assert_eq!((r.u8().unwrap(), r.u128().unwrap()), (1, LOG_ID));
    let oldest_op = r.u64().unwrap();
    let _retained_since = r.u64().unwrap();
    let _head = r.u64().unwrap();
    let next = (r.u8().unwrap() == 1).then(|| Cursor::decode(&mut r).unwrap());
    let has_more = r.u8().unwrap() == 1;
    let records = (0..r.u32().unwrap())
        .map(|_| {
            let (op, ordinal, _checksum, _timestamp) =
                (r.u64().unwrap(), r.u32().unwrap(), r.u128().unwrap(), r.u64().unwrap());
            assert_eq!(r.u8().unwrap(), 0, "no actor");
            let (group, kind) = (r.u8().unwrap(), r.u8().unwrap());
            assert_eq!(group, group_of(kind));
            let len = r.u32().unwrap() as usize;
            (op, ordinal, kind, r.bytes(len).unwrap().to_vec())
        })
        .collect();
    let items = (0..r.u32().unwrap())
        .map(|_| {
            let group = r.u8().unwrap();
            let len = r.u32().unwrap() as usize;
            (group, r.bytes(len).unwrap().to_vec())
        })
        .collect();
    let token_len = u16::from_le_bytes([r.u8().unwrap(), r.u8().unwrap()]) as usize;
    let token =
        (token_len > 0).then(|| query::PageToken::decode(&mut Reader::new(r.bytes(token_len).unwrap())).unwrap());
    r.finish().unwrap();
    Decoded { status, oldest_op, next, has_more, records, items, token }
}

fn kinds(page: &Decoded) -> Vec<u8> {
    page.records.iter().map(|r| r.2).collect()
}

#[test]
fn every_change_is_a_record_in_op_order_and_a_cursor_goes_on_after_it() {
    let log = sample(RECORDS_MAX);
    let all = log.page(Start::Earliest, 100, u8::MAX);
    assert_eq!(all.status, STATUS_OK);
    assert_eq!(kinds(&all), vec![1, 10, 30, 31, 20, 20, 12]);
    assert_eq!(all.records.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 2, 4, 5, 6, 7, 8]);
    assert!(!all.has_more);
    // The deleted group's record names it and counts the groups left; the partition
    // deletion lists the ids it removed.
    assert!(all.records[3].3.windows(7).any(|w| w == b"billing"));
    assert!(all.records[3].3.ends_with(&[0, 0, 0, 0, 0]));
    assert!(all.records[5].3.ends_with(&[3, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0]));

    let first = log.page(Start::Earliest, 3, u8::MAX);
    assert_eq!((kinds(&first), first.has_more), (vec![1, 10, 30], true));
    let rest = log.page(Start::After(first.next.unwrap()), 100, u8::MAX);
    assert_eq!(kinds(&rest), vec![31, 20, 20, 12]);
    let end = log.page(Start::After(rest.next.unwrap()), 100, u8::MAX);
    assert_eq!((end.status, end.records.len(), end.next), (STATUS_OK, 0, rest.next));

    let topics_only = log.page(Start::Earliest, 100, 1 << 1);
    assert_eq!(kinds(&topics_only), vec![10, 12]);
    assert_eq!(topics_only.next.unwrap().op, 8, "the cursor passes the records it skipped");
    assert_eq!(log.page(Start::Latest, 10, u8::MAX).next, all.next);
}

#[test]
fn a_cursor_the_feed_cannot_continue_is_answered_with_why() {
    let log = sample(RECORDS_MAX);
    let good = log.page(Start::Earliest, 1, u8::MAX).next.unwrap();
    let forged = Cursor { checksum: good.checksum ^ 1, ..good };
    assert_eq!(log.page(Start::After(forged), 10, u8::MAX).status, STATUS_RESET);
    let other_log = Cursor { log_id: 9, ..good };
    assert_eq!(log.page(Start::After(other_log), 10, u8::MAX).status, STATUS_RESET);
    let ahead = Cursor { op: 99, ..good };
    assert_eq!(log.page(Start::After(ahead), 10, u8::MAX).status, STATUS_BEHIND);

    // Two records kept: the oldest ops fall below the floor.
    let small = sample(2);
    let page = small.page(Start::Earliest, 10, u8::MAX);
    assert_eq!((kinds(&page), page.oldest_op), (vec![20, 12], 7));
    assert_eq!(small.page(Start::After(good), 10, u8::MAX).status, STATUS_EXPIRED);
    let zero = Cursor { log_id: LOG_ID, ..Cursor::default() };
    assert_eq!(small.page(Start::After(zero), 10, u8::MAX).status, STATUS_EXPIRED);
    assert_eq!(log.page(Start::After(zero), 10, u8::MAX).records.len(), 7, "nothing dropped: op 0 reads all");
}

#[test]
fn the_current_state_pages_through_every_item_and_ends_without_a_token() {
    let mut log = sample(RECORDS_MAX);
    log.apply(MetadataOp::CreateTopic {
        stream: Identifier::Numeric(0),
        partitions_count: 1,
        name: "us".into(),
        options: &[],
    });
    log.apply(MetadataOp::CreateStream { name: "audit".into(), options: &[] });
    log.apply(MetadataOp::CreateConsumerGroup { topic: topic(), name: "fraud".into() });
    let whole = log.page(Start::Current(None), 100, u8::MAX);
    let groups: Vec<u8> = whole.items.iter().map(|i| i.0).collect();
    assert_eq!(groups, vec![1, 1, 2, 3, 4]);
    assert!(whole.token.is_none());
    assert_eq!(whole.next, log.page(Start::Latest, 1, u8::MAX).next);

    let mut seen = Vec::new();
    let mut start = Start::Current(None);
    loop {
        let page = log.page(start, 2, u8::MAX);
        assert!(page.items.len() <= 2);
        seen.extend(page.items);
        match page.token {
            Some(token) => start = Start::Current(Some(token)),
            None => break,
        }
    }
    assert_eq!(seen, whole.items, "pages of two give the same items, each once");
}

#[test]
fn restored_state_starts_the_feed_again_at_the_next_op() {
    let mut log = sample(RECORDS_MAX);
    log.feed.clear();
    assert_eq!(log.page(Start::Earliest, 10, u8::MAX).oldest_op, 9, "nothing applied since: the head");
    log.apply(MetadataOp::CreateStream { name: "audit".into(), options: &[] });
    let page = log.page(Start::Earliest, 10, u8::MAX);
    assert_eq!((kinds(&page), page.oldest_op), (vec![1], 9));
}

#[test]
fn members_joining_and_leaving_and_their_partitions_are_records_and_items() {
    use crate::consumer_group::{GroupKey, MemberId};
    let mut log = with_group(RECORDS_MAX);
    let group = GroupKey { stream_id: 0, topic_id: 0, group_id: 0 };
    let member = |client: u128| MemberId { client, client_id: client as u32, node: 0, boot: 1 };
    let members_only = 1 << 4;
    let from = log.page(Start::Latest, 1, u8::MAX).next.unwrap();

    log.apply(MetadataOp::JoinGroup { group, member: member(7) });
    let joined = log.page(Start::After(from), 100, members_only);
    assert_eq!(kinds(&joined), vec![40, 42, 42], "joined, and both partitions handed to it");
    assert!(
        joined.records[0].3.ends_with(&[1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]),
        "one member, partitions 0 and 1"
    );

    log.apply(MetadataOp::JoinGroup { group, member: member(8) });
    log.apply(MetadataOp::DropMembers { node: 0, boot: 1, connection: Some(7) });
    let all = log.page(Start::After(from), 100, members_only);
    let left = all.records.iter().find(|r| r.2 == 41).expect("a member left");
    assert_eq!(left.3.last(), Some(&1), "its session ended");
    let items = log.page(Start::Current(None), 100, members_only);
    assert_eq!(items.items.len(), 1, "one member is left");
    assert_eq!(items.items[0].1[28..32], 8u32.to_le_bytes(), "member 8");
}
