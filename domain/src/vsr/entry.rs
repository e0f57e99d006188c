//! A journal entry (one prepared operation and its link in the log's hash chain), a checkpoint
//! of the applied state, and the checksummed byte formats an adapter stores them in.

use crate::checksum::xxh3_128;

/// Checksum of the virtual entry before op 1: the root of every replica's hash chain.
pub const ROOT_CHECKSUM: u128 = 0;
/// Largest body an entry may carry; longer lengths in a frame are rejected before allocating.
/// A partition group's send carries its whole batch, so this bounds a replicated batch.
pub const ENTRY_BODY_MAX: usize = 4 << 20;
/// Largest checkpoint state a frame may announce.
pub const CHECKPOINT_STATE_MAX: usize = 1 << 30;

/// op, view, timestamp, client_id, request_number, parent, operation, body length.
const HEADER_SIZE: usize = 8 + 4 + 8 + 16 + 8 + 16 + 1 + 4;
/// The length prefix plus the checksum in front of the checksummed bytes.
const FRAME_PREFIX: usize = 4 + 16;
/// op, entry checksum, timestamp, state length.
const CHECKPOINT_HEADER_SIZE: usize = 8 + 16 + 8 + 4;

/// One operation in the log. `parent` is the checksum of the entry at `op - 1`
/// ([`ROOT_CHECKSUM`] for op 1), so an entry vouches for its whole prefix: a replica that holds
/// the canonical entry at some op can tell which copy of every earlier op is the right one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub op: u64,
    /// The view in which the entry was prepared.
    pub view: u32,
    /// Assigned by the primary: the state machine's only source of time.
    pub timestamp: u64,
    pub client_id: u128,
    pub request_number: u64,
    pub operation: u8,
    pub parent: u128,
    pub body: Vec<u8>,
    /// xxh3-128 over every other field and the body.
    pub checksum: u128,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryError {
    /// Fewer bytes than the frame announces (a torn write).
    Truncated,
    /// A length beyond the limits (garbage, never allocated).
    TooLarge,
    /// The bytes do not hash to the stored checksum (a bit flip).
    Checksum,
    /// Bytes after the one frame `decode` expects.
    Trailing,
}

impl Entry {
    /// Fills in `checksum` from the other fields.
    pub fn seal(mut self) -> Self {
        self.checksum = self.compute_checksum();
        self
    }

    pub fn compute_checksum(&self) -> u128 {
        crate::checksum::xxh3_128_parts(&[&self.header_bytes(), &self.body])
    }

    /// Whether the stored checksum matches the content (and the body is within bounds).
    pub fn verify(&self) -> bool {
        self.body.len() <= ENTRY_BODY_MAX && self.compute_checksum() == self.checksum
    }

    fn header_bytes(&self) -> [u8; HEADER_SIZE] {
        let mut header = [0u8; HEADER_SIZE];
        let mut writer = Writer { bytes: &mut header, at: 0 };
        writer.put(&self.op.to_le_bytes());
        writer.put(&self.view.to_le_bytes());
        writer.put(&self.timestamp.to_le_bytes());
        writer.put(&self.client_id.to_le_bytes());
        writer.put(&self.request_number.to_le_bytes());
        writer.put(&self.parent.to_le_bytes());
        writer.put(&[self.operation]);
        writer.put(&(self.body.len() as u32).to_le_bytes());
        header
    }

    /// `[u32 length of the rest][u128 checksum][header][body]`, little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let rest = 16 + HEADER_SIZE + self.body.len();
        let mut bytes = Vec::with_capacity(4 + rest);
        bytes.extend_from_slice(&(rest as u32).to_le_bytes());
        bytes.extend_from_slice(&self.checksum.to_le_bytes());
        bytes.extend_from_slice(&self.header_bytes());
        bytes.extend_from_slice(&self.body);
        bytes
    }

    /// Decodes exactly one frame.
    pub fn decode(bytes: &[u8]) -> Result<Self, EntryError> {
        let (entry, used) = Self::decode_prefix(bytes)?;
        if used != bytes.len() {
            return Err(EntryError::Trailing);
        }
        Ok(entry)
    }

    /// Decodes the frame at the start of `bytes` and returns it with the bytes it used, so a
    /// journal can be read frame after frame.
    pub fn decode_prefix(bytes: &[u8]) -> Result<(Self, usize), EntryError> {
        let rest = read_len(bytes)?;
        if !(16 + HEADER_SIZE..=16 + HEADER_SIZE + ENTRY_BODY_MAX).contains(&rest) {
            return Err(EntryError::TooLarge);
        }
        let Some(frame) = bytes.get(4..4 + rest) else { return Err(EntryError::Truncated) };
        let mut reader = Reader { bytes: frame, at: 0 };
        let checksum = reader.u128();
        let entry = Entry {
            op: reader.u64(),
            view: reader.u32(),
            timestamp: reader.u64(),
            client_id: reader.u128(),
            request_number: reader.u64(),
            parent: reader.u128(),
            operation: reader.u8(),
            body: Vec::new(),
            checksum,
        };
        let body_len = reader.u32() as usize;
        if 16 + HEADER_SIZE + body_len != rest {
            return Err(EntryError::TooLarge);
        }
        let entry = Entry { body: frame[16 + HEADER_SIZE..].to_vec(), ..entry };
        if xxh3_128(&frame[16..]) != checksum {
            return Err(EntryError::Checksum);
        }
        Ok((entry, 4 + rest))
    }
}

/// The applied state at a checkpoint op: the state machine's snapshot and the client table,
/// encoded together in `state`, plus what the log needs to continue the chain after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub op: u64,
    /// Checksum of the entry at `op`: the parent of the entry at `op + 1`.
    pub checksum: u128,
    /// Timestamp of the entry at `op`, so a primary's next timestamp stays monotonic.
    pub timestamp: u64,
    pub state: Vec<u8>,
}

impl Checkpoint {
    /// `[u32 length of the rest][u128 xxh3 of what follows][op][checksum][timestamp][u32][state]`.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(CHECKPOINT_HEADER_SIZE + self.state.len());
        body.extend_from_slice(&self.op.to_le_bytes());
        body.extend_from_slice(&self.checksum.to_le_bytes());
        body.extend_from_slice(&self.timestamp.to_le_bytes());
        body.extend_from_slice(&(self.state.len() as u32).to_le_bytes());
        body.extend_from_slice(&self.state);
        let mut bytes = Vec::with_capacity(FRAME_PREFIX + body.len());
        bytes.extend_from_slice(&((16 + body.len()) as u32).to_le_bytes());
        bytes.extend_from_slice(&xxh3_128(&body).to_le_bytes());
        bytes.extend_from_slice(&body);
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EntryError> {
        let rest = read_len(bytes)?;
        if !(16 + CHECKPOINT_HEADER_SIZE..=16 + CHECKPOINT_HEADER_SIZE + CHECKPOINT_STATE_MAX).contains(&rest) {
            return Err(EntryError::TooLarge);
        }
        let Some(frame) = bytes.get(4..4 + rest) else { return Err(EntryError::Truncated) };
        if bytes.len() != 4 + rest {
            return Err(EntryError::Trailing);
        }
        let mut reader = Reader { bytes: frame, at: 0 };
        let checksum = reader.u128();
        if xxh3_128(&frame[16..]) != checksum {
            return Err(EntryError::Checksum);
        }
        let (op, entry_checksum, timestamp) = (reader.u64(), reader.u128(), reader.u64());
        let state_len = reader.u32() as usize;
        if 16 + CHECKPOINT_HEADER_SIZE + state_len != rest {
            return Err(EntryError::TooLarge);
        }
        Ok(Checkpoint { op, checksum: entry_checksum, timestamp, state: frame[16 + CHECKPOINT_HEADER_SIZE..].to_vec() })
    }
}

fn read_len(bytes: &[u8]) -> Result<usize, EntryError> {
    let Some(prefix) = bytes.get(..4) else { return Err(EntryError::Truncated) };
    Ok(u32::from_le_bytes(prefix.try_into().expect("four bytes")) as usize)
}

struct Writer<'a> {
    bytes: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, value: &[u8]) {
        self.bytes[self.at..self.at + value.len()].copy_from_slice(value);
        self.at += value.len();
    }
}

/// Reads fixed-size fields from a slice whose length the caller has already checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let value = self.bytes[self.at..self.at + N].try_into().expect("length checked by the caller");
        self.at += N;
        value
    }

    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }

    fn u128(&mut self) -> u128 {
        u128::from_le_bytes(self.take())
    }
}
