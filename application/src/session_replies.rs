//! The replies a 0.12 session's replicated requests got, kept so that a request its client
//! sends again after losing a connection (the same request number and request identifier,
//! after BIND_SESSION) is answered with its first result and does not run twice.
//!
//! Guarantees: a successful reply is kept until [`REPLIES_KEPT`] newer ones push it out;
//! a request is replayed only when both its number and its random identifier match; a
//! request sent again while its first attempt still runs waits for that attempt, then gets
//! its reply (or, when it failed and so kept none, runs again). Not covered: a restart keeps
//! no session and so no reply (the client registers a new session and numbers afresh).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Replies kept per session: as many as a 0.12 client has in flight on a connection.
pub const REPLIES_KEPT: usize = 256;

#[derive(Debug)]
struct Kept {
    request: u64,
    checksum: u128,
    body: Vec<u8>,
}

#[derive(Debug, Default)]
struct Kepts {
    /// The highest request number kept: a request above it has not run.
    newest: u64,
    /// Ordered by request number.
    replies: VecDeque<Kept>,
    /// The requests (number, identifier) whose first attempt runs now: a few at most, as
    /// many as the client has in flight.
    running: Vec<(u64, u128)>,
}

/// One session's kept replies; shared by the connections that hold the session in turn
/// (each request locks it briefly, and only one connection holds a session at a time).
#[derive(Debug, Default)]
pub struct SessionReplies {
    kept: Mutex<Kepts>,
    /// Notified whenever an attempt ends, so the requests waiting on one look again.
    ended: event_listener::Event,
}

/// What a replicated request of the session does when it arrives (see
/// [`SessionReplies::arrive`]).
#[derive(Debug)]
pub enum Arrival<'a> {
    /// It ran before: the body of its first reply.
    Replay(Vec<u8>),
    /// Its first attempt still runs: wait for this, then arrive again.
    Wait(event_listener::EventListener),
    /// It runs now, as the attempt this guard ends when dropped.
    Run(Attempt<'a>),
}

/// A request's attempt in progress; dropping it (after a success was kept, or on a
/// failure or a cancelled request) lets a copy of the request waiting for it go on.
#[derive(Debug)]
pub struct Attempt<'a> {
    replies: &'a SessionReplies,
    request: (u64, u128),
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        self.replies.lock().running.retain(|running| *running != self.request);
        self.replies.ended.notify(usize::MAX);
    }
}

impl SessionReplies {
    fn lock(&self) -> MutexGuard<'_, Kepts> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Request `request` (identified by `checksum`) arrives: it replays its kept reply,
    /// waits for its first attempt still running, or runs.
    pub fn arrive(&self, request: u64, checksum: u128) -> Arrival<'_> {
        let mut kept = self.lock();
        if let Some(body) = Self::kept_reply(&kept, request, checksum) {
            return Arrival::Replay(body);
        }
        if kept.running.contains(&(request, checksum)) {
            // Listening before the lock is let go: the attempt's end cannot slip past.
            return Arrival::Wait(self.ended.listen());
        }
        kept.running.push((request, checksum));
        Arrival::Run(Attempt { replies: self, request: (request, checksum) })
    }

    /// The body of the reply request `request` (identified by `checksum`) got, when it ran
    /// before and its reply is still kept.
    #[cfg(test)]
    fn replay(&self, request: u64, checksum: u128) -> Option<Vec<u8>> {
        Self::kept_reply(&self.lock(), request, checksum)
    }

    fn kept_reply(kept: &Kepts, request: u64, checksum: u128) -> Option<Vec<u8>> {
        if request > kept.newest {
            return None;
        }
        let at = kept.replies.partition_point(|reply| reply.request < request);
        kept.replies
            .get(at)
            .filter(|reply| reply.request == request && reply.checksum == checksum)
            .map(|r| r.body.clone())
    }

    /// Keeps the body of a successful reply to `request`.
    pub fn keep(&self, request: u64, checksum: u128, body: &[u8]) {
        let mut kept = self.lock();
        let at = kept.replies.partition_point(|reply| reply.request < request);
        if kept.replies.get(at).is_some_and(|reply| reply.request == request) {
            return;
        }
        kept.replies.insert(at, Kept { request, checksum, body: body.to_vec() });
        kept.newest = kept.newest.max(request);
        while kept.replies.len() > REPLIES_KEPT {
            kept.replies.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_reply_is_replayed_only_to_the_same_request_and_identifier() {
        let replies = SessionReplies::default();
        assert_eq!(replies.replay(1, 7), None, "nothing ran yet");
        replies.keep(2, 7, b"two");
        replies.keep(1, 5, b"one");
        assert_eq!(replies.replay(2, 7).as_deref(), Some(&b"two"[..]));
        assert_eq!(replies.replay(1, 5).as_deref(), Some(&b"one"[..]));
        assert_eq!(replies.replay(2, 8), None, "another identifier is another request");
        assert_eq!(replies.replay(3, 7), None, "newer than any kept");
        replies.keep(2, 9, b"again");
        assert_eq!(replies.replay(2, 7).as_deref(), Some(&b"two"[..]), "the first result stays");
    }

    #[test]
    fn a_copy_arriving_while_the_first_attempt_runs_waits_for_its_reply() {
        let replies = SessionReplies::default();
        let Arrival::Run(first) = replies.arrive(4, 7) else { panic!("the first arrival runs") };
        let Arrival::Wait(waiting) = replies.arrive(4, 7) else { panic!("a copy waits for the first") };
        assert!(matches!(replies.arrive(4, 8), Arrival::Run(_)), "another identifier is another request");
        replies.keep(4, 7, b"four");
        drop(first);
        wait_for(waiting);
        match replies.arrive(4, 7) {
            Arrival::Replay(body) => assert_eq!(body, b"four"),
            other => panic!("the copy gets the first reply, not {other:?}"),
        }
    }

    #[test]
    fn a_copy_of_a_failed_attempt_runs_itself() {
        let replies = SessionReplies::default();
        let Arrival::Run(first) = replies.arrive(5, 1) else { panic!("the first arrival runs") };
        let Arrival::Wait(waiting) = replies.arrive(5, 1) else { panic!("a copy waits for the first") };
        // A failure keeps no reply.
        drop(first);
        wait_for(waiting);
        assert!(matches!(replies.arrive(5, 1), Arrival::Run(_)), "nothing kept: the copy runs");
    }

    /// Blocks until `listener` is notified (it already was, or the test would hang).
    fn wait_for(listener: event_listener::EventListener) {
        use event_listener::Listener;
        listener.wait();
    }

    #[test]
    fn only_the_newest_replies_are_kept() {
        let replies = SessionReplies::default();
        for request in 1..=(REPLIES_KEPT as u64 + 10) {
            replies.keep(request, 1, &request.to_le_bytes());
        }
        assert_eq!(replies.replay(10, 1), None);
        assert_eq!(replies.replay(11, 1), Some(11u64.to_le_bytes().to_vec()));
        assert_eq!(
            replies.replay(REPLIES_KEPT as u64 + 10, 1),
            Some((REPLIES_KEPT as u64 + 10).to_le_bytes().to_vec())
        );
    }
}
