//! Protocol 0.12's deferred polls (POLL_MESSAGES_DEFERRED with a wait): a poll that finds
//! fewer than `min_count` messages waits, up to `wait_us`, for the append that brings them
//! (`PartitionStats::appended`, notified by the owner on any shard), then answers with what
//! there is. A CANCEL_DEFERRED_REQUEST naming it ends the wait at once, answered the same
//! way. Each shard holds at most [`MAX_WAITING_POLLS`] waiting polls; one more is refused
//! with DeferredPollCapacityExceeded (90).
//!
//! While it waits, a poll only probes without committing: a poll with auto-commit commits
//! once, in the poll that answers, so no message is committed that the reply does not hold.

use std::cell::Cell;
use std::rc::Rc;

use futures_util::future::{Either, select};
use rill_domain::answer::Answer;
use rill_domain::constants::HEADER_SIZE;
use rill_domain::error::ErrorCode;
use rill_domain::wire::command::PollRequest;

use crate::ports::{BusReply, Clock, Env, Reply};
use crate::shard::Shard;

/// Waiting polls a shard holds at once.
pub const MAX_WAITING_POLLS: u32 = 4096;

/// Counts a waiting poll or fetch for as long as it lives.
pub(super) struct WaitingPoll<'a>(&'a Cell<u32>);

impl<'a> WaitingPoll<'a> {
    /// Counts one more waiting poll on `shard`, or refuses it past [`MAX_WAITING_POLLS`].
    pub(super) fn enter<E: Env>(shard: &'a Shard<E>) -> Result<Self, ErrorCode> {
        let waiting = &shard.waiting_polls;
        if waiting.get() >= MAX_WAITING_POLLS {
            return Err(ErrorCode::DeferredPollCapacityExceeded);
        }
        waiting.set(waiting.get() + 1);
        Ok(Self(waiting))
    }
}

impl Drop for WaitingPoll<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// How many messages a poll's reply holds; `None` for a reply that must go out as it is
/// (a consumer-group member told to sync first).
fn polled_messages(reply: &Reply) -> Option<u32> {
    match reply {
        Reply::Frame(frame) => {
            let prefix = frame.get(HEADER_SIZE..crate::partition::REPLY_ROOM)?;
            Some(rill_domain::wire::response::read_poll_head(prefix.try_into().ok()?).messages_count)
        }
        Reply::Answer(Answer::EmptyPoll(head)) if head.partition_id == super::messages::RESYNC_PARTITION => None,
        Reply::Answer(Answer::EmptyPoll(head)) => Some(head.messages_count),
        _ => None,
    }
}

impl<E: Env> Shard<E> {
    /// Waits for `woken` until the monotonic `deadline` or until `cancelled` fires; whether
    /// `woken` came first.
    pub(super) async fn woken_before(
        &self,
        woken: impl Future + Unpin,
        deadline: u64,
        cancelled: Option<event_listener::EventListener>,
    ) -> bool {
        let left = deadline.saturating_sub(self.monotonic_us());
        if left == 0 {
            return false;
        }
        let timer = self.clock.sleep_us(left);
        let ended = std::pin::pin!(async move {
            match cancelled {
                Some(cancelled) => drop(select(std::pin::pin!(timer), cancelled).await),
                None => timer.await,
            }
        });
        matches!(select(woken, ended).await, Either::Left(_))
    }

    /// A poll that may wait for its messages (see the module). `cancel` ends the wait.
    pub(crate) async fn poll_deferred(
        &self,
        client: u128,
        request: &PollRequest,
        cancel: Option<Rc<event_listener::Event>>,
    ) -> BusReply {
        let Some(deferred) = request.deferred.filter(|deferred| deferred.wait_us > 0) else {
            return self.poll_messages(client, request).await;
        };
        let namespace = self.resolve_partition(&request.topic, request.partition_id.unwrap_or(0))?;
        let Some(stats) = self.shared.partitions.stats(namespace) else {
            return self.poll_messages(client, request).await;
        };
        let _waiting = WaitingPoll::enter(self)?;
        let deadline = self.monotonic_us().saturating_add(deferred.wait_us);
        let probe = PollRequest { auto_commit: false, ..request.clone() };
        loop {
            // Listening before the probe: an append between the two still wakes the wait.
            let appended = stats.appended.listen();
            let cancelled = cancel.as_ref().map(|event| event.listen());
            let reply = self.poll_messages(client, &probe).await?;
            match polled_messages(&reply) {
                Some(count) if count < deferred.min_count => drop(reply),
                _ if request.auto_commit => break,
                _ => return Ok(reply),
            }
            if !self.woken_before(appended, deadline, cancelled).await {
                break;
            }
        }
        self.poll_messages(client, request).await
    }
}
