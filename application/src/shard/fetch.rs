//! Protocol 0.12's FETCH_MESSAGES: reads the targets of one topic in the client's order, each
//! a poll of its owner within what is left of the request's message and byte budgets, and
//! answers one section per target read (a refused target's section carries its error code).
//! A fetch whose targets hold fewer than `min_count` messages waits, as a deferred poll
//! does, for an append to any of them, up to `wait_us`; its cancel ends the wait.
//!
//! While it waits a fetch only probes; an auto-commit fetch commits once, in the read that
//! answers, so no offset is stored for messages the reply does not hold.

use std::rc::Rc;

use futures_util::future::select_all;
use rill_domain::constants::HEADER_SIZE;
use rill_domain::error::ErrorCode;
use rill_domain::namespace::Namespace;
use rill_domain::wire::command::Consumer;
use rill_domain::wire::command::{FetchRequest, FetchTarget};
use rill_domain::wire::fetch::{SECTION_HEADER_SIZE, SectionHeader};
use rill_domain::wire::response;

use crate::memory_pool::PoolSlice;
use crate::partition::{MAX_POLL_BYTES, PollLimit, REPLY_ROOM, resolved_start};
use crate::ports::{BusReply, Env, PartitionOp, Reply};
use crate::shard::Shard;
use crate::shard::deferred::WaitingPoll;

/// The smallest byte budget worth a read: one batch header and one message header.
const MIN_READ_BYTES: usize = 256 + 48;

/// One target's part of the reply: its header and, when read, the poll frame holding its
/// batches after [`REPLY_ROOM`].
struct Section {
    header: SectionHeader,
    frame: Option<PoolSlice>,
}

impl Section {
    fn refused(partition_id: u32, code: ErrorCode) -> Self {
        Self { header: SectionHeader { partition_id, status: code.code(), ..SectionHeader::default() }, frame: None }
    }

    /// The section a poll frame makes: the prefix's fields, the batches after it.
    fn read(partition_id: u32, frame: PoolSlice) -> Self {
        let head = response::read_poll_head(frame[HEADER_SIZE..REPLY_ROOM].try_into().expect("a 40-byte prefix"));
        let records = &frame[REPLY_ROOM..];
        let header = SectionHeader {
            partition_id,
            status: 0,
            current_offset: head.current_offset,
            messages_count: head.messages_count,
            context: head.context,
            next_offset: rill_domain::batch::end_offset(records).unwrap_or_else(|| resolved_start(&frame)),
            records_len: records.len() as u32,
        };
        Self { header, frame: Some(frame) }
    }
}

impl<E: Env> Shard<E> {
    /// A fetch (see the module); `cancel` ends its wait.
    pub(crate) async fn fetch_messages(
        &self,
        client: u128,
        request: &FetchRequest,
        cancel: Option<Rc<event_listener::Event>>,
    ) -> BusReply {
        let (stream_id, topic_id, _) = self.resolve_topic(&request.topic)?;
        if let Consumer::Group(group) = &request.consumer {
            self.resolve_group(&request.topic, group)?;
        }
        if request.wait_us == 0 {
            return Ok(self.read_sections(client, request, request.auto_commit).await.into_reply(self));
        }
        let waiting = WaitingPoll::enter(self)?;
        let deadline = self.monotonic_us().saturating_add(request.wait_us);
        let stats: Vec<_> = (request.targets.iter())
            .filter_map(|target| Namespace::new(stream_id, topic_id, target.partition_id))
            .filter_map(|namespace| self.shared.partitions.stats(namespace))
            .collect();
        loop {
            // Listening before the probe: an append between the two still wakes the wait.
            let appended: Vec<_> = stats.iter().map(|stats| stats.appended.listen()).collect();
            let cancelled = cancel.as_ref().map(|event| event.listen());
            let probe = self.read_sections(client, request, false).await;
            if probe.messages() >= request.min_count || appended.is_empty() {
                if !request.auto_commit {
                    return Ok(probe.into_reply(self));
                }
                break;
            }
            drop(probe);
            if !self.woken_before(select_all(appended), deadline, cancelled).await {
                break;
            }
        }
        drop(waiting);
        Ok(self.read_sections(client, request, request.auto_commit).await.into_reply(self))
    }

    /// Reads the targets in order while the budgets last; a target refused (no such
    /// partition, another history, not the member's) gets its error in its section.
    async fn read_sections(&self, client: u128, request: &FetchRequest, auto_commit: bool) -> Sections {
        let mut sections = Sections(Vec::with_capacity(request.targets.len()));
        let (mut messages_left, mut bytes_left) = (request.count, (request.max_bytes as usize).min(MAX_POLL_BYTES));
        for target in &request.targets {
            if messages_left == 0 || bytes_left < MIN_READ_BYTES {
                break;
            }
            let limit = PollLimit { messages: messages_left, bytes: bytes_left.min(target.max_bytes as usize) };
            let section = match self.read_target(client, request, target, limit, auto_commit).await {
                Ok(Reply::Frame(frame)) => Section::read(target.partition_id, frame),
                Ok(_) => Section::refused(target.partition_id, ErrorCode::Error),
                Err(code) => Section::refused(target.partition_id, code),
            };
            messages_left = messages_left.saturating_sub(section.header.messages_count);
            bytes_left = bytes_left.saturating_sub(section.header.records_len as usize);
            sections.0.push(section);
        }
        sections
    }

    async fn read_target(
        &self,
        client: u128,
        request: &FetchRequest,
        target: &FetchTarget,
        limit: PollLimit,
        auto_commit: bool,
    ) -> BusReply {
        if let Consumer::Group(group) = &request.consumer {
            let key = self.resolve_group(&request.topic, group)?;
            if !self.owns_group_partition(key, client, target.partition_id) {
                return Err(ErrorCode::ConsumerGroupPartitionNotOwned);
            }
        }
        let namespace = self.resolve_partition(&request.topic, target.partition_id)?;
        if let Some(stats) = self.shared.partitions.stats(namespace)
            && target.incarnation != 0
            && target.incarnation != stats.incarnation()
        {
            return Err(ErrorCode::HistoryUnavailable);
        }
        let key = self.consumer_key(&request.consumer, &request.topic)?;
        let op = PartitionOp::Poll { key, strategy: target.strategy, limit, auto_commit };
        self.route_partition(namespace, op, None).await
    }
}

/// The sections of one read of a fetch's targets.
struct Sections(Vec<Section>);

impl Sections {
    fn messages(&self) -> u32 {
        self.0.iter().map(|section| section.header.messages_count).sum()
    }

    /// `[count u32][section headers][each section's batches, in table order]` after the
    /// room for the reply header.
    fn into_reply<E: Env>(self, shard: &Shard<E>) -> Reply {
        let table = 4 + self.0.len() * SECTION_HEADER_SIZE;
        let records: usize = self.0.iter().map(|section| section.header.records_len as usize).sum();
        let mut frame = shard.shared.pool.acquire(HEADER_SIZE + table + records);
        frame[HEADER_SIZE..HEADER_SIZE + 4].copy_from_slice(&(self.0.len() as u32).to_le_bytes());
        let (mut entry, mut at) = (HEADER_SIZE + 4, HEADER_SIZE + table);
        for section in &self.0 {
            section.header.encode(&mut frame[entry..entry + SECTION_HEADER_SIZE]);
            entry += SECTION_HEADER_SIZE;
            if let Some(read) = &section.frame {
                let batches = &read[REPLY_ROOM..];
                frame[at..at + batches.len()].copy_from_slice(batches);
                at += batches.len();
            }
        }
        Reply::Frame(frame.whole())
    }
}
