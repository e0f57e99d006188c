//! The QUIC transport: every bidirectional stream carries one request frame and its reply,
//! then the server finishes the stream. Unlike upstream, which serves one stream at a time
//! per connection, each stream is served as an independent request. QUIC connections stay
//! on shard 0; TLS 1.3 is mandatory.

use std::net::SocketAddr;
use std::rc::Rc;

use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::io::AsyncWriteExt;
use std::sync::Arc;

use compio_quic::{
    Connection as QuicConnection, Endpoint, RecvStream, SendStream, ServerBuilder, TransportConfig, VarInt,
};
use rill_application::memory_pool::{PoolBuf, PoolSlice};
use rill_application::ports::Env;
use rill_application::{Connection, Outcome, Shard, Transport};
use rill_domain::constants::MAX_FRAME_SIZE;

/// Binds the QUIC endpoint; a taken address fails with a message naming transport and address.
pub async fn bind(address: &str, tls: rustls::ServerConfig) -> std::io::Result<Endpoint> {
    let mut config = ServerBuilder::new_with_rustls_server_config(tls).build();
    config.transport_config(Arc::new(transport()));
    Endpoint::server(address, config)
        .await
        .map_err(|error| std::io::Error::new(error.kind(), format!("quic transport cannot bind {address}: {error}")))
}

/// Windows as large as the largest frame, so a 64 MiB request streams without stalling on
/// flow control; many concurrent streams, since each carries one request.
fn transport() -> TransportConfig {
    let window = MAX_FRAME_SIZE as u32;
    let mut transport = TransportConfig::default();
    transport
        .stream_receive_window(VarInt::from_u32(window))
        .receive_window(VarInt::from_u32(window))
        .send_window(window as u64)
        .max_concurrent_bidi_streams(VarInt::from_u32(1024));
    transport
}

/// Accepts QUIC connections forever.
pub async fn serve<E: Env>(system: Rc<Shard<E>>, endpoint: Endpoint) {
    while let Some(incoming) = endpoint.wait_incoming().await {
        let peer = incoming.remote_address();
        let Ok(connecting) = incoming.accept() else { continue };
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
    // The frame's range goes to the stream as it sits in its buffer, which then goes home.
    let (vec, range, home) = reply.into_vec();
    let BufResult(result, vec) = send.write_all(vec.slice(range.clone())).await;
    drop(PoolSlice::from_vec(vec.into_inner(), range, home));
    if result.is_ok() {
        let _ = send.finish();
        let _ = send.stopped().await;
    }
}
