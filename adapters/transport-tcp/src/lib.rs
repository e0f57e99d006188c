//! The TCP transport: accepts connections and frames Iggy 0.11 requests (a 256-byte
//! header, then `size - 256` body bytes). Frames go to the application's dispatcher; this
//! crate knows nothing about commands.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use compio::net::{TcpListener, TcpStream};
use compio::tls::{TlsAcceptor, TlsStream};
use std::os::fd::{AsFd, OwnedFd};

use rill_application::memory_pool::{PoolBuf, PoolSlice};
use rill_application::ports::bus::{ConnectionKind, next_connection_shard};
use rill_application::ports::{ConnectionHandoff, Env};
use rill_application::{Connection, ConnectionState, Outcome, Shard, Transport};
use rill_domain::constants::HEADER_SIZE;
use rill_domain::wire::header::{EvictionReason, RequestHeader, encode_eviction, frame_size};

/// How long a start waits for a port that is still in use. A predecessor killed with
/// SIGKILL can hold its listening socket for a moment after it exits, because the kernel
/// tears io_uring rings down asynchronously; a restart must not fail on that.
const BIND_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Binds a TCP listener for `transport` (tcp or websocket); a port that stays taken fails
/// with a message naming the transport and the address.
pub async fn bind(address: &str, transport: &str) -> io::Result<TcpListener> {
    let started = std::time::Instant::now();
    loop {
        match TcpListener::bind(address).await {
            Ok(listener) => return Ok(listener),
            Err(error) if error.kind() == io::ErrorKind::AddrInUse && started.elapsed() < BIND_RETRY => {
                compio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(error) => {
                return Err(io::Error::new(
                    error.kind(),
                    format!("{transport} transport cannot bind {address}: {error}"),
                ));
            }
        }
    }
}

/// How an accepted TLS stream splits into a reader and a writer that work at the same time
/// (compio's own split would hold the stream for a whole pending read); the composition
/// root supplies it, as adapters name no other adapter.
pub type TlsSplit<R, W> = fn(TlsStream<TcpStream>) -> (R, W);

/// Accepts connections forever on shard 0 and hands each to the shard `next_connection_shard`
/// picks, by its duplicated descriptor, before a byte is read; shard 0 drops its own handle
/// at once (or serves the connection itself when it is the pick).
/// With TLS, connections stay on shard 0, where their TLS session lives.
pub async fn serve<E: Env, H: ConnectionHandoff, R: AsyncRead + 'static, W: AsyncWrite + 'static>(
    system: Rc<Shard<E>>,
    listener: TcpListener,
    handoff: H,
    tls: Option<(TlsAcceptor, TlsSplit<R, W>)>,
) {
    let mut accepted = 0u64;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Running out of descriptors must not end the listener; back off briefly.
                tracing::warn!(%error, "tcp accept failed");
                compio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        // Before any hand-off: the option belongs to the socket, so the shard that serves
        // it inherits it. Without it a reply's last partial segment waits for the client's
        // (possibly delayed) ACK of the ones before it.
        let _ = stream.set_nodelay(true);
        if let Some((acceptor, split)) = tls.clone() {
            let system = system.clone();
            compio::runtime::spawn(async move {
                match acceptor.accept(stream).await {
                    Ok(tls_stream) => serve_tls(system, tls_stream, split, peer).await,
                    // Plaintext sent to a TLS port lands here: the connection just closes.
                    Err(error) => tracing::debug!(%peer, %error, "tcp TLS handshake failed"),
                }
            })
            .detach();
            continue;
        }
        let target = next_connection_shard(accepted, system.shard_count());
        accepted += 1;
        if target == system.shard_id() {
            spawn_connection(system.clone(), stream, peer);
            continue;
        }
        let fd = match stream.as_fd().try_clone_to_owned() {
            Ok(fd) => fd,
            Err(error) => {
                tracing::warn!(%error, "cannot duplicate an accepted socket; serving it on shard 0");
                spawn_connection(system.clone(), stream, peer);
                continue;
            }
        };
        drop(stream);
        if let Err(fd) = handoff.hand_off(target, fd, peer, ConnectionKind::Tcp).await {
            tracing::warn!(target, "shard refused a connection; serving it on shard 0");
            adopt(system.clone(), fd, peer, None);
        }
    }
}

/// Serves a connection handed over by shard 0, or moved here by a peer shard together with
/// its session (`moved`).
pub fn adopt<E: Env>(system: Rc<Shard<E>>, fd: OwnedFd, peer: SocketAddr, moved: Option<ConnectionState>) {
    match TcpStream::from_std(std::net::TcpStream::from(fd)) {
        Ok(stream) => {
            compio::runtime::spawn(async move { serve_plain(system, stream, peer, moved).await }).detach();
        }
        Err(error) => tracing::warn!(%peer, %error, "cannot adopt a handed-off connection"),
    }
}

fn spawn_connection<E: Env>(system: Rc<Shard<E>>, stream: TcpStream, peer: SocketAddr) {
    compio::runtime::spawn(async move { serve_plain(system, stream, peer, None).await }).detach();
}

/// How a run of requests on one connection ended.
enum Ended {
    /// The peer closed it, or the dispatcher evicted the session.
    Closed,
    /// Between two requests: the connection belongs on this other shard.
    Moving(u16),
}

/// Serves one plaintext connection. Between requests it may move to the shard owning the
/// partitions it keeps using; if that shard cannot take it, it stays here.
async fn serve_plain<E: Env>(
    system: Rc<Shard<E>>,
    mut stream: TcpStream,
    peer: SocketAddr,
    moved: Option<ConnectionState>,
) {
    let connection = match moved {
        Some(state) => system.resume_connection(state),
        None => match register(&system, &mut stream, peer).await {
            Some(connection) => connection,
            None => return,
        },
    };
    // Owners on other shards write send replies to a duplicate of the socket; it keeps the
    // socket open while one of them still holds it.
    let connection = match stream.as_fd().try_clone_to_owned() {
        Ok(fd) => connection.with_reply_socket(std::sync::Arc::new(PlainSocket(fd))),
        Err(_) => connection,
    };
    // A socket reads and writes independently: the loop reads on one handle of it while
    // replies go out on another.
    let mut reader = stream.clone();
    let replies = Replies::new(stream, connection);
    let connection = &*replies.connection;
    let mut unbound_since = Instant::now();
    loop {
        match request_loop(&system, &mut reader, &replies, true, &mut unbound_since).await {
            Ok(Ended::Moving(target)) => {
                let Ok(fd) = reader.as_fd().try_clone_to_owned() else { continue };
                if system.move_connection(target, fd, peer, ConnectionKind::MovedTcp(connection.state())).await.is_ok()
                {
                    let (client_id, from) = (connection.client_id, system.shard_id());
                    tracing::info!(client_id, %peer, from, shard = target, "client moved");
                    return;
                }
            }
            Ok(Ended::Closed) => break,
            Err(error) => {
                tracing::debug!(%peer, %error, "connection closed");
                break;
            }
        }
    }
    connection.cancel_all_waiting();
    system.on_disconnect(connection.client_id).await;
}

/// Serves one TLS connection until the peer closes it, a frame is malformed, or the
/// dispatcher evicts the session; it cannot move (its TLS session lives on this shard).
/// The stream is split (by `split`) so that replies to waiting requests go out while the
/// next request is read.
async fn serve_tls<E: Env, R: AsyncRead, W: AsyncWrite + 'static>(
    system: Rc<Shard<E>>,
    mut stream: TlsStream<TcpStream>,
    split: TlsSplit<R, W>,
    peer: SocketAddr,
) {
    let Some(connection) = register(&system, &mut stream, peer).await else { return };
    let (mut reader, writer) = split(stream);
    let replies = Replies::new(writer, connection);
    let mut unbound_since = Instant::now();
    if let Err(error) = request_loop(&system, &mut reader, &replies, false, &mut unbound_since).await {
        tracing::debug!(%peer, %error, "connection closed");
    }
    replies.connection.cancel_all_waiting();
    system.on_disconnect(replies.connection.client_id).await;
}

/// The write side of a connection and the connection itself, shared by its request loop
/// and the tasks serving its waiting requests (see [`Connection::may_wait`]). Every reply
/// is written whole under the lock, so none interleave.
struct Replies<W> {
    writer: Rc<async_lock::Mutex<W>>,
    connection: Rc<Connection>,
}

impl<W: AsyncWrite + 'static> Replies<W> {
    fn new(writer: W, connection: Connection) -> Self {
        Self { writer: Rc::new(async_lock::Mutex::new(writer)), connection: Rc::new(connection) }
    }

    /// Writes `reply` once no other reply is being written.
    async fn write(&self, reply: PoolSlice) -> io::Result<()> {
        write_reply(&mut *self.writer.lock().await, reply).await
    }

    /// Serves `frame` in its own task; its reply is written when it is ready.
    fn spawn_waiting<E: Env>(&self, system: &Rc<Shard<E>>, frame: PoolBuf) {
        let (system, writer, connection) = (system.clone(), self.writer.clone(), self.connection.clone());
        connection.begin_detached();
        compio::runtime::spawn(async move {
            let reply = match system.handle(&connection, frame).await {
                Outcome::Reply(frame) | Outcome::Evict(frame) => frame,
            };
            if let Err(error) = write_reply(&mut *writer.lock().await, reply).await {
                tracing::debug!(%error, "a waiting request's reply was not written");
            }
            connection.end_detached();
        })
        .detach();
    }
}

/// Registers a new connection, or refuses it with an Eviction when the server already
/// serves its `max_connections`.
async fn register<E: Env, S: AsyncWrite>(system: &Shard<E>, stream: &mut S, peer: SocketAddr) -> Option<Connection> {
    let Some(client_id) = system.connect(peer.to_string(), Transport::Tcp) else {
        let _ = stream.write_all(encode_eviction(1, EvictionReason::SessionError, (0, 0))).await;
        let _ = stream.flush().await;
        return None;
    };
    tracing::info!(client_id, %peer, shard = system.shard_id(), "client connected");
    Some(Connection::new(client_id))
}

/// Runs `future` within `timeout_us` (`None`: without a limit).
async fn within<T>(timeout_us: Option<u64>, future: impl Future<Output = T>) -> Option<T> {
    match timeout_us {
        None => Some(future.await),
        Some(timeout_us) => compio::time::timeout(Duration::from_micros(timeout_us), future).await.ok(),
    }
}

/// Writes a last Eviction frame (best effort) and ends the connection with `why`.
async fn evict<W: AsyncWrite + 'static>(replies: &Replies<W>, reason: EvictionReason, why: &str) -> io::Error {
    let client = replies.connection.bound().map_or(1, |bound| bound.client);
    let mut writer = replies.writer.lock().await;
    let _ = writer.write_all(encode_eviction(client, reason, (0, 0))).await;
    let _ = writer.flush().await;
    io::Error::new(io::ErrorKind::TimedOut, why.to_owned())
}

/// Serves requests until the connection closes or, when it is `movable`, until it should
/// move to another shard (asked between requests, with nothing of the next one read and no
/// reply outstanding). Requests that may wait are served beside the loop; every other one
/// is answered in turn.
/// Limits: a header must arrive within the idle limit (logged in) or what is left of the
/// login timeout since `unbound_since` (no session); a body within the frame timeout; no
/// frame may exceed the frame size limit.
async fn request_loop<E: Env, R: AsyncRead, W: AsyncWrite + 'static>(
    system: &Rc<Shard<E>>,
    reader: &mut R,
    replies: &Replies<W>,
    movable: bool,
    unbound_since: &mut Instant,
) -> io::Result<Ended> {
    let connection = &*replies.connection;
    let mut header_buf = vec![0u8; HEADER_SIZE];
    loop {
        let unbound_for_us = unbound_since.elapsed().as_micros() as u64;
        let deadline = system.header_deadline(connection, unbound_for_us);
        let Some(BufResult(result, buf)) = within(deadline.map(|(us, _)| us), reader.read_exact(header_buf)).await
        else {
            let reason = deadline.map_or(EvictionReason::StaleClient, |(_, reason)| reason);
            let why = match reason {
                EvictionReason::NoSession => "no login within the login timeout",
                _ => "connection idle past its limit",
            };
            return Err(evict(replies, reason, why).await);
        };
        header_buf = buf;
        result?;
        let header_bytes: &[u8; HEADER_SIZE] = header_buf.as_slice().try_into().expect("header buffer is 256 bytes");
        let size = frame_size(header_bytes)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, format!("{error:?}")))?;
        if size > system.max_frame_bytes() {
            return Err(evict(replies, EvictionReason::InvalidRequestBodySize, "frame over the size limit").await);
        }
        let frame = read_frame(system, reader, header_bytes, size).await?;
        if connection.may_wait(RequestHeader::parse(header_bytes).code, &frame[HEADER_SIZE..]) {
            replies.spawn_waiting(system, frame);
            continue;
        }
        let was_bound = connection.bound().is_some();
        let (reply, keep_open) = match system.handle(connection, frame).await {
            Outcome::Reply(frame) => (frame, true),
            Outcome::Evict(frame) => (frame, false),
        };
        replies.write(reply).await?;
        if !keep_open {
            return Ok(Ended::Closed);
        }
        if was_bound && connection.bound().is_none() {
            // Logged out: the login timeout starts again.
            *unbound_since = Instant::now();
        }
        if movable
            && !connection.has_detached()
            && !connection.has_waiting()
            && let Some(target) = connection.take_move()
        {
            return Ok(Ended::Moving(target));
        }
    }
}

/// Reads the body of a frame whose header is `header_bytes` into one pooled frame holding
/// both, which goes to the dispatcher by value (a send's batch moves on inside it). The
/// body must arrive within the frame timeout.
async fn read_frame<E: Env, R: AsyncRead>(
    system: &Shard<E>,
    reader: &mut R,
    header_bytes: &[u8; HEADER_SIZE],
    size: usize,
) -> io::Result<PoolBuf> {
    let mut frame = system.pool().acquire(size);
    frame[..HEADER_SIZE].copy_from_slice(header_bytes);
    if size > HEADER_SIZE {
        let (vec, home) = frame.into_vec();
        let read = within(system.frame_timeout_us(), reader.read_exact(vec.slice(HEADER_SIZE..size))).await;
        // A body that does not arrive in time: the buffer stays with the cancelled read
        // and is counted gone; the connection ends.
        let Some(BufResult(result, body)) = read else {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "frame body not received within the frame timeout"));
        };
        frame = PoolBuf::from_vec(body.into_inner(), home);
        result?;
    }
    Ok(frame)
}

/// Writes a reply as it sits in its buffer, which then goes home; an empty one was written
/// by the partition's owner (or needs none).
async fn write_reply<S: AsyncWrite>(stream: &mut S, reply: PoolSlice) -> io::Result<()> {
    let (vec, range, home) = reply.into_vec();
    if !range.is_empty() {
        let BufResult(result, vec) = stream.write_all(vec.slice(range.clone())).await;
        drop(PoolSlice::from_vec(vec.into_inner(), range, home));
        result?;
    } else {
        drop(PoolSlice::from_vec(vec, range, home));
    }
    // A TLS stream buffers records until flushed; for a plain socket this is a no-op.
    stream.flush().await
}

/// A plaintext client socket a partition's owner writes a send's reply to without waiting:
/// the client waits for that reply, so its socket's send buffer has room for it.
#[derive(Debug)]
struct PlainSocket(OwnedFd);

impl rill_application::ports::ReplySocket for PlainSocket {
    fn try_send(&self, bytes: &[u8]) -> io::Result<usize> {
        use nix::sys::socket::{MsgFlags, send};
        use std::os::fd::AsRawFd;
        let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
        send(self.0.as_raw_fd(), bytes, flags).map_err(io::Error::from)
    }
}
