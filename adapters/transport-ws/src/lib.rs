//! The WebSocket transport: the client sends each request frame as one binary message and
//! gets each reply as one. Plaintext connections are handed to the shard picked by
//! `next_connection_shard` at accept time,
//! like TCP ones (the upgrade happens on the serving shard); TLS (`wss://`) stays on shard 0.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::rc::Rc;

use compio::net::{TcpListener, TcpStream};
use compio::tls::TlsAcceptor;
use compio::ws::tungstenite::Message;
use compio::ws::tungstenite::protocol::WebSocketConfig;
use rill_application::memory_pool::PoolBuf;
use rill_application::ports::bus::{ConnectionKind, next_connection_shard};
use rill_application::ports::{ConnectionHandoff, Env};
use rill_application::{Connection, Outcome, Shard, Transport};
use rill_domain::constants::MAX_FRAME_SIZE;
use rill_domain::wire::header::{EvictionReason, encode_eviction};

/// Messages and frames above the protocol's frame limit are refused by the WebSocket
/// layer itself, before they are buffered.
/// A message (one request frame) may be at most `max_frame_bytes`.
fn config(max_frame_bytes: usize) -> WebSocketConfig {
    let limit = max_frame_bytes.min(MAX_FRAME_SIZE);
    WebSocketConfig::default().max_message_size(Some(limit)).max_frame_size(Some(limit))
}

/// Accepts WebSocket connections on shard 0: plaintext ones go by descriptor to the shard
/// `next_connection_shard` picks (possibly this one); with TLS they are served here.
pub async fn serve<E: Env, H: ConnectionHandoff>(
    system: Rc<Shard<E>>,
    listener: TcpListener,
    handoff: H,
    tls: Option<TlsAcceptor>,
) {
    let mut accepted = 0u64;
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            compio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        if let Some(acceptor) = tls.clone() {
            let system = system.clone();
            compio::runtime::spawn(async move {
                match acceptor.accept(stream).await {
                    Ok(tls_stream) => upgrade_and_serve(system, tls_stream, peer).await,
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
                compio::runtime::spawn(upgrade_and_serve(system.clone(), stream, peer)).detach();
                continue;
            }
        };
        drop(stream);
        if let Err(fd) = handoff.hand_off(target, fd, peer, ConnectionKind::WebSocket).await {
            adopt(system.clone(), fd, peer);
        }
    }
}

/// Serves a WebSocket connection handed over by shard 0 (still before its upgrade).
pub fn adopt<E: Env>(system: Rc<Shard<E>>, fd: OwnedFd, peer: SocketAddr) {
    match TcpStream::from_std(std::net::TcpStream::from(fd)) {
        Ok(stream) => compio::runtime::spawn(upgrade_and_serve(system, stream, peer)).detach(),
        Err(error) => tracing::warn!(%peer, %error, "cannot adopt a handed-off websocket connection"),
    }
}

async fn upgrade_and_serve<E: Env, T>(system: Rc<Shard<E>>, stream: T, peer: SocketAddr)
where
    T: compio::ws::IntoMaybeTlsStream<TcpStream>,
{
    let mut socket = match compio::ws::accept_async_with_config(stream, Some(config(system.max_frame_bytes()))).await {
        Ok(socket) => socket,
        Err(error) => {
            tracing::debug!(%peer, %error, "websocket upgrade failed");
            return;
        }
    };
    let Some(client_id) = system.connect(peer.to_string(), Transport::WebSocket) else {
        let refusal = encode_eviction(1, EvictionReason::SessionError, (0, 0));
        let _ = socket.send(Message::Binary(refusal.into())).await;
        let _ = socket.close(None).await;
        return;
    };
    tracing::info!(client_id, %peer, shard = system.shard_id(), transport = "websocket", "client connected");
    let connection = Connection::new(client_id);
    let mut unbound_since = std::time::Instant::now();
    loop {
        // A whole message must arrive within the idle limit, or what is left of the login
        // timeout while the connection has no session.
        let deadline = system.header_deadline(&connection, unbound_since.elapsed().as_micros() as u64);
        let read = match deadline {
            Some((timeout_us, _)) => {
                compio::time::timeout(std::time::Duration::from_micros(timeout_us), socket.read()).await
            }
            None => Ok(socket.read().await),
        };
        let Ok(read) = read else {
            let reason = deadline.map_or(EvictionReason::StaleClient, |(_, reason)| reason);
            let client = connection.bound().map_or(1, |bound| bound.client);
            let _ = socket.send(Message::Binary(encode_eviction(client, reason, (0, 0)).into())).await;
            break;
        };
        // The message's own buffer becomes the request frame (no copy when the WebSocket
        // layer holds it alone).
        let frame = match read {
            Ok(Message::Binary(bytes)) => Vec::from(bytes),
            // Text is treated as bytes, as the clients do; control frames are answered by
            // the WebSocket layer itself.
            Ok(Message::Text(text)) => text.as_bytes().to_vec(),
            Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
            Ok(Message::Close(_)) | Err(_) => break,
        };
        let was_bound = connection.bound().is_some();
        let Some(outcome) = system.handle_frame(&connection, PoolBuf::plain(frame)).await else { break };
        if was_bound && connection.bound().is_none() {
            unbound_since = std::time::Instant::now();
        }
        let (reply, keep_open) = match outcome {
            Outcome::Reply(frame) => (frame, true),
            Outcome::Evict(frame) => (frame, false),
        };
        // The reply frame is sent as it is; it goes back to the pool once sent.
        let reply = compio::ws::tungstenite::Bytes::from_owner(reply);
        if socket.send(Message::Binary(reply)).await.is_err() || !keep_open {
            break;
        }
    }
    let _ = socket.close(None).await;
    system.on_disconnect(client_id);
}
