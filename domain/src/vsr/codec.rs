//! The bytes replicas send each other: one [`Message`] per self-delimiting, checksummed frame.
//!
//! A frame is `[len u32][checksum u128][kind u8][fields...]`, little-endian, where `len` counts
//! every byte after itself and `checksum` is xxh3-128 of every byte after itself. A transport
//! reads the 4-byte prefix, asks [`frame_len`] how much to read (refused before allocating when
//! absurd), then hands the frame to [`decode_message`]. Decoding checks shape only, never panics
//! and never allocates out of proportion to its input; whether the content makes sense (chains,
//! replica ids) is the replica's job when the message arrives.

use crate::checksum::xxh3_128;

use super::entry::{Checkpoint, Entry, EntryError};
use super::message::{LogSuffix, Message};

/// Largest `len` a frame may announce (the bytes after its length prefix). A view change
/// carries a whole log: a partition group's (32 entries of at most `ENTRY_BODY_MAX`) fits,
/// as does the metadata log's (544 entries of at most 64 KiB).
pub const MESSAGE_MAX: usize = 160 << 20;

/// Length prefix plus checksum: the bytes in front of the kind.
const FRAME_HEADER: usize = 4 + 16;
/// Smallest encoded entry (length prefix, checksum, fixed header, empty body). Bounds how many
/// entries a count may announce for the bytes that are left.
const ENTRY_FRAME_MIN: usize = 4 + 16 + 65;

const PREPARE: u8 = 1;
const PREPARE_OK: u8 = 2;
const COMMIT: u8 = 3;
const START_VIEW_CHANGE: u8 = 4;
const DO_VIEW_CHANGE: u8 = 5;
const START_VIEW: u8 = 6;
const REQUEST_START_VIEW: u8 = 7;
const RECOVERY: u8 = 8;
const RECOVERY_RESPONSE: u8 = 9;
const REQUEST_PREPARE: u8 = 10;
const REPAIR: u8 = 11;
const GET_STATE: u8 = 12;
const NEW_STATE: u8 = 13;
const REQUEST: u8 = 14;
const REPLY: u8 = 15;
const REQUEST_BATCHES: u8 = 16;
const BATCHES: u8 = 17;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// Fewer bytes than the frame announces.
    #[error("message frame truncated")]
    Truncated,
    /// The frame announces more than [`MESSAGE_MAX`] bytes.
    #[error("message frame too large")]
    TooLarge,
    /// The frame (or an entry inside it) does not hash to its stored checksum.
    #[error("message checksum mismatch")]
    Checksum,
    /// The kind byte names no message.
    #[error("unknown message kind")]
    UnknownKind,
    /// The checksum holds but the fields do not parse: the sender encoded something else.
    #[error("malformed message")]
    Malformed,
    /// Bytes after the one frame `decode_message` expects.
    #[error("trailing bytes after message frame")]
    Trailing,
}

/// Encodes `message` as one frame. The caller keeps messages under [`MESSAGE_MAX`] (the replica
/// bounds its batches); a larger frame is refused by every receiver.
pub fn encode_message(message: &Message) -> Vec<u8> {
    let mut writer = Writer(vec![0; FRAME_HEADER]);
    put_message(&mut writer, message);
    seal(writer.0)
}

/// Fills in the length and checksum in front of the body that starts at [`FRAME_HEADER`].
fn seal(mut frame: Vec<u8>) -> Vec<u8> {
    let checksum = xxh3_128(&frame[FRAME_HEADER..]);
    let len = (frame.len() - 4) as u32;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    frame[4..FRAME_HEADER].copy_from_slice(&checksum.to_le_bytes());
    frame
}

fn put_message(w: &mut Writer, message: &Message) {
    match message {
        Message::Prepare { view, commit, entry } => w.u8(PREPARE).u32(*view).u64(*commit).entry(entry),
        Message::PrepareOk { view, replica, op, checksum } => {
            w.u8(PREPARE_OK).u32(*view).u8(*replica).u64(*op).u128(*checksum)
        }
        Message::Commit { view, commit } => w.u8(COMMIT).u32(*view).u64(*commit),
        Message::StartViewChange { view, replica } => w.u8(START_VIEW_CHANGE).u32(*view).u8(*replica),
        Message::DoViewChange { view, replica, log_view, log } => {
            w.u8(DO_VIEW_CHANGE).u32(*view).u8(*replica).u32(*log_view).log(log)
        }
        Message::StartView { view, log } => w.u8(START_VIEW).u32(*view).log(log),
        Message::RequestStartView { view, replica } => w.u8(REQUEST_START_VIEW).u32(*view).u8(*replica),
        Message::Recovery { replica, nonce } => w.u8(RECOVERY).u8(*replica).u64(*nonce),
        Message::RecoveryResponse { view, replica, nonce, log } => {
            let w = w.u8(RECOVERY_RESPONSE).u32(*view).u8(*replica).u64(*nonce).u8(log.is_some() as u8);
            match log {
                Some(log) => w.log(log),
                None => w,
            }
        }
        Message::RequestPrepare { replica, op, checksum } => {
            w.u8(REQUEST_PREPARE).u8(*replica).u64(*op).u128(*checksum)
        }
        Message::Repair { replica, entries } => w.u8(REPAIR).u8(*replica).entries(entries),
        Message::GetState { view, replica, commit } => w.u8(GET_STATE).u32(*view).u8(*replica).u64(*commit),
        Message::NewState { view, replica, checkpoint, entries } => {
            let w = w.u8(NEW_STATE).u32(*view).u8(*replica).u8(checkpoint.is_some() as u8);
            let w = match checkpoint {
                Some(checkpoint) => w.checkpoint(checkpoint),
                None => w,
            };
            w.entries(entries)
        }
        Message::Request { client_id, request_number, operation, body } => {
            w.u8(REQUEST).u128(*client_id).u64(*request_number).u8(*operation).blob(body)
        }
        Message::Reply { client_id, request_number, reply } => {
            w.u8(REPLY).u128(*client_id).u64(*request_number).blob(reply)
        }
        Message::RequestBatches { replica, partition, incarnation, from_offset, to_offset } => {
            w.u8(REQUEST_BATCHES).u8(*replica).u64(*partition).u64(*incarnation).u64(*from_offset).u64(*to_offset)
        }
        Message::Batches { replica, partition, incarnation, from_offset, log_start, batches } => {
            w.u8(BATCHES).u8(*replica).u64(*partition).u64(*incarnation).u64(*from_offset).u64(*log_start).blob(batches)
        }
    };
}

/// How many bytes the whole frame (prefix included) has, from its 4-byte length prefix, so a
/// stream reader knows how much to read before it allocates anything.
pub fn frame_len(prefix: &[u8; 4]) -> Result<usize, MessageError> {
    let len = u32::from_le_bytes(*prefix) as usize;
    if len > MESSAGE_MAX {
        return Err(MessageError::TooLarge);
    }
    // Every frame has at least a checksum and a kind; refusing less here spares a read.
    if len < FRAME_HEADER - 4 + 1 {
        return Err(MessageError::Malformed);
    }
    Ok(4 + len)
}

/// Decodes exactly one frame: bytes after it are an error, not the start of the next message.
pub fn decode_message(bytes: &[u8]) -> Result<Message, MessageError> {
    let Some(prefix) = bytes.first_chunk::<4>() else { return Err(MessageError::Truncated) };
    let total = frame_len(prefix)?;
    if bytes.len() < total {
        return Err(MessageError::Truncated);
    }
    if bytes.len() > total {
        return Err(MessageError::Trailing);
    }
    let Some((checksum, body)) = bytes[4..].split_first_chunk::<16>() else { return Err(MessageError::Truncated) };
    if xxh3_128(body) != u128::from_le_bytes(*checksum) {
        return Err(MessageError::Checksum);
    }
    let mut reader = Reader(body);
    let message = read_message(&mut reader)?;
    // The checksum vouches for the sender, so leftover fields mean it encoded something else.
    if !reader.0.is_empty() {
        return Err(MessageError::Malformed);
    }
    Ok(message)
}

fn read_message(r: &mut Reader<'_>) -> Result<Message, MessageError> {
    // Struct fields are evaluated in the order written, which is the order on the wire.
    Ok(match r.u8()? {
        PREPARE => Message::Prepare { view: r.u32()?, commit: r.u64()?, entry: r.entry()? },
        PREPARE_OK => Message::PrepareOk { view: r.u32()?, replica: r.u8()?, op: r.u64()?, checksum: r.u128()? },
        COMMIT => Message::Commit { view: r.u32()?, commit: r.u64()? },
        START_VIEW_CHANGE => Message::StartViewChange { view: r.u32()?, replica: r.u8()? },
        DO_VIEW_CHANGE => Message::DoViewChange { view: r.u32()?, replica: r.u8()?, log_view: r.u32()?, log: r.log()? },
        START_VIEW => Message::StartView { view: r.u32()?, log: r.log()? },
        REQUEST_START_VIEW => Message::RequestStartView { view: r.u32()?, replica: r.u8()? },
        RECOVERY => Message::Recovery { replica: r.u8()?, nonce: r.u64()? },
        RECOVERY_RESPONSE => Message::RecoveryResponse {
            view: r.u32()?,
            replica: r.u8()?,
            nonce: r.u64()?,
            log: if r.present()? { Some(r.log()?) } else { None },
        },
        REQUEST_PREPARE => Message::RequestPrepare { replica: r.u8()?, op: r.u64()?, checksum: r.u128()? },
        REPAIR => Message::Repair { replica: r.u8()?, entries: r.entries()? },
        GET_STATE => Message::GetState { view: r.u32()?, replica: r.u8()?, commit: r.u64()? },
        NEW_STATE => Message::NewState {
            view: r.u32()?,
            replica: r.u8()?,
            checkpoint: if r.present()? { Some(r.checkpoint()?) } else { None },
            entries: r.entries()?,
        },
        REQUEST => {
            Message::Request { client_id: r.u128()?, request_number: r.u64()?, operation: r.u8()?, body: r.blob()? }
        }
        REPLY => Message::Reply { client_id: r.u128()?, request_number: r.u64()?, reply: r.blob()? },
        REQUEST_BATCHES => Message::RequestBatches {
            replica: r.u8()?,
            partition: r.u64()?,
            incarnation: r.u64()?,
            from_offset: r.u64()?,
            to_offset: r.u64()?,
        },
        BATCHES => Message::Batches {
            replica: r.u8()?,
            partition: r.u64()?,
            incarnation: r.u64()?,
            from_offset: r.u64()?,
            log_start: r.u64()?,
            batches: r.blob()?,
        },
        _ => return Err(MessageError::UnknownKind),
    })
}

/// Appends little-endian fields; each method returns the writer so a variant is one chain.
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, value: u8) -> &mut Self {
        self.0.push(value);
        self
    }

    fn u32(&mut self, value: u32) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }

    fn u64(&mut self, value: u64) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }

    fn u128(&mut self, value: u128) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// An entry frame is length-prefixed already, so it needs no wrapper.
    fn entry(&mut self, entry: &Entry) -> &mut Self {
        self.0.extend_from_slice(&entry.encode());
        self
    }

    fn entries(&mut self, entries: &[Entry]) -> &mut Self {
        self.u32(entries.len() as u32);
        entries.iter().fold(self, |w, entry| w.entry(entry))
    }

    fn log(&mut self, log: &LogSuffix) -> &mut Self {
        self.u64(log.op).u128(log.op_checksum).u64(log.commit).entries(&log.entries)
    }

    /// Bytes with a `u32` length in front.
    fn blob(&mut self, bytes: &[u8]) -> &mut Self {
        self.u32(bytes.len() as u32);
        self.0.extend_from_slice(bytes);
        self
    }

    /// `Checkpoint::decode` wants exactly its frame, hence the outer length.
    fn checkpoint(&mut self, checkpoint: &Checkpoint) -> &mut Self {
        let bytes = checkpoint.encode();
        self.u32(bytes.len() as u32);
        self.0.extend_from_slice(&bytes);
        self
    }
}

/// A cursor over a checksummed body: every read checks the bytes left first.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], MessageError> {
        let (head, rest) = self.0.split_first_chunk::<N>().ok_or(MessageError::Malformed)?;
        self.0 = rest;
        Ok(*head)
    }

    fn bytes(&mut self, len: usize) -> Result<&'a [u8], MessageError> {
        if len > self.0.len() {
            return Err(MessageError::Malformed);
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, MessageError> {
        Ok(self.take::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, MessageError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64, MessageError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn u128(&mut self) -> Result<u128, MessageError> {
        Ok(u128::from_le_bytes(self.take()?))
    }

    /// An `Option`'s presence byte; anything but 0 or 1 is not something we encode.
    fn present(&mut self) -> Result<bool, MessageError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(MessageError::Malformed),
        }
    }

    fn entry(&mut self) -> Result<Entry, MessageError> {
        let (entry, used) = Entry::decode_prefix(self.0).map_err(entry_error)?;
        self.bytes(used)?;
        Ok(entry)
    }

    fn entries(&mut self) -> Result<Vec<Entry>, MessageError> {
        let count = self.u32()? as usize;
        // A lying count must not reserve more than the bytes left could hold.
        if count > self.0.len() / ENTRY_FRAME_MIN {
            return Err(MessageError::Malformed);
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            entries.push(self.entry()?);
        }
        Ok(entries)
    }

    fn log(&mut self) -> Result<LogSuffix, MessageError> {
        Ok(LogSuffix { op: self.u64()?, op_checksum: self.u128()?, commit: self.u64()?, entries: self.entries()? })
    }

    fn blob(&mut self) -> Result<Vec<u8>, MessageError> {
        let len = self.u32()? as usize;
        Ok(self.bytes(len)?.to_vec())
    }

    fn checkpoint(&mut self) -> Result<Checkpoint, MessageError> {
        let len = self.u32()? as usize;
        Checkpoint::decode(self.bytes(len)?).map_err(entry_error)
    }
}

/// Inside a frame whose checksum held, a broken entry or checkpoint is the sender's encoding
/// error, except a checksum mismatch, which stays one (the entry's own checksum caught it).
fn entry_error(error: EntryError) -> MessageError {
    match error {
        EntryError::Checksum => MessageError::Checksum,
        EntryError::Truncated | EntryError::TooLarge | EntryError::Trailing => MessageError::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vsr::entry::ROOT_CHECKSUM;

    /// `count` sealed entries from op `first`, each the parent of the next, bodies of varied size.
    fn chain(first: u64, count: u64, parent: u128) -> Vec<Entry> {
        let mut parent = parent;
        (first..first + count)
            .map(|op| {
                let entry = Entry {
                    op,
                    view: 3,
                    timestamp: 1_000 + op,
                    client_id: 0xC11E_u128 << 64 | u128::from(op),
                    request_number: op * 7,
                    operation: (op % 5) as u8,
                    parent,
                    body: (0..op * 13 % 40).map(|i| (i * 31 + op) as u8).collect(),
                    checksum: 0,
                }
                .seal();
                parent = entry.checksum;
                entry
            })
            .collect()
    }

    fn checkpoint(entries: &[Entry]) -> Checkpoint {
        let last = entries.last().expect("a chain");
        Checkpoint { op: last.op, checksum: last.checksum, timestamp: last.timestamp, state: b"snapshot".repeat(9) }
    }

    fn log(entries: Vec<Entry>, commit: u64) -> LogSuffix {
        let last = entries.last().expect("a chain");
        LogSuffix { op: last.op, op_checksum: last.checksum, commit, entries }
    }

    /// Every variant, with both arms of every `Option` and empty as well as long entry lists.
    fn samples() -> Vec<Message> {
        let entries = chain(1, 6, ROOT_CHECKSUM);
        let tail = chain(7, 3, entries[5].checksum);
        let empty = LogSuffix { op: 0, op_checksum: ROOT_CHECKSUM, commit: 0, entries: Vec::new() };
        vec![
            Message::Prepare { view: 3, commit: 5, entry: entries[5].clone() },
            Message::PrepareOk { view: 3, replica: 2, op: 6, checksum: entries[5].checksum },
            Message::Commit { view: u32::MAX, commit: u64::MAX },
            Message::StartViewChange { view: 4, replica: 1 },
            Message::DoViewChange { view: 4, replica: 2, log_view: 3, log: log(entries.clone(), 4) },
            Message::DoViewChange { view: 4, replica: 0, log_view: 0, log: empty.clone() },
            Message::StartView { view: 4, log: log(tail.clone(), 6) },
            Message::RequestStartView { view: 9, replica: 30 },
            Message::Recovery { replica: 1, nonce: 0xDEAD_BEEF_F00D },
            Message::RecoveryResponse { view: 4, replica: 0, nonce: 77, log: Some(log(entries.clone(), 6)) },
            Message::RecoveryResponse { view: 4, replica: 2, nonce: 77, log: None },
            Message::RecoveryResponse { view: 4, replica: 0, nonce: 78, log: Some(empty) },
            Message::RequestPrepare { replica: 2, op: 4, checksum: entries[3].checksum },
            Message::Repair { replica: 1, entries: entries.iter().rev().take(4).cloned().collect() },
            Message::Repair { replica: 1, entries: Vec::new() },
            Message::GetState { view: 4, replica: 2, commit: 3 },
            Message::NewState { view: 4, replica: 0, checkpoint: Some(checkpoint(&entries)), entries: tail.clone() },
            Message::NewState { view: 4, replica: 0, checkpoint: Some(checkpoint(&entries)), entries: Vec::new() },
            Message::NewState { view: 4, replica: 0, checkpoint: None, entries: tail },
            Message::Request { client_id: 7 << 64 | 3, request_number: 9, operation: 160, body: vec![5; 33] },
            Message::Request { client_id: 1, request_number: 1, operation: 161, body: Vec::new() },
            Message::Reply { client_id: 7 << 64 | 3, request_number: 9, reply: vec![0; 20] },
            Message::RequestBatches {
                replica: 2,
                partition: 1 << 40 | 7,
                incarnation: 5,
                from_offset: 10,
                to_offset: 250,
            },
            Message::Batches {
                replica: 0,
                partition: 1 << 40 | 7,
                incarnation: 5,
                from_offset: 10,
                log_start: 4,
                batches: vec![3; 90],
            },
            Message::Batches {
                replica: 1,
                partition: 9,
                incarnation: u64::MAX,
                from_offset: 0,
                log_start: 70,
                batches: Vec::new(),
            },
        ]
    }

    /// A frame around an arbitrary body, so the parser behind the checksum can be reached.
    fn frame(body: &[u8]) -> Vec<u8> {
        seal([&[0; FRAME_HEADER][..], body].concat())
    }

    /// xorshift64: deterministic garbage without a dependency.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn bytes(&mut self, len: usize) -> Vec<u8> {
            (0..len).map(|_| self.next() as u8).collect()
        }
    }

    #[test]
    fn every_variant_round_trips() {
        let mut kinds = Vec::new();
        for message in samples() {
            let bytes = encode_message(&message);
            assert_eq!(decode_message(&bytes), Ok(message.clone()));
            kinds.push(bytes[FRAME_HEADER]);
        }
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds, (PREPARE..=BATCHES).collect::<Vec<_>>(), "every kind is covered");
    }

    #[test]
    fn frame_len_agrees_and_refuses_oversized() {
        for message in samples() {
            let bytes = encode_message(&message);
            assert_eq!(frame_len(bytes.first_chunk().unwrap()), Ok(bytes.len()));
        }
        assert_eq!(frame_len(&(MESSAGE_MAX as u32).to_le_bytes()), Ok(4 + MESSAGE_MAX));
        assert_eq!(frame_len(&(MESSAGE_MAX as u32 + 1).to_le_bytes()), Err(MessageError::TooLarge));
        assert_eq!(frame_len(&u32::MAX.to_le_bytes()), Err(MessageError::TooLarge));
        for len in 0..17u32 {
            assert_eq!(frame_len(&len.to_le_bytes()), Err(MessageError::Malformed));
        }
        let mut oversized = (MESSAGE_MAX as u32 + 1).to_le_bytes().to_vec();
        oversized.resize(64, 0);
        assert_eq!(decode_message(&oversized), Err(MessageError::TooLarge));
    }

    #[test]
    fn entry_frame_min_matches_an_empty_entry() {
        let entry = Entry { body: Vec::new(), ..chain(1, 1, ROOT_CHECKSUM).remove(0) }.seal();
        assert_eq!(entry.encode().len(), ENTRY_FRAME_MIN);
    }

    #[test]
    fn every_truncation_and_trailing_byte_is_an_error() {
        for message in samples() {
            let bytes = encode_message(&message);
            for cut in 0..bytes.len() {
                assert!(decode_message(&bytes[..cut]).is_err(), "cut at {cut} of {message:?}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(decode_message(&longer), Err(MessageError::Trailing));
        }
    }

    #[test]
    fn every_flipped_byte_is_an_error() {
        for message in samples() {
            let bytes = encode_message(&message);
            for at in 0..bytes.len() {
                for mask in [0x01, 0x80, 0xFF] {
                    let mut flipped = bytes.clone();
                    flipped[at] ^= mask;
                    let result = decode_message(&flipped);
                    if at >= 4 {
                        assert_eq!(result, Err(MessageError::Checksum), "byte {at} of {message:?}");
                    } else {
                        assert!(result.is_err(), "length byte {at} of {message:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn resealed_truncated_bodies_are_malformed() {
        // Behind a valid checksum, a body cut short must still fail to parse.
        for message in samples() {
            let bytes = encode_message(&message);
            for cut in FRAME_HEADER..bytes.len() {
                assert_eq!(decode_message(&frame(&bytes[FRAME_HEADER..cut])), Err(MessageError::Malformed));
            }
            let mut longer = bytes[FRAME_HEADER..].to_vec();
            longer.push(0);
            assert_eq!(decode_message(&frame(&longer)), Err(MessageError::Malformed));
        }
    }

    #[test]
    fn lying_counts_and_kinds_are_refused_before_allocating() {
        let mut body = vec![REPAIR, 1];
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        body.extend_from_slice(&[0; 200]);
        assert_eq!(decode_message(&frame(&body)), Err(MessageError::Malformed));
        let mut body = vec![NEW_STATE, 0, 0, 0, 0, 0, 1];
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_message(&frame(&body)), Err(MessageError::Malformed));
        let mut body = vec![RECOVERY_RESPONSE, 0, 0, 0, 0, 0];
        body.extend_from_slice(&[0; 8]);
        body.push(2);
        assert_eq!(decode_message(&frame(&body)), Err(MessageError::Malformed));
        for kind in [0, BATCHES + 1, u8::MAX] {
            assert_eq!(decode_message(&frame(&[kind; 40])), Err(MessageError::UnknownKind));
        }
    }

    #[test]
    fn an_entry_with_a_bad_checksum_is_refused() {
        let mut entry = chain(1, 1, ROOT_CHECKSUM).remove(0);
        entry.checksum ^= 1;
        let bytes = encode_message(&Message::Prepare { view: 1, commit: 0, entry });
        assert_eq!(decode_message(&bytes), Err(MessageError::Checksum));
    }

    #[test]
    fn random_garbage_never_panics() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for len in (0..600).chain((600..20_000).step_by(997)) {
            let garbage = rng.bytes(len);
            assert!(decode_message(&garbage).is_err());
            // Behind a valid frame the parser itself sees the garbage, kind byte included.
            let mut body = garbage;
            if let Some(kind) = body.first_mut() {
                *kind = (*kind % (BATCHES + 2)).max(PREPARE);
            }
            let _ = decode_message(&frame(&body));
        }
    }

    #[test]
    fn mutated_bodies_behind_a_valid_checksum_never_panic() {
        let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
        for message in samples() {
            let bytes = encode_message(&message);
            for _ in 0..300 {
                let mut body = bytes[FRAME_HEADER..].to_vec();
                for _ in 0..1 + rng.next() % 3 {
                    let at = rng.next() as usize % body.len();
                    body[at] = rng.next() as u8;
                }
                if let Ok(decoded) = decode_message(&frame(&body)) {
                    assert_eq!(encode_message(&decoded)[FRAME_HEADER..], body[..], "decoding is exact");
                }
            }
        }
    }
}
