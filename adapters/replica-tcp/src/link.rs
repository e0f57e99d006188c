//! One replica connection, plain TCP or TLS over it, with the three operations the plane
//! needs: read exactly N bytes, read exactly a length, write a frame and flush it (TLS holds
//! written bytes until flushed). A TLS connection also yields its channel binding: keying
//! material exported from the TLS session (RFC 5705 / RFC 8446 section 7.5), the same at both
//! ends of one session and different for every other, which the key handshake signs.

use std::io;
use std::pin::Pin;
use std::sync::Arc;

use compio::BufResult;
use compio::io::compat::AsyncStream;
use compio::io::{AsyncReadExt, AsyncWriteExt};
use compio::net::TcpStream;
use futures_rustls::rustls::{ClientConfig, ServerConfig};
use futures_rustls::{TlsAcceptor, TlsConnector, TlsStream, pki_types::ServerName};
use futures_util::{AsyncReadExt as _, AsyncWriteExt as _};

/// The exporter label of the replica handshake's channel binding.
const BINDING_LABEL: &[u8] = b"EXPORTER-rill-replica-handshake";
pub const BINDING_LEN: usize = 32;

/// A TLS stream over a compio socket, seen through futures' IO traits (rustls's own
/// stream, so that its session's exporter is reachable).
type TlsOverTcp = TlsStream<Pin<Box<AsyncStream<TcpStream>>>>;

pub enum Link {
    Plain(TcpStream),
    Tls(Box<TlsOverTcp>),
}

/// A link and its channel binding (None on plain TCP).
pub type Bound = (Link, Option<[u8; BINDING_LEN]>);

fn binding_error(error: futures_rustls::rustls::Error) -> io::Error {
    io::Error::other(format!("cannot export the TLS session's channel binding: {error}"))
}

/// The acceptor's side of TLS on a new connection, with the session's binding.
pub async fn accept_tls(config: &Arc<ServerConfig>, stream: TcpStream) -> io::Result<Bound> {
    let tls = TlsAcceptor::from(config.clone()).accept(Box::pin(AsyncStream::new(stream))).await?;
    let mut binding = [0u8; BINDING_LEN];
    tls.get_ref().1.export_keying_material(&mut binding, BINDING_LABEL, None).map_err(binding_error)?;
    Ok((Link::Tls(Box::new(TlsStream::Server(tls))), Some(binding)))
}

/// The dialer's side of TLS to `host`, with the session's binding.
pub async fn connect_tls(config: &Arc<ClientConfig>, host: &str, stream: TcpStream) -> io::Result<Bound> {
    let name = ServerName::try_from(host.to_owned()).map_err(|error| io::Error::other(error.to_string()))?;
    let tls = TlsConnector::from(config.clone()).connect(name, Box::pin(AsyncStream::new(stream))).await?;
    let mut binding = [0u8; BINDING_LEN];
    tls.get_ref().1.export_keying_material(&mut binding, BINDING_LABEL, None).map_err(binding_error)?;
    Ok((Link::Tls(Box::new(TlsStream::Client(tls))), Some(binding)))
}

impl Link {
    pub async fn read_array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        match self {
            Link::Plain(stream) => {
                let BufResult(result, buf) = stream.read_exact([0u8; N]).await;
                result.map(|()| buf)
            }
            Link::Tls(stream) => {
                let mut buf = [0u8; N];
                stream.read_exact(&mut buf).await?;
                Ok(buf)
            }
        }
    }

    pub async fn read_vec(&mut self, len: usize) -> io::Result<Vec<u8>> {
        match self {
            Link::Plain(stream) => {
                let BufResult(result, buf) = stream.read_exact(vec![0u8; len]).await;
                result.map(|()| buf)
            }
            Link::Tls(stream) => {
                let mut buf = vec![0u8; len];
                stream.read_exact(&mut buf).await?;
                Ok(buf)
            }
        }
    }

    pub async fn write(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        match self {
            Link::Plain(stream) => stream.write_all(bytes).await.0,
            Link::Tls(stream) => {
                stream.write_all(&bytes).await?;
                stream.flush().await
            }
        }
    }
}
