//! Stream options (protocol 0.12). A client may set one: `encryption_key`, the stream's own
//! at-rest key, on create only. The server never stores or journals that key in clear: it
//! replaces it with `encryption_key_wrapped`, an envelope sealed under a key derived from
//! the server's own key, before the create is committed. Reads report the derived
//! `encryption_key_source`, `encryption_key_fingerprint` and `encryption_kek_fingerprint`,
//! never the key or its envelope.
//!
//! Envelope layout (78 bytes): `[version 1][origin][kek_fingerprint 8][nonce 12]
//! [sealed key 32][tag 16][key_fingerprint 8]`. The fingerprints sit in clear, so reads
//! report them without the server key; sealing and opening live in the application.

use crate::error::ErrorCode;
use crate::wire::tlv::{self, KIND_RAW, KIND_STRING};

pub const ENCRYPTION_KEY: &str = "encryption_key";
pub const ENCRYPTION_KEY_WRAPPED: &str = "encryption_key_wrapped";
const KEY_SOURCE: &str = "encryption_key_source";
const KEY_FINGERPRINT: &str = "encryption_key_fingerprint";
const KEK_FINGERPRINT: &str = "encryption_kek_fingerprint";
/// The keys only the server sets or reports.
const SERVER_KEYS: [&str; 4] = [ENCRYPTION_KEY_WRAPPED, KEY_SOURCE, KEY_FINGERPRINT, KEK_FINGERPRINT];

pub const ENVELOPE_VERSION: u8 = 1;
pub const ENVELOPE_LEN: usize = 1 + 1 + 8 + 12 + 32 + 16 + 8;
/// The client sent the key.
pub const ORIGIN_CLIENT: u8 = 1;
/// The server drew the key (a server with a key of its own, a create without one).
pub const ORIGIN_SERVER: u8 = 2;

/// A stream key as the client sent it: 32 raw bytes, or base64 text of them (the caller
/// decodes it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum RequestedKey<'a> {
    Raw(&'a [u8]),
    Base64(&'a str),
}

impl std::fmt::Debug for RequestedKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestedKey(<redacted>)")
    }
}

/// The key a create's options block asks for, if any; refuses every other key (derived and
/// internal ones with 4105, unknown ones with 4041) and a key of the wrong kind or length.
pub fn requested_key(block: &[u8]) -> Result<Option<RequestedKey<'_>>, ErrorCode> {
    let mut requested = None;
    for entry in tlv::decode_options(block)? {
        match std::str::from_utf8(entry.key).map_err(|_| ErrorCode::InvalidFormat)? {
            ENCRYPTION_KEY => {
                requested = Some(match entry.value_kind {
                    KIND_RAW if entry.value.len() == 32 => RequestedKey::Raw(entry.value),
                    KIND_STRING => RequestedKey::Base64(
                        std::str::from_utf8(entry.value).map_err(|_| ErrorCode::InvalidEncryptionKey)?,
                    ),
                    _ => return Err(ErrorCode::InvalidEncryptionKey),
                });
            }
            key if SERVER_KEYS.contains(&key) => return Err(ErrorCode::ReadOnlyOption),
            _ => return Err(ErrorCode::UnsupportedOptionKey),
        }
    }
    Ok(requested)
}

/// The options block a create is committed with: the envelope alone.
pub fn stored_block(envelope: &[u8]) -> Vec<u8> {
    let mut block = Vec::new();
    tlv::put(&mut block, ENCRYPTION_KEY_WRAPPED, KIND_RAW, envelope);
    block
}

/// The envelope a committed block holds, checked: a committed block is empty or holds
/// exactly one well-formed envelope (a key in clear is never applied).
pub fn stored_envelope(block: &[u8]) -> Result<Option<&[u8]>, ErrorCode> {
    let entries = tlv::decode_options(block)?;
    match entries.as_slice() {
        [] => Ok(None),
        [entry] if entry.key == ENCRYPTION_KEY_WRAPPED.as_bytes() && envelope_well_formed(entry.value) => {
            Ok(Some(entry.value))
        }
        _ => Err(ErrorCode::InvalidFormat),
    }
}

fn envelope_well_formed(envelope: &[u8]) -> bool {
    envelope.len() == ENVELOPE_LEN
        && envelope[0] == ENVELOPE_VERSION
        && matches!(envelope[1], ORIGIN_CLIENT | ORIGIN_SERVER)
}

/// The fingerprint of the key-encryption key that sealed `envelope`.
pub fn kek_fingerprint(envelope: &[u8]) -> &[u8] {
    &envelope[2..10]
}

/// The fingerprint of the stream key inside `envelope`.
pub fn key_fingerprint(envelope: &[u8]) -> &[u8] {
    &envelope[ENVELOPE_LEN - 8..]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The derived options block a read reports for a stream with `envelope` (or none).
pub fn derived_options(envelope: Option<&[u8]>) -> Vec<u8> {
    let mut block = Vec::new();
    match envelope {
        Some(envelope) => {
            let source: &[u8] = if envelope[1] == ORIGIN_CLIENT { b"stream" } else { b"server" };
            tlv::put(&mut block, KEY_SOURCE, KIND_STRING, source);
            tlv::put(&mut block, KEY_FINGERPRINT, KIND_STRING, hex(key_fingerprint(envelope)).as_bytes());
            tlv::put(&mut block, KEK_FINGERPRINT, KIND_STRING, hex(kek_fingerprint(envelope)).as_bytes());
        }
        None => tlv::put(&mut block, KEY_SOURCE, KIND_STRING, b"none"),
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(entries: &[(&str, u8, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        entries.iter().for_each(|(key, kind, value)| tlv::put(&mut out, key, *kind, value));
        out
    }

    fn envelope(origin: u8) -> Vec<u8> {
        let mut envelope = vec![ENVELOPE_VERSION, origin];
        envelope.extend_from_slice(&[0xab; 8]);
        envelope.resize(ENVELOPE_LEN - 8, 0);
        envelope.extend_from_slice(&[0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
        envelope
    }

    #[test]
    fn a_create_may_ask_for_its_own_key_and_nothing_else() {
        assert_eq!(requested_key(&[]), Ok(None));
        assert_eq!(
            requested_key(&block(&[(ENCRYPTION_KEY, KIND_RAW, &[7; 32])])),
            Ok(Some(RequestedKey::Raw(&[7; 32])))
        );
        let text = block(&[(ENCRYPTION_KEY, KIND_STRING, b"c2VjcmV0")]);
        assert_eq!(requested_key(&text), Ok(Some(RequestedKey::Base64("c2VjcmV0"))));
        let short = block(&[(ENCRYPTION_KEY, KIND_RAW, &[7; 31])]);
        assert_eq!(requested_key(&short), Err(ErrorCode::InvalidEncryptionKey));
        let wrapped = block(&[(ENCRYPTION_KEY_WRAPPED, KIND_RAW, &envelope(1))]);
        assert_eq!(requested_key(&wrapped), Err(ErrorCode::ReadOnlyOption));
        let unknown = block(&[("retention", KIND_STRING, b"1d")]);
        assert_eq!(requested_key(&unknown), Err(ErrorCode::UnsupportedOptionKey));
        assert_eq!(format!("{:?}", RequestedKey::Raw(&[7; 32])), "RequestedKey(<redacted>)");
    }

    #[test]
    fn a_committed_block_holds_an_envelope_or_nothing_and_never_a_key() {
        let sealed = envelope(ORIGIN_CLIENT);
        assert_eq!(stored_envelope(&stored_block(&sealed)), Ok(Some(&sealed[..])));
        assert_eq!(stored_envelope(&[]), Ok(None));
        let clear = block(&[(ENCRYPTION_KEY, KIND_RAW, &[7; 32])]);
        assert_eq!(stored_envelope(&clear), Err(ErrorCode::InvalidFormat));
        assert_eq!(stored_envelope(&stored_block(&sealed[1..])), Err(ErrorCode::InvalidFormat));
    }

    #[test]
    fn reads_report_the_source_and_fingerprints_from_the_envelope() {
        let reported = derived_options(Some(&envelope(ORIGIN_SERVER)));
        let entries = tlv::decode_options(&reported).unwrap();
        let values: Vec<(&[u8], &[u8])> = entries.iter().map(|e| (e.key, e.value)).collect();
        assert_eq!(
            values,
            vec![
                (KEY_SOURCE.as_bytes(), &b"server"[..]),
                (KEY_FINGERPRINT.as_bytes(), &b"0123456789abcdef"[..]),
                (KEK_FINGERPRINT.as_bytes(), &b"abababababababab"[..]),
            ]
        );
        let none = derived_options(None);
        assert_eq!(tlv::decode_options(&none).unwrap()[0].value, b"none");
    }
}
