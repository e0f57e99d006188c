//! The replica plane over TCP, on shard 0's event loop: each node listens on its roster
//! address for peers and keeps one outbound connection to every other replica. Every
//! connection first runs the handshake (`handshake.rs`: the pre-shared key proven both
//! ways), inside TLS when `[cluster.tls]` is on, where the proofs also sign the TLS
//! session's channel binding (`link.rs`); a peer that fails it is refused and logged,
//! and nothing it sent reaches the replica. Messages are the domain codec's
//! self-delimiting, checksummed frames. Sending never blocks: each peer has a bounded queue
//! drained by its own task, which reconnects after a failure; what does not fit is dropped,
//! as the protocol expects of a network.

pub mod handshake;
mod link;

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use compio::net::{TcpListener, TcpStream};
use futures_rustls::rustls::{ClientConfig, ServerConfig};
use rill_application::ports::ReplicaNetwork;
use rill_domain::vsr::{Message, decode_message, encode_message, frame_len};

use handshake::{Acceptor, CHALLENGE_LEN, Dialer, HELLO_LEN, Keys, Refusal, TAG_LEN};
use link::Link;

/// Messages queued for one peer at most; beyond it new messages are dropped.
const QUEUE_MAX: usize = 4096;
/// Pause before dialing a peer again after a failed connection.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// Pause after a peer refused the handshake: a misconfigured node retries slowly.
const REFUSED_DELAY: Duration = Duration::from_secs(1);
/// TLS and the handshake must be done within this, or the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The same refusal from the same address is logged at most this often.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Distinct (address, reason) pairs remembered for that; past it the memory starts afresh.
const REFUSALS_REMEMBERED: usize = 1024;
/// Connections still in their handshake at most; more are closed at once, so a flood of
/// connections to the replica port holds no more than this many tasks and sockets.
const HANDSHAKES_MAX: usize = 64;

/// What the plane calls for every message that arrives.
pub type Handler = Rc<dyn Fn(Message) -> Pin<Box<dyn Future<Output = ()>>>>;

/// What the plane calls when a peer's admitted connection opens (`true`) or closes.
pub type Presence = Rc<dyn Fn(u8, bool)>;

/// How connections prove themselves: the keys, and TLS both ways when it is on (this
/// node's server and client configurations).
#[derive(Clone)]
pub struct Security {
    pub keys: Keys,
    pub tls: Option<(std::sync::Arc<ServerConfig>, std::sync::Arc<ClientConfig>)>,
}

/// One peer's outbound queue and the signal that wakes its sender task.
struct Peer {
    queue: RefCell<VecDeque<Vec<u8>>>,
    ready: async_lock::Semaphore,
}

/// The sending side, handed to the application as its `ReplicaNetwork`.
pub struct TcpReplicaNetwork {
    peers: Vec<Option<Rc<Peer>>>,
}

impl ReplicaNetwork for TcpReplicaNetwork {
    fn send(&self, to: u8, message: Message) {
        let Some(Some(peer)) = self.peers.get(to as usize) else { return };
        let mut queue = peer.queue.borrow_mut();
        if queue.len() >= QUEUE_MAX {
            return;
        }
        queue.push_back(encode_message(&message));
        drop(queue);
        peer.ready.add_permits(1);
    }
}

/// Binds this node's replica address; a taken port fails with a message naming it.
pub async fn bind(address: &str) -> io::Result<TcpListener> {
    TcpListener::bind(address)
        .await
        .map_err(|error| io::Error::new(error.kind(), format!("replica plane cannot bind {address}: {error}")))
}

/// Starts one sender task per other replica in `roster` (indexed by replica id) and
/// returns the network to send through.
pub fn connect(roster: Vec<String>, replica_id: u8, security: Security) -> TcpReplicaNetwork {
    let peers = roster
        .into_iter()
        .enumerate()
        .map(|(index, address)| {
            (index != replica_id as usize).then(|| {
                let peer = Rc::new(Peer { queue: RefCell::new(VecDeque::new()), ready: async_lock::Semaphore::new(0) });
                let dial = Dial { address, me: replica_id, them: index as u8, security: security.clone() };
                compio::runtime::spawn(sender(peer.clone(), dial)).detach();
                peer
            })
        })
        .collect();
    TcpReplicaNetwork { peers }
}

/// Refusals already logged, so a misconfigured node retrying does not flood the log.
#[derive(Default)]
struct RefusalLog(RefCell<HashMap<(IpAddr, String), LoggedRefusal>>);

/// When a refusal was last logged, and how many times it happened since.
type LoggedRefusal = (Option<Instant>, u64);

impl RefusalLog {
    fn refused(&self, peer: SocketAddr, reason: &str) {
        let mut seen = self.0.borrow_mut();
        if seen.len() >= REFUSALS_REMEMBERED {
            seen.clear();
        }
        let entry = seen.entry((peer.ip(), reason.to_owned())).or_insert((None, 0));
        entry.1 += 1;
        if entry.0.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_INTERVAL) {
            tracing::warn!(%peer, reason, times = entry.1, "replica plane: refused a connection");
            *entry = (Some(Instant::now()), 0);
        }
    }
}

/// Serves peers' connections on `listener`: each passes TLS (when on) and the handshake,
/// then every message it sends goes to `handler`; `presence` hears of each admitted
/// connection opening and closing.
pub async fn serve(
    listener: TcpListener,
    handler: Handler,
    presence: Presence,
    security: Security,
    replica_id: u8,
    replicas: u8,
) {
    let refusals = Rc::new(RefusalLog::default());
    let handshaking = Rc::new(std::cell::Cell::new(0usize));
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                if handshaking.get() >= HANDSHAKES_MAX {
                    refusals.refused(peer, "too many connections in their handshake");
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let (handler, security, refusals) = (handler.clone(), security.clone(), refusals.clone());
                let presence = presence.clone();
                let handshaking = handshaking.clone();
                handshaking.set(handshaking.get() + 1);
                compio::runtime::spawn(async move {
                    let admitted =
                        compio::time::timeout(HANDSHAKE_TIMEOUT, admit(stream, &security, replica_id, replicas)).await;
                    handshaking.set(handshaking.get() - 1);
                    match admitted {
                        Ok(Ok((link, from))) => {
                            presence(from, true);
                            receive(link, peer, from, handler).await;
                            presence(from, false);
                        }
                        Ok(Err(reason)) => refusals.refused(peer, &reason),
                        Err(_) => refusals.refused(peer, "no handshake within 5 s"),
                    }
                })
                .detach();
            }
            Err(error) => {
                tracing::warn!(%error, "replica plane accept failed");
                compio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// The acceptor's side of a new connection: TLS, then the handshake. The verified peer's
/// replica id, or why it was refused.
async fn admit(stream: TcpStream, security: &Security, me: u8, replicas: u8) -> Result<(Link, u8), String> {
    let (mut link, binding) = match &security.tls {
        Some((server, _)) => {
            link::accept_tls(server, stream).await.map_err(|e| format!("TLS handshake failed: {e}"))?
        }
        None => (Link::Plain(stream), None),
    };
    // The magic alone first: a client that dialed this port by mistake is told apart at once
    // instead of waiting out the timeout for bytes it will never send.
    let magic: [u8; 8] = link.read_array().await.map_err(|_| Refusal::NotAReplica.to_string())?;
    if magic != handshake::MAGIC {
        return Err(Refusal::NotAReplica.to_string());
    }
    let rest: [u8; HELLO_LEN - 8] = link.read_array().await.map_err(|_| Refusal::NotAReplica.to_string())?;
    let mut hello = [0u8; HELLO_LEN];
    hello[..8].copy_from_slice(&magic);
    hello[8..].copy_from_slice(&rest);
    let (acceptor, challenge) =
        Acceptor::challenge(security.keys.clone(), (me, replicas), &hello, &binding).map_err(|r| r.to_string())?;
    link.write(challenge.to_vec()).await.map_err(|e| format!("write failed: {e}"))?;
    let proof: [u8; TAG_LEN] = link.read_array().await.map_err(|_| Refusal::WrongKey.to_string())?;
    acceptor.verify(&proof).map_err(|r| r.to_string())?;
    Ok((link, acceptor.peer))
}

/// Reads frames until the peer closes or sends something that is not a frame; a bad
/// frame ends the connection (the peer reconnects), it never reaches the replica.
async fn receive(mut link: Link, peer: SocketAddr, from: u8, handler: Handler) {
    tracing::debug!(%peer, replica = from, "replica plane: peer admitted");
    loop {
        let Ok(prefix) = link.read_array::<4>().await else { return };
        let Ok(len) = frame_len(&prefix) else {
            tracing::warn!(%peer, "replica plane: refused an oversized or malformed frame");
            return;
        };
        let Ok(rest) = link.read_vec(len - 4).await else { return };
        let mut frame = Vec::with_capacity(len);
        frame.extend_from_slice(&prefix);
        frame.extend_from_slice(&rest);
        match decode_message(&frame) {
            Ok(message) => handler(message).await,
            Err(error) => {
                tracing::warn!(%peer, ?error, "replica plane: dropped a damaged frame");
                return;
            }
        }
    }
}

/// Where and how one sender task dials its peer.
struct Dial {
    address: String,
    me: u8,
    them: u8,
    security: Security,
}

impl Dial {
    /// A connection that passed TLS (when on) and the handshake.
    async fn open(&self) -> Result<Link, DialError> {
        let stream = TcpStream::connect(self.address.as_str()).await.map_err(|_| DialError::Unreachable)?;
        let _ = stream.set_nodelay(true);
        let (mut link, binding) = match &self.security.tls {
            Some((_, client)) => {
                let host = self.address.rsplit_once(':').map_or(self.address.as_str(), |(host, _)| host);
                let tls = link::connect_tls(client, host.trim_matches(['[', ']']), stream).await;
                tls.map_err(|e| DialError::Refused(format!("TLS handshake failed: {e}")))?
            }
            None => (Link::Plain(stream), None),
        };
        let dialer = Dialer::new(self.security.keys.clone(), self.me, self.them, binding);
        let lost = |_| DialError::Refused("the peer closed the connection during the handshake".into());
        link.write(dialer.hello().to_vec()).await.map_err(lost)?;
        let challenge: [u8; CHALLENGE_LEN] = link.read_array().await.map_err(lost)?;
        let proof = dialer.answer(&challenge).map_err(|r| DialError::Refused(r.to_string()))?;
        link.write(proof.to_vec()).await.map_err(lost)?;
        Ok(link)
    }
}

enum DialError {
    Unreachable,
    Refused(String),
}

/// Drains one peer's queue over a connection, dialing again whenever it breaks. A
/// message whose write failed is dropped; the protocol re-sends what matters.
async fn sender(peer: Rc<Peer>, dial: Dial) {
    let mut connection: Option<Link> = None;
    let mut last_refusal: Option<(String, Instant)> = None;
    loop {
        peer.ready.acquire().await.forget();
        let Some(frame) = peer.queue.borrow_mut().pop_front() else { continue };
        if connection.is_none() {
            let opened = compio::time::timeout(HANDSHAKE_TIMEOUT, dial.open()).await;
            match opened {
                Ok(Ok(link)) => connection = Some(link),
                failed => {
                    // Peer down or refusing: drop what is queued rather than deliver stale
                    // messages later (spare permits only make the loop find an empty queue).
                    peer.queue.borrow_mut().clear();
                    let reason = match failed {
                        Ok(Err(DialError::Refused(reason))) => Some(reason),
                        Err(_) => Some("no handshake within 5 s".to_owned()),
                        _ => None,
                    };
                    let Some(reason) = reason else {
                        compio::time::sleep(RECONNECT_DELAY).await;
                        continue;
                    };
                    let repeat = last_refusal
                        .as_ref()
                        .is_some_and(|(last, at)| *last == reason && at.elapsed() < REFUSAL_LOG_INTERVAL);
                    if !repeat {
                        tracing::warn!(peer = %dial.address, reason, "replica plane: cannot join peer");
                        last_refusal = Some((reason, Instant::now()));
                    }
                    compio::time::sleep(REFUSED_DELAY).await;
                    continue;
                }
            }
        }
        if let Some(link) = connection.as_mut()
            && link.write(frame).await.is_err()
        {
            connection = None;
        }
    }
}
