//! Raw QUIC streams to a server's QUIC listener, for tests that must send what the official
//! client never sends. The server's certificate is accepted unchecked (loopback tests only).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::tls::client_trusting_any_certificate;

/// A QUIC connection to `address` (a `127.0.0.1:port` string).
pub async fn connect(address: &str) -> anyhow::Result<quinn::Connection> {
    let tls = client_trusting_any_certificate(&[])?;
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let server: SocketAddr = address.parse()?;
    Ok(endpoint.connect(server, "localhost")?.await?)
}

/// Sends `bytes` on a new stream, finishes it, and reads the answer to its end; `None`
/// when the server reset or stopped the stream, closed the connection or did not answer
/// within 10 s.
pub async fn exchange(connection: &quinn::Connection, bytes: &[u8]) -> Option<Vec<u8>> {
    let round = async {
        let (mut send, mut recv) = connection.open_bi().await.ok()?;
        send.write_all(bytes).await.ok()?;
        send.finish().ok()?;
        recv.read_to_end(64 << 20).await.ok()
    };
    tokio::time::timeout(Duration::from_secs(10), round).await.ok().flatten()
}
