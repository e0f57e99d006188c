//! Every JSON request body the REST API reads, decoded and converted by the same functions
//! its route uses: the entry of the `http_bodies` fuzz target (fuzz/). What converts into a
//! command must encode into a binary request that the shard's decoder reads back the same.

use rill_domain::batch;
use rill_domain::identifier::Identifier;
use rill_domain::wire::command::{Command, MetadataOp, TopicRef};

use crate::api::body;
use crate::{auth, messages, resources, system, users};

/// Decodes `bytes` as body kind `kind` (taken modulo the kinds there are) and checks what
/// it converts to; panics only when the server's own conversion is inconsistent.
pub fn check(kind: u8, bytes: &[u8]) {
    let user = Identifier::Numeric(1);
    let topic = TopicRef { stream: Identifier::Numeric(1), topic: Identifier::Name("t".into()) };
    match kind % 13 {
        0 => {
            if let Ok((partitioning, messages_count, batch)) = messages::send_body(bytes) {
                // The shard validates the batch as it would a binary client's (an empty send or
                // an empty payload is refused there, as Iggy refuses them).
                let _ = batch::validate(&batch, messages_count);
                round_trip(Command::SendMessages { topic, partitioning, messages_count, batch: &batch });
            }
        }
        1 => {
            if let Ok((name, partitions_count, options)) = resources::topic_body(bytes) {
                let op = MetadataOp::CreateTopic { stream: user, partitions_count, name, options: &options };
                round_trip(Command::Metadata(op));
            }
        }
        2 => decoded(users::create_user_command(bytes)),
        3 => decoded(users::update_user_op(user, bytes).map(Command::Metadata)),
        4 => decoded(users::permissions_op(user, bytes).map(Command::Metadata)),
        5 => decoded(body::<system::SnapshotBody>(bytes).and_then(|request| system::snapshot_command(&request))),
        6 => decoded(messages::store_offset_command(topic, bytes)),
        7 => {
            let _ = body::<resources::NameBody>(bytes);
        }
        8 => {
            let _ = body::<resources::CountBody>(bytes);
        }
        9 => {
            let _ = body::<users::PasswordBody>(bytes);
        }
        10 => {
            let _ = body::<users::CreateTokenBody>(bytes);
        }
        11 => {
            let _ = body::<auth::LoginRequest>(bytes);
        }
        _ => {
            let _ = body::<auth::TokenRequest>(bytes);
        }
    }
}

fn decoded<E>(command: Result<Command<'_>, E>) {
    if let Ok(command) = command {
        round_trip(command);
    }
}

/// A command that encodes decodes back to itself (one the wire cannot carry, such as an
/// over-long name, is refused by the encoder instead).
fn round_trip(command: Command<'_>) {
    if let Ok(encoded) = command.encode() {
        let again = Command::decode(encoded.operation, encoded.code, &encoded.body);
        assert_eq!(again.as_ref(), Ok(&command), "decode(encode(command)) differs");
    }
}
