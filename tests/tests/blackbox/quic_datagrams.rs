//! QUIC datagram sizes: a peer on this host is sent 1,472-byte datagrams (the most quinn's
//! default client accepts) from the first packet on, not the 1,200 bytes an internet path
//! starts from, so a large poll reply right after connecting crosses in fewer packets. The
//! reply's pooled buffer, handed to the stream without a copy, goes home once acknowledged.

use std::time::Duration;

use anyhow::Context;
use iggy::prelude::*;
use rill_tests::raw::{self, Request};
use rill_tests::{TestServer, connect_root, create_stream_and_topic, free_port, id, message, quic_raw};

const MESSAGES: u32 = 512;

#[tokio::test]
async fn a_peer_on_this_host_gets_its_largest_datagrams_from_the_first_poll() -> anyhow::Result<()> {
    let (quic, http) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let server = TestServer::start_with_env(&[
        ("IGGY_QUIC_ENABLED", "true"),
        ("IGGY_QUIC_ADDRESS", quic.as_str()),
        ("IGGY_HTTP_ENABLED", "true"),
        ("IGGY_HTTP_ADDRESS", http.as_str()),
    ])?;
    let client = connect_root(&server.tcp_address()).await?;
    let (stream, topic) = create_stream_and_topic(&client, "datagrams", "t", 1).await?;
    let token = client.create_personal_access_token("datagrams", IggyExpiry::NeverExpire).await?.token;
    let mut messages: Vec<IggyMessage> =
        (0..MESSAGES as u128).map(|i| message(i + 1, vec![i as u8; 1024], None)).collect();
    client.send_messages(&id(stream), &id(topic), &Partitioning::partition_id(0), &mut messages).await?;
    // Written out, the batch's frame leaves the journal: no pooled buffer is in use now.
    client.flush_unsaved_buffer(&id(stream), &id(topic), 0, true).await?;

    // quinn's default client (the official SDK's) accepts 1,472-byte payloads: starting at
    // 1,200 bytes, the 540 KB reply would take over 450 datagrams.
    let default = quic_raw::connect(&quic).await?;
    let (bytes, datagrams) = poll_all(&default, login(&default).await?, (stream, topic)).await?;
    assert!(bytes > datagrams * 1350, "{datagrams} datagrams carried a {bytes}-byte reply to a 1,472-byte peer");
    default.close(0u32.into(), b"done");
    rill_tests::eventually(Duration::from_secs(15), "no pooled buffer in use", || async {
        Ok(in_use(&http, &token)? == 0)
    })
    .await
}

/// The pooled buffers in use, from `/metrics`.
fn in_use(http: &str, token: &str) -> anyhow::Result<u64> {
    let (_, text) = rill_tests::http::get(http, "/metrics", Some(token))?;
    rill_tests::http::metric(&text, "rill_memory_pool_in_use_buffers").ok_or_else(|| anyhow::anyhow!("no pool figure"))
}

/// Logs in on `connection`; returns the client id and session the polls carry.
async fn login(connection: &quinn::Connection) -> anyhow::Result<(u128, u64)> {
    let client_id = 0xd7u128 << 120 | free_port() as u128;
    let login = Request::register(client_id, raw::GOLDEN_LOGIN_CHECKSUM).frame(&raw::GOLDEN_LOGIN_BODY);
    let login = raw::Frame(quic_raw::exchange(connection, &login).await.context("no login reply")?);
    anyhow::ensure!(login.status() == 0 && login.body().len() >= 16, "login refused: status {}", login.status());
    Ok((client_id, raw::u64_at(login.body(), 8)))
}

/// Polls every message of partition 0 in one request; returns the reply's size and the
/// datagrams the connection received for it.
async fn poll_all(
    connection: &quinn::Connection,
    (client_id, session): (u128, u64),
    (stream, topic): (u32, u32),
) -> anyhow::Result<(u64, u64)> {
    let body = raw::poll_body(stream, topic, 0, 0, MESSAGES);
    let poll = Request::non_replicated(client_id, 1, session, raw::CODE_POLL_MESSAGES).frame(&body);
    let before = connection.stats().udp_rx.datagrams;
    let reply = raw::Frame(quic_raw::exchange(connection, &poll).await.context("no poll reply")?);
    let datagrams = connection.stats().udp_rx.datagrams - before;
    anyhow::ensure!(reply.status() == 0, "poll status {}", reply.status());
    let bytes = reply.0.len() as u64;
    anyhow::ensure!(bytes > MESSAGES as u64 * 1024, "the reply holds every message: {bytes} bytes");
    Ok((bytes, datagrams))
}
