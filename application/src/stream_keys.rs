//! Per-stream keys (protocol 0.12's `encryption_key`): a stream of a server with a key of
//! its own has a key of its own too, the client's or one the server draws, and its messages
//! are sealed with it. The key is kept only inside an envelope sealed (AES-256-GCM) under a
//! key-encryption key derived from the server key with HKDF-SHA-256, so neither the
//! journal, nor a snapshot, nor a peer ever holds it in clear.
//!
//! Fingerprints follow Iggy's published definitions, so a client can check one against the
//! key it holds: the first 8 bytes of SHA-256 over a label and the key, in hex.

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{AeadInOut, KeyInit};
use argon2::password_hash::rand_core::{OsRng, RngCore};
use base64::Engine;
use rill_domain::error::ErrorCode;
use rill_domain::stream_options::{self, ENVELOPE_LEN, ENVELOPE_VERSION, ORIGIN_CLIENT, ORIGIN_SERVER, RequestedKey};
use sha2::{Digest, Sha256};

use crate::encryption::EncryptionKey;

const WRAP_INFO: &[u8] = b"iggy/stream-key-wrap/v1";
const AAD_LABEL: &[u8] = b"iggy/stream-key/v1";
const KEY_FINGERPRINT_LABEL: &[u8] = b"iggy/stream-key-fingerprint/v1";
const KEK_FINGERPRINT_LABEL: &[u8] = b"iggy/stream-kek-fingerprint/v1";

fn fingerprint(label: &[u8], key: &[u8]) -> [u8; 8] {
    let digest = Sha256::new().chain_update(label).chain_update(key).finalize();
    digest[..8].try_into().expect("eight bytes")
}

/// The fingerprint reads report for a stream key.
pub fn key_fingerprint(key: &[u8; 32]) -> [u8; 8] {
    fingerprint(KEY_FINGERPRINT_LABEL, key)
}

/// The key that seals stream keys, derived from the server key.
pub struct KeyWrapper {
    cipher: Aes256Gcm,
    fingerprint: [u8; 8],
}

impl KeyWrapper {
    pub fn new(server_key: &EncryptionKey) -> Self {
        let mut kek = [0u8; 32];
        hkdf::Hkdf::<Sha256>::new(None, &server_key.0).expand(WRAP_INFO, &mut kek).expect("32 bytes is a valid length");
        let wrapper =
            Self { cipher: Aes256Gcm::new(&kek.into()), fingerprint: fingerprint(KEK_FINGERPRINT_LABEL, &kek) };
        kek.fill(0);
        wrapper
    }

    fn aad(origin: u8, kek_fingerprint: &[u8], key_fingerprint: &[u8]) -> Vec<u8> {
        [AAD_LABEL, &[ENVELOPE_VERSION, origin], kek_fingerprint, key_fingerprint].concat()
    }

    /// The envelope of `key`, chosen by `origin` (`stream_options::ORIGIN_*`).
    pub fn wrap(&self, key: &[u8; 32], origin: u8) -> Result<Vec<u8>, ErrorCode> {
        let key_fingerprint = key_fingerprint(key);
        let mut nonce = [0u8; 12];
        OsRng.fill_bytes(&mut nonce);
        let mut sealed = *key;
        let aad = Self::aad(origin, &self.fingerprint, &key_fingerprint);
        let tag = self
            .cipher
            .encrypt_inout_detached(&nonce.into(), &aad, (&mut sealed[..]).into())
            .map_err(|_| ErrorCode::CannotEncryptData)?;
        let envelope =
            [&[ENVELOPE_VERSION, origin][..], &self.fingerprint, &nonce, &sealed, &tag[..], &key_fingerprint].concat();
        debug_assert_eq!(envelope.len(), ENVELOPE_LEN);
        Ok(envelope)
    }

    /// The key inside `envelope`; refused when another server key sealed it or the
    /// envelope was altered.
    pub fn unwrap(&self, envelope: &[u8]) -> Result<EncryptionKey, ErrorCode> {
        if envelope.len() != ENVELOPE_LEN || stream_options::kek_fingerprint(envelope) != self.fingerprint {
            return Err(ErrorCode::CannotDecryptData);
        }
        let nonce: [u8; 12] = envelope[10..22].try_into().expect("twelve bytes");
        let mut key: [u8; 32] = envelope[22..54].try_into().expect("32 bytes");
        let tag: [u8; 16] = envelope[54..70].try_into().expect("sixteen bytes");
        let aad = Self::aad(envelope[1], &self.fingerprint, stream_options::key_fingerprint(envelope));
        self.cipher
            .decrypt_inout_detached(&nonce.into(), &aad, (&mut key[..]).into(), &tag.into())
            .map_err(|_| ErrorCode::CannotDecryptData)?;
        Ok(EncryptionKey(key))
    }

    /// The committed options block of a stream create: the envelope of the key the client
    /// asked for, or of one drawn here. Refuses a malformed key.
    pub fn create_block(&self, requested: Option<RequestedKey<'_>>) -> Result<Vec<u8>, ErrorCode> {
        let (key, origin) = match requested {
            Some(requested) => (requested_bytes(requested)?, ORIGIN_CLIENT),
            None => {
                let mut key = [0u8; 32];
                OsRng.fill_bytes(&mut key);
                (key, ORIGIN_SERVER)
            }
        };
        Ok(stream_options::stored_block(&self.wrap(&key, origin)?))
    }
}

/// A requested key's 32 bytes: raw, or standard padded base64 of them.
fn requested_bytes(requested: RequestedKey<'_>) -> Result<[u8; 32], ErrorCode> {
    let bytes = match requested {
        RequestedKey::Raw(raw) => raw.to_vec(),
        RequestedKey::Base64(text) => {
            base64::engine::general_purpose::STANDARD.decode(text).map_err(|_| ErrorCode::InvalidEncryptionKey)?
        }
    };
    bytes.try_into().map_err(|_| ErrorCode::InvalidEncryptionKey)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_key_opens_only_under_the_server_key_that_wrapped_it() {
        let wrapper = KeyWrapper::new(&EncryptionKey([1; 32]));
        let envelope = wrapper.wrap(&[9; 32], ORIGIN_CLIENT).unwrap();
        assert_eq!(envelope.len(), ENVELOPE_LEN);
        assert!(!envelope.windows(32).any(|w| w == [9; 32]), "the key is not in clear");
        assert_eq!(wrapper.unwrap(&envelope), Ok(EncryptionKey([9; 32])));
        assert_eq!(stream_options::key_fingerprint(&envelope), key_fingerprint(&[9; 32]));
        let other = KeyWrapper::new(&EncryptionKey([2; 32]));
        assert_eq!(other.unwrap(&envelope), Err(ErrorCode::CannotDecryptData));
        let mut altered = envelope.clone();
        altered[1] = ORIGIN_SERVER;
        assert_eq!(wrapper.unwrap(&altered), Err(ErrorCode::CannotDecryptData), "the origin is authenticated");
    }

    #[test]
    fn a_create_wraps_the_clients_key_or_draws_one() {
        let wrapper = KeyWrapper::new(&EncryptionKey([1; 32]));
        let text = base64::engine::general_purpose::STANDARD.encode([5u8; 32]);
        let block = wrapper.create_block(Some(RequestedKey::Base64(&text))).unwrap();
        let envelope = stream_options::stored_envelope(&block).unwrap().unwrap();
        assert_eq!((envelope[1], wrapper.unwrap(envelope)), (ORIGIN_CLIENT, Ok(EncryptionKey([5; 32]))));
        let drawn = wrapper.create_block(None).unwrap();
        assert_eq!(stream_options::stored_envelope(&drawn).unwrap().unwrap()[1], ORIGIN_SERVER);
        assert_ne!(drawn, wrapper.create_block(None).unwrap(), "every stream its own key");
        assert_eq!(wrapper.create_block(Some(RequestedKey::Base64("c2hvcnQ="))), Err(ErrorCode::InvalidEncryptionKey));
    }
}
