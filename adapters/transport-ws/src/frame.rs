//! WebSocket frame heads (RFC 6455 section 5.2), pure: what a client frame's first bytes
//! say, the head of a server frame, and unmasking a payload in place. No I/O, so the socket
//! can read a head, then the payload straight into a pooled request frame.

/// The opcodes of RFC 6455; anything else is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl Opcode {
    fn from_bits(bits: u8) -> Option<Self> {
        Some(match bits {
            0x0 => Self::Continuation,
            0x1 => Self::Text,
            0x2 => Self::Binary,
            0x8 => Self::Close,
            0x9 => Self::Ping,
            0xA => Self::Pong,
            _ => return None,
        })
    }

    fn bits(self) -> u8 {
        match self {
            Self::Continuation => 0x0,
            Self::Text => 0x1,
            Self::Binary => 0x2,
            Self::Close => 0x8,
            Self::Ping => 0x9,
            Self::Pong => 0xA,
        }
    }

    pub fn is_control(self) -> bool {
        matches!(self, Self::Close | Self::Ping | Self::Pong)
    }
}

/// Why a client frame is refused; each maps to the close code the server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// RSV bits set: no extension (permessage-deflate among them) is ever negotiated.
    ReservedBits,
    UnknownOpcode(u8),
    /// Clients must mask every frame (section 5.1).
    Unmasked,
    /// A control frame longer than 125 bytes or fragmented (section 5.5).
    BadControlFrame,
    /// A 64-bit length with its top bit set (section 5.2 forbids it).
    BadLength,
    /// A message larger than the frame limit.
    TooLarge,
    /// A continuation with no message started, or a new message inside another.
    BadFragmentation,
    /// A Close payload of one byte, or with a status code a peer may not send.
    BadClose,
}

impl FrameError {
    /// The close status code: 1009 for size, 1002 (protocol error) for the rest.
    pub fn close_code(self) -> u16 {
        match self {
            Self::TooLarge => 1009,
            _ => 1002,
        }
    }
}

/// The first two bytes of a client frame, decoded as far as they go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadStart {
    pub fin: bool,
    pub opcode: Opcode,
    /// The 7-bit length field: the length itself up to 125, else 126 or 127.
    short_len: u8,
}

impl HeadStart {
    /// Checks what two bytes can tell: reserved bits, opcode, mask bit, control frames.
    pub fn decode(bytes: [u8; 2]) -> Result<Self, FrameError> {
        if bytes[0] & 0x70 != 0 {
            return Err(FrameError::ReservedBits);
        }
        let opcode = Opcode::from_bits(bytes[0] & 0x0F).ok_or(FrameError::UnknownOpcode(bytes[0] & 0x0F))?;
        if bytes[1] & 0x80 == 0 {
            return Err(FrameError::Unmasked);
        }
        let fin = bytes[0] & 0x80 != 0;
        let short_len = bytes[1] & 0x7F;
        if opcode.is_control() && (!fin || short_len > 125) {
            return Err(FrameError::BadControlFrame);
        }
        Ok(Self { fin, opcode, short_len })
    }

    /// How many head bytes follow these two: the extended length and the 4-byte mask key.
    pub fn rest_len(self) -> usize {
        4 + match self.short_len {
            126 => 2,
            127 => 8,
            _ => 0,
        }
    }

    /// The payload length and mask key from the `rest_len()` bytes that follow.
    pub fn finish(self, rest: &[u8]) -> Result<(u64, [u8; 4]), FrameError> {
        debug_assert_eq!(rest.len(), self.rest_len());
        let (len, key) = match self.short_len {
            126 => (u64::from(u16::from_be_bytes([rest[0], rest[1]])), &rest[2..]),
            127 => {
                let len = u64::from_be_bytes(rest[..8].try_into().expect("eight length bytes"));
                if len >> 63 != 0 {
                    return Err(FrameError::BadLength);
                }
                (len, &rest[8..])
            }
            short => (u64::from(short), rest),
        };
        Ok((len, key.try_into().expect("four mask bytes")))
    }
}

/// The longest server frame head: two bytes and a 64-bit length (servers never mask).
pub const MAX_HEAD_LEN: usize = 10;

/// The head of an unfragmented, unmasked server frame of `len` payload bytes; the first
/// `.1` bytes of the array are the head.
pub fn server_head(opcode: Opcode, len: usize) -> ([u8; MAX_HEAD_LEN], usize) {
    let mut head = [0u8; MAX_HEAD_LEN];
    head[0] = 0x80 | opcode.bits();
    let used = match len {
        0..=125 => {
            head[1] = len as u8;
            2
        }
        126..=0xFFFF => {
            head[1] = 126;
            head[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            4
        }
        _ => {
            head[1] = 127;
            head[2..10].copy_from_slice(&(len as u64).to_be_bytes());
            10
        }
    };
    (head, used)
}

/// XORs `payload` with the mask key, as if the payload started `offset` bytes into its
/// frame (a frame read in pieces). Eight bytes at a time: a 1 MB send is unmasked on every
/// request, so a byte loop would show in the profile.
pub fn unmask(payload: &mut [u8], key: [u8; 4], offset: usize) {
    let mut key = key;
    key.rotate_left(offset % 4);
    let word = u64::from_ne_bytes([key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3]]);
    let mut chunks = payload.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let value = u64::from_ne_bytes((&*chunk).try_into().expect("eight bytes")) ^ word;
        chunk.copy_from_slice(&value.to_ne_bytes());
    }
    for (index, byte) in chunks.into_remainder().iter_mut().enumerate() {
        *byte ^= key[index % 4];
    }
}

/// The status code a server answers a client's Close payload with: the client's own code
/// (section 5.5.1), 1000 when it sent none. A one-byte payload, or a code a peer may not send
/// (section 7.4.1: below 1000, 1004 to 1006, 1015, up to 2999 unassigned), is a protocol error.
pub fn close_code(payload: &[u8]) -> Result<u16, FrameError> {
    match payload {
        [] => Ok(1000),
        [_] => Err(FrameError::BadClose),
        [high, low, ..] => match u16::from_be_bytes([*high, *low]) {
            code @ (1000..=1003 | 1007..=1014 | 3000..=4999) => Ok(code),
            _ => Err(FrameError::BadClose),
        },
    }
}

/// The payload of a server close frame: the status code, no reason.
pub fn close_payload(code: u16) -> [u8; 2] {
    code.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(payload: &[u8], key: [u8; 4]) -> Vec<u8> {
        payload.iter().enumerate().map(|(index, byte)| byte ^ key[index % 4]).collect()
    }

    #[test]
    fn unmasking_undoes_the_client_mask_at_any_offset() {
        let payload: Vec<u8> = (0..1000u32).map(|value| (value * 7) as u8).collect();
        let key = [0x12, 0x34, 0x56, 0x78];
        let mut whole = masked(&payload, key);
        unmask(&mut whole, key, 0);
        assert_eq!(whole, payload);
        // In pieces of awkward sizes, each told where it starts.
        let mut pieces = masked(&payload, key);
        let mut start = 0;
        for size in [3, 1, 13, 64, 7] {
            unmask(&mut pieces[start..start + size], key, start);
            start += size;
        }
        unmask(&mut pieces[start..], key, start);
        assert_eq!(pieces, payload);
    }

    #[test]
    fn heads_decode_lengths_and_keys() {
        let start = HeadStart::decode([0x82, 0x80 | 5]).unwrap();
        assert_eq!((start.fin, start.opcode, start.rest_len()), (true, Opcode::Binary, 4));
        assert_eq!(start.finish(&[1, 2, 3, 4]), Ok((5, [1, 2, 3, 4])));
        let start = HeadStart::decode([0x02, 0x80 | 126]).unwrap();
        assert_eq!((start.fin, start.rest_len()), (false, 6));
        assert_eq!(start.finish(&[0x01, 0x00, 9, 9, 9, 9]), Ok((256, [9; 4])));
        let start = HeadStart::decode([0x80, 0x80 | 127]).unwrap();
        assert_eq!(start.opcode, Opcode::Continuation);
        let mut rest = (1u64 << 40).to_be_bytes().to_vec();
        rest.extend([5; 4]);
        assert_eq!(start.finish(&rest), Ok((1 << 40, [5; 4])));
        let mut lying = (1u64 << 63).to_be_bytes().to_vec();
        lying.extend([0; 4]);
        assert_eq!(start.finish(&lying), Err(FrameError::BadLength));
    }

    #[test]
    fn refusals_are_decided_from_the_first_two_bytes() {
        assert_eq!(HeadStart::decode([0x80 | 0x40 | 0x02, 0x80]), Err(FrameError::ReservedBits));
        assert_eq!(HeadStart::decode([0x83, 0x80]), Err(FrameError::UnknownOpcode(3)));
        assert_eq!(HeadStart::decode([0x82, 10]), Err(FrameError::Unmasked));
        assert_eq!(HeadStart::decode([0x89, 0x80 | 126]), Err(FrameError::BadControlFrame));
        assert_eq!(HeadStart::decode([0x09, 0x80]), Err(FrameError::BadControlFrame), "a fragmented ping");
        assert!(HeadStart::decode([0x89, 0x80 | 125]).is_ok());
        assert_eq!(FrameError::TooLarge.close_code(), 1009);
        assert_eq!(close_code(&[]), Ok(1000));
        assert_eq!(close_code(&[0x03, 0xE9, b'b', b'y', b'e']), Ok(1001), "the client's code is echoed");
        assert_eq!(close_code(&[0x0F, 0xA0]), Ok(4000));
        for bad in [&[0x03][..], &[0x03, 0xED], &[0x03, 0xE7], &[0x03, 0xF7], &[0x07, 0xD0]] {
            assert_eq!(close_code(bad), Err(FrameError::BadClose), "{bad:?}");
        }
        assert_eq!(FrameError::Unmasked.close_code(), 1002);
    }

    #[test]
    fn server_heads_pick_the_shortest_length_form() {
        assert_eq!(server_head(Opcode::Binary, 125), ([0x82, 125, 0, 0, 0, 0, 0, 0, 0, 0], 2));
        assert_eq!(server_head(Opcode::Binary, 300).0[..4], [0x82, 126, 0x01, 0x2C]);
        assert_eq!(server_head(Opcode::Pong, 0).0[..2], [0x8A, 0]);
        let (head, used) = server_head(Opcode::Binary, 1 << 20);
        assert_eq!((used, head[1]), (10, 127));
        assert_eq!(u64::from_be_bytes(head[2..10].try_into().unwrap()), 1 << 20);
    }
}
