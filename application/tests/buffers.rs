//! The hot path's buffers, on simulated shards: a send's batch reaches the storage write as
//! the range of the very frame the transport read (no copy on the way, across shards too),
//! a poll's reply is the buffer the storage read filled, and after sends, polls, errors and
//! evictions every pooled buffer is back in the pool.

mod common;

use common::shards::*;
use futures_executor::block_on;
use rill_adapter_sim::SimStorage;
use rill_application::Outcome;
use rill_application::memory_pool::PoolBuf;
use rill_domain::Namespace;
use rill_domain::constants::HEADER_SIZE;
use rill_domain::wire::codes::{code, operation};

/// The request frame in a pooled buffer, as a transport reads it.
fn pooled_frame(client: &mut Client, op: u8, nr_code: u32, body: &[u8]) -> PoolBuf {
    let bytes = client.frame(op, nr_code, body);
    let mut frame = client.system.shared().pool.acquire(bytes.len());
    frame.copy_from_slice(&bytes);
    frame
}

fn status(outcome: &Outcome) -> u32 {
    u32::from_le_bytes(outcome.frame()[216..220].try_into().unwrap())
}

#[test]
fn a_sent_batch_is_written_from_the_frame_the_transport_read() {
    for shards in [1, 3] {
        let storage = SimStorage::new();
        let (shards, _) = start_shards(&storage, shards);
        let mut client = Client::login(&shards[shards.len() - 1]);
        create_persisted_topic(&mut client, "orders", 3);
        for partition in 0..3 {
            let payloads: [&[u8]; 3] = [b"first", b"second", b"third"];
            let (body, batch_at) = send_body(0, partition, &payloads);
            let frame = pooled_frame(&mut client, operation::SEND_MESSAGES, 0, &body);
            let (address, len) = (frame.as_ptr() as usize, frame.len());
            let outcome = block_on(client.system.handle(&client.connection, frame));
            assert_eq!(status(&outcome), 0);
            let owner = Namespace::new(0, 0, partition).unwrap().shard(shards.len() as u16);
            let log = format!("partitions/{partition}/00000000000000000000.log");
            let written = storage.transfers().into_iter().any(|t| {
                t.write && t.path.ends_with(&log) && t.buffer == address && t.range == (HEADER_SIZE + batch_at..len)
            });
            assert!(written, "partition {partition} (owner {owner}): the write took the frame's own range");
        }
    }
}

#[test]
fn a_polled_batch_is_served_from_the_buffer_the_read_filled() {
    let storage = SimStorage::new();
    let (shards, _) = start_shards(&storage, 3);
    let mut client = Client::login(&shards[1]);
    create_persisted_topic(&mut client, "orders", 3);
    for partition in 0..3 {
        send(&mut client, 0, partition, &[b"alpha", b"beta"]).expect("send");
        let frame = client.frame(operation::NON_REPLICATED, code::POLL_MESSAGES, &poll_body(0, partition, 0, 2));
        let outcome = block_on(client.system.handle(&client.connection, PoolBuf::plain(frame)));
        let Outcome::Reply(reply) = outcome else { panic!("a reply") };
        let read =
            storage.transfers().into_iter().rev().find(|t| !t.write && t.path.to_string_lossy().ends_with(".log"));
        let read = read.expect("the poll read the segment");
        assert_eq!(read.buffer, reply.buffer().as_ptr() as usize, "partition {partition}: no copy after the read");
        assert!(reply.range().start <= read.range.start && read.range.end == reply.range().end);
        assert!(reply.windows(4).any(|w| w == b"beta"));
    }
}

#[test]
fn every_pooled_buffer_goes_home() {
    let storage = SimStorage::new();
    let (shards, _) = start_shards(&storage, 3);
    let pool = shards[0].shared().pool;
    let mut client = Client::login(&shards[1]);
    create_persisted_topic(&mut client, "durable", 3);
    create_stream_and_topic(&mut client, "journaled", 3);
    for partition in 0..3 {
        for stream in [0, 1] {
            for round in 0..3 {
                let payloads: [&[u8]; 3] = [b"one", b"two", b"three"];
                let (body, _) = send_body(stream, partition, &payloads[..=round]);
                let frame = pooled_frame(&mut client, operation::SEND_MESSAGES, 0, &body);
                assert_eq!(status(&block_on(client.system.handle(&client.connection, frame))), 0);
            }
            // Whole, partial, from the journal and from disk, past the end.
            for (offset, count) in [(0, 100), (1, 1), (2, 3), (5, 1), (50, 10)] {
                let body = poll_body(stream, partition, offset, count);
                let frame = pooled_frame(&mut client, operation::NON_REPLICATED, code::POLL_MESSAGES, &body);
                assert_eq!(status(&block_on(client.system.handle(&client.connection, frame))), 0);
            }
        }
    }
    // Error paths: an unknown partition, a batch that fails its checksum, a body that does
    // not decode, a request from a connection that never logged in.
    let body = poll_body(0, 9, 0, 1);
    let frame = pooled_frame(&mut client, operation::NON_REPLICATED, code::POLL_MESSAGES, &body);
    assert_eq!(status(&block_on(client.system.handle(&client.connection, frame))), 3007);
    let (mut body, batch_at) = send_body(0, 0, &[b"tampered"]);
    body[batch_at + 300] ^= 1;
    let frame = pooled_frame(&mut client, operation::SEND_MESSAGES, 0, &body);
    assert_ne!(status(&block_on(client.system.handle(&client.connection, frame))), 0);
    let frame = pooled_frame(&mut client, operation::NON_REPLICATED, code::POLL_MESSAGES, &[1, 2, 3]);
    assert_ne!(status(&block_on(client.system.handle(&client.connection, frame))), 0);
    let stranger = rill_application::Connection::new(999);
    let frame = pooled_frame(&mut client, operation::SEND_MESSAGES, 0, &send_body(0, 0, &[b"x"]).0);
    assert!(matches!(block_on(client.system.handle(&stranger, frame)), Outcome::Evict(_)));
    assert!(pool.stats().in_use_buffers > 0, "journaled batches hold their frames until written");
    block_on(shards[0].flush_all()).expect("flush");
    assert_eq!(pool.stats().in_use_buffers, 0, "{:?}", pool.stats());
}
