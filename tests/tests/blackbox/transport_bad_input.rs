//! Bad input on the QUIC-era transports: plaintext sent to a TLS port, a WebSocket frame
//! with a lying 64-bit length, a compressed (permessage-deflate) frame that was never
//! negotiated, and an oversized WebSocket message. Each is refused by closing that
//! connection, and the server keeps serving. Also: the official client over `wss://`, and
//! WebSocket pings keeping a connection open, its Close answered with its own code.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use iggy::prelude::*;
use rill_tests::raw::{self, Request};
use rill_tests::{TestServer, connect_root, free_port};

/// A server with WebSocket on a known port.
fn with_websocket() -> anyhow::Result<(TestServer, String)> {
    let address = format!("127.0.0.1:{}", free_port());
    let server = TestServer::start_with_env(&[
        ("IGGY_WEBSOCKET_ENABLED", "true"),
        ("IGGY_WEBSOCKET_ADDRESS", address.as_str()),
    ])?;
    Ok((server, address))
}

/// Upgrades a raw TCP connection to WebSocket and returns the socket for raw writes.
fn upgraded(address: &str) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let (socket, _) =
        tungstenite::client::client(format!("ws://{address}/"), stream).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(socket.into_inner())
}

/// Reads until the server closes the connection; true when it did within the timeout.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(error) => return error.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

/// A masked client frame header (FIN + opcode), with the given 64-bit payload length.
fn frame_header(first_byte: u8, length: u64) -> Vec<u8> {
    let mut header = vec![first_byte, 0x80 | 127];
    header.extend_from_slice(&length.to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    header
}

async fn still_serving(server: &TestServer) -> anyhow::Result<()> {
    raw::assert_ping_served(&server.tcp_address());
    let client = connect_root(&server.tcp_address()).await?;
    client.get_streams().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_64_bit_websocket_length_closes_the_connection() -> anyhow::Result<()> {
    let (server, address) = with_websocket()?;
    let mut stream = upgraded(&address)?;
    stream.write_all(&frame_header(0x82, 1 << 62))?;
    stream.write_all(&[0u8; 64])?;
    assert!(closed_by_server(&mut stream), "a frame claiming 4 EiB must close the connection");
    still_serving(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unnegotiated_compressed_frame_is_refused() -> anyhow::Result<()> {
    let (server, address) = with_websocket()?;
    let mut stream = upgraded(&address)?;
    // RSV1 marks permessage-deflate, which the server never agrees to: a "deflate bomb"
    // is never inflated.
    let mut frame = vec![0x80 | 0x40 | 0x02, 0x80 | 8, 1, 2, 3, 4];
    frame.extend_from_slice(&[0xAA; 8]);
    stream.write_all(&frame)?;
    assert!(closed_by_server(&mut stream), "a compressed frame must close the connection");
    still_serving(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_websocket_message_is_refused() -> anyhow::Result<()> {
    let (server, address) = with_websocket()?;
    let mut stream = upgraded(&address)?;
    stream.write_all(&frame_header(0x82, 64 * 1024 * 1024 + 1))?;
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..65 {
        if stream.write_all(&chunk).is_err() {
            break;
        }
    }
    assert!(closed_by_server(&mut stream), "a message over the frame limit must close the connection");
    still_serving(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_sent_to_a_tls_port_is_dropped() -> anyhow::Result<()> {
    let server = TestServer::start_with_env(&[("IGGY_TCP_TLS_ENABLED", "true")])?;
    let mut stream = raw::connect(&server.tcp_address())?;
    stream.write_all(&Request::non_replicated(7, 1, 0, raw::CODE_PING).frame(&[]))?;
    assert!(closed_by_server(&mut stream), "plaintext on a TLS port must close the connection");
    let certificate = server.data_dir().join("runtime/certs/self_signed_cert.pem");
    let config = TcpClientConfig {
        server_address: server.tcp_address(),
        tls_enabled: true,
        tls_domain: "localhost".to_owned(),
        tls_ca_file: Some(certificate.display().to_string()),
        tls_validate_certificate: true,
        ..TcpClientConfig::default()
    };
    let client = rill_tests::connect_configured(config).await?;
    client.login_user(rill_tests::ROOT_USERNAME, rill_tests::ROOT_PASSWORD).await?;
    client.get_streams().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_sends_and_polls_over_websocket_tls() -> anyhow::Result<()> {
    let address = format!("127.0.0.1:{}", free_port());
    let server = TestServer::start_with_env(&[
        ("IGGY_WEBSOCKET_ENABLED", "true"),
        ("IGGY_WEBSOCKET_ADDRESS", address.as_str()),
        ("IGGY_WEBSOCKET_TLS_ENABLED", "true"),
    ])?;
    let certificate = server.data_dir().join("runtime/certs/self_signed_cert.pem");
    let config = WebSocketClientConfig {
        server_address: address.clone(),
        tls_enabled: true,
        tls_domain: "localhost".to_owned(),
        tls_ca_file: Some(certificate.display().to_string()),
        tls_validate_certificate: true,
        ..WebSocketClientConfig::default()
    };
    let client = IggyClient::new(ClientWrapper::WebSocket(WebSocketClient::create(std::sync::Arc::new(config))?));
    client.connect().await?;
    client.login_user(rill_tests::ROOT_USERNAME, rill_tests::ROOT_PASSWORD).await?;
    client.create_stream("secure").await?;
    client.create_topic(&rill_tests::id(0), "events", &rill_tests::topic_options(1)).await?;
    // A payload past 64 KiB crosses several TLS records each way.
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let mut batch =
        vec![IggyMessage::builder().id(1).payload(payload.clone().into()).build()?, rill_tests::sample_message(2)];
    client.send_messages(&rill_tests::id(0), &rill_tests::id(0), &Partitioning::partition_id(0), &mut batch).await?;
    let polled = rill_tests::poll_all(&client, &rill_tests::id(0), &rill_tests::id(0), 0).await?;
    assert_eq!(polled.len(), 2);
    assert_eq!(polled[0].payload.as_ref(), payload.as_slice());
    rill_tests::assert_same_message(&batch[1], &polled[1], "over wss");
    still_serving(&server).await
}

#[test]
fn websocket_pings_keep_a_connection_open_and_a_close_is_answered_with_its_code() -> anyhow::Result<()> {
    use tungstenite::protocol::CloseFrame;
    use tungstenite::protocol::frame::coding::CloseCode;
    let address = format!("127.0.0.1:{}", free_port());
    // A 1 s heartbeat: 1.2 s of silence evicts.
    let _server = TestServer::start_with_env(&[
        ("IGGY_WEBSOCKET_ENABLED", "true"),
        ("IGGY_WEBSOCKET_ADDRESS", address.as_str()),
        ("IGGY_HEARTBEAT_INTERVAL", "1 s"),
    ])?;
    let stream = TcpStream::connect(&address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let (mut socket, _) =
        tungstenite::client::client(format!("ws://{address}/"), stream).map_err(|e| anyhow::anyhow!("{e}"))?;
    for round in 0..8u8 {
        std::thread::sleep(Duration::from_millis(400));
        socket.send(tungstenite::Message::Ping(vec![round; 3].into()))?;
        match socket.read()? {
            tungstenite::Message::Pong(payload) => assert_eq!(payload.as_ref(), [round; 3], "the ping's own payload"),
            other => panic!("round {round}: {other:?} instead of a pong"),
        }
    }
    // 3.2 s on, past the idle limit, and still served.
    socket.send(tungstenite::Message::Binary(Request::non_replicated(7, 1, 0, raw::CODE_PING).frame(&[]).into()))?;
    match socket.read()? {
        tungstenite::Message::Binary(bytes) => assert_eq!(raw::Frame(bytes.to_vec()).status(), 0, "PING answered"),
        other => panic!("{other:?} instead of the PING reply"),
    }
    socket.close(Some(CloseFrame { code: CloseCode::Away, reason: "".into() }))?;
    loop {
        match socket.read() {
            Ok(tungstenite::Message::Close(Some(frame))) => {
                assert_eq!(frame.code, CloseCode::Away, "the client's code echoed");
                return Ok(());
            }
            Ok(_) => continue,
            Err(error) => anyhow::bail!("no Close answer: {error}"),
        }
    }
}
