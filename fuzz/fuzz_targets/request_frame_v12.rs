//! A request frame of a protocol 0.12 connection: the header (its partition context too),
//! then a body decoded as the 0.12 command its operation and code name. A login or session
//! binding is also read for the version it announces, and a decoded resource patch is
//! applied to a metadata state holding one stream, topic and user, which must refuse or
//! apply it without panicking.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rill_domain::batch;
use rill_domain::constants::HEADER_SIZE;
use rill_domain::identifier::Identifier;
use rill_domain::metadata::Metadata;
use rill_domain::version::{self, Dialect};
use rill_domain::wire::command::{Command, MetadataOp};
use rill_domain::wire::header::{RequestHeader, encode_reply, frame_size};

fn seeded_metadata() -> Metadata {
    let mut metadata = Metadata::default();
    let stream = MetadataOp::CreateStream { name: "s".into(), options: &[] };
    let topic = MetadataOp::CreateTopic { stream: Identifier::Numeric(0), partitions_count: 1, name: "t".into(), options: &[] };
    let user = MetadataOp::InsertUser { username: "worker".into(), password_hash: "h".into(), status: 1, permissions: None };
    for op in [stream, topic, user] {
        metadata.apply(&op, 1, 1).expect("a fresh state takes the seed resources");
    }
    metadata
}

fuzz_target!(|data: &[u8]| {
    let Some((header, body)) = data.split_first_chunk::<HEADER_SIZE>() else { return };
    let _ = frame_size(header);
    let request = RequestHeader::parse(header);
    let _ = version::announced(body);
    let reply = encode_reply(&request, 1, 0, &[]);
    assert_eq!(&reply[224..232], &request.partition_incarnation.to_le_bytes(), "the incarnation is echoed");
    let Ok(command) = Command::decode_in(Dialect::V12, request.operation, request.code, body) else { return };
    match &command {
        Command::SendMessages { messages_count, batch, .. } => {
            let _ = batch::validate(batch, *messages_count);
        }
        Command::Metadata(op @ MetadataOp::UpdateResource { .. }) => {
            let _ = seeded_metadata().apply(op, 3, 2);
        }
        // Any query, cursor or page token is answered, never a panic.
        Command::GetMetadataChanges(query) => {
            let _ = rill_domain::change_feed::ChangeFeed::default().page(query, &seeded_metadata(), 3);
        }
        _ => {}
    }
});
