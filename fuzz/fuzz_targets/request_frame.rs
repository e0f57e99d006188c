//! A request frame as a peer sends it: the 256-byte header, then a body decoded as the
//! command its operation and code name. A decoded command must survive an encode and a
//! second decode unchanged, and a send's batch is validated as the shard would.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rill_domain::batch;
use rill_domain::constants::HEADER_SIZE;
use rill_domain::wire::command::Command;
use rill_domain::wire::header::{RequestHeader, frame_size};

fuzz_target!(|data: &[u8]| {
    let Some((header, body)) = data.split_first_chunk::<HEADER_SIZE>() else { return };
    let _ = frame_size(header);
    let request = RequestHeader::parse(header);
    let _ = request.checksum_matches(body);
    let Ok(command) = Command::decode(request.operation, request.code, body) else { return };
    if let Command::SendMessages { messages_count, batch, .. } = &command {
        let _ = batch::validate(batch, *messages_count);
    }
    if let Ok(encoded) = command.encode() {
        let again = Command::decode(encoded.operation, encoded.code, &encoded.body);
        assert_eq!(again.as_ref(), Ok(&command), "decode(encode(command)) differs");
    }
});
