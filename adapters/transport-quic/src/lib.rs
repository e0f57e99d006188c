//! The QUIC transport: every bidirectional stream carries one request frame and its reply,
//! then the server finishes the stream. Unlike upstream, which serves one stream at a time
//! per connection, each stream is served as an independent request. QUIC connections stay
//! on shard 0; TLS 1.3 is mandatory.

use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;

use bytes::Bytes;
use std::sync::Arc;

use compio_quic::{
    Connection as QuicConnection, Endpoint, RecvStream, SendStream, ServerBuilder, ServerConfig, TransportConfig,
    VarInt,
};
use rill_application::memory_pool::PoolBuf;
use rill_application::ports::Env;
use rill_application::{Connection, Outcome, Shard, Transport};
use rill_domain::constants::MAX_FRAME_SIZE;

/// A bound QUIC endpoint and the configuration its loopback peers are accepted with.
pub struct QuicListener {
    endpoint: Endpoint,
    loopback: ServerConfig,
}

impl QuicListener {
    /// The address the endpoint is bound to.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }
}

/// Binds the QUIC endpoint; a taken address fails with a message naming transport and address.
pub async fn bind(address: &str, tls: rustls::ServerConfig) -> std::io::Result<QuicListener> {
    let mut config = ServerBuilder::new_with_rustls_server_config(tls).build();
    let mut loopback = config.clone();
    config.transport_config(Arc::new(transport(Path::Network)));
    loopback.transport_config(Arc::new(transport(Path::Loopback)));
    let endpoint = Endpoint::server(address, config)
        .await
        .map_err(|error| std::io::Error::new(error.kind(), format!("quic transport cannot bind {address}: {error}")))?;
    Ok(QuicListener { endpoint, loopback })
}

/// Where a peer sits, as far as the size of the datagrams sent to it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// A peer on this host: no path MTU to discover (the loopback interface carries 64 KiB
    /// datagrams), so starting at the protocol's 1,200 bytes and waiting for discovery to
    /// climb only splits the first replies into more packets, each sealed, sent, received and
    /// acknowledged on its own.
    Loopback,
    /// Anyone else: quinn's defaults (1,200 bytes, raised by path MTU discovery).
    Network,
}

impl Path {
    fn of(peer: IpAddr) -> Path {
        match peer.to_canonical().is_loopback() {
            true => Path::Loopback,
            false => Path::Network,
        }
    }
}

/// The UDP payload a loopback peer is sent from its first packet on: the most quinn's
/// default client (the official SDK's) accepts. It is also within the three times 1,200
/// bytes a server may send before the client's address is validated: quinn waits for room
/// for a whole datagram, so a larger start would stall the handshake. Black-hole detection
/// would still fall back to 1,200 bytes.
const LOOPBACK_INITIAL_MTU: u16 = 1_472;

/// Windows as large as the largest frame, so a 64 MiB request streams without stalling on
/// flow control; many concurrent streams, since each carries one request. Streams are sent
/// in the order they were written, not round-robin: each carries one reply, and a reply
/// finished sooner is a request answered sooner, where interleaving would delay them all.
fn transport(path: Path) -> TransportConfig {
    let window = MAX_FRAME_SIZE as u32;
    let mut transport = TransportConfig::default();
    transport
        .stream_receive_window(VarInt::from_u32(window))
        .receive_window(VarInt::from_u32(window))
        .send_window(window as u64)
        .max_concurrent_bidi_streams(VarInt::from_u32(1024))
        .send_fairness(false);
    if path == Path::Loopback {
        transport.initial_mtu(LOOPBACK_INITIAL_MTU);
    }
    transport
}

/// Accepts QUIC connections forever.
pub async fn serve<E: Env>(system: Rc<Shard<E>>, listener: QuicListener) {
    while let Some(incoming) = listener.endpoint.wait_incoming().await {
        let peer = incoming.remote_address();
        let accepted = match Path::of(peer.ip()) {
            Path::Loopback => incoming.accept_with(listener.loopback.clone()),
            Path::Network => incoming.accept(),
        };
        let Ok(connecting) = accepted else { continue };
        let system = system.clone();
        compio::runtime::spawn(async move {
            match connecting.await {
                Ok(connection) => serve_connection(system, connection, peer).await,
                Err(error) => tracing::debug!(%peer, %error, "quic handshake failed"),
            }
        })
        .detach();
    }
}

async fn serve_connection<E: Env>(system: Rc<Shard<E>>, quic: QuicConnection, peer: SocketAddr) {
    let Some(client_id) = system.connect(peer.to_string(), Transport::Quic) else {
        quic.close(VarInt::from_u32(1), b"connection limit reached");
        return;
    };
    tracing::info!(client_id, %peer, shard = system.shard_id(), transport = "quic", "client connected");
    let connection = Rc::new(Connection::new(client_id));
    if let Some(timeout_us) = system.login_timeout_us() {
        // A connection that has not logged in by the login timeout is closed.
        let (quic, connection) = (quic.clone(), connection.clone());
        compio::runtime::spawn(async move {
            compio::time::sleep(std::time::Duration::from_micros(timeout_us)).await;
            if connection.bound().is_none() {
                quic.close(VarInt::from_u32(2), b"no login within the login timeout");
            }
        })
        .detach();
    }
    while let Ok((send, recv)) = quic.accept_bi().await {
        let (system, connection) = (system.clone(), connection.clone());
        compio::runtime::spawn(async move { serve_stream(&system, &connection, send, recv).await }).detach();
    }
    system.on_disconnect(client_id).await;
}

/// Reads the stream's one frame (bounded by the frame limit), answers it, finishes.
async fn serve_stream<E: Env>(system: &Shard<E>, connection: &Connection, mut send: SendStream, mut recv: RecvStream) {
    let limit = system.max_frame_bytes();
    let read = async {
        let mut frame = Vec::new();
        loop {
            match recv.read_chunk(limit, true).await {
                Ok(Some(chunk)) if frame.len() + chunk.bytes.len() <= limit => frame.extend_from_slice(&chunk.bytes),
                Ok(None) => return Some(frame),
                // Too large, reset or lost: nothing sensible to answer.
                _ => return None,
            }
        }
    };
    let read = match system.frame_timeout_us() {
        Some(timeout_us) => {
            compio::time::timeout(std::time::Duration::from_micros(timeout_us), read).await.ok().flatten()
        }
        None => read.await,
    };
    let Some(frame) = read else {
        let _ = recv.stop(0u32.into());
        return;
    };
    let Some(outcome) = system.handle_frame(connection, PoolBuf::plain(frame)).await else {
        let _ = send.reset(0u32.into());
        return;
    };
    let reply = match outcome {
        Outcome::Reply(frame) | Outcome::Evict(frame) => frame,
    };
    // The frame goes to the stream as it sits in its pooled buffer: quinn keeps the chunk
    // until the peer acknowledges it (it may be resent), then drops it, and the buffer goes
    // home. Writing it as a slice would copy the whole reply into the stream's own buffer.
    let mut chunks = [Bytes::from_owner(reply)];
    if send.write_all_chunks(&mut chunks).await.is_ok() {
        let _ = send.finish();
        let _ = send.stopped().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_peers_on_this_host_are_on_the_loopback_path() {
        for peer in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] {
            assert_eq!(Path::of(peer.parse().unwrap()), Path::Loopback, "{peer}");
        }
        for peer in ["10.0.0.7", "192.168.1.20", "::ffff:10.0.0.7", "2001:db8::1", "0.0.0.0"] {
            assert_eq!(Path::of(peer.parse().unwrap()), Path::Network, "{peer}");
        }
    }
}
