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
use compio::tls::TlsAcceptor;
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

/// Accepts connections forever on shard 0 and hands each to the shard `next_connection_shard`
/// picks, by its duplicated descriptor, before a byte is read; shard 0 drops its own handle
/// at once (or serves the connection itself when it is the pick).
/// With TLS, connections stay on shard 0, where their TLS session lives.
pub async fn serve<E: Env, H: ConnectionHandoff>(
    system: Rc<Shard<E>>,
    listener: TcpListener,
    handoff: H,
    tls: Option<TlsAcceptor>,
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
        if let Some(acceptor) = tls.clone() {
            let system = system.clone();
            compio::runtime::spawn(async move {
                match acceptor.accept(stream).await {
                    Ok(tls_stream) => serve_connection(system, tls_stream, peer).await,
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
    let detacher = Detacher { stream: Rc::new(stream), writing: Rc::default(), connection: Rc::new(connection) };
    let connection = &*detacher.connection;
    let mut unbound_since = Instant::now();
    loop {
        let mut reader = &*detacher.stream;
        match request_loop(&system, connection, &mut reader, Some(&detacher), &mut unbound_since).await {
            Ok(Ended::Moving(target)) => {
                let Ok(fd) = detacher.stream.as_fd().try_clone_to_owned() else { continue };
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

/// What serves a plaintext connection's waiting requests (see [`Connection::may_wait`])
/// beside its loop: a task per request writes the reply to the shared socket, and every
/// reply is written whole under `writing`, so none interleave.
struct Detacher {
    stream: Rc<TcpStream>,
    writing: Rc<async_lock::Mutex<()>>,
    connection: Rc<Connection>,
}

impl Detacher {
    /// Serves `frame` in its own task; its reply is written when it is ready.
    fn spawn<E: Env>(&self, system: &Rc<Shard<E>>, frame: PoolBuf) {
        let (system, stream, writing) = (system.clone(), self.stream.clone(), self.writing.clone());
        let connection = self.connection.clone();
        connection.begin_detached();
        compio::runtime::spawn(async move {
            let reply = match system.handle(&connection, frame).await {
                Outcome::Reply(frame) | Outcome::Evict(frame) => frame,
            };
            let _writing = writing.lock().await;
            let mut writer = &*stream;
            if let Err(error) = write_reply(&mut writer, reply).await {
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

/// Serves one connection that cannot move (TLS: its session lives on this shard) until the
/// peer closes it, a frame is malformed, or the dispatcher evicts the session.
pub async fn serve_connection<E: Env, S: AsyncRead + AsyncWrite>(
    system: Rc<Shard<E>>,
    mut stream: S,
    peer: SocketAddr,
) {
    let Some(connection) = register(&system, &mut stream, peer).await else { return };
    let mut unbound_since = Instant::now();
    if let Err(error) = request_loop(&system, &connection, &mut stream, None, &mut unbound_since).await {
        tracing::debug!(%peer, %error, "connection closed");
    }
    system.on_disconnect(connection.client_id).await;
}

/// Runs `future` within `timeout_us` (`None`: without a limit).
async fn within<T>(timeout_us: Option<u64>, future: impl Future<Output = T>) -> Option<T> {
    match timeout_us {
        None => Some(future.await),
        Some(timeout_us) => compio::time::timeout(Duration::from_micros(timeout_us), future).await.ok(),
    }
}

/// Writes a last Eviction frame (best effort) and ends the connection with `why`.
async fn evict<S: AsyncWrite>(stream: &mut S, connection: &Connection, reason: EvictionReason, why: &str) -> io::Error {
    let client = connection.bound().map_or(1, |bound| bound.client);
    let _ = stream.write_all(encode_eviction(client, reason, (0, 0))).await;
    let _ = stream.flush().await;
    io::Error::new(io::ErrorKind::TimedOut, why.to_owned())
}

/// Serves requests until the connection closes or, for a plaintext one (with a
/// `detacher`), until it should move to another shard (asked between requests, with
/// nothing of the next one read). With a `detacher`, requests that may wait are served
/// beside the loop; otherwise every request is answered in turn.
/// Limits: a header must arrive within the idle limit (logged in) or what is left of the
/// login timeout since `unbound_since` (no session); a body within the frame timeout; no
/// frame may exceed the frame size limit.
async fn request_loop<E: Env, S: AsyncRead + AsyncWrite>(
    system: &Rc<Shard<E>>,
    connection: &Connection,
    stream: &mut S,
    detacher: Option<&Detacher>,
    unbound_since: &mut Instant,
) -> io::Result<Ended> {
    let mut header_buf = vec![0u8; HEADER_SIZE];
    loop {
        let unbound_for_us = unbound_since.elapsed().as_micros() as u64;
        let deadline = system.header_deadline(connection, unbound_for_us);
        let Some(BufResult(result, buf)) = within(deadline.map(|(us, _)| us), stream.read_exact(header_buf)).await
        else {
            let reason = deadline.map_or(EvictionReason::StaleClient, |(_, reason)| reason);
            let why = match reason {
                EvictionReason::NoSession => "no login within the login timeout",
                _ => "connection idle past its limit",
            };
            return Err(evict(stream, connection, reason, why).await);
        };
        header_buf = buf;
        result?;
        let header_bytes: &[u8; HEADER_SIZE] = header_buf.as_slice().try_into().expect("header buffer is 256 bytes");
        let size = frame_size(header_bytes)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, format!("{error:?}")))?;
        if size > system.max_frame_bytes() {
            return Err(
                evict(stream, connection, EvictionReason::InvalidRequestBodySize, "frame over the size limit").await
            );
        }
        // One pooled frame holds header and body; the body is read straight into it, and
        // the frame goes to the dispatcher by value (a send's batch moves on inside it).
        let pool = system.pool();
        let mut frame = pool.acquire(size);
        frame[..HEADER_SIZE].copy_from_slice(header_bytes);
        if size > HEADER_SIZE {
            let (vec, home) = frame.into_vec();
            let read = within(system.frame_timeout_us(), stream.read_exact(vec.slice(HEADER_SIZE..size))).await;
            // A body that does not arrive in time: the buffer stays with the cancelled read
            // and is counted gone; the connection ends.
            let Some(BufResult(result, body)) = read else {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "frame body not received within the frame timeout",
                ));
            };
            frame = PoolBuf::from_vec(body.into_inner(), home);
            result?;
        }
        if let Some(detacher) = detacher
            && connection.may_wait(RequestHeader::parse(header_bytes).code, &frame[HEADER_SIZE..])
        {
            detacher.spawn(system, frame);
            continue;
        }
        let was_bound = connection.bound().is_some();
        let (reply, keep_open) = match system.handle(connection, frame).await {
            Outcome::Reply(frame) => (frame, true),
            Outcome::Evict(frame) => (frame, false),
        };
        {
            let _writing = match detacher {
                Some(detacher) => Some(detacher.writing.lock().await),
                None => None,
            };
            write_reply(stream, reply).await?;
        }
        if !keep_open {
            return Ok(Ended::Closed);
        }
        if was_bound && connection.bound().is_none() {
            // Logged out: the login timeout starts again.
            *unbound_since = Instant::now();
        }
        if detacher.is_some()
            && !connection.has_detached()
            && !connection.has_waiting()
            && let Some(target) = connection.take_move()
        {
            return Ok(Ended::Moving(target));
        }
    }
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
