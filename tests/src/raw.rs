//! Hand-built Iggy 0.11 (VSR) frames over a plain `std::net::TcpStream`, for tests that must send what no well-behaved client sends.
//!
//! Layouts follow the protocol reference, section 2: a 256-byte header (common prefix
//! plus request or reply fields), all integers little-endian.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

pub const HEADER_SIZE: usize = 256;
pub const MAX_MESSAGE_SIZE: u32 = 64 * 1024 * 1024;

pub const COMMAND_REQUEST: u8 = 5;
pub const COMMAND_REPLY: u8 = 8;
pub const COMMAND_EVICTION: u8 = 13;

pub const OP_REGISTER: u8 = 1;
pub const OP_NON_REPLICATED: u8 = 2;
pub const OP_LOGOUT: u8 = 3;
pub const OP_CREATE_STREAM: u8 = 128;

pub const CODE_PING: u32 = 1;
pub const CODE_GET_STATS: u32 = 10;
pub const CODE_GET_STREAMS: u32 = 201;
pub const CODE_POLL_MESSAGES: u32 = 100;

/// Packed protocol version 0.11.0.
pub const PROTOCOL_VERSION: u32 = 11264;

/// The reference's golden login body: rust-sdk 0.11.0, user iggy, password iggy, no context.
pub const GOLDEN_LOGIN_BODY: [u8; 34] = [
    0x00, 0x2c, 0x00, 0x00, 8, b'r', b'u', b's', b't', b'-', b's', b'd', b'k', 6, b'0', b'.', b'1', b'1', b'.', b'0',
    4, b'i', b'g', b'g', b'y', 4, b'i', b'g', b'g', b'y', 0, 0, 0, 0,
];
/// XXH3-64 of [`GOLDEN_LOGIN_BODY`], per the reference.
pub const GOLDEN_LOGIN_CHECKSUM: u128 = 0x8fde_203c_2a3f_8095;

/// The `client` id of the reference's PING golden vector.
pub const GOLDEN_CLIENT: u128 = 0x1122_3344_5566_7788_9900_aabb_ccdd_eeff;

/// How long a raw exchange waits for the server before calling it unresponsive.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The fields of a request header that tests vary.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Value of the `size` field; `None` means header plus body length.
    pub size: Option<u32>,
    pub command: u8,
    pub client: u128,
    pub request_checksum: u128,
    pub request: u64,
    pub operation: u8,
    pub session: u64,
    /// Command code written at bytes 196..200 (NonReplicated operations).
    pub code: Option<u32>,
}

impl Request {
    /// A NonReplicated request for `code`.
    pub fn non_replicated(client: u128, request: u64, session: u64, code: u32) -> Self {
        Request {
            size: None,
            command: COMMAND_REQUEST,
            client,
            request_checksum: 0,
            request,
            operation: OP_NON_REPLICATED,
            session,
            code: Some(code),
        }
    }

    /// A Register (login) request with the given body checksum.
    pub fn register(client: u128, request_checksum: u128) -> Self {
        Request {
            size: None,
            command: COMMAND_REQUEST,
            client,
            request_checksum,
            request: 0,
            operation: OP_REGISTER,
            session: 0,
            code: None,
        }
    }

    /// The 256-byte header for a body of `body_len` bytes.
    pub fn header(&self, body_len: usize) -> [u8; HEADER_SIZE] {
        let mut h = [0u8; HEADER_SIZE];
        let size = self.size.unwrap_or((HEADER_SIZE + body_len) as u32);
        h[48..52].copy_from_slice(&size.to_le_bytes());
        h[60] = self.command;
        h[128..144].copy_from_slice(&self.client.to_le_bytes());
        h[144..160].copy_from_slice(&self.request_checksum.to_le_bytes());
        h[168..176].copy_from_slice(&self.request.to_le_bytes());
        h[176] = self.operation;
        h[184..192].copy_from_slice(&self.session.to_le_bytes());
        if let Some(code) = self.code {
            h[196..200].copy_from_slice(&code.to_le_bytes());
        }
        h
    }

    /// Header followed by `body`.
    pub fn frame(&self, body: &[u8]) -> Vec<u8> {
        let mut frame = self.header(body.len()).to_vec();
        frame.extend_from_slice(body);
        frame
    }
}

/// A frame received from the server (header plus body).
#[derive(Debug, Clone)]
pub struct Frame(pub Vec<u8>);

impl Frame {
    pub fn command(&self) -> u8 {
        self.0[60]
    }
    pub fn size(&self) -> u32 {
        u32_at(&self.0, 48)
    }
    /// Reply: echo of the request checksum.
    pub fn request_checksum(&self) -> u128 {
        u128_at(&self.0, 128)
    }
    /// Reply: echo of the client id.
    pub fn reply_client(&self) -> u128 {
        u128_at(&self.0, 160)
    }
    /// Reply: echo of the request number.
    pub fn reply_request(&self) -> u64 {
        u64_at(&self.0, 200)
    }
    /// Reply: echo of the operation.
    pub fn reply_operation(&self) -> u8 {
        self.0[208]
    }
    /// Reply: 0 or an IggyError code.
    pub fn status(&self) -> u32 {
        u32_at(&self.0, 216)
    }
    /// Eviction: the client id.
    pub fn eviction_client(&self) -> u128 {
        u128_at(&self.0, 128)
    }
    /// Eviction: the reason byte.
    pub fn eviction_reason(&self) -> u8 {
        self.0[255]
    }
    pub fn body(&self) -> &[u8] {
        &self.0[HEADER_SIZE..]
    }
}

/// What the server did after a request.
#[derive(Debug)]
pub enum Outcome {
    /// A complete frame arrived.
    Frame(Frame),
    /// The connection was closed (or reset) before a complete frame arrived.
    Closed,
    /// Nothing arrived within [`READ_TIMEOUT`].
    Silent,
}

impl Outcome {
    /// The frame, panicking with `what` otherwise.
    pub fn expect_frame(self, what: &str) -> Frame {
        match self {
            Outcome::Frame(frame) => frame,
            other => panic!("{what}: expected a frame, got {other:?}"),
        }
    }
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
pub fn u128_at(b: &[u8], at: usize) -> u128 {
    u128::from_le_bytes(b[at..at + 16].try_into().expect("16 bytes"))
}

/// Opens a raw connection with read and write timeouts.
pub fn connect(address: &str) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Writes `bytes`, tolerating a server that already closed the connection.
pub fn send(stream: &mut TcpStream, bytes: &[u8]) {
    if let Err(error) = stream.write_all(bytes).and_then(|()| stream.flush()) {
        assert!(is_disconnect(&error), "unexpected write error: {error}");
    }
}

/// Half-closes the connection: the server sees end of input.
pub fn close_write(stream: &TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
}

fn is_disconnect(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
            | ErrorKind::UnexpectedEof
            | ErrorKind::NotConnected
    )
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` if the connection ended first.
fn read_full(stream: &mut TcpStream, buf: &mut [u8]) -> Result<bool, Outcome> {
    match stream.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Err(Outcome::Silent),
        Err(e) if is_disconnect(&e) => Ok(false),
        Err(e) => panic!("unexpected read error: {e}"),
    }
}

/// Reads one frame, or reports that the server closed the connection or stayed silent.
pub fn read_frame(stream: &mut TcpStream) -> Outcome {
    let mut header = vec![0u8; HEADER_SIZE];
    match read_full(stream, &mut header) {
        Ok(true) => {}
        Ok(false) => return Outcome::Closed,
        Err(outcome) => return outcome,
    }
    let size = u32_at(&header, 48) as usize;
    assert!(
        (HEADER_SIZE..=MAX_MESSAGE_SIZE as usize).contains(&size),
        "server sent a frame with an invalid size field {size}"
    );
    let mut frame = header;
    frame.resize(size, 0);
    match read_full(stream, &mut frame[HEADER_SIZE..]) {
        Ok(true) => Outcome::Frame(Frame(frame)),
        Ok(false) => Outcome::Closed,
        Err(outcome) => outcome,
    }
}

/// Reads frames until the server closes the connection (or stays silent); returns them.
pub fn read_until_closed(stream: &mut TcpStream) -> (Vec<Frame>, Outcome) {
    let mut frames = Vec::new();
    loop {
        match read_frame(stream) {
            Outcome::Frame(frame) => frames.push(frame),
            end => return (frames, end),
        }
    }
}

/// Sends one frame on a new connection and reads the answer.
pub fn exchange(address: &str, frame: &[u8]) -> std::io::Result<Outcome> {
    let mut stream = connect(address)?;
    send(&mut stream, frame);
    Ok(read_frame(&mut stream))
}

/// Logs in as iggy/iggy with the golden login body; the session number, or why not.
pub fn try_login(stream: &mut TcpStream, client: u128) -> Result<u64, String> {
    let request = Request::register(client, GOLDEN_LOGIN_CHECKSUM);
    send(stream, &request.frame(&GOLDEN_LOGIN_BODY));
    match read_frame(stream) {
        Outcome::Frame(reply)
            if reply.command() == COMMAND_REPLY && reply.status() == 0 && reply.body().len() >= 16 =>
        {
            Ok(u64_at(reply.body(), 8))
        }
        other => Err(format!("login refused: {other:?}")),
    }
}

/// Logs in as iggy/iggy with the golden login body; returns the session number.
pub fn login(stream: &mut TcpStream, client: u128) -> u64 {
    let request = Request::register(client, GOLDEN_LOGIN_CHECKSUM);
    send(stream, &request.frame(&GOLDEN_LOGIN_BODY));
    let reply = read_frame(stream).expect_frame("login reply");
    assert_eq!(reply.command(), COMMAND_REPLY, "login reply command: {reply:?}");
    assert_eq!(reply.status(), 0, "login reply status");
    let body = reply.body();
    assert!(body.len() >= 20, "login reply body too short: {body:?}");
    assert_eq!(u32_at(body, 0), 0, "login reply result section count");
    let session = u64_at(body, 8);
    assert_ne!(session, 0, "login must hand out a non-zero session");
    session
}

/// Sends PING on a fresh connection and checks the reply; panics if the server does not
/// answer properly.
pub fn assert_ping_served(address: &str) {
    let client = 0x5eed_0000_0000_0000_0000_0000_0000_0001u128;
    let request = Request::non_replicated(client, 1, 0, CODE_PING);
    let outcome = exchange(address, &request.frame(&[])).expect("connect for PING");
    let reply = outcome.expect_frame("PING reply");
    assert_eq!(reply.command(), COMMAND_REPLY, "PING reply command");
    assert_eq!(reply.status(), 0, "PING reply status");
    assert_eq!(reply.reply_client(), client, "PING reply client");
}

/// Deterministic pseudo-random bytes.
pub fn garbage(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// A POLL_MESSAGES body: consumer 9, numeric stream and topic ids, `count` messages of
/// `partition` from `offset`, no auto-commit.
pub fn poll_body(stream: u32, topic: u32, partition: u32, offset: u64, count: u32) -> Vec<u8> {
    let numeric = |value: u32| [&[1u8, 4][..], &value.to_le_bytes()].concat();
    let mut body = vec![1u8];
    body.extend(numeric(9));
    body.extend(numeric(stream));
    body.extend(numeric(topic));
    body.push(1);
    body.extend(partition.to_le_bytes());
    body.push(1);
    body.extend(offset.to_le_bytes());
    body.extend(count.to_le_bytes());
    body.push(0);
    body
}
