//! A client connection as the application sees it, apart from its socket: the session a
//! login bound to it, where its partition traffic goes, and what a transport does with a
//! request's result.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use rill_domain::affinity::Affinity;
use rill_domain::version::Dialect;
use rill_domain::wire::codes::code;

use crate::memory_pool::PoolSlice;
use crate::ports::ReplySocket;
use crate::session_replies::SessionReplies;

/// A session bound to a connection by a successful login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundSession {
    pub client: u128,
    pub session: u64,
    pub user_id: u32,
}

/// Who runs a request: the client and connection it came from (both 0 through a
/// connectionless gateway) and the authenticated user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caller {
    pub client: u128,
    pub client_id: u32,
    pub user_id: u32,
    /// The session of the caller's login (0 through a gateway).
    pub session: u64,
    /// The protocol generation the caller speaks (0.11's layouts through a gateway).
    pub dialect: Dialect,
}

/// Per-connection state a transport keeps and passes to every `handle` call. The session
/// sits in a `Cell` so requests of one connection may run concurrently on its shard (QUIC
/// serves each stream independently); a login or logout replaces it whole.
#[derive(Debug)]
pub struct Connection {
    pub client_id: u32,
    bound: Cell<Option<BoundSession>>,
    /// Where its partition requests went lately (see `rill_domain::affinity`).
    affinity: Cell<Affinity>,
    /// The shard this connection should move to, once its transport can move it.
    move_to: Cell<Option<u16>>,
    /// The coordinator login (client, session) whose group identity this data connection
    /// polls with (ATTACH_CONSUMER_SESSION, multi-node routing).
    attached: Cell<Option<(u128, u64)>>,
    /// The socket a partition's owner on another shard may write a send's reply to.
    reply_socket: Option<Arc<dyn ReplySocket>>,
    /// The protocol generation the connection's login chose (0.11 until one does).
    dialect: Cell<Dialect>,
    /// Its deferred polls waiting now, by request number: a CANCEL_DEFERRED_REQUEST naming
    /// one notifies it.
    waiting: RefCell<HashMap<u64, Rc<event_listener::Event>>>,
    /// Requests served beside the connection's loop whose replies are not yet written
    /// (see [`Connection::may_wait`]); owners on other shards do not write to the socket
    /// then, so no two replies interleave.
    detached: Cell<u32>,
    /// Its 0.12 session's kept replies (none for a 0.11 login).
    replies: RefCell<Option<Arc<SessionReplies>>>,
}

/// What a connection is, apart from its socket: enough to go on serving it on another shard.
#[derive(Debug, Clone)]
pub struct ConnectionState {
    pub client_id: u32,
    pub bound: Option<BoundSession>,
    pub attached: Option<(u128, u64)>,
    pub dialect: Dialect,
    pub replies: Option<Arc<SessionReplies>>,
}

/// Equal when every field is, the replies by identity (the same session's store).
impl PartialEq for ConnectionState {
    fn eq(&self, other: &Self) -> bool {
        let same_replies = match (&self.replies, &other.replies) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        (self.client_id, self.bound, self.attached, self.dialect)
            == (other.client_id, other.bound, other.attached, other.dialect)
            && same_replies
    }
}

impl Eq for ConnectionState {}

impl Connection {
    pub fn new(client_id: u32) -> Self {
        Self::resume(ConnectionState { client_id, bound: None, attached: None, dialect: Dialect::V11, replies: None })
    }

    /// A connection moved from another shard, logged in as it was there.
    pub fn resume(state: ConnectionState) -> Self {
        let ConnectionState { client_id, bound, attached, dialect, replies } = state;
        let attached = Cell::new(attached);
        Self {
            client_id,
            bound: Cell::new(bound),
            affinity: Cell::default(),
            move_to: Cell::new(None),
            attached,
            reply_socket: None,
            dialect: Cell::new(dialect),
            waiting: RefCell::default(),
            detached: Cell::new(0),
            replies: RefCell::new(replies),
        }
    }

    /// Lets the owners of the partitions this connection sends to write their replies to
    /// `socket` themselves.
    pub fn with_reply_socket(mut self, socket: Arc<dyn ReplySocket>) -> Self {
        self.reply_socket = Some(socket);
        self
    }

    pub fn state(&self) -> ConnectionState {
        ConnectionState {
            client_id: self.client_id,
            bound: self.bound.get(),
            attached: self.attached.get(),
            dialect: self.dialect.get(),
            replies: self.replies.borrow().clone(),
        }
    }

    /// The protocol generation this connection speaks.
    pub fn dialect(&self) -> Dialect {
        self.dialect.get()
    }

    pub(crate) fn set_dialect(&self, dialect: Dialect) {
        self.dialect.set(dialect);
    }

    /// Registers deferred poll `request` as waiting; the event ends its wait.
    pub(crate) fn start_waiting(&self, request: u64) -> Rc<event_listener::Event> {
        let event = Rc::new(event_listener::Event::new());
        self.waiting.borrow_mut().insert(request, event.clone());
        event
    }

    pub(crate) fn stop_waiting(&self, request: u64) {
        self.waiting.borrow_mut().remove(&request);
    }

    /// Ends the wait of deferred poll `request`, if it waits.
    pub(crate) fn cancel_waiting(&self, request: u64) {
        if let Some(event) = self.waiting.borrow().get(&request) {
            event.notify(usize::MAX);
        }
    }

    /// Whether a deferred poll of this connection waits (a connection does not move then).
    pub fn has_waiting(&self) -> bool {
        !self.waiting.borrow().is_empty()
    }

    pub fn bound(&self) -> Option<BoundSession> {
        self.bound.get()
    }

    /// Binds the session of a successful login, replacing any earlier one.
    pub(crate) fn bind(&self, session: BoundSession) {
        self.bound.set(Some(session));
    }

    /// Unbinds its session (a logout, or a login that replaces it); the one it had.
    pub(crate) fn unbind(&self) -> Option<BoundSession> {
        self.replies.take();
        self.bound.take()
    }

    /// The kept replies of its 0.12 session.
    pub(crate) fn replies(&self) -> Option<Arc<SessionReplies>> {
        self.replies.borrow().clone()
    }

    pub(crate) fn set_replies(&self, replies: Option<Arc<SessionReplies>>) {
        *self.replies.borrow_mut() = replies;
    }

    /// The socket a partition's owner on another shard may write a send's reply to.
    pub(crate) fn reply_socket(&self) -> Option<Arc<dyn ReplySocket>> {
        if self.detached.get() > 0 {
            return None;
        }
        self.reply_socket.clone()
    }

    /// Whether request `code` with `body` may wait on this connection (a 0.12 deferred poll
    /// or fetch asking for a wait): a transport that can write from another task serves it
    /// there, so the requests behind it (PINGs among them) are not held up by its wait. A
    /// poll that asks for none (the 0.12 client's every plain poll) is served in turn.
    pub fn may_wait(&self, code: u32, body: &[u8]) -> bool {
        self.dialect.get() == Dialect::V12
            && matches!(code, code::POLL_MESSAGES_DEFERRED | code::FETCH_MESSAGES)
            && rill_domain::wire::decode::requested_wait_us(code, body).is_none_or(|wait_us| wait_us > 0)
    }

    /// Counts a request served beside the loop until [`Connection::end_detached`].
    pub fn begin_detached(&self) {
        self.detached.set(self.detached.get() + 1);
    }

    pub fn end_detached(&self) {
        self.detached.set(self.detached.get().saturating_sub(1));
    }

    /// Whether a request served beside the loop is still unanswered (the connection
    /// neither moves nor hands its socket to other shards then).
    pub fn has_detached(&self) -> bool {
        self.detached.get() > 0
    }

    /// Ends every wait of the connection's deferred polls (it is closing).
    pub fn cancel_all_waiting(&self) {
        for event in self.waiting.borrow().values() {
            event.notify(usize::MAX);
        }
    }

    pub(crate) fn attachment(&self) -> Option<(u128, u64)> {
        self.attached.get()
    }

    pub(crate) fn attach(&self, client: u128, session: u64) {
        self.attached.set(Some((client, session)));
    }

    pub(crate) fn detach(&self) {
        self.attached.set(None);
    }

    /// The shard this connection's partition traffic says it belongs on, once; a transport
    /// that can move connections asks after each reply it wrote.
    pub fn take_move(&self) -> Option<u16> {
        self.move_to.take()
    }

    pub(crate) fn record_route(&self, home: u16, owner: u16) {
        let mut affinity = self.affinity.get();
        if let Some(target) = affinity.record(home, owner) {
            self.move_to.set(Some(target));
        }
        self.affinity.set(affinity);
    }
}

/// What a transport does with the result of one request. Dropping the frame once it is
/// written gives its buffer back to the pool.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Send the frame and keep serving the connection.
    Reply(PoolSlice),
    /// Send the frame (an Eviction) and close the connection.
    Evict(PoolSlice),
}

impl Outcome {
    pub(crate) fn reply(frame: Vec<u8>) -> Self {
        Outcome::Reply(PoolSlice::plain(frame))
    }

    pub(crate) fn evict(frame: Vec<u8>) -> Self {
        Outcome::Evict(PoolSlice::plain(frame))
    }

    /// The frame to write.
    pub fn frame(&self) -> &[u8] {
        match self {
            Outcome::Reply(frame) | Outcome::Evict(frame) => frame,
        }
    }
}
