//! Session liveness: a connection that stays silent past the heartbeat limit is evicted
//! with StaleClient, while one that pings keeps its session.

use std::time::Duration;

use rill_tests::TestServer;
use rill_tests::raw::{self, COMMAND_EVICTION, COMMAND_REPLY, Request};

const CLIENT: u128 = 0x5e55_1011;
const STALE_CLIENT: u8 = 13;

fn quick_heartbeat() -> anyhow::Result<TestServer> {
    // A 1 s interval evicts after 1.2 s of silence.
    TestServer::start_with_env(&[("IGGY_HEARTBEAT_INTERVAL", "1 s")])
}

#[test]
fn a_silent_connection_is_evicted_as_stale() -> anyhow::Result<()> {
    let server = quick_heartbeat()?;
    let mut stream = raw::connect(&server.tcp_address())?;
    std::thread::sleep(Duration::from_millis(2500));
    let (frames, end) = raw::read_until_closed(&mut stream);
    let eviction = frames.first().expect("an eviction before the close");
    assert_eq!(eviction.command(), COMMAND_EVICTION);
    assert_eq!(eviction.eviction_reason(), STALE_CLIENT);
    assert!(matches!(end, raw::Outcome::Closed), "connection still open: {end:?}");
    Ok(())
}

#[test]
fn a_pinging_connection_stays() -> anyhow::Result<()> {
    let server = quick_heartbeat()?;
    let mut stream = raw::connect(&server.tcp_address())?;
    for request in 1..=8u64 {
        std::thread::sleep(Duration::from_millis(400));
        let frame = Request::non_replicated(CLIENT, request, 0, raw::CODE_PING).frame(&[]);
        raw::send(&mut stream, &frame);
        let reply = raw::read_frame(&mut stream).expect_frame("ping reply");
        assert_eq!((reply.command(), reply.status()), (COMMAND_REPLY, 0));
    }
    Ok(())
}
