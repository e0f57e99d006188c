//! A replica-plane message: its length prefix and the message codec. A message that
//! decodes encodes to bytes that decode to the same message.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rill_domain::vsr::{decode_message, encode_message, frame_len};

fuzz_target!(|data: &[u8]| {
    if let Some(prefix) = data.first_chunk::<4>() {
        let _ = frame_len(prefix);
    }
    if let Ok(message) = decode_message(data) {
        let encoded = encode_message(&message);
        assert_eq!(decode_message(&encoded).as_ref(), Ok(&message), "decode(encode(message)) differs");
    }
});
