//! The WebSocket transport: the client sends each request frame as one binary message and
//! gets each reply as one. Plaintext connections are handed to the shard picked by
//! `next_connection_shard` at accept time, like TCP ones (the upgrade happens on the
//! serving shard), and between requests they move to the shard owning the partitions they
//! use; TLS (`wss://`) stays on shard 0. The framing is this crate's own (`frame`,
//! `socket`): payloads are read straight into pooled request frames, and nothing is read
//! ahead, which is what lets a connection move by descriptor.

mod frame;
mod handshake;
mod socket;

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use compio::io::{AsyncRead, AsyncWrite};
use compio::net::{TcpListener, TcpStream};
use compio::tls::{TlsAcceptor, TlsStream};
use rill_application::memory_pool::PoolBuf;
use rill_application::ports::bus::{ConnectionKind, next_connection_shard};
use rill_application::ports::{ConnectionHandoff, Env};
use rill_application::{Connection, ConnectionState, Outcome, Shard, Transport};
use rill_domain::constants::{HEADER_SIZE, MAX_FRAME_SIZE};
use rill_domain::wire::header::{EvictionReason, RequestHeader, encode_eviction, whole_frame_header};

use socket::{End, Sender, Socket};

/// How long a new connection may take to send its upgrade request.
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(10);

/// Close codes of RFC 6455 section 7.4.1.
const CLOSE_NORMAL: u16 = 1000;
const CLOSE_PROTOCOL_ERROR: u16 = 1002;

/// How an accepted TLS stream splits into a reader and a writer that work at the same time;
/// the composition root supplies it, as adapters name no other adapter.
pub type TlsSplit<R, W> = fn(TlsStream<TcpStream>) -> (R, W);

/// Accepts WebSocket connections on shard 0: plaintext ones go by descriptor to the shard
/// `next_connection_shard` picks (possibly this one); with TLS they are served here.
pub async fn serve<E: Env, H: ConnectionHandoff, R: AsyncRead + 'static, W: AsyncWrite + 'static>(
    system: Rc<Shard<E>>,
    listener: TcpListener,
    handoff: H,
    tls: Option<(TlsAcceptor, TlsSplit<R, W>)>,
) {
    let mut accepted = 0u64;
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            compio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        // Before any hand-off, as for TCP: a reply's last partial segment must not wait for
        // the client's ACK of the ones before it.
        let _ = stream.set_nodelay(true);
        if let Some((acceptor, split)) = tls.clone() {
            let system = system.clone();
            compio::runtime::spawn(async move {
                match acceptor.accept(stream).await {
                    Ok(tls_stream) => serve_tls(system, tls_stream, split, peer).await,
                    Err(error) => tracing::debug!(%peer, %error, "websocket TLS handshake failed"),
                }
            })
            .detach();
            continue;
        }
        let target = next_connection_shard(accepted, system.shard_count());
        accepted += 1;
        let fd = match (target == system.shard_id(), stream.as_fd().try_clone_to_owned()) {
            (false, Ok(fd)) => fd,
            _ => {
                compio::runtime::spawn(serve_plain(system.clone(), stream, peer, None)).detach();
                continue;
            }
        };
        drop(stream);
        if let Err(fd) = handoff.hand_off(target, fd, peer, ConnectionKind::WebSocket).await {
            adopt(system.clone(), fd, peer, None);
        }
    }
}

/// Serves a WebSocket connection handed over by shard 0 (still before its upgrade), or
/// moved here upgraded by a peer shard together with its session (`moved`).
pub fn adopt<E: Env>(system: Rc<Shard<E>>, fd: OwnedFd, peer: SocketAddr, moved: Option<ConnectionState>) {
    match TcpStream::from_std(std::net::TcpStream::from(fd)) {
        Ok(stream) => compio::runtime::spawn(serve_plain(system, stream, peer, moved)).detach(),
        Err(error) => tracing::warn!(%peer, %error, "cannot adopt a handed-off websocket connection"),
    }
}

/// The largest message accepted: one request frame within the configured limit.
fn max_message(system: &Shard<impl Env>) -> usize {
    system.max_frame_bytes().min(MAX_FRAME_SIZE)
}

/// Answers a new connection's upgrade request; `None` when it fails or does not come in
/// time. What the client sent past its request comes back, to be read first.
async fn upgrade<S: AsyncRead + AsyncWrite>(stream: &mut S, peer: SocketAddr) -> Option<Vec<u8>> {
    match compio::time::timeout(UPGRADE_TIMEOUT, handshake::accept(stream)).await {
        Ok(Ok(carry)) => Some(carry),
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "websocket upgrade failed");
            None
        }
        Err(_elapsed) => {
            tracing::debug!(%peer, "no websocket upgrade within the limit");
            None
        }
    }
}

/// Registers the client of an upgraded connection; `None` when the server is full (it is
/// told so with an Eviction first).
async fn register<E: Env, W: AsyncWrite>(
    system: &Shard<E>,
    sender: &Sender<W>,
    peer: SocketAddr,
) -> Option<Connection> {
    let Some(client_id) = system.connect(peer.to_string(), Transport::WebSocket) else {
        let _ = sender.send_bytes(encode_eviction(1, EvictionReason::SessionError, (0, 0))).await;
        sender.close(CLOSE_NORMAL).await;
        return None;
    };
    tracing::info!(client_id, %peer, shard = system.shard_id(), transport = "websocket", "client connected");
    Some(Connection::new(client_id))
}

/// Serves a plaintext connection; between requests it may move to the shard owning the
/// partitions it keeps using (if that shard cannot take it, it stays here). The socket
/// reads and writes independently: the loop reads on one handle while replies go out on
/// another.
async fn serve_plain<E: Env>(
    system: Rc<Shard<E>>,
    mut stream: TcpStream,
    peer: SocketAddr,
    moved: Option<ConnectionState>,
) {
    let max = max_message(&system);
    let (mut socket, connection) = match moved {
        Some(state) => (Socket::new(stream.clone(), stream, Vec::new(), max), system.resume_connection(state)),
        None => {
            let Some(carry) = upgrade(&mut stream, peer).await else { return };
            let socket = Socket::new(stream.clone(), stream, carry, max);
            let Some(connection) = register(&system, socket.sender(), peer).await else { return };
            (socket, connection)
        }
    };
    let connection = Rc::new(connection);
    let mut unbound_since = Instant::now();
    loop {
        let Some(target) = request_loop(&system, &connection, &mut socket, true, &mut unbound_since).await else {
            break;
        };
        let Ok(fd) = socket.reader().as_fd().try_clone_to_owned() else { continue };
        let kind = ConnectionKind::MovedWebSocket(connection.state());
        if system.move_connection(target, fd, peer, kind).await.is_ok() {
            let (client_id, from) = (connection.client_id, system.shard_id());
            tracing::info!(client_id, %peer, from, shard = target, transport = "websocket", "client moved");
            return;
        }
    }
    connection.cancel_all_waiting();
    system.on_disconnect(connection.client_id).await;
}

/// Serves a TLS connection (`wss://`), which cannot move: its TLS session lives on this
/// shard. The stream is split after the upgrade, so replies to waiting requests go out
/// while the next request is read.
async fn serve_tls<E: Env, R: AsyncRead, W: AsyncWrite + 'static>(
    system: Rc<Shard<E>>,
    mut stream: TlsStream<TcpStream>,
    split: TlsSplit<R, W>,
    peer: SocketAddr,
) {
    let Some(carry) = upgrade(&mut stream, peer).await else { return };
    let (reader, writer) = split(stream);
    let mut socket = Socket::new(reader, writer, carry, max_message(&system));
    let Some(connection) = register(&system, socket.sender(), peer).await else { return };
    let connection = Rc::new(connection);
    let mut unbound_since = Instant::now();
    request_loop(&system, &connection, &mut socket, false, &mut unbound_since).await;
    connection.cancel_all_waiting();
    system.on_disconnect(connection.client_id).await;
}

/// Serves requests until the connection ends (`None`, the stream closed or told why) or,
/// when it is `movable`, until it should move to another shard (`Some(shard)`, asked
/// between requests with nothing of the next one read and no reply outstanding). A request
/// that may wait is served in a task of its own (see [`Connection::may_wait`]); every other
/// one in turn. Each frame must arrive within the idle limit, or what is left of the login
/// timeout while the connection has no session.
async fn request_loop<E: Env, R: AsyncRead, W: AsyncWrite + 'static>(
    system: &Rc<Shard<E>>,
    connection: &Rc<Connection>,
    socket: &mut Socket<R, W>,
    movable: bool,
    unbound_since: &mut Instant,
) -> Option<u16> {
    loop {
        let frame = read_request(system, connection, socket, unbound_since).await?;
        if let Some(header) = whole_frame_header(&frame)
            && connection.may_wait(RequestHeader::parse(header).code, &frame[HEADER_SIZE..])
        {
            spawn_waiting(system, connection, socket.sender(), frame);
            continue;
        }
        let was_bound = connection.bound().is_some();
        // A message that is not exactly one request frame ends the connection.
        let Some(outcome) = system.handle_frame(connection, frame).await else {
            socket.sender().close(CLOSE_PROTOCOL_ERROR).await;
            return None;
        };
        if was_bound && connection.bound().is_none() {
            *unbound_since = Instant::now();
        }
        let (reply, keep_open) = match outcome {
            Outcome::Reply(frame) => (frame, true),
            Outcome::Evict(frame) => (frame, false),
        };
        if socket.sender().send_reply(reply).await.is_err() {
            return None;
        }
        if !keep_open {
            socket.sender().close(CLOSE_NORMAL).await;
            return None;
        }
        if movable
            && socket.is_drained()
            && !connection.has_detached()
            && !connection.has_waiting()
            && let Some(target) = connection.take_move()
        {
            return Some(target);
        }
    }
}

/// Reads the next request frame; `None` when the connection ends (a Close, a broken frame,
/// the stream's end, or no frame within the deadline, after an Eviction).
async fn read_request<E: Env, R: AsyncRead, W: AsyncWrite>(
    system: &Shard<E>,
    connection: &Connection,
    socket: &mut Socket<R, W>,
    unbound_since: &Instant,
) -> Option<PoolBuf> {
    loop {
        let deadline = system.header_deadline(connection, unbound_since.elapsed().as_micros() as u64);
        let read = match deadline {
            Some((timeout_us, _)) => {
                compio::time::timeout(Duration::from_micros(timeout_us), socket.read_frame(system.pool())).await
            }
            None => Ok(socket.read_frame(system.pool()).await),
        };
        match read {
            Ok(Ok(Some(frame))) => return Some(frame),
            // A ping answered or a fragment collected: the wait starts again.
            Ok(Ok(None)) => continue,
            Err(_elapsed) => {
                let reason = deadline.map_or(EvictionReason::StaleClient, |(_, reason)| reason);
                let client = connection.bound().map_or(1, |bound| bound.client);
                let _ = socket.sender().send_bytes(encode_eviction(client, reason, (0, 0))).await;
                socket.sender().close(CLOSE_NORMAL).await;
                return None;
            }
            Ok(Err(end)) => {
                let client_id = connection.client_id;
                match end {
                    End::Refused(error) => {
                        tracing::debug!(client_id, ?error, "websocket frame refused");
                        socket.sender().close(error.close_code()).await;
                    }
                    End::Io(error) => tracing::debug!(client_id, %error, "websocket connection closed"),
                    End::Closed => {}
                }
                return None;
            }
        }
    }
}

/// Serves a request that may wait in its own task; its reply is sent when it is ready.
fn spawn_waiting<E: Env, W: AsyncWrite + 'static>(
    system: &Rc<Shard<E>>,
    connection: &Rc<Connection>,
    sender: &Sender<W>,
    frame: PoolBuf,
) {
    let (system, connection, sender) = (system.clone(), connection.clone(), sender.clone());
    connection.begin_detached();
    compio::runtime::spawn(async move {
        let reply = match system.handle(&connection, frame).await {
            Outcome::Reply(frame) | Outcome::Evict(frame) => frame,
        };
        if let Err(error) = sender.send_reply(reply).await {
            tracing::debug!(%error, "a waiting request's reply was not sent");
        }
        connection.end_detached();
    })
    .detach();
}
