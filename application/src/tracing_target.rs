//! What a request is about, for its trace span: the stream, topic and partition it names,
//! read from its body (identifiers as the client wrote them: a number, or a name).

use rill_domain::identifier::Identifier;
use rill_domain::wire::command::{Command, MetadataOp, Partitioning, TopicRef};

fn text(id: &Identifier) -> String {
    match id {
        Identifier::Numeric(n) => n.to_string(),
        Identifier::Name(name) => name.clone(),
    }
}

fn of_topic(topic: &TopicRef, partition: Option<u32>) -> (Option<String>, Option<String>, Option<u32>) {
    (Some(text(&topic.stream)), Some(text(&topic.topic)), partition)
}

/// (stream, topic, partition) a request names; `None` for what it does not name or a body
/// that does not decode.
pub fn target(operation: u8, code: u32, body: &[u8]) -> (Option<String>, Option<String>, Option<u32>) {
    let Ok(command) = Command::decode(operation, code, body) else { return (None, None, None) };
    match &command {
        Command::SendMessages { topic, partitioning, .. } => {
            let partition = match partitioning {
                Partitioning::PartitionId(id) => Some(*id),
                _ => None,
            };
            of_topic(topic, partition)
        }
        Command::PollMessages(poll) => of_topic(&poll.topic, poll.partition_id),
        Command::StoreConsumerOffset { topic, partition_id, .. }
        | Command::GetConsumerOffset { topic, partition_id, .. }
        | Command::DeleteConsumerOffset { topic, partition_id, .. } => of_topic(topic, *partition_id),
        Command::FlushUnsavedBuffer { topic, partition_id, .. }
        | Command::DeleteSegments { topic, partition_id, .. } => of_topic(topic, Some(*partition_id)),
        Command::GetTopic(topic) => of_topic(topic, None),
        Command::GetStream { stream } | Command::GetTopics { stream } => (Some(text(stream)), None, None),
        Command::Metadata(MetadataOp::CreateTopic { stream, .. }) => (Some(text(stream)), None, None),
        Command::Metadata(MetadataOp::DeleteTopic(topic) | MetadataOp::PurgeTopic(topic)) => of_topic(topic, None),
        _ => (None, None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_domain::polling::PollingStrategy;
    use rill_domain::wire::command::Consumer;
    use rill_domain::wire::command::PollRequest;

    #[test]
    fn sends_and_polls_name_their_partition() {
        let topic = TopicRef { stream: Identifier::Numeric(3), topic: Identifier::Name("orders".into()) };
        let batch = rill_domain::batch::build(&[(1, b"x", b"")], 1);
        let send = Command::SendMessages {
            topic: topic.clone(),
            partitioning: Partitioning::PartitionId(2),
            messages_count: 1,
            batch: &batch,
        };
        let encoded = send.encode().unwrap();
        assert_eq!(
            target(encoded.operation, encoded.code, &encoded.body),
            (Some("3".into()), Some("orders".into()), Some(2))
        );
        let poll = Command::PollMessages(PollRequest {
            consumer: Consumer::Single(Identifier::Numeric(1)),
            topic,
            partition_id: None,
            strategy: PollingStrategy::Next,
            count: 1,
            auto_commit: false,
            deferred: None,
        })
        .encode()
        .unwrap();
        assert_eq!(target(poll.operation, poll.code, &poll.body), (Some("3".into()), Some("orders".into()), None));
        assert_eq!(target(2, 1, &[]), (None, None, None), "a ping names nothing");
    }
}
