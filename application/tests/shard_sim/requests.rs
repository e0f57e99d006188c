//! The shard simulation's requests: what a simulated client asks, its frame body, and how
//! a trace names it.

use rill_domain::batch;
use rill_domain::identifier::Identifier;
use rill_domain::polling::PollingStrategy;
use rill_domain::wire::command::{Command, Consumer, Partitioning, PollRequest, TopicRef};
use rill_domain::wire::encode::EncodedRequest;

use super::CONSUMER;

pub enum Request {
    Send { topic: usize, partition: u32, payloads: Vec<String>, submitted_us: u64 },
    Poll { topic: usize, partition: u32, offset: u64 },
    StoreOffset { topic: usize, partition: u32, offset: u64 },
    GetOffset { topic: usize, partition: u32, at_least: Option<u64> },
    Flush { topic: usize, partition: u32, fsync: bool },
}

pub fn topic_ref(topic: usize) -> TopicRef {
    TopicRef { stream: Identifier::Numeric(0), topic: Identifier::Numeric(topic as u32) }
}

pub fn consumer() -> Consumer {
    Consumer::Single(Identifier::Numeric(CONSUMER))
}

/// (client, send number, index in the batch) of a payload this simulation made.
pub fn origin(payload: &str) -> (u64, u64, u64) {
    let mut parts = payload.split(':').skip(1).map(|part| part.parse::<u64>().unwrap_or(u64::MAX));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The request's frame body; `step` numbers the messages of a send.
pub fn encode(request: &Request, step: u64) -> EncodedRequest {
    let built: Vec<u8>;
    let command = match request {
        Request::Send { topic, partition, payloads, .. } => {
            let frames: Vec<(u128, &[u8], &[u8])> = payloads
                .iter()
                .enumerate()
                .map(|(i, p)| ((step as u128) << 8 | i as u128, p.as_bytes(), &b""[..]))
                .collect();
            built = batch::build(&frames, 1);
            Command::SendMessages {
                topic: topic_ref(*topic),
                partitioning: Partitioning::PartitionId(*partition),
                messages_count: payloads.len() as u32,
                batch: &built,
            }
        }
        Request::Poll { topic, partition, offset } => Command::PollMessages(PollRequest {
            consumer: consumer(),
            topic: topic_ref(*topic),
            partition_id: Some(*partition),
            strategy: PollingStrategy::Offset(*offset),
            count: 1 + (step % 50) as u32,
            auto_commit: false,
            deferred: None,
        }),
        Request::StoreOffset { topic, partition, offset } => Command::StoreConsumerOffset {
            consumer: consumer(),
            topic: topic_ref(*topic),
            partition_id: Some(*partition),
            offset: *offset,
        },
        Request::GetOffset { topic, partition, .. } => Command::GetConsumerOffset {
            consumer: consumer(),
            topic: topic_ref(*topic),
            partition_id: Some(*partition),
        },
        Request::Flush { topic, partition, fsync } => {
            Command::FlushUnsavedBuffer { topic: topic_ref(*topic), partition_id: *partition, fsync: *fsync }
        }
    };
    command.encode().expect("the simulation's requests encode")
}

pub fn describe(request: &Request) -> String {
    match request {
        Request::Send { topic, partition, payloads, .. } => {
            let first = payloads.first().map(|p| p.split(':').take(4).collect::<Vec<_>>().join(":"));
            format!("send {} to {topic}/{partition} from {}", payloads.len(), first.unwrap_or_default())
        }
        Request::Poll { topic, partition, offset } => format!("poll {topic}/{partition} at {offset}"),
        Request::StoreOffset { topic, partition, offset } => format!("store offset {offset} on {topic}/{partition}"),
        Request::GetOffset { topic, partition, .. } => format!("get offset of {topic}/{partition}"),
        Request::Flush { topic, partition, fsync } => format!("flush {topic}/{partition} fsync {fsync}"),
    }
}

pub fn summary(result: &Result<Vec<u8>, u32>) -> String {
    match result {
        Ok(body) => format!("ok, {} bytes", body.len()),
        Err(code) => format!("error {code}"),
    }
}
