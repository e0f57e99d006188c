//! Connection and resource limits (`[connections]`): the connection cap, the login timeout,
//! the slow-body (slow-loris) timeout, the frame size cap, and a server holding thousands
//! of idle and half-open connections while it goes on serving a real client.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use iggy::prelude::*;
use rill_tests::raw::{self, COMMAND_EVICTION, COMMAND_REPLY, Outcome, Request};
use rill_tests::{TestServer, connect_root, create_stream_and_topic, id, message};

const CLIENT: u128 = 0x11b1_7000;
const NO_SESSION: u8 = 1;
const INVALID_REQUEST_BODY_SIZE: u8 = 6;
const SESSION_ERROR: u8 = 12;

/// Pings on `stream`; true when a successful reply came back.
fn ping(stream: &mut TcpStream, request: u64) -> bool {
    raw::send(stream, &Request::non_replicated(CLIENT, request, 0, raw::CODE_PING).frame(&[]));
    matches!(raw::read_frame(stream), Outcome::Frame(reply) if reply.command() == COMMAND_REPLY && reply.status() == 0)
}

/// A new connection the server serves, retried while connections it is still closing
/// (the harness's readiness probe, one the test just dropped) hold their slots.
fn served_connection(address: &str) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut stream = raw::connect(address).expect("connect");
        if ping(&mut stream, 1) {
            return stream;
        }
        assert!(Instant::now() < deadline, "no connection slot came free within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The server sent one Eviction with `reason` and closed the connection.
fn assert_evicted(stream: &mut TcpStream, reason: u8, what: &str) {
    let (frames, end) = raw::read_until_closed(stream);
    let eviction = frames.first().unwrap_or_else(|| panic!("{what}: no eviction before the close ({end:?})"));
    assert_eq!(eviction.command(), COMMAND_EVICTION, "{what}: eviction frame");
    assert_eq!(eviction.eviction_reason(), reason, "{what}: eviction reason");
    assert!(matches!(end, Outcome::Closed), "{what}: connection still open: {end:?}");
}

#[test]
fn connections_past_the_limit_are_refused_and_a_freed_slot_is_reused() -> anyhow::Result<()> {
    let server = TestServer::start_with_env(&[("IGGY_CONNECTIONS_MAX_CONNECTIONS", "3")])?;
    let address = server.tcp_address();
    let mut held: Vec<TcpStream> = (0..3).map(|_| served_connection(&address)).collect();
    let mut refused = raw::connect(&address)?;
    assert_evicted(&mut refused, SESSION_ERROR, "the fourth connection");
    for (request, stream) in held.iter_mut().enumerate() {
        assert!(ping(stream, 2 + request as u64), "a connection within the limit is still served");
    }
    drop(held.pop());
    let mut replacement = served_connection(&address);
    assert!(ping(&mut replacement, 2), "the connection that took the freed slot is served");
    assert!(server.logs().contains("connection limit"), "the refusal is logged:\n{}", server.logs());
    Ok(())
}

#[test]
fn a_connection_that_never_logs_in_is_closed_after_the_login_timeout() -> anyhow::Result<()> {
    let server = TestServer::start_with_env(&[("IGGY_CONNECTIONS_LOGIN_TIMEOUT", "1 s")])?;
    let address = server.tcp_address();
    // The timeout runs from the connect, so the clock starts before it (the other
    // connection's login, an Argon2 check, may take a while on a loaded machine).
    let started = Instant::now();
    let mut anonymous = raw::connect(&address)?;
    let mut logged_in = raw::connect(&address)?;
    raw::login(&mut logged_in, CLIENT + 1);
    // Pings answer, but they do not stand in for a login.
    let mut request = 1;
    while started.elapsed() < Duration::from_millis(700) {
        assert!(ping(&mut anonymous, request), "a ping before the timeout is answered");
        request += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_evicted(&mut anonymous, NO_SESSION, "the connection without a login");
    assert!(started.elapsed() >= Duration::from_millis(900), "closed before its login timeout");
    assert!(ping(&mut logged_in, 1), "a logged-in connection outlives the login timeout");
    Ok(())
}

#[test]
fn a_frame_whose_body_never_finishes_is_dropped_and_others_are_served() -> anyhow::Result<()> {
    let server = TestServer::start_with_env(&[("IGGY_CONNECTIONS_FRAME_TIMEOUT", "1 s")])?;
    let address = server.tcp_address();
    let mut slow = raw::connect(&address)?;
    raw::login(&mut slow, CLIENT);
    // A header announcing 4 KiB of body, then only a trickle of it.
    let header = Request::non_replicated(CLIENT, 2, 0, raw::CODE_PING).header(4096);
    raw::send(&mut slow, &header);
    raw::send(&mut slow, &[0u8; 16]);
    let started = Instant::now();
    let (frames, end) = raw::read_until_closed(&mut slow);
    assert!(frames.is_empty(), "nothing is answered for a frame never finished: {frames:?}");
    assert!(matches!(end, Outcome::Closed), "the slow connection is closed, not left hanging: {end:?}");
    assert!(started.elapsed() < raw::READ_TIMEOUT, "closed by the frame timeout");
    raw::assert_ping_served(&address);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_over_the_size_limit_is_evicted_before_its_body_is_read() -> anyhow::Result<()> {
    let server = TestServer::start_with_env(&[("IGGY_CONNECTIONS_MAX_FRAME_SIZE", "64 KiB")])?;
    let address = server.tcp_address();
    let mut stream = raw::connect(&address)?;
    raw::login(&mut stream, CLIENT);
    let header = Request::non_replicated(CLIENT, 2, 0, raw::CODE_PING).header(1 << 20);
    raw::send(&mut stream, &header);
    assert_evicted(&mut stream, INVALID_REQUEST_BODY_SIZE, "the 1 MiB frame");
    // The official client: a batch within the limit is stored, one past it is refused.
    let client = connect_root(&address).await?;
    create_stream_and_topic(&client, "limits", "t", 1).await?;
    let mut small = vec![message(1, vec![7u8; 16 * 1024], None)];
    client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut small).await?;
    let mut large = vec![message(2, vec![7u8; 128 * 1024], None)];
    let refused = client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut large).await;
    assert!(refused.is_err(), "a 128 KiB batch over a 64 KiB frame limit is refused");
    let client = connect_root(&address).await?;
    let polled = client
        .poll_messages(&id(0), &id(0), Some(0), &Consumer::new(id(1)), &PollingStrategy::offset(0), 10, false)
        .await?;
    assert_eq!(polled.messages.len(), 1, "only the batch within the limit was stored");
    assert_eq!(polled.messages[0].payload.len(), 16 * 1024);
    Ok(())
}

/// Latencies of `rounds` send-then-poll round trips on one partition, in microseconds, sorted.
async fn round_trips(client: &IggyClient, rounds: u64, first_offset: u64) -> anyhow::Result<Vec<u128>> {
    let mut latencies = Vec::new();
    for round in 0..rounds {
        let started = Instant::now();
        let mut batch = vec![message(u128::from(first_offset + round + 1), vec![round as u8; 512], None)];
        client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await?;
        let offset = PollingStrategy::offset(first_offset + round);
        let polled = client.poll_messages(&id(0), &id(0), Some(0), &Consumer::new(id(1)), &offset, 1, false).await?;
        latencies.push(started.elapsed().as_micros());
        assert_eq!(polled.messages.len(), 1, "round {round}: the message just sent is polled");
        assert_eq!(polled.messages[0].header.offset, first_offset + round, "round {round}: its offset");
    }
    latencies.sort_unstable();
    Ok(latencies)
}

fn percentile(sorted: &[u128], fraction: f64) -> u128 {
    sorted[((sorted.len() - 1) as f64 * fraction) as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_and_half_open_connections_do_not_starve_a_client() -> anyhow::Result<()> {
    let server = TestServer::start_with_env(&[("IGGY_CONNECTIONS_LOGIN_TIMEOUT", "8 s")])?;
    let address = server.tcp_address();
    let client = connect_root(&address).await?;
    create_stream_and_topic(&client, "limits", "t", 1).await?;
    let before = round_trips(&client, 200, 0).await?;
    // 1,000 connections that send nothing, 1,000 that stop half-way through a header.
    let mut crowd = Vec::with_capacity(2000);
    for index in 0..2000u64 {
        let mut stream = raw::connect(&address)?;
        if index % 2 == 1 {
            raw::send(&mut stream, &Request::non_replicated(CLIENT, 1, 0, raw::CODE_PING).header(0)[..100]);
        }
        crowd.push(stream);
    }
    let during = round_trips(&client, 200, 200).await?;
    println!(
        "send+poll round trip, p50/p99 µs: alone {}/{}, beside 2,000 idle and half-open connections {}/{}",
        percentile(&before, 0.5),
        percentile(&before, 0.99),
        percentile(&during, 0.5),
        percentile(&during, 0.99)
    );
    // A new client is still let in and served beside the crowd.
    let late = connect_root(&address).await?;
    late.ping().await?;
    assert_eq!(late.get_streams().await?.len(), 1);
    // The crowd never logs in: every one of them is closed at the login timeout.
    for (index, stream) in crowd.iter_mut().enumerate() {
        stream.set_read_timeout(Some(Duration::from_secs(40)))?;
        let (frames, end) = raw::read_until_closed(stream);
        assert!(matches!(end, Outcome::Closed), "connection {index} still open after the login timeout: {end:?}");
        assert!(frames.iter().all(|frame| frame.command() == COMMAND_EVICTION), "connection {index}: {frames:?}");
    }
    client.ping().await?;
    Ok(())
}

/// The first binary message a WebSocket server sends on a new connection at `address`.
fn first_websocket_message(address: &str) -> anyhow::Result<raw::Frame> {
    let stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(raw::READ_TIMEOUT))?;
    let (mut socket, _) =
        tungstenite::client::client(format!("ws://{address}/"), stream).map_err(|e| anyhow::anyhow!("{e}"))?;
    loop {
        match socket.read().map_err(|e| anyhow::anyhow!("{e}"))? {
            tungstenite::Message::Binary(bytes) => return Ok(raw::Frame(bytes.to_vec())),
            tungstenite::Message::Close(_) => anyhow::bail!("closed without a message"),
            _ => continue,
        }
    }
}

#[test]
fn websocket_connections_get_the_same_limits() -> anyhow::Result<()> {
    let websocket = format!("127.0.0.1:{}", rill_tests::free_port());
    let server = TestServer::start_with_env(&[
        ("IGGY_WEBSOCKET_ENABLED", "true"),
        ("IGGY_WEBSOCKET_ADDRESS", websocket.as_str()),
        ("IGGY_CONNECTIONS_MAX_CONNECTIONS", "2"),
        ("IGGY_CONNECTIONS_LOGIN_TIMEOUT", "1 s"),
    ])?;
    // A WebSocket connection that never logs in is evicted at the login timeout.
    let started = Instant::now();
    let eviction = first_websocket_message(&websocket)?;
    assert_eq!((eviction.command(), eviction.eviction_reason()), (COMMAND_EVICTION, NO_SESSION));
    assert!(started.elapsed() >= Duration::from_millis(900), "evicted before its login timeout");
    // Two logged-in TCP connections fill the server: a WebSocket one is refused.
    let mut held = Vec::new();
    for client in 0..2 {
        let mut stream = served_connection(&server.tcp_address());
        raw::login(&mut stream, CLIENT + client);
        held.push(stream);
    }
    let refusal = first_websocket_message(&websocket)?;
    assert_eq!((refusal.command(), refusal.eviction_reason()), (COMMAND_EVICTION, SESSION_ERROR));
    Ok(())
}
