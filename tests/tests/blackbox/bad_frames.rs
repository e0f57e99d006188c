//! Raw-socket tests of the VSR framing: golden vectors from the protocol reference, and malformed frames that must be refused without taking the server down.

use iggy::prelude::*;
use rill_tests::raw::{
    self, COMMAND_EVICTION, COMMAND_REPLY, GOLDEN_CLIENT, GOLDEN_LOGIN_BODY, GOLDEN_LOGIN_CHECKSUM, HEADER_SIZE,
    MAX_MESSAGE_SIZE, OP_CREATE_STREAM, OP_NON_REPLICATED, OP_REGISTER, Outcome, PROTOCOL_VERSION, Request,
};
use rill_tests::{TestServer, connect_root};

const CLIENT: u128 = 0x0bad_f00d_0000_0000_0000_0000_0000_0001;

/// The server still answers a raw PING and serves a fresh official client.
async fn assert_server_alive(server: &TestServer) -> anyhow::Result<()> {
    let address = server.tcp_address();
    raw::assert_ping_served(&address);
    let client = connect_root(&address).await?;
    client.ping().await?;
    client.get_streams().await?;
    Ok(())
}

/// The request was refused: the connection closed, an Eviction came back, or a Reply
/// with a non-zero status did.
fn assert_refused(outcome: Outcome, what: &str) {
    match outcome {
        Outcome::Closed => {}
        Outcome::Frame(frame) if frame.command() == COMMAND_EVICTION => {}
        Outcome::Frame(frame) if frame.command() == COMMAND_REPLY && frame.status() != 0 => {
            assert!(frame.body().is_empty(), "{what}: error replies carry no body");
        }
        other => panic!("{what}: expected the request to be refused, got {other:?}"),
    }
}

/// The server drops the connection, sending at most Eviction frames first.
fn assert_dropped(stream: &mut std::net::TcpStream, what: &str) {
    let (frames, end) = raw::read_until_closed(stream);
    for frame in &frames {
        assert_eq!(frame.command(), COMMAND_EVICTION, "{what}: only an eviction may precede the close");
    }
    assert!(matches!(end, Outcome::Closed), "{what}: connection not closed: {end:?}");
}

#[test]
fn request_header_builder_matches_the_ping_golden_vector() {
    let header = Request::non_replicated(GOLDEN_CLIENT, 1, 0, raw::CODE_PING).header(0);
    let mut expected = [0u8; HEADER_SIZE];
    expected[49] = 0x01;
    expected[60] = 0x05;
    let client_le = [0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x00, 0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11];
    expected[128..144].copy_from_slice(&client_le);
    expected[168] = 0x01;
    expected[176] = 0x02;
    expected[196] = 0x01;
    assert_eq!(header, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_golden_vector_gets_the_golden_reply() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let mut stream = raw::connect(&server.tcp_address())?;
    for request in 1..=3u64 {
        let ping = Request::non_replicated(GOLDEN_CLIENT, request, 0, raw::CODE_PING);
        raw::send(&mut stream, &ping.frame(&[]));
        let reply = raw::read_frame(&mut stream).expect_frame("PING reply");
        assert_eq!(reply.0.len(), 256, "reply length");
        assert_eq!(reply.command(), COMMAND_REPLY, "command byte 60");
        assert_eq!(reply.size(), 256, "size field");
        assert_eq!(reply.status(), 0, "status");
        assert_eq!(reply.reply_client(), GOLDEN_CLIENT, "client echoed");
        assert_eq!(reply.reply_operation(), OP_NON_REPLICATED, "operation byte 208");
        assert_eq!(reply.reply_request(), request, "request echoed");
        assert_eq!(reply.request_checksum(), 0, "request checksum echoed");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_login_binds_a_session_usable_for_reads() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let mut stream = raw::connect(&server.tcp_address())?;
    raw::send(&mut stream, &Request::register(CLIENT, GOLDEN_LOGIN_CHECKSUM).frame(&GOLDEN_LOGIN_BODY));
    let reply = raw::read_frame(&mut stream).expect_frame("login reply");
    assert_eq!(reply.command(), COMMAND_REPLY);
    assert_eq!(reply.status(), 0);
    assert_eq!(reply.reply_operation(), OP_REGISTER, "operation echoed");
    assert_eq!(reply.reply_client(), CLIENT);
    let body = reply.body();
    assert_eq!(raw::u32_at(body, 0), 0, "result section: success");
    assert_eq!(raw::u32_at(body, 4), 0, "root user id");
    let session = raw::u64_at(body, 8);
    assert_ne!(session, 0, "session");
    assert_eq!(raw::u32_at(body, 16), PROTOCOL_VERSION, "server protocol version");
    let version_len = usize::from(body[20]);
    assert!(version_len > 0, "server version present");
    assert_eq!(body.len(), 21 + version_len, "reply body length");

    let streams = Request::non_replicated(CLIENT, 1, session, raw::CODE_GET_STREAMS);
    raw::send(&mut stream, &streams.frame(&[]));
    let reply = raw::read_frame(&mut stream).expect_frame("GET_STREAMS reply");
    assert_eq!((reply.command(), reply.status()), (COMMAND_REPLY, 0));
    assert!(reply.body().is_empty(), "no streams on a fresh server");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_before_login_get_status_40_and_writes_get_evicted() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let stats = Request::non_replicated(CLIENT, 1, 0, raw::CODE_GET_STATS);
    let reply = raw::exchange(&address, &stats.frame(&[]))?.expect_frame("GET_STATS reply");
    assert_eq!(reply.command(), COMMAND_REPLY);
    assert_eq!(reply.status(), 40, "Unauthenticated");
    assert!(reply.body().is_empty());

    let create = Request {
        size: None,
        command: raw::COMMAND_REQUEST,
        client: CLIENT,
        request_checksum: 0,
        request: 1,
        operation: OP_CREATE_STREAM,
        session: 1,
        code: None,
    };
    let mut body = vec![7u8];
    body.extend_from_slice(b"sneaky!");
    let outcome = raw::exchange(&address, &create.frame(&body))?;
    let eviction = outcome.expect_frame("CreateStream without a session");
    assert_eq!(eviction.command(), COMMAND_EVICTION);
    assert_eq!(eviction.eviction_reason(), 1, "NoSession");
    assert_eq!(eviction.eviction_client(), CLIENT);

    assert_server_alive(&server).await?;
    let client = connect_root(&address).await?;
    assert!(client.get_streams().await?.is_empty(), "nothing was created");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frame_size_below_the_header_drops_the_connection() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let mut stream = raw::connect(&server.tcp_address())?;
    let mut ping = Request::non_replicated(CLIENT, 1, 0, raw::CODE_PING);
    ping.size = Some(100);
    raw::send(&mut stream, &ping.frame(&[]));
    assert_dropped(&mut stream, "size 100");
    assert_server_alive(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frame_size_above_64_mib_drops_the_connection() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let mut stream = raw::connect(&server.tcp_address())?;
    let mut ping = Request::non_replicated(CLIENT, 1, 0, raw::CODE_PING);
    ping.size = Some(MAX_MESSAGE_SIZE + 1);
    raw::send(&mut stream, &ping.frame(&[]));
    assert_dropped(&mut stream, "size 64 MiB + 1");
    assert_server_alive(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_operation_is_refused() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let mut stream = raw::connect(&server.tcp_address())?;
    let session = raw::login(&mut stream, CLIENT);
    let mut request = Request::non_replicated(CLIENT, 1, session, 0);
    request.operation = 99;
    request.code = None;
    raw::send(&mut stream, &request.frame(&[1, 2, 3, 4]));
    assert_refused(raw::read_frame(&mut stream), "operation 99");
    assert_server_alive(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_non_replicated_code_gets_status_3() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let mut stream = raw::connect(&server.tcp_address())?;
    let session = raw::login(&mut stream, CLIENT);
    let unknown = Request::non_replicated(CLIENT, 1, session, 9999);
    raw::send(&mut stream, &unknown.frame(&[]));
    let reply = raw::read_frame(&mut stream).expect_frame("reply to code 9999");
    assert_eq!(reply.command(), COMMAND_REPLY);
    assert_eq!(reply.status(), 3, "InvalidCommand");
    assert_eq!(reply.reply_operation(), OP_NON_REPLICATED);
    assert!(reply.body().is_empty());

    // The same connection keeps working.
    let ping = Request::non_replicated(CLIENT, 1, session, raw::CODE_PING);
    raw::send(&mut stream, &ping.frame(&[]));
    let reply = raw::read_frame(&mut stream).expect_frame("PING after code 9999");
    assert_eq!((reply.command(), reply.status()), (COMMAND_REPLY, 0));
    assert_server_alive(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_with_a_wrong_checksum_is_refused() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let wrong = Request::register(CLIENT, GOLDEN_LOGIN_CHECKSUM ^ 1);
    let outcome = raw::exchange(&address, &wrong.frame(&GOLDEN_LOGIN_BODY))?;
    let frame = outcome.expect_frame("reply to a corrupted Register");
    match frame.command() {
        COMMAND_REPLY => assert_eq!(frame.status(), 4, "InvalidFormat"),
        COMMAND_EVICTION => {}
        other => panic!("unexpected command {other} in {frame:?}"),
    }

    // The same body with the right checksum is accepted.
    let mut stream = raw::connect(&address)?;
    raw::login(&mut stream, CLIENT + 1);
    assert_server_alive(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_body_then_close_is_survived() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let mut stream = raw::connect(&server.tcp_address())?;
    let mut register = Request::register(CLIENT, GOLDEN_LOGIN_CHECKSUM);
    register.size = Some((HEADER_SIZE + 1000) as u32);
    let frame = register.frame(&GOLDEN_LOGIN_BODY);
    raw::send(&mut stream, &frame);
    raw::close_write(&stream);
    let (frames, end) = raw::read_until_closed(&mut stream);
    assert!(frames.is_empty(), "no answer to an incomplete frame: {frames:?}");
    assert!(matches!(end, Outcome::Closed), "connection closed: {end:?}");
    drop(stream);

    // Also a header cut short, on a connection that is then dropped abruptly.
    let mut stream = raw::connect(&server.tcp_address())?;
    raw::send(&mut stream, &frame[..100]);
    drop(stream);
    assert_server_alive(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bytes_are_survived() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    for (seed, len) in [(1u64, 7usize), (2, 256), (3, 1000), (4, 70_000)] {
        let mut stream = raw::connect(&server.tcp_address())?;
        raw::send(&mut stream, &raw::garbage(len, seed));
        raw::close_write(&stream);
        let (_, end) = raw::read_until_closed(&mut stream);
        assert!(matches!(end, Outcome::Closed), "garbage {len} bytes: {end:?}");
    }
    assert_server_alive(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_client_id_and_foreign_commands_are_refused() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();
    let zero_client = Request::non_replicated(0, 1, 0, raw::CODE_PING);
    assert_refused(raw::exchange(&address, &zero_client.frame(&[]))?, "client 0");

    let mut prepare = Request::non_replicated(CLIENT, 1, 0, raw::CODE_PING);
    prepare.command = 6;
    assert_refused(raw::exchange(&address, &prepare.frame(&[]))?, "command Prepare");

    let mut register_with_session = Request::register(CLIENT, GOLDEN_LOGIN_CHECKSUM);
    register_with_session.session = 5;
    let frame = register_with_session.frame(&GOLDEN_LOGIN_BODY);
    assert_refused(raw::exchange(&address, &frame)?, "Register with a session");
    assert_server_alive(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_options_with_an_unknown_scope_gets_invalid_command() -> anyhow::Result<()> {
    const CODE_DESCRIBE_OPTIONS: u32 = 13;
    const INVALID_COMMAND: u32 = 3;
    let server = TestServer::start()?;
    let mut stream = raw::connect(&server.tcp_address())?;
    let session = raw::login(&mut stream, CLIENT);
    let describe = Request::non_replicated(CLIENT, 1, session, CODE_DESCRIBE_OPTIONS);
    for scope in [0u8, 4, 255] {
        raw::send(&mut stream, &describe.frame(&[scope]));
        let reply = raw::read_frame(&mut stream).expect_frame("DESCRIBE_OPTIONS reply");
        assert_eq!((reply.command(), reply.status()), (COMMAND_REPLY, INVALID_COMMAND), "scope {scope}");
        assert!(reply.body().is_empty());
    }
    // The connection is still served: topic scope lists twelve keys, stream scope none.
    raw::send(&mut stream, &describe.frame(&[1]));
    let topics = raw::read_frame(&mut stream).expect_frame("topic catalog");
    assert_eq!((topics.status(), raw::u32_at(topics.body(), 0)), (0, 12));
    raw::send(&mut stream, &describe.frame(&[2]));
    let streams = raw::read_frame(&mut stream).expect_frame("stream catalog");
    assert_eq!((streams.status(), streams.body()), (0, &0u32.to_le_bytes()[..]));
    assert_server_alive(&server).await
}
