//! The 256-byte frame headers: request (client to server), reply and eviction. Both
//! protocol generations share the layout; 0.12 gives meaning to bytes 0.11 keeps zero (the
//! partition context of a request from 200, its echo in a reply at 224), so one parser and
//! one writer serve both.

use crate::constants::{HEADER_SIZE, MAX_FRAME_SIZE};

pub const COMMAND_REQUEST: u8 = 5;
pub const COMMAND_REPLY: u8 = 8;
pub const COMMAND_EVICTION: u8 = 13;

const OFFSET_SIZE: usize = 48;
const OFFSET_COMMAND: usize = 60;

/// Why a frame header cannot be served; the transport closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// `size` is below 256 or above the frame limit.
    BadSize(u32),
    /// The command byte is not Request.
    NotARequest(u8),
}

/// Reads the total frame size from a header and checks it against the limits.
pub fn frame_size(header: &[u8; HEADER_SIZE]) -> Result<usize, FrameError> {
    let size = u32::from_le_bytes(header[OFFSET_SIZE..OFFSET_SIZE + 4].try_into().unwrap());
    if (size as usize) < HEADER_SIZE || size as usize > MAX_FRAME_SIZE {
        return Err(FrameError::BadSize(size));
    }
    if header[OFFSET_COMMAND] != COMMAND_REQUEST {
        return Err(FrameError::NotARequest(header[OFFSET_COMMAND]));
    }
    Ok(size as usize)
}

/// The header of `frame` when `frame` is exactly one request frame (a message-framed
/// transport's unit): a valid header whose size is the frame's length.
pub fn whole_frame_header(frame: &[u8]) -> Option<&[u8; HEADER_SIZE]> {
    let header: &[u8; HEADER_SIZE] = frame.get(..HEADER_SIZE)?.try_into().ok()?;
    (frame_size(header).ok()? == frame.len()).then_some(header)
}

/// The fields of a request header the server acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestHeader {
    pub size: u32,
    pub client: u128,
    pub request_checksum: u128,
    pub timestamp: u64,
    pub request: u64,
    pub operation: u8,
    pub session: u64,
    /// The command code for NonReplicated requests (reserved bytes 196..200).
    pub code: u32,
    /// Protocol 0.12's partition context: the incarnation of the partition's history the
    /// client's route named, the consumer-group owner generation it captured, and the
    /// metadata op it has seen. Zero in 0.11 frames (reserved bytes).
    pub partition_incarnation: u64,
    pub owner_generation: u64,
    pub minimum_metadata_op: u64,
}

fn le<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    bytes[at..at + N].try_into().unwrap()
}

impl RequestHeader {
    pub fn parse(header: &[u8; HEADER_SIZE]) -> Self {
        Self {
            size: u32::from_le_bytes(le(header, 48)),
            client: u128::from_le_bytes(le(header, 128)),
            request_checksum: u128::from_le_bytes(le(header, 144)),
            timestamp: u64::from_le_bytes(le(header, 160)),
            request: u64::from_le_bytes(le(header, 168)),
            operation: header[176],
            session: u64::from_le_bytes(le(header, 184)),
            code: u32::from_le_bytes(le(header, 196)),
            partition_incarnation: u64::from_le_bytes(le(header, 200)),
            owner_generation: u64::from_le_bytes(le(header, 208)),
            minimum_metadata_op: u64::from_le_bytes(le(header, 216)),
        }
    }

    /// Encodes a request header; used by tests and tools that speak to the server raw.
    pub fn encode(&self, body_len: usize) -> [u8; HEADER_SIZE] {
        let mut out = [0u8; HEADER_SIZE];
        out[48..52].copy_from_slice(&((HEADER_SIZE + body_len) as u32).to_le_bytes());
        out[OFFSET_COMMAND] = COMMAND_REQUEST;
        out[128..144].copy_from_slice(&self.client.to_le_bytes());
        out[144..160].copy_from_slice(&self.request_checksum.to_le_bytes());
        out[160..168].copy_from_slice(&self.timestamp.to_le_bytes());
        out[168..176].copy_from_slice(&self.request.to_le_bytes());
        out[176] = self.operation;
        out[184..192].copy_from_slice(&self.session.to_le_bytes());
        out[196..200].copy_from_slice(&self.code.to_le_bytes());
        out[200..208].copy_from_slice(&self.partition_incarnation.to_le_bytes());
        out[208..216].copy_from_slice(&self.owner_generation.to_le_bytes());
        out[216..224].copy_from_slice(&self.minimum_metadata_op.to_le_bytes());
        out
    }

    /// XXH3-64 of the body, zero-extended, as the client stamps it. Zero means "not stamped".
    pub fn checksum_matches(&self, body: &[u8]) -> bool {
        self.request_checksum == 0 || self.request_checksum == crate::checksum::xxh3_64(body) as u128
    }
}

/// Writes a reply frame: header plus `body`, echoing the request's identity fields.
pub fn encode_reply(request: &RequestHeader, commit: u64, status: u32, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_SIZE + body.len()];
    write_reply(&mut out, request, commit, status, body);
    out
}

/// Writes a reply frame into `out`, which must be exactly `256 + body.len()` bytes long (a
/// recycled buffer: every header byte is written, reserved ones as zero).
pub fn write_reply(out: &mut [u8], request: &RequestHeader, commit: u64, status: u32, body: &[u8]) {
    assert_eq!(out.len(), HEADER_SIZE + body.len(), "reply buffer must fit header and body exactly");
    out[HEADER_SIZE..].copy_from_slice(body);
    write_reply_header(out, request, commit, status);
}

/// Writes the reply header into the first 256 bytes of `frame`, whose body already follows
/// (a poll's batches were read into it in place); the size field is the whole frame's.
pub fn write_reply_header(frame: &mut [u8], request: &RequestHeader, commit: u64, status: u32) {
    let size = frame.len() as u32;
    let out = &mut frame[..HEADER_SIZE];
    out.fill(0);
    out[48..52].copy_from_slice(&size.to_le_bytes());
    out[OFFSET_COMMAND] = COMMAND_REPLY;
    out[128..144].copy_from_slice(&request.request_checksum.to_le_bytes());
    out[160..176].copy_from_slice(&request.client.to_le_bytes());
    out[176..184].copy_from_slice(&request.session.to_le_bytes());
    out[184..192].copy_from_slice(&commit.to_le_bytes());
    out[192..200].copy_from_slice(&request.timestamp.to_le_bytes());
    out[200..208].copy_from_slice(&request.request.to_le_bytes());
    out[208] = request.operation;
    out[216..220].copy_from_slice(&status.to_le_bytes());
    // Byte 220 (a committed result's marker) stays zero here (`mark_committed` sets it).
    // The incarnation echo is zero for every 0.11 request.
    out[224..232].copy_from_slice(&request.partition_incarnation.to_le_bytes());
}

/// Marks a written reply as the final committed result of its request, as protocol 0.12
/// reads it: byte 220 is 1 and `op` (176) equals `commit` (184), which must be nonzero.
/// A 0.12 client retrying a request whose first reply it lost accepts only such a reply.
pub fn mark_committed(frame: &mut [u8], commit: u64) {
    if commit == 0 {
        return;
    }
    frame[176..184].copy_from_slice(&commit.to_le_bytes());
    frame[184..192].copy_from_slice(&commit.to_le_bytes());
    frame[220] = 1;
}

/// Why a session is refused or ended; the byte at offset 255 of an Eviction frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum EvictionReason {
    NoSession = 1,
    InvalidRequestOperation = 4,
    InvalidRequestBody = 5,
    /// The frame is larger than the server accepts.
    InvalidRequestBodySize = 6,
    InvalidCredentials = 9,
    InvalidToken = 10,
    UserInactive = 11,
    /// The server will not hold a session for this connection (its connection limit).
    SessionError = 12,
    StaleClient = 13,
    IncompatibleProtocol = 14,
    MalformedLogin = 15,
}

/// An Eviction frame (header only). The protocol window is filled in for reason 14 only.
pub fn encode_eviction(client: u128, reason: EvictionReason, protocol: (u32, u32)) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_SIZE];
    out[48..52].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
    out[OFFSET_COMMAND] = COMMAND_EVICTION;
    // The client id must be non-zero; an id-less peer gets 1 so the frame still decodes.
    out[128..144].copy_from_slice(&client.max(1).to_le_bytes());
    if reason == EvictionReason::IncompatibleProtocol {
        out[144..148].copy_from_slice(&protocol.0.to_le_bytes());
        out[148..152].copy_from_slice(&protocol.1.to_le_bytes());
    }
    out[255] = reason as u8;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ping_golden() -> [u8; HEADER_SIZE] {
        let mut h = [0u8; HEADER_SIZE];
        h[49] = 1;
        h[60] = 5;
        h[128..144].copy_from_slice(&0x11223344556677889900aabbccddeeff_u128.to_le_bytes());
        h[168] = 1;
        h[176] = 2;
        h[196] = 1;
        h
    }

    #[test]
    fn parses_the_ping_golden_vector() {
        let golden = ping_golden();
        assert_eq!(frame_size(&golden), Ok(256));
        let header = RequestHeader::parse(&golden);
        assert_eq!(header.client, 0x11223344556677889900aabbccddeeff);
        assert_eq!((header.request, header.operation, header.code), (1, 2, 1));
        assert_eq!(header.encode(0), golden);
    }

    #[test]
    fn reply_to_ping_echoes_identity() {
        let header = RequestHeader::parse(&ping_golden());
        let reply = encode_reply(&header, 0, 0, &[]);
        assert_eq!(reply.len(), 256);
        assert_eq!(reply[60], COMMAND_REPLY);
        assert_eq!(&reply[48..52], &256u32.to_le_bytes());
        assert_eq!(&reply[160..176], &header.client.to_le_bytes());
        assert_eq!(reply[208], 2);
        assert_eq!(&reply[216..220], &[0; 4]);
    }

    #[test]
    fn rejects_bad_sizes_and_commands() {
        let mut h = ping_golden();
        h[48..52].copy_from_slice(&255u32.to_le_bytes());
        assert_eq!(frame_size(&h), Err(FrameError::BadSize(255)));
        h[48..52].copy_from_slice(&(MAX_FRAME_SIZE as u32 + 1).to_le_bytes());
        assert!(frame_size(&h).is_err());
        let mut h = ping_golden();
        h[60] = 8;
        assert_eq!(frame_size(&h), Err(FrameError::NotARequest(8)));
    }

    #[test]
    fn a_whole_frame_is_one_request_of_exactly_its_length() {
        let ping = ping_golden();
        assert_eq!(whole_frame_header(&ping), Some(&ping));
        let mut longer = ping.to_vec();
        longer.push(0);
        assert_eq!(whole_frame_header(&longer), None, "a byte past the header's size");
        assert_eq!(whole_frame_header(&ping[..HEADER_SIZE - 1]), None, "a short header");
        let mut reply = ping;
        reply[60] = COMMAND_REPLY;
        assert_eq!(whole_frame_header(&reply), None, "not a request");
    }

    #[test]
    fn login_golden_checksum() {
        let mut body = vec![0x00, 0x2c, 0x00, 0x00, 8];
        body.extend_from_slice(b"rust-sdk");
        body.push(6);
        body.extend_from_slice(b"0.11.0");
        body.push(4);
        body.extend_from_slice(b"iggy");
        body.push(4);
        body.extend_from_slice(b"iggy");
        body.extend_from_slice(&[0; 4]);
        assert_eq!(body.len(), 34);
        assert_eq!(xxhash_rust::xxh3::xxh3_64(&body), 0x8fde203c2a3f8095);
        assert_eq!(xxhash_rust::xxh3::xxh3_64(&[]), 0x2d06800538d394c2);
    }
}
