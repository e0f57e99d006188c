//! Protocol 0.12 sessions that outlive their connection: a 0.12 login gives its session a
//! 32-byte bind secret, and a client that lost its connection sends BIND_SESSION with the
//! session, its client id and that secret to go on with the session on a new connection. A
//! session whose connection closed is kept for [`RETAIN_US`]; a logout, or a bind that
//! proves nothing, ends nothing else.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::session_replies::SessionReplies;

/// How long a session is kept after its connection closed.
pub const RETAIN_US: u64 = 5 * 60 * 1_000_000;
/// The most sessions kept without a connection; past it the longest released goes first.
pub const MAX_RELEASED: usize = 100_000;

#[derive(Debug, Clone)]
struct Retained {
    client: u128,
    user_id: u32,
    secret: [u8; 32],
    /// The connection holding the session now (its client id), if any.
    holder: Option<u32>,
    released_at_us: u64,
    /// The replies its replicated requests got, for a client that sends one again.
    replies: Arc<SessionReplies>,
}

/// The 0.12 sessions of this process, by session number.
#[derive(Debug, Default)]
pub struct RetainedSessions {
    sessions: Mutex<HashMap<u64, Retained>>,
}

/// Compares secrets without stopping at the first difference.
fn same_secret(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

impl RetainedSessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Retained>> {
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a 0.12 login's session, held by connection `holder`; the store of its replies.
    pub fn open(
        &self,
        session: u64,
        client: u128,
        user_id: u32,
        secret: [u8; 32],
        holder: u32,
        now_us: u64,
    ) -> Arc<SessionReplies> {
        let mut sessions = self.lock();
        Self::sweep(&mut sessions, now_us);
        let replies = Arc::new(SessionReplies::default());
        let retained =
            Retained { client, user_id, secret, holder: Some(holder), released_at_us: 0, replies: replies.clone() };
        sessions.insert(session, retained);
        replies
    }

    /// Connection `holder` closed: its session waits for a bind.
    pub fn release(&self, session: u64, holder: u32, now_us: u64) {
        let mut sessions = self.lock();
        if let Some(retained) = sessions.get_mut(&session)
            && retained.holder == Some(holder)
        {
            retained.holder = None;
            retained.released_at_us = now_us;
        }
    }

    /// A logout: the session ends.
    pub fn close(&self, session: u64) {
        self.lock().remove(&session);
    }

    /// Hands `session` to connection `holder` when `client` and `secret` are the session's
    /// (taking it from a connection that may not have noticed it is gone); the session's
    /// user and replies. `None` for a session this process does not know, or one not proven.
    pub fn bind(
        &self,
        session: u64,
        client: u128,
        secret: &[u8; 32],
        holder: u32,
        now_us: u64,
    ) -> Option<(u32, Arc<SessionReplies>)> {
        let mut sessions = self.lock();
        Self::sweep(&mut sessions, now_us);
        let retained = sessions.get_mut(&session)?;
        if retained.client != client || !same_secret(&retained.secret, secret) {
            return None;
        }
        retained.holder = Some(holder);
        Some((retained.user_id, retained.replies.clone()))
    }

    /// Forgets released sessions past [`RETAIN_US`], and the longest released past
    /// [`MAX_RELEASED`].
    fn sweep(sessions: &mut HashMap<u64, Retained>, now_us: u64) {
        sessions.retain(|_, retained| retained.holder.is_some() || retained.released_at_us + RETAIN_US > now_us);
        let released = sessions.values().filter(|retained| retained.holder.is_none()).count();
        if released > MAX_RELEASED {
            let mut oldest: Vec<(u64, u64)> = (sessions.iter())
                .filter(|(_, retained)| retained.holder.is_none())
                .map(|(session, retained)| (retained.released_at_us, *session))
                .collect();
            oldest.sort_unstable();
            for (_, session) in oldest.into_iter().take(released - MAX_RELEASED) {
                sessions.remove(&session);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: [u8; 32] = [7; 32];

    #[test]
    fn a_released_session_binds_again_with_its_client_and_secret() {
        let sessions = RetainedSessions::default();
        sessions.open(9, 1, 4, SECRET, 100, 0);
        sessions.release(9, 100, 10);
        assert_eq!(sessions.bind(9, 2, &SECRET, 101, 20).map(|(user, _)| user), None, "another client");
        assert_eq!(sessions.bind(9, 1, &[8; 32], 101, 20).map(|(user, _)| user), None, "another secret");
        assert_eq!(sessions.bind(8, 1, &SECRET, 101, 20).map(|(user, _)| user), None, "another session");
        assert_eq!(sessions.bind(9, 1, &SECRET, 101, 20).map(|(user, _)| user), Some(4));
        sessions.release(9, 100, 30);
        assert_eq!(
            sessions.bind(9, 1, &SECRET, 102, 40 + RETAIN_US).map(|(user, _)| user),
            Some(4),
            "the old holder released nothing"
        );
    }

    #[test]
    fn sessions_end_at_logout_and_after_the_retention() {
        let sessions = RetainedSessions::default();
        sessions.open(1, 1, 0, SECRET, 100, 0);
        sessions.close(1);
        assert_eq!(sessions.bind(1, 1, &SECRET, 101, 1).map(|(user, _)| user), None);
        sessions.open(2, 1, 0, SECRET, 100, 0);
        sessions.release(2, 100, 10);
        assert_eq!(sessions.bind(2, 1, &SECRET, 101, 10 + RETAIN_US).map(|(user, _)| user), None);
        assert!(sessions.is_empty());
    }
}
