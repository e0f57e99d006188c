//! A shard holds at most `MAX_WAITING_POLLS` waiting deferred polls (protocol 0.12): one
//! more is refused with 90 (DeferredPollCapacityExceeded) at once, and a wait that ends
//! frees its place.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use common::shards::*;
use rill_adapter_sim::{Jitter, ManualClock, SimStorage};
use rill_application::Outcome;
use rill_application::memory_pool::MemoryPool;
use rill_application::memory_pool::PoolBuf;
use rill_application::shard::deferred::MAX_WAITING_POLLS;
use rill_domain::wire::codes::{code, operation};

/// A POLL_MESSAGES_DEFERRED body for partition 0 of stream 0 from offset 0, waiting up to a
/// minute for one message.
fn deferred_body() -> Vec<u8> {
    let mut body = poll_body(0, 0, 0, 10);
    body.extend_from_slice(&60_000_000u64.to_le_bytes());
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&(1u32 << 20).to_le_bytes());
    body.extend_from_slice(&62_000_000u64.to_le_bytes());
    body
}

type Waiting<'a> = Pin<Box<dyn Future<Output = Outcome> + 'a>>;

/// The outcome, if the request is answered without waiting (polled once, never blocking).
fn answered_now(future: &mut Waiting<'_>) -> Option<Outcome> {
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(outcome) => Some(outcome),
        Poll::Pending => None,
    }
}

fn still_waiting(future: &mut Waiting<'_>) -> bool {
    answered_now(future).is_none()
}

#[test]
fn one_waiting_poll_past_the_cap_is_refused_and_an_ended_wait_frees_its_place() {
    let storage = SimStorage::new();
    let clock = ManualClock::with_held_sleeps(1_700_000_000_000_000);
    let pool = MemoryPool::new(512 << 20, 64).expect("pool").leak();
    let (shards, _) = start_on(&storage, config(), &clock, 1, pool, Jitter::default()).expect("start");
    let mut admin = Client::login(&shards[0]);
    create_stream_and_topic(&mut admin, "orders", 1);
    let mut client = Client::login_v12(&shards[0]);
    let frames: Vec<Vec<u8>> = (0..=MAX_WAITING_POLLS)
        .map(|_| client.frame(operation::NON_REPLICATED, code::POLL_MESSAGES_DEFERRED, &deferred_body()))
        .collect();
    let (system, connection) = (&client.system, &client.connection);
    let mut waiting: Vec<Waiting<'_>> = frames[..MAX_WAITING_POLLS as usize]
        .iter()
        .map(|frame| Box::pin(system.handle(connection, PoolBuf::plain(frame.clone()))) as Waiting<'_>)
        .collect();
    assert!(waiting.iter_mut().all(still_waiting), "every poll under the cap waits for a message");

    let mut past_cap: Waiting<'_> =
        Box::pin(system.handle(connection, PoolBuf::plain(frames[MAX_WAITING_POLLS as usize].clone())));
    let refused = answered_now(&mut past_cap).expect("refused at once, not left waiting");
    assert_eq!(reply_of(refused), Err(90));

    drop(waiting.pop());
    let mut freed: Waiting<'_> = Box::pin(system.handle(connection, PoolBuf::plain(frames[0].clone())));
    assert!(still_waiting(&mut freed), "an ended wait leaves room for one more");
    // The waits run out: each answers, empty.
    clock.advance_us(60_000_000);
    let answered = answered_now(&mut freed).expect("answered when its wait ran out");
    assert_eq!(reply_of(answered).map(|body| body.len()), Ok(40), "the 40-byte prefix, no message");
}
