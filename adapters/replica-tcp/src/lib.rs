//! The replica plane over TCP, on shard 0's event loop: each node listens on its roster
//! address for peers and keeps one outbound connection to every other replica. Messages
//! are the domain codec's self-delimiting, checksummed frames. Sending never blocks: each
//! peer has a bounded queue drained by its own task, which reconnects after a failure;
//! what does not fit is dropped, as the protocol expects of a network.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use compio::BufResult;
use compio::io::{AsyncReadExt, AsyncWriteExt};
use compio::net::{TcpListener, TcpStream};
use rill_application::ports::ReplicaNetwork;
use rill_domain::vsr::{Message, decode_message, encode_message, frame_len};

/// Messages queued for one peer at most; beyond it new messages are dropped.
const QUEUE_MAX: usize = 4096;
/// Pause before dialing a peer again after a failed connection.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// What the plane calls for every message that arrives.
pub type Handler = Rc<dyn Fn(Message) -> Pin<Box<dyn Future<Output = ()>>>>;

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
pub fn connect(roster: Vec<String>, replica_id: u8) -> TcpReplicaNetwork {
    let peers = roster
        .into_iter()
        .enumerate()
        .map(|(index, address)| {
            (index != replica_id as usize).then(|| {
                let peer = Rc::new(Peer { queue: RefCell::new(VecDeque::new()), ready: async_lock::Semaphore::new(0) });
                compio::runtime::spawn(sender(peer.clone(), address)).detach();
                peer
            })
        })
        .collect();
    TcpReplicaNetwork { peers }
}

/// Serves peers' connections on `listener`, handing every message to `handler`.
pub async fn serve(listener: TcpListener, handler: Handler) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                compio::runtime::spawn(receive(stream, peer, handler.clone())).detach();
            }
            Err(error) => {
                tracing::warn!(%error, "replica plane accept failed");
                compio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Reads frames until the peer closes or sends something that is not a frame; a bad
/// frame ends the connection (the peer reconnects), it never reaches the replica.
async fn receive(mut stream: TcpStream, peer: std::net::SocketAddr, handler: Handler) {
    loop {
        let BufResult(result, prefix) = stream.read_exact([0u8; 4]).await;
        if result.is_err() {
            return;
        }
        let Ok(len) = frame_len(&prefix) else {
            tracing::warn!(%peer, "replica plane: refused an oversized or malformed frame");
            return;
        };
        let BufResult(result, rest) = stream.read_exact(vec![0u8; len - 4]).await;
        if result.is_err() {
            return;
        }
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

/// Drains one peer's queue over a connection, dialing again whenever it breaks. A
/// message whose write failed is dropped; the protocol re-sends what matters.
async fn sender(peer: Rc<Peer>, address: String) {
    let mut connection: Option<TcpStream> = None;
    loop {
        peer.ready.acquire().await.forget();
        let Some(frame) = peer.queue.borrow_mut().pop_front() else { continue };
        if connection.is_none() {
            match TcpStream::connect(address.as_str()).await {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    connection = Some(stream);
                }
                Err(_) => {
                    // Peer down: drop what is queued rather than deliver stale messages later
                    // (spare permits only make the loop find an empty queue).
                    peer.queue.borrow_mut().clear();
                    compio::time::sleep(RECONNECT_DELAY).await;
                    continue;
                }
            }
        }
        if let Some(stream) = connection.as_mut() {
            let BufResult(result, _) = stream.write_all(frame).await;
            if result.is_err() {
                connection = None;
            }
        }
    }
}
