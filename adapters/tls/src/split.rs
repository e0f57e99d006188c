//! A server TLS stream split into a read half and a write half that work at the same time:
//! a connection's loop waits for the next request on one while replies to its waiting
//! requests go out on the other.
//!
//! compio's own `split` locks the whole stream for as long as a read is pending, so a
//! reply could not be written until the client sent something. Here the halves share the
//! TLS session through a lock held only while one of them is polled; the socket under it
//! is already split by compio, so a pending read and a write each have their own operation
//! in flight.

use std::io;

use compio::buf::{BufResult, IoBuf, IoBufMut};
use compio::io::{AsyncRead, AsyncWrite};
use compio::net::TcpStream;
use compio::tls::TlsStream;
use futures_util::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};

/// The reading side of a split TLS connection.
pub struct TlsReader(ReadHalf<TlsStream<TcpStream>>);

/// The writing side of a split TLS connection; a write is encrypted and sent at once, and
/// `flush` pushes out what the session still buffers.
pub struct TlsWriter(WriteHalf<TlsStream<TcpStream>>);

/// Splits an accepted TLS connection into halves usable from different tasks.
pub fn split(stream: TlsStream<TcpStream>) -> (TlsReader, TlsWriter) {
    let (reader, writer) = stream.split();
    (TlsReader(reader), TlsWriter(writer))
}

/// Reads into the initialised bytes of `buf` from its start, as compio's own reads fill a
/// buffer. Every buffer the transports read into is initialised (zeroed vectors, pooled
/// frames of their full length and slices of them); one with nothing initialised gets an
/// `InvalidInput` error rather than an `Ok(0)` that would read as the end of the stream.
impl AsyncRead for TlsReader {
    async fn read<B: IoBufMut>(&mut self, mut buf: B) -> BufResult<usize, B> {
        if buf.buf_len() == 0 && buf.buf_capacity() > 0 {
            let error = io::Error::new(io::ErrorKind::InvalidInput, "a TLS read needs an initialised buffer");
            return BufResult(Err(error), buf);
        }
        let result = match self.0.read(buf.as_mut_slice()).await {
            // A peer that closes without a TLS close_notify ends the stream like any close.
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
            other => other,
        };
        BufResult(result, buf)
    }
}

impl AsyncWrite for TlsWriter {
    async fn write<B: IoBuf>(&mut self, buf: B) -> BufResult<usize, B> {
        let result = self.0.write(buf.as_init()).await;
        BufResult(result, buf)
    }

    async fn flush(&mut self) -> io::Result<()> {
        self.0.flush().await
    }

    async fn shutdown(&mut self) -> io::Result<()> {
        self.0.close().await
    }
}
