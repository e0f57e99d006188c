//! Encryption at rest (`[system.encryption]`): each message's payload and user headers are
//! sealed with AES-256-GCM on the partition's owner before they reach the journal or a
//! segment, and opened on the way out of a poll, so no byte of them is on disk in clear.
//!
//! A sealed message keeps its 48-byte header (id, offset delta, timestamp delta) and
//! becomes `[nonce 12][AES-GCM(plain headers length u32 || payload || user headers)][tag 16]`
//! as its payload, with no user headers and the header's reserved field set to
//! [`SEALED_FRAME`]; the message id is the associated data, so a sealed body cannot be moved
//! to another message. Checksums cover the sealed bytes, so verified reads and the
//! scrubber work as before; messages written before encryption was turned on stay plain
//! and are served as they are.
//!
//! Nonces never repeat under one key: each shard draws a random 64-bit prefix at start and
//! again every 2^32 messages, and counts in the low 32 bits (a random 96-bit nonce per
//! message would reach the birthday bound after 2^32 messages, which a busy server writes
//! in hours).

use std::cell::Cell;

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{AeadInOut, KeyInit};
use argon2::password_hash::rand_core::{OsRng, RngCore};
use rill_domain::batch::{self, BatchHeader};
use rill_domain::constants::BATCH_HEADER_SIZE;
use rill_domain::error::ErrorCode;

/// The header's reserved field of a sealed message.
pub const SEALED_FRAME: u64 = 1;
const NONCE: usize = 12;
const TAG: usize = 16;
/// Bytes sealing adds to a message: the nonce, the plain headers' length and the tag.
pub const SEAL_OVERHEAD: usize = NONCE + 4 + TAG;
/// What the key-check file seals: opening it proves the configured key is the data's.
const KEY_CHECK_TEXT: &[u8] = b"rill encryption key check v1";

/// A 256-bit key. Its `Debug` never shows it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EncryptionKey(pub [u8; 32]);

impl std::fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EncryptionKey(<redacted>)")
    }
}

/// One shard's sealer and opener.
pub struct Encryptor {
    cipher: Aes256Gcm,
    prefix: Cell<[u8; 8]>,
    counter: Cell<u32>,
}

fn random_prefix() -> [u8; 8] {
    let mut prefix = [0u8; 8];
    OsRng.fill_bytes(&mut prefix);
    prefix
}

impl Encryptor {
    pub fn new(key: &EncryptionKey) -> Self {
        Self { cipher: Aes256Gcm::new(&key.0.into()), prefix: Cell::new(random_prefix()), counter: Cell::new(0) }
    }

    fn next_nonce(&self) -> [u8; NONCE] {
        let counter = self.counter.get();
        if counter == u32::MAX {
            self.prefix.set(random_prefix());
        }
        self.counter.set(counter.wrapping_add(1));
        let mut nonce = [0u8; NONCE];
        nonce[..8].copy_from_slice(&self.prefix.get());
        nonce[8..].copy_from_slice(&counter.to_le_bytes());
        nonce
    }

    /// Seals `plain` (with `aad`) into `out`: nonce, ciphertext, tag.
    fn seal(&self, aad: &[u8], plain: &[&[u8]], out: &mut Vec<u8>) -> Result<(), ErrorCode> {
        let nonce = self.next_nonce();
        out.extend_from_slice(&nonce);
        let start = out.len();
        for part in plain {
            out.extend_from_slice(part);
        }
        let tag = self
            .cipher
            .encrypt_inout_detached(&nonce.into(), aad, (&mut out[start..]).into())
            .map_err(|_| ErrorCode::CannotEncryptData)?;
        out.extend_from_slice(&tag);
        Ok(())
    }

    /// Opens a sealed body in place; returns the plain bytes' range in `body`.
    fn open<'a>(&self, aad: &[u8], body: &'a mut [u8]) -> Result<&'a [u8], ErrorCode> {
        if body.len() < NONCE + TAG {
            return Err(ErrorCode::CannotDecryptData);
        }
        let (nonce, rest) = body.split_at_mut(NONCE);
        let (data, tag) = rest.split_at_mut(rest.len() - TAG);
        let nonce: [u8; NONCE] = (&*nonce).try_into().expect("twelve bytes");
        let tag: [u8; TAG] = (&*tag).try_into().expect("sixteen bytes");
        self.cipher
            .decrypt_inout_detached(&nonce.into(), aad, (&mut *data).into(), &tag.into())
            .map_err(|_| ErrorCode::CannotDecryptData)?;
        Ok(data)
    }

    /// A validated producer batch with every message sealed, as a new batch in `out`.
    pub fn seal_batch(&self, batch: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorCode> {
        let start = out.len();
        out.extend_from_slice(&batch[..BATCH_HEADER_SIZE]);
        let mut sealed = Vec::new();
        for frame in batch::frames(batch) {
            let parts = batch::frame_parts(batch, &frame);
            sealed.clear();
            let headers_len = (parts.user_headers.len() as u32).to_le_bytes();
            self.seal(parts.id_bytes(), &[&headers_len, parts.payload, parts.user_headers], &mut sealed)?;
            batch::push_frame(out, parts.header, &sealed, &[], SEALED_FRAME);
        }
        let count = BatchHeader::read(batch).message_count;
        batch::reseal(&mut out[start..], count);
        Ok(())
    }

    /// Poll records (stored batches, whole or cut) with every sealed message opened, into
    /// `out`; plain messages are copied as they are.
    pub fn open_records(&self, records: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorCode> {
        let mut position = 0;
        let mut body = Vec::new();
        while position < records.len() {
            let header = BatchHeader::read(&records[position..]);
            let record = &records[position..position + header.batch_length as usize];
            let start = out.len();
            out.extend_from_slice(&record[..BATCH_HEADER_SIZE]);
            for frame in batch::frames(record) {
                let parts = batch::frame_parts(record, &frame);
                if parts.reserved != SEALED_FRAME {
                    out.extend_from_slice(&record[frame.start..frame.end]);
                    continue;
                }
                body.clear();
                body.extend_from_slice(parts.payload);
                let plain = self.open(parts.id_bytes(), &mut body)?;
                let (headers_len, rest) = plain.split_at_checked(4).ok_or(ErrorCode::CannotDecryptData)?;
                let headers_len = u32::from_le_bytes(headers_len.try_into().expect("four bytes")) as usize;
                let split = rest.len().checked_sub(headers_len).ok_or(ErrorCode::CannotDecryptData)?;
                let (payload, user_headers) = rest.split_at(split);
                batch::push_frame(out, parts.header, payload, user_headers, 0);
            }
            batch::reseal(&mut out[start..], header.message_count);
            position += header.batch_length as usize;
        }
        Ok(())
    }
}

/// The key-check file's bytes for `key`.
pub fn key_check(key: &EncryptionKey) -> Vec<u8> {
    let mut out = Vec::new();
    Encryptor::new(key).seal(b"key-check", &[KEY_CHECK_TEXT], &mut out).expect("sealing a constant");
    out
}

/// Whether a key-check file was written with `key`.
pub fn key_matches(key: &EncryptionKey, check: &[u8]) -> bool {
    let mut body = check.to_vec();
    Encryptor::new(key).open(b"key-check", &mut body).is_ok_and(|plain| plain == KEY_CHECK_TEXT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> EncryptionKey {
        EncryptionKey([byte; 32])
    }

    #[test]
    fn sealed_batches_hide_payload_and_headers_and_open_to_the_same_messages() {
        let headers = {
            let mut block = Vec::new();
            rill_domain::wire::tlv::put(&mut block, "trace", rill_domain::wire::tlv::KIND_STRING, b"secret-header");
            block
        };
        let plain = batch::build(&[(7, b"secret-payload-one", &headers), (8, b"two", b"")], 5);
        let encryptor = Encryptor::new(&key(1));
        let mut sealed = Vec::new();
        encryptor.seal_batch(&plain, &mut sealed).unwrap();
        assert!(batch::verify_stored(&sealed), "checksums cover the sealed bytes");
        assert!(!sealed.windows(6).any(|w| w == b"secret"), "nothing readable is left");
        assert_eq!(sealed.len(), plain.len() + 2 * SEAL_OVERHEAD, "headers move into the sealed body");
        let mut opened = Vec::new();
        encryptor.open_records(&sealed, &mut opened).unwrap();
        assert_eq!(opened, plain, "the very batch the producer sent");
        // Two records back to back (a poll reply), one plain among them.
        let mut records = sealed.clone();
        records.extend_from_slice(&plain);
        let mut both = Vec::new();
        Encryptor::new(&key(1)).open_records(&records, &mut both).unwrap();
        assert_eq!(both, [plain.clone(), plain.clone()].concat());
    }

    #[test]
    fn a_wrong_key_or_a_moved_body_is_refused_and_nonces_never_repeat() {
        let plain = batch::build(&[(7, b"payload", b"")], 5);
        let encryptor = Encryptor::new(&key(1));
        let mut sealed = Vec::new();
        encryptor.seal_batch(&plain, &mut sealed).unwrap();
        let mut out = Vec::new();
        assert_eq!(Encryptor::new(&key(2)).open_records(&sealed, &mut out), Err(ErrorCode::CannotDecryptData));
        // The same body under another message id does not open.
        let mut moved = sealed.clone();
        moved[BATCH_HEADER_SIZE + 8] ^= 1;
        let checksum = rill_domain::checksum::xxh3_64(&moved[BATCH_HEADER_SIZE + 8..]);
        moved[BATCH_HEADER_SIZE..BATCH_HEADER_SIZE + 8].copy_from_slice(&checksum.to_le_bytes());
        assert_eq!(encryptor.open_records(&moved, &mut Vec::new()), Err(ErrorCode::CannotDecryptData));
        let nonces: std::collections::BTreeSet<[u8; NONCE]> = (0..1000).map(|_| encryptor.next_nonce()).collect();
        assert_eq!(nonces.len(), 1000);
    }

    #[test]
    fn the_key_check_tells_the_right_key_from_a_wrong_one() {
        let check = key_check(&key(3));
        assert!(key_matches(&key(3), &check));
        assert!(!key_matches(&key(4), &check));
        assert!(!key_matches(&key(3), b"short"));
        assert_eq!(format!("{:?}", key(3)), "EncryptionKey(<redacted>)");
    }
}
