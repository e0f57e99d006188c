//! One replica connection, plain TCP or TLS over it, with the three operations the plane
//! needs: read exactly N bytes, read exactly a length, write a frame and flush it (TLS holds
//! written bytes until flushed).

use std::io;

use compio::BufResult;
use compio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use compio::net::TcpStream;
use compio::tls::TlsStream;

pub enum Link {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Link {
    pub async fn read_array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let BufResult(result, buf) = match self {
            Link::Plain(stream) => stream.read_exact([0u8; N]).await,
            Link::Tls(stream) => stream.read_exact([0u8; N]).await,
        };
        result.map(|()| buf)
    }

    pub async fn read_vec(&mut self, len: usize) -> io::Result<Vec<u8>> {
        let BufResult(result, buf) = match self {
            Link::Plain(stream) => stream.read_exact(vec![0u8; len]).await,
            Link::Tls(stream) => stream.read_exact(vec![0u8; len]).await,
        };
        result.map(|()| buf)
    }

    pub async fn write(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        match self {
            Link::Plain(stream) => stream.write_all(bytes).await.0,
            Link::Tls(stream) => {
                stream.write_all(bytes).await.0?;
                stream.flush().await
            }
        }
    }
}
