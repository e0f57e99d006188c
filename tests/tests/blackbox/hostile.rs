//! The malformed-input suite: named hostile cases over every transport (raw TCP frames and
//! bodies, WebSocket frames, QUIC streams, HTTP requests) and a few thousand mutated frames,
//! against one server. Each case must be refused (an error status, an Eviction, a closed
//! connection or stream) and never answered with success or left hanging, and each is
//! followed by a successful request from another client. Then, with every client gone,
//! the memory pool holds no buffer in use, and a second pass of everything leaves its
//! allocated bytes where the first left them.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use iggy::prelude::*;
use rill_tests::raw::{self, COMMAND_REPLY, GOLDEN_LOGIN_BODY, GOLDEN_LOGIN_CHECKSUM, Outcome, Request};
use rill_tests::{TestServer, connect_root, create_stream_and_topic, free_port, quic_raw};

const CLIENT: u128 = 0x4057_11e0;
const OP_SEND_MESSAGES: u8 = 160;
const OP_STORE_OFFSET: u8 = 161;
const CODE_POLL: u32 = 100;
const CODE_DESCRIBE_OPTIONS: u32 = 13;
const CODE_SNAPSHOT: u32 = 11;
const OP_CREATE_USER: u8 = 136;
const OP_CREATE_TOPIC: u8 = 132;

/// What a case may get back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Anything but a success.
    Refused,
    /// Any well-formed answer (the input is odd, not wrong).
    Answered,
}

/// A raw TCP case: bytes sent after an optional login, then end of input.
struct TcpCase {
    name: &'static str,
    login: bool,
    bytes: Vec<u8>,
    expect: Expect,
}

fn numeric(id: u32) -> Vec<u8> {
    [&[1u8, 4][..], &id.to_le_bytes()].concat()
}

fn nr(code: u32, body: &[u8]) -> Vec<u8> {
    Request::non_replicated(CLIENT, 2, 0, code).frame(body)
}

fn op(operation: u8, body: &[u8]) -> Vec<u8> {
    let mut request = Request::non_replicated(CLIENT, 2, 0, 0);
    request.operation = operation;
    request.code = None;
    request.frame(body)
}

fn with_size(mut frame: Vec<u8>, size: u32) -> Vec<u8> {
    frame[48..52].copy_from_slice(&size.to_le_bytes());
    frame
}

/// `[stream 0][topic 0][partition id][count]` then `batch`.
fn send_body(partition: u32, count: u32, batch: &[u8]) -> Vec<u8> {
    [
        numeric(0),
        numeric(0),
        [&[2u8, 4][..], &partition.to_le_bytes()].concat(),
        count.to_le_bytes().to_vec(),
        batch.to_vec(),
    ]
    .concat()
}

fn tcp_cases() -> Vec<TcpCase> {
    use Expect::{Answered, Refused};
    let case = |name, login, bytes, expect| TcpCase { name, login, bytes, expect };
    let ping = nr(raw::CODE_PING, &[]);
    let mut header_fields = Request::non_replicated(CLIENT, 2, 0, raw::CODE_PING);
    header_fields.command = 8;
    let reply_command = header_fields.frame(&[]);
    header_fields.command = 0;
    let zero_command = header_fields.frame(&[]);
    let poll = |strategy: u8, count: u32| {
        let body = [
            vec![1u8],
            numeric(1),
            numeric(0),
            numeric(0),
            vec![1],
            0u32.to_le_bytes().to_vec(),
            vec![strategy],
            0u64.to_le_bytes().to_vec(),
            count.to_le_bytes().to_vec(),
            vec![0],
        ]
        .concat();
        nr(CODE_POLL, &body)
    };
    let mut half_login = Request::register(CLIENT, 0).frame(&GOLDEN_LOGIN_BODY[..17]);
    half_login.truncate(HEADER + 17);
    let mut two_frames = ping.clone();
    two_frames.extend(with_size(ping.clone(), 100));
    let pings: Vec<u8> = (0..500).flat_map(|_| ping.clone()).collect();
    let mut long_username = GOLDEN_LOGIN_BODY.to_vec();
    long_username[20] = 200;
    vec![
        case("size below the header", false, with_size(ping.clone(), 100), Refused),
        case("size zero", false, with_size(ping.clone(), 0), Refused),
        case("size above 64 MiB", false, with_size(ping.clone(), (64 << 20) + 1), Refused),
        case("size u32::MAX", false, with_size(ping.clone(), u32::MAX), Refused),
        case("command Reply", false, reply_command, Refused),
        case("command zero", false, zero_command, Refused),
        case("operation 99", true, op(99, &[1, 2, 3]), Refused),
        case("operation 255", true, op(255, &[]), Refused),
        case("code 9999", true, nr(9999, &[]), Refused),
        case("code 0", true, nr(0, &[]), Refused),
        case(
            "register, wrong checksum",
            false,
            Request::register(CLIENT, GOLDEN_LOGIN_CHECKSUM ^ 1).frame(&GOLDEN_LOGIN_BODY),
            Refused,
        ),
        case("register, empty body", false, Request::register(CLIENT, 0).frame(&[]), Refused),
        case("register, half a body", false, half_login, Refused),
        case("register, username past the body", false, Request::register(CLIENT, 0).frame(&long_username), Refused),
        case("write before login", false, op(raw::OP_CREATE_STREAM, b"\x01s"), Refused),
        case("read before login", false, nr(raw::CODE_GET_STREAMS, &[]), Refused),
        case("header only, body announced", false, with_size(ping.clone(), 1256), Refused),
        case("header cut at 255 bytes", false, ping[..255].to_vec(), Refused),
        case("garbage 300 bytes", false, raw::garbage(300, 11), Refused),
        case("garbage 4 KiB", false, raw::garbage(4096, 12), Refused),
        case("client id zero", false, Request::non_replicated(0, 1, 0, raw::CODE_PING).frame(&[]), Refused),
        case("a good frame, then a lying one", false, two_frames, Answered),
        case("500 pipelined pings, never read", false, pings, Answered),
        case("send, body of three bytes", true, op(OP_SEND_MESSAGES, &[1, 4, 0]), Refused),
        case("send, count without a batch", true, op(OP_SEND_MESSAGES, &send_body(0, 3, &[])), Refused),
        case("send, garbage batch", true, op(OP_SEND_MESSAGES, &send_body(0, 1, &raw::garbage(400, 13))), Refused),
        case("send, zeroed batch", true, op(OP_SEND_MESSAGES, &send_body(0, 1, &[0u8; 320])), Refused),
        case(
            "send, partition 4 billion",
            true,
            op(OP_SEND_MESSAGES, &send_body(4_000_000_000, 1, &[0u8; 320])),
            Refused,
        ),
        case(
            "send, partitioning kind 9",
            true,
            op(OP_SEND_MESSAGES, &[numeric(0), numeric(0), vec![9, 0], 1u32.to_le_bytes().to_vec()].concat()),
            Refused,
        ),
        case(
            "send, messages key of 0 bytes",
            true,
            op(OP_SEND_MESSAGES, &[numeric(0), numeric(0), vec![3, 0], 1u32.to_le_bytes().to_vec()].concat()),
            Refused,
        ),
        case("poll, strategy 77", true, poll(77, 10), Refused),
        case("poll, body cut short", true, nr(CODE_POLL, &[1, 1, 4, 0]), Refused),
        case(
            "poll, unknown topic",
            true,
            nr(
                CODE_POLL,
                &[
                    vec![1u8],
                    numeric(1),
                    numeric(0),
                    numeric(99),
                    vec![0],
                    vec![1],
                    0u64.to_le_bytes().to_vec(),
                    1u32.to_le_bytes().to_vec(),
                    vec![0],
                ]
                .concat(),
            ),
            Refused,
        ),
        case("create stream, empty name", true, op(raw::OP_CREATE_STREAM, &[0]), Refused),
        case("create stream, name longer than the body", true, op(raw::OP_CREATE_STREAM, &[200, b'a', b'b']), Refused),
        case("create stream, name not UTF-8", true, op(raw::OP_CREATE_STREAM, &[2, 0xff, 0xfe]), Refused),
        case("identifier kind 9", true, nr(200, &[9, 4, 0, 0, 0, 0]), Refused),
        case("numeric identifier of 3 bytes", true, nr(200, &[1, 3, 0, 0, 0]), Refused),
        case(
            "create topic, garbage options",
            true,
            op(
                OP_CREATE_TOPIC,
                &[numeric(0), 1u32.to_le_bytes().to_vec(), vec![1, b't'], raw::garbage(40, 14)].concat(),
            ),
            Refused,
        ),
        case(
            "store offset, unknown topic",
            true,
            op(
                OP_STORE_OFFSET,
                &[
                    vec![1u8],
                    numeric(1),
                    numeric(0),
                    numeric(99),
                    vec![1],
                    0u32.to_le_bytes().to_vec(),
                    5u64.to_le_bytes().to_vec(),
                ]
                .concat(),
            ),
            Refused,
        ),
        case("describe options, scope 9", true, nr(CODE_DESCRIBE_OPTIONS, &[9]), Refused),
        case("snapshot, no types", true, nr(CODE_SNAPSHOT, &[1, 0]), Refused),
        case(
            "create user, permissions cut short",
            true,
            op(
                OP_CREATE_USER,
                &[vec![1, b'u', 6], b"secret".to_vec(), vec![1, 1], 100u32.to_le_bytes().to_vec(), vec![1]].concat(),
            ),
            Refused,
        ),
    ]
}

const HEADER: usize = raw::HEADER_SIZE;

/// Runs one TCP case and checks what came back.
fn run_tcp_case(address: &str, case: &TcpCase) {
    let mut stream = raw::connect(address).expect("connect");
    if case.login {
        raw::login(&mut stream, CLIENT);
    }
    raw::send(&mut stream, &case.bytes);
    raw::close_write(&stream);
    let (frames, end) = raw::read_until_closed(&mut stream);
    assert!(matches!(end, Outcome::Closed), "{}: the server left the connection hanging: {end:?}", case.name);
    if case.expect == Expect::Refused {
        let succeeded = frames.iter().any(|f| f.command() == COMMAND_REPLY && f.status() == 0);
        assert!(!succeeded, "{}: answered with success: {frames:?}", case.name);
    }
    raw::assert_ping_served(address);
}

/// A WebSocket connection's raw socket after the upgrade.
fn websocket(address: &str) -> TcpStream {
    let stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let (socket, _) = tungstenite::client::client(format!("ws://{address}/"), stream).expect("upgrade");
    socket.into_inner()
}

/// A masked client frame: FIN and opcode byte, then the payload (mask 0: bytes as they are).
fn ws_frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    match payload.len() {
        len @ 0..=125 => out.push(0x80 | len as u8),
        len @ 126..=65535 => {
            out.push(0x80 | 126);
            out.extend((len as u16).to_be_bytes());
        }
        len => {
            out.push(0x80 | 127);
            out.extend((len as u64).to_be_bytes());
        }
    }
    out.extend([0, 0, 0, 0]);
    out.extend(payload);
    out
}

fn websocket_cases() -> Vec<(&'static str, Vec<u8>)> {
    let ping_frame = nr(raw::CODE_PING, &[]);
    let mut lying = vec![0x82, 0x80 | 127];
    lying.extend((1u64 << 62).to_be_bytes());
    lying.extend([0u8; 4]);
    let mut unmasked = vec![0x82, 10];
    unmasked.extend([0u8; 10]);
    vec![
        ("websocket: a 4 EiB length", lying),
        ("websocket: an unmasked client frame", unmasked),
        ("websocket: a compressed frame never negotiated", ws_frame(0x80 | 0x40 | 0x02, &[0xaa; 8])),
        ("websocket: a continuation with no start", ws_frame(0x80, &ping_frame)),
        ("websocket: a ping of 126 bytes", ws_frame(0x89, &[0u8; 126])),
        ("websocket: opcode 3", ws_frame(0x83, b"xx")),
        ("websocket: a one-byte close payload", ws_frame(0x88, &[3])),
        ("websocket: a close with reserved code 1005", ws_frame(0x88, &[0x03, 0xED])),
        ("websocket: a message below one header", ws_frame(0x82, &ping_frame[..100])),
        ("websocket: two frames in one message", ws_frame(0x82, &[ping_frame.clone(), ping_frame.clone()].concat())),
        ("websocket: garbage text", ws_frame(0x81, &raw::garbage(500, 21))),
        ("websocket: a write before login", ws_frame(0x82, &op(raw::OP_CREATE_STREAM, b"\x01s"))),
    ]
}

/// Sends a WebSocket case, then end of input; the server must close (having answered, if
/// at all, with no success).
fn run_websocket_case(address: &str, name: &str, bytes: &[u8]) {
    let mut stream = websocket(address);
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut reply = Vec::new();
    let read = std::io::Read::read_to_end(&mut stream, &mut reply);
    assert!(
        read.is_ok() || read.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "{name}: the server left the connection hanging: {read:?}"
    );
    // A binary reply frame carries a request frame reply at its payload; status 0 is success.
    let start = if reply.get(1) == Some(&126) { 4 } else { 2 };
    let succeeded = reply.first() == Some(&0x82)
        && reply.len() >= start + 68
        && reply[start + 60] == COMMAND_REPLY
        && reply[start + 64..start + 68] == [0, 0, 0, 0];
    assert!(!succeeded, "{name}: answered with success");
}

/// One PING over a new WebSocket connection is answered.
fn assert_websocket_ping(address: &str) {
    let stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let (mut socket, _) = tungstenite::client::client(format!("ws://{address}/"), stream).expect("upgrade");
    let ping = nr(raw::CODE_PING, &[]);
    socket.send(tungstenite::Message::Binary(ping.into())).expect("send a ping");
    loop {
        match socket.read().expect("a reply") {
            tungstenite::Message::Binary(bytes) => {
                let reply = raw::Frame(bytes.to_vec());
                assert_eq!((reply.command(), reply.status()), (COMMAND_REPLY, 0), "websocket PING reply");
                return;
            }
            _ => continue,
        }
    }
}

fn quic_cases() -> Vec<(&'static str, Vec<u8>)> {
    let ping = nr(raw::CODE_PING, &[]);
    vec![
        ("quic: an empty stream", Vec::new()),
        ("quic: garbage", raw::garbage(700, 31)),
        ("quic: a header alone, body announced", with_size(ping.clone(), 2000)),
        ("quic: size below the header", with_size(ping.clone(), 10)),
        ("quic: two frames on one stream", [ping.clone(), ping.clone()].concat()),
        ("quic: a write before login", op(raw::OP_CREATE_STREAM, b"\x01s")),
        ("quic: register, wrong checksum", Request::register(CLIENT, 5).frame(&GOLDEN_LOGIN_BODY)),
        ("quic: a frame cut at 200 bytes", ping[..200].to_vec()),
    ]
}

async fn run_quic_cases(address: &str) -> anyhow::Result<()> {
    for (name, bytes) in quic_cases() {
        let connection = quic_raw::connect(address).await?;
        if let Some(reply) = quic_raw::exchange(&connection, &bytes).await {
            let frame = raw::Frame(reply);
            let succeeded = frame.0.len() >= HEADER && frame.command() == COMMAND_REPLY && frame.status() == 0;
            assert!(!succeeded, "{name}: answered with success");
        }
        // Streams opened and abandoned on the same connection, then a fresh one is served.
        for _ in 0..20 {
            let _ = connection.open_bi().await;
        }
        connection.close(0u32.into(), b"done");
        let fresh = quic_raw::connect(address).await?;
        let reply = quic_raw::exchange(&fresh, &nr(raw::CODE_PING, &[])).await;
        let reply = raw::Frame(reply.unwrap_or_else(|| panic!("{name}: no PING reply on a fresh connection")));
        assert_eq!((reply.command(), reply.status()), (COMMAND_REPLY, 0), "{name}: PING after");
        fresh.close(0u32.into(), b"done");
    }
    Ok(())
}

/// Raw HTTP/1.1 requests and the status each must not be (2xx).
fn http_cases() -> Vec<(&'static str, String)> {
    let post = |path: &str, headers: &str, body: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    vec![
        ("http: login, not JSON", post("/users/login", "Content-Type: application/json\r\n", "{not json")),
        ("http: login, wrong shape", post("/users/login", "Content-Type: application/json\r\n", r#"{"username":7}"#)),
        ("http: login, 5,000 levels of nesting", post("/users/login", "Content-Type: application/json\r\n", &deep)),
        ("http: a stream without a token", post("/streams", "Content-Type: application/json\r\n", r#"{"name":"s"}"#)),
        (
            "http: a malformed bearer token",
            post("/streams", "Authorization: Bearer ...\r\nContent-Type: application/json\r\n", r#"{"name":"s"}"#),
        ),
        (
            "http: a body over the size limit",
            post("/users/login", "Content-Type: application/json\r\n", &"x".repeat(3 << 20)),
        ),
        ("http: an unknown route", "GET /no/such/route HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_owned()),
        (
            "http: a bad percent-encoding",
            "GET /streams/%zz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_owned(),
        ),
        ("http: a garbage request line", "\u{1}\u{2} / HTTP/9\r\n\r\n".to_owned()),
        (
            "http: a content length that lies",
            "POST /users/login HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{}".to_owned(),
        ),
        (
            "http: a 1 MiB header",
            format!("GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n", "a".repeat(1 << 20)),
        ),
    ]
}

/// Sends a raw HTTP request; the status line's code, 0 when the server closed without one.
fn http_status(address: &str, request: &str) -> u16 {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let _ = stream.write_all(request.as_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut response = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stream, &mut response);
    let text = String::from_utf8_lossy(&response);
    text.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0)
}

/// Deterministic mutations of good frames: bit flips, cuts and size lies.
fn mutated_frames(count: usize) -> Vec<Vec<u8>> {
    let seeds = [
        nr(raw::CODE_PING, &[]),
        Request::register(CLIENT, GOLDEN_LOGIN_CHECKSUM).frame(&GOLDEN_LOGIN_BODY),
        op(raw::OP_CREATE_STREAM, b"\x01m"),
        op(OP_SEND_MESSAGES, &send_body(0, 1, &[0u8; 320])),
    ];
    let noise = raw::garbage(count * 8, 99);
    (0..count)
        .map(|i| {
            let mut frame = seeds[i % seeds.len()].clone();
            let pick = |k: usize| noise[i * 8 + k] as usize;
            match i % 3 {
                0 => {
                    let at = (pick(0) << 8 | pick(1)) % frame.len();
                    frame[at] ^= 1 << (pick(2) % 8);
                }
                1 => frame.truncate((pick(0) << 8 | pick(1)) % frame.len()),
                _ => {
                    let size = u32::from_le_bytes([pick(0) as u8, pick(1) as u8, pick(2) as u8, 0]);
                    frame[48..52].copy_from_slice(&size.to_le_bytes());
                }
            }
            frame
        })
        .collect()
}

/// Every case on every transport, then the mutated frames on TCP and WebSocket.
async fn one_pass(tcp: &str, websocket_address: &str, quic: &str, http: &str) -> anyhow::Result<()> {
    let cases = tcp_cases();
    for case in &cases {
        run_tcp_case(tcp, case);
    }
    for (name, bytes) in websocket_cases() {
        run_websocket_case(websocket_address, name, &bytes);
        assert_websocket_ping(websocket_address);
    }
    run_quic_cases(quic).await?;
    for (name, request) in http_cases() {
        let status = http_status(http, &request);
        assert!(!(200..300).contains(&status), "{name}: answered {status}");
        // A plain GET that keeps its write side open (a half-closed request may be dropped).
        let (status, _) = rill_tests::http::get(http, "/ping", None)?;
        assert_eq!(status, 200, "{name}: /ping after");
    }
    for frame in mutated_frames(1000) {
        let mut stream = raw::connect(tcp)?;
        raw::send(&mut stream, &frame);
        raw::close_write(&stream);
        let (_, end) = raw::read_until_closed(&mut stream);
        assert!(matches!(end, Outcome::Closed), "a mutated frame left the connection hanging: {frame:?}");
    }
    raw::assert_ping_served(tcp);
    Ok(())
}

/// The pool's allocated bytes once no buffer is in use.
async fn settled_pool(http: &str, token: &str) -> anyhow::Result<u64> {
    rill_tests::eventually(Duration::from_secs(15), "no pooled buffer in use", || async {
        let (_, text) = rill_tests::http::get(http, "/metrics", Some(token))?;
        Ok(rill_tests::http::metric(&text, "rill_memory_pool_in_use_buffers") == Some(0))
    })
    .await?;
    let (_, text) = rill_tests::http::get(http, "/metrics", Some(token))?;
    rill_tests::http::metric(&text, "rill_memory_pool_allocated_bytes").ok_or_else(|| anyhow::anyhow!("no pool figure"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hostile_case_is_refused_and_the_pool_gets_every_buffer_back() -> anyhow::Result<()> {
    let (websocket_address, quic, http) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let server = TestServer::start_with_env(&[
        ("IGGY_WEBSOCKET_ENABLED", "true"),
        ("IGGY_WEBSOCKET_ADDRESS", websocket_address.as_str()),
        ("IGGY_QUIC_ENABLED", "true"),
        ("IGGY_QUIC_ADDRESS", quic.as_str()),
        ("IGGY_HTTP_ENABLED", "true"),
        ("IGGY_HTTP_ADDRESS", http.as_str()),
    ])?;
    let tcp = server.tcp_address();
    let admin = connect_root(&tcp).await?;
    create_stream_and_topic(&admin, "hostile", "t", 2).await?;
    let token = admin.create_personal_access_token("hostile", IggyExpiry::NeverExpire).await?.token;
    drop(admin);
    let named = tcp_cases().len() + websocket_cases().len() + quic_cases().len() + http_cases().len();
    assert!(named >= 60, "{named} named cases");
    one_pass(&tcp, &websocket_address, &quic, &http).await?;
    let first = settled_pool(&http, &token).await?;
    one_pass(&tcp, &websocket_address, &quic, &http).await?;
    let second = settled_pool(&http, &token).await?;
    println!(
        "{named} named cases and 1,000 mutated frames, twice: pool allocated {first} then {second} bytes, 0 in use"
    );
    assert!(second <= first, "the pool grew from {first} to {second} bytes on the second pass");
    Ok(())
}
