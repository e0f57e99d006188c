//! The replies a 0.12 session's replicated requests got, kept so that a request its client
//! sends again after losing a connection (the same request number and request identifier,
//! after BIND_SESSION) is answered with its first result and does not run twice.
//!
//! Guarantees: a successful reply is kept until [`REPLIES_KEPT`] newer ones push it out;
//! a request is replayed only when both its number and its random identifier match. Not
//! covered: a retry that arrives while the first attempt still runs runs again (the client
//! retries only after its connection was lost and bound again, well after a send or a
//! metadata op answers), and a restart keeps no session and so no reply.

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
}

/// One session's kept replies; shared by the connections that hold the session in turn
/// (each request locks it briefly, and only one connection holds a session at a time).
#[derive(Debug, Default)]
pub struct SessionReplies {
    kept: Mutex<Kepts>,
}

impl SessionReplies {
    fn lock(&self) -> MutexGuard<'_, Kepts> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The body of the reply request `request` (identified by `checksum`) got, when it ran
    /// before and its reply is still kept.
    pub fn replay(&self, request: u64, checksum: u128) -> Option<Vec<u8>> {
        let kept = self.lock();
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
