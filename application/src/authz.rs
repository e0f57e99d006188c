//! Which permission each command needs. Identifiers are resolved against the committed
//! metadata; a command naming something that does not exist needs nothing here and fails
//! with its own not-found answer.

use rill_domain::identifier::Identifier;
use rill_domain::metadata::Metadata;
use rill_domain::permissions::Access;
use rill_domain::wire::command::{Command, MetadataOp, ResourceTarget, TopicRef};

fn topic(metadata: &Metadata, topic: &TopicRef, access: fn(u32, u32) -> Access) -> Option<Access> {
    metadata.topic_ids(topic).ok().map(|(s, t)| access(s, t))
}

fn stream(metadata: &Metadata, stream: &Identifier, access: fn(u32) -> Access) -> Option<Access> {
    metadata.stream_id(stream).ok().map(access)
}

/// The access `command` needs from user `caller`; `None` when being logged in is enough.
pub fn required(metadata: &Metadata, caller: u32, command: &Command<'_>) -> Option<Access> {
    match command {
        Command::GetStats | Command::GetClients | Command::GetClient { .. } | Command::GetMetadataChanges(_) => {
            Some(Access::ReadServers)
        }
        Command::GetStream { stream: s } => stream(metadata, s, Access::ReadStream),
        Command::GetStreams => Some(Access::ReadStreams),
        Command::GetTopic(t) => topic(metadata, t, Access::ReadTopic),
        Command::GetTopics { stream: s } => stream(metadata, s, Access::ReadTopics),
        Command::Metadata(op) => metadata_access(metadata, op),
        Command::DeleteSegments { topic: t, .. } => topic(metadata, t, Access::ManageTopic),
        Command::SendMessages { topic: t, .. } | Command::FlushUnsavedBuffer { topic: t, .. } => {
            topic(metadata, t, Access::Send)
        }
        Command::PollMessages(request) | Command::GetPollRouting(request) | Command::PollMessagesOnPrimary(request) => {
            topic(metadata, &request.topic, Access::Poll)
        }
        Command::FetchMessages(request) => topic(metadata, &request.topic, Access::Poll),
        Command::GetPartitionRoute { topic: t, .. } => topic(metadata, t, Access::ReadTopic),
        Command::GetConsumerOffset { topic: t, .. }
        | Command::GetConsumerOffsetRouting { topic: t, .. }
        | Command::StoreConsumerOffset { topic: t, .. }
        | Command::DeleteConsumerOffset { topic: t, .. } => topic(metadata, t, Access::Poll),
        // Group membership, like group management, is a topic-read right, as in Iggy; the
        // polls a member then makes still need poll rights.
        Command::JoinConsumerGroup { topic: t, .. }
        | Command::LeaveConsumerGroup { topic: t, .. }
        | Command::SyncConsumerGroup { topic: t, .. }
        | Command::GetConsumerGroup { topic: t, .. }
        | Command::GetConsumerGroups { topic: t } => topic(metadata, t, Access::ReadTopic),
        Command::GetUser { user } => match metadata.user_id(user) {
            Ok(id) if id == caller => None,
            _ => Some(Access::ReadUsers),
        },
        Command::GetUsers => Some(Access::ReadUsers),
        Command::CreateUser { .. } => Some(Access::ManageUsers),
        // Checked by the use case: self, or manage_users for someone else.
        Command::ChangePassword { .. } => None,
        Command::GetTokens | Command::CreateToken { .. } | Command::DeleteToken { .. } => None,
        // A snapshot carries the server's logs, configuration and processes.
        Command::GetSnapshot { .. } => Some(Access::ReadServers),
        Command::GetMe
        | Command::GetClusterMetadata
        | Command::DescribeOptions { .. }
        | Command::AttachConsumerSession { .. }
        | Command::CancelDeferred
        | Command::Unsupported { .. } => None,
        Command::Ping | Command::Register { .. } | Command::BindSession { .. } | Command::Logout => None,
    }
}

fn metadata_access(metadata: &Metadata, op: &MetadataOp<'_>) -> Option<Access> {
    match op {
        MetadataOp::UpdateResource { target: ResourceTarget::Stream(s), .. } => {
            stream(metadata, s, Access::ManageStream)
        }
        MetadataOp::UpdateResource { target: ResourceTarget::Topic(t), .. } => topic(metadata, t, Access::ManageTopic),
        MetadataOp::UpdateResource { target: ResourceTarget::User(_), .. } => Some(Access::ManageUsers),
        MetadataOp::CreateStream { .. } => Some(Access::CreateStream),
        MetadataOp::UpdateStream { stream: s, .. }
        | MetadataOp::DeleteStream { stream: s }
        | MetadataOp::PurgeStream { stream: s } => stream(metadata, s, Access::ManageStream),
        MetadataOp::CreateTopic { stream: s, .. } => stream(metadata, s, Access::CreateTopic),
        MetadataOp::UpdateTopic { topic: t, .. }
        | MetadataOp::DeleteTopic(t)
        | MetadataOp::PurgeTopic(t)
        | MetadataOp::CreatePartitions { topic: t, .. }
        | MetadataOp::DeletePartitions { topic: t, .. } => topic(metadata, t, Access::ManageTopic),
        MetadataOp::CreateConsumerGroup { topic: t, .. } | MetadataOp::DeleteConsumerGroup { topic: t, .. } => {
            topic(metadata, t, Access::ReadTopic)
        }
        MetadataOp::UpdateUser { .. } | MetadataOp::DeleteUser { .. } | MetadataOp::UpdatePermissions { .. } => {
            Some(Access::ManageUsers)
        }
        // Journal-only operations never arrive from a client; refuse them outright.
        MetadataOp::InsertUser { .. }
        | MetadataOp::SetPassword { .. }
        | MetadataOp::InsertToken { .. }
        | MetadataOp::RemoveToken { .. }
        | MetadataOp::JoinGroup { .. }
        | MetadataOp::LeaveGroup { .. }
        | MetadataOp::DropMembers { .. }
        | MetadataOp::SettleGroup { .. } => Some(Access::ManageServers),
    }
}
