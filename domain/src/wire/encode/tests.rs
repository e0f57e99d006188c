//! Every encodable command decodes back to itself, and names the wire cannot carry are
//! refused instead of truncated.

use super::*;
use crate::snapshot::{SnapshotCompression, SnapshotType};
use crate::wire::command::Command;

fn topic() -> TopicRef {
    TopicRef { stream: Identifier::Numeric(3), topic: Identifier::Name("orders".into()) }
}

fn round_trip(command: Command<'_>) {
    let request = command.encode().expect("encodes");
    let decoded = Command::decode(request.operation, request.code, &request.body).expect("decodes");
    assert_eq!(decoded, command);
}

#[test]
fn queries_round_trip() {
    for command in [
        Command::GetStats,
        Command::GetClusterMetadata,
        Command::DescribeOptions { scope: 1 },
        Command::GetSnapshot {
            compression: SnapshotCompression::Stored,
            types: vec![SnapshotType::ProcessList, SnapshotType::ServerConfig],
        },
        Command::DescribeOptions { scope: 3 },
        Command::GetMe,
        Command::GetClient { client_id: 9 },
        Command::GetClients,
        Command::GetStream { stream: Identifier::Name("s".into()) },
        Command::GetStreams,
        Command::GetTopic(topic()),
        Command::GetTopics { stream: Identifier::Numeric(1) },
        Command::GetUser { user: Identifier::Numeric(0) },
        Command::GetUsers,
        Command::GetTokens,
        Command::GetConsumerGroup { topic: topic(), group: Identifier::Name("g".into()) },
        Command::GetConsumerGroups { topic: topic() },
    ] {
        round_trip(command);
    }
}

#[test]
fn messages_and_offsets_round_trip() {
    let batch = crate::batch::build(&[(7, b"payload", b"")], 11);
    for partitioning in
        [Partitioning::Balanced, Partitioning::PartitionId(2), Partitioning::MessagesKey(b"key".to_vec())]
    {
        round_trip(Command::SendMessages { topic: topic(), partitioning, messages_count: 1, batch: &batch });
    }
    for strategy in [
        PollingStrategy::Offset(5),
        PollingStrategy::Timestamp(6),
        PollingStrategy::First,
        PollingStrategy::Last,
        PollingStrategy::Next,
    ] {
        round_trip(Command::PollMessages(PollRequest {
            consumer: Consumer::Group(Identifier::Numeric(4)),
            topic: topic(),
            partition_id: Some(1),
            strategy,
            count: 10,
            auto_commit: true,
            deferred: None,
        }));
    }
    let single = Consumer::Single(Identifier::Name("c".into()));
    round_trip(Command::FlushUnsavedBuffer { topic: topic(), partition_id: 0, fsync: true });
    round_trip(Command::GetConsumerOffset { consumer: single.clone(), topic: topic(), partition_id: None });
    round_trip(Command::StoreConsumerOffset {
        consumer: single.clone(),
        topic: topic(),
        partition_id: Some(1),
        offset: 8,
    });
    round_trip(Command::DeleteConsumerOffset { consumer: single, topic: topic(), partition_id: Some(0) });
    round_trip(Command::DeleteSegments { topic: topic(), partition_id: 1, segments_count: 2 });
}

#[test]
fn metadata_round_trips() {
    let mut options = Vec::new();
    crate::wire::tlv::put(&mut options, "compression_algorithm", crate::wire::tlv::KIND_STRING, b"gzip");
    for op in [
        MetadataOp::CreateStream { name: "s".into(), options: &[] },
        MetadataOp::UpdateStream { stream: Identifier::Numeric(1), name: "t".into() },
        MetadataOp::DeleteStream { stream: Identifier::Numeric(1) },
        MetadataOp::PurgeStream { stream: Identifier::Name("x".into()) },
        MetadataOp::CreateTopic {
            stream: Identifier::Numeric(1),
            partitions_count: 3,
            name: "t".into(),
            options: &options,
        },
        MetadataOp::UpdateTopic { topic: topic(), name: "u".into(), options: &options },
        MetadataOp::DeleteTopic(topic()),
        MetadataOp::PurgeTopic(topic()),
        MetadataOp::CreatePartitions { topic: topic(), count: 2 },
        MetadataOp::DeletePartitions { topic: topic(), count: 1 },
        MetadataOp::CreateConsumerGroup { topic: topic(), name: "g".into() },
        MetadataOp::DeleteConsumerGroup { topic: topic(), group: Identifier::Numeric(0) },
        MetadataOp::UpdateUser { user: Identifier::Numeric(2), username: Some("n".into()), status: None },
        MetadataOp::UpdateUser { user: Identifier::Numeric(2), username: None, status: Some(2) },
        MetadataOp::DeleteUser { user: Identifier::Name("u".into()) },
        MetadataOp::UpdatePermissions { user: Identifier::Numeric(2), permissions: Some(Permissions::all()) },
        MetadataOp::UpdatePermissions { user: Identifier::Numeric(2), permissions: None },
    ] {
        round_trip(Command::Metadata(op));
    }
}

#[test]
fn users_round_trip() {
    for command in [
        Command::CreateUser {
            username: "u".into(),
            password: "secret".into(),
            status: 1,
            permissions: Some(Permissions::all()),
        },
        Command::ChangePassword { user: Identifier::Numeric(1), current: "a".into(), new: "b".into() },
        Command::CreateToken { name: "t".into(), expiry_us: 0 },
        Command::DeleteToken { name: "t".into() },
        Command::JoinConsumerGroup { topic: topic(), group: Identifier::Numeric(1) },
        Command::LeaveConsumerGroup { topic: topic(), group: Identifier::Numeric(1) },
        Command::SyncConsumerGroup { topic: topic(), group: Identifier::Numeric(1) },
    ] {
        round_trip(command);
    }
}

#[test]
fn names_the_wire_cannot_carry_are_refused() {
    let long = "n".repeat(256);
    assert!(Command::Metadata(MetadataOp::CreateStream { name: long.clone(), options: &[] }).encode().is_err());
    assert!(Command::Metadata(MetadataOp::CreateStream { name: String::new(), options: &[] }).encode().is_err());
    assert!(Command::GetStream { stream: Identifier::Name(long) }.encode().is_err());
    let key = Partitioning::MessagesKey(vec![1; 256]);
    let command = Command::SendMessages { topic: topic(), partitioning: key, messages_count: 0, batch: &[] };
    assert_eq!(command.encode(), Err(ErrorCode::InvalidFormat));
}
