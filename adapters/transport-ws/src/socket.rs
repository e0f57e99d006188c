//! A server-side WebSocket connection over a compio stream split in two: reads each
//! message's payload straight into a pooled request frame (unmasked in place), and a shared
//! [`Sender`] writes each reply as a frame head and the reply buffer in one vectored write,
//! from the connection's loop or from a task serving a waiting request. It reads exactly
//! the bytes of the frames it returns, never ahead, so between requests the socket holds
//! nothing of the next one and the connection can move to another shard by descriptor.

use std::io;
use std::rc::Rc;

use compio::buf::{BufResult, IntoInner, IoBuf};
use compio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use rill_application::memory_pool::{MemoryPool, PoolBuf, PoolSlice};

use crate::frame::{FrameError, HeadStart, Opcode, close_code, close_payload, server_head, unmask};

/// How a connection's reading ended.
#[derive(Debug)]
pub enum End {
    /// The client sent a Close frame (answered) or closed the stream.
    Closed,
    /// The client broke the framing rules; the server closes with the error's code.
    Refused(FrameError),
    Io(io::Error),
}

impl From<io::Error> for End {
    fn from(error: io::Error) -> Self {
        Self::Io(error)
    }
}

/// The sending side of a connection, shared by its loop and the tasks serving its waiting
/// requests: each frame is written whole under the lock, so no two interleave.
pub struct Sender<W>(Rc<async_lock::Mutex<W>>);

impl<W> Clone for Sender<W> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

/// One WebSocket connection, after its handshake.
pub struct Socket<R, W> {
    reader: R,
    sender: Sender<W>,
    /// Bytes received before the handshake was answered, read before the stream.
    carry: Vec<u8>,
    /// The largest message (one request frame) accepted.
    max_message: usize,
    /// A fragmented message collected so far (control frames may come between fragments).
    fragments: Option<Vec<u8>>,
}

impl<R: AsyncRead, W: AsyncWrite> Socket<R, W> {
    pub fn new(reader: R, writer: W, carry: Vec<u8>, max_message: usize) -> Self {
        let sender = Sender(Rc::new(async_lock::Mutex::new(writer)));
        Self { reader, sender, carry, max_message, fragments: None }
    }

    pub fn reader(&self) -> &R {
        &self.reader
    }

    pub fn sender(&self) -> &Sender<W> {
        &self.sender
    }

    /// Whether nothing received is waiting here (so the descriptor alone carries the state).
    pub fn is_drained(&self) -> bool {
        self.carry.is_empty() && self.fragments.is_none()
    }

    /// Reads `vec[start..vec.len()]` in full, from what was carried over first.
    async fn fill(&mut self, mut vec: Vec<u8>, start: usize) -> (io::Result<()>, Vec<u8>) {
        let end = vec.len();
        let carried = self.carry.len().min(end - start);
        vec[start..start + carried].copy_from_slice(&self.carry[..carried]);
        self.carry.drain(..carried);
        if start + carried == end {
            return (Ok(()), vec);
        }
        let BufResult(read, slice) = self.reader.read_exact(vec.slice(start + carried..end)).await;
        (read, slice.into_inner())
    }

    /// Reads a frame head: FIN, opcode, payload length and mask key.
    async fn read_head(&mut self) -> Result<(HeadStart, u64, [u8; 4]), End> {
        let (read, first) = self.fill(vec![0; 2], 0).await;
        match read {
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Err(End::Closed),
            other => other?,
        }
        let start = HeadStart::decode([first[0], first[1]]).map_err(End::Refused)?;
        let (read, rest) = self.fill(vec![0; start.rest_len()], 0).await;
        read?;
        let (len, key) = start.finish(&rest).map_err(End::Refused)?;
        Ok((start, len, key))
    }

    /// Reads the next frame: a whole data message comes back as a request frame; a ping is
    /// answered and a pong skipped (`None`, so the caller's wait starts again: a client's
    /// pings keep its connection alive); a Close is answered and ends the reading.
    pub async fn read_frame(&mut self, pool: &'static MemoryPool) -> Result<Option<PoolBuf>, End> {
        let (start, len, key) = self.read_head().await?;
        let total = self.fragments.as_ref().map_or(0, Vec::len) as u64 + len;
        if !start.opcode.is_control() && total > self.max_message as u64 {
            return Err(End::Refused(FrameError::TooLarge));
        }
        let len = len as usize;
        match (start.opcode, self.fragments.take()) {
            (Opcode::Ping, pending) => {
                self.fragments = pending;
                let payload = self.read_payload(len, key).await?;
                self.sender.send_frame(Opcode::Pong, payload).await.0?;
                Ok(None)
            }
            (Opcode::Pong, pending) => {
                self.fragments = pending;
                self.read_payload(len, key).await?;
                Ok(None)
            }
            (Opcode::Close, _) => {
                let payload = self.read_payload(len, key).await?;
                let code = close_code(&payload).map_err(End::Refused)?;
                self.sender.close(code).await;
                Err(End::Closed)
            }
            (Opcode::Text | Opcode::Binary, None) if start.fin => {
                let (vec, home) = pool.acquire(len).into_vec();
                let (read, mut vec) = self.fill(vec, 0).await;
                unmask(&mut vec, key, 0);
                // Home again before the result is looked at, so an error returns it too.
                let frame = PoolBuf::from_vec(vec, home);
                read?;
                Ok(Some(frame))
            }
            (Opcode::Text | Opcode::Binary, None) => {
                self.fragments = Some(self.read_fragment(Vec::new(), len, key).await?);
                Ok(None)
            }
            (Opcode::Continuation, Some(collected)) => {
                let collected = self.read_fragment(collected, len, key).await?;
                if start.fin {
                    return Ok(Some(PoolBuf::plain(collected)));
                }
                self.fragments = Some(collected);
                Ok(None)
            }
            (Opcode::Continuation, None) | (Opcode::Text | Opcode::Binary, Some(_)) => {
                Err(End::Refused(FrameError::BadFragmentation))
            }
        }
    }

    /// Appends one fragment's payload, unmasked, to the message collected so far.
    async fn read_fragment(&mut self, mut collected: Vec<u8>, len: usize, key: [u8; 4]) -> Result<Vec<u8>, End> {
        let from = collected.len();
        collected.resize(from + len, 0);
        let (read, mut collected) = self.fill(collected, from).await;
        read?;
        unmask(&mut collected[from..], key, 0);
        Ok(collected)
    }

    /// A control frame's payload (at most 125 bytes, checked by the head), unmasked.
    async fn read_payload(&mut self, len: usize, key: [u8; 4]) -> Result<Vec<u8>, End> {
        let (read, mut payload) = self.fill(vec![0; len], 0).await;
        read?;
        unmask(&mut payload, key, 0);
        Ok(payload)
    }
}

impl<W: AsyncWrite> Sender<W> {
    /// Sends `payload` as one unfragmented frame: the head and the payload go out in one
    /// vectored write. The payload comes back, so a pooled one can go home.
    async fn send_frame<B: IoBuf>(&self, opcode: Opcode, payload: B) -> (io::Result<()>, B) {
        let (head, used) = server_head(opcode, payload.buf_len());
        let mut writer = self.0.lock().await;
        let BufResult(written, (_, (payload,))) = writer.write_vectored_all((head.slice(..used), (payload,))).await;
        // A TLS stream buffers records until flushed; for a plain socket this is a no-op.
        let result = match written {
            Ok(()) => writer.flush().await,
            Err(error) => Err(error),
        };
        (result, payload)
    }

    /// Sends a reply frame as one binary message; the buffer goes back to its pool after.
    pub async fn send_reply(&self, reply: PoolSlice) -> io::Result<()> {
        let (vec, range, home) = reply.into_vec();
        let (result, payload) = self.send_frame(Opcode::Binary, vec.slice(range.clone())).await;
        drop(PoolSlice::from_vec(payload.into_inner(), range, home));
        result
    }

    /// Sends a bare binary message (an Eviction before closing).
    pub async fn send_bytes(&self, bytes: Vec<u8>) -> io::Result<()> {
        self.send_frame(Opcode::Binary, bytes).await.0
    }

    /// Sends a Close frame with `code` (best effort); the caller then drops the stream.
    pub async fn close(&self, code: u16) {
        let _ = self.send_frame(Opcode::Close, close_payload(code)).await;
    }
}
