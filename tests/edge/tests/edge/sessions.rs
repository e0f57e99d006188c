//! 0.12 sessions outlive their connection: a client whose connection is cut reconnects and
//! binds its session again (BIND_SESSION), keeping its session number, and a request whose
//! reply was lost is answered with its first result when the client sends it again; after a
//! server restart, which keeps no session, the client registers again.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iggy::prelude::*;
use rill_edge_tests::id;
use rill_edge_tests::{ROOT_PASSWORD, ROOT_USERNAME, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// A TCP relay in front of the server whose connections the test can cut, or whose next
/// reply from the server it can swallow (cutting that connection with it).
struct Proxy {
    address: String,
    relays: Arc<Mutex<Vec<AbortHandle>>>,
    swallow: Arc<AtomicBool>,
}

/// Relays one client connection; the first server bytes read while `swallow` is set are
/// dropped, and the connection with them.
async fn relay(downstream: TcpStream, upstream: String, swallow: Arc<AtomicBool>) -> std::io::Result<()> {
    let server = TcpStream::connect(upstream).await?;
    let (mut from_server, mut to_server) = server.into_split();
    let (mut from_client, mut to_client) = downstream.into_split();
    let up = tokio::io::copy(&mut from_client, &mut to_server);
    let down = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let read = from_server.read(&mut buf).await?;
            if read == 0 || swallow.swap(false, Ordering::SeqCst) {
                return Ok::<(), std::io::Error>(());
            }
            to_client.write_all(&buf[..read]).await?;
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
    Ok(())
}

impl Proxy {
    async fn start(upstream: String) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let relays: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let swallow = Arc::new(AtomicBool::new(false));
        let (registry, armed) = (relays.clone(), swallow.clone());
        tokio::spawn(async move {
            while let Ok((downstream, _)) = listener.accept().await {
                let relay = tokio::spawn(relay(downstream, upstream.clone(), armed.clone()));
                registry.lock().expect("relays").push(relay.abort_handle());
            }
        });
        Ok(Self { address, relays, swallow })
    }

    /// Drops the next reply the server writes, and that connection: the request was
    /// served, the client cannot know it.
    fn lose_next_reply(&self) {
        self.swallow.store(true, Ordering::SeqCst);
    }

    /// Closes every relayed connection (new ones are relayed again).
    fn cut(&self) {
        for relay in self.relays.lock().expect("relays").drain(..) {
            relay.abort();
        }
    }
}

/// The session number a 0.12 client holds: producer ids are `session << 20 | index`.
async fn session_of(client: &IggyClient) -> anyhow::Result<u64> {
    Ok(client.next_producer_id().await? >> 20)
}

/// Streams, once the client is served again.
async fn streams_when_back(client: &IggyClient) -> anyhow::Result<Vec<String>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match client.get_streams().await {
            Ok(streams) => return Ok(streams.into_iter().map(|s| s.name).collect()),
            Err(error) if std::time::Instant::now() < deadline => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => anyhow::bail!("the client did not come back: {error}"),
        }
    }
}

#[tokio::test]
async fn a_cut_connection_binds_its_session_again() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let proxy = Proxy::start(server.tcp_address()).await?;
    let client = IggyClient::builder().with_tcp().with_server_address(proxy.address.clone()).build()?;
    client.connect().await?;
    client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;
    let session = session_of(&client).await?;
    assert_ne!(session, 0);
    client.create_stream("kept", &StreamCreateOptions::default()).await?;
    proxy.cut();
    assert_eq!(streams_when_back(&client).await?, ["kept"]);
    assert_eq!(session_of(&client).await?, session, "the reconnected client goes on with its session");
    Ok(())
}

#[tokio::test]
async fn after_a_restart_the_client_registers_a_new_session() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let client = server.root_client().await?;
    let session = session_of(&client).await?;
    client.create_stream("kept", &StreamCreateOptions::default()).await?;
    server.restart()?;
    assert_eq!(streams_when_back(&client).await?, ["kept"]);
    let new_session = session_of(&client).await?;
    assert!(new_session > session, "a new session, numbered past every earlier one: {new_session} after {session}");
    Ok(())
}

#[tokio::test]
async fn a_request_whose_reply_was_lost_is_answered_with_its_first_result_once() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let proxy = Proxy::start(server.tcp_address()).await?;
    let client = IggyClient::builder().with_tcp().with_server_address(proxy.address.clone()).build()?;
    client.connect().await?;
    client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;

    // Created by the first attempt; the retry is answered with that creation, not with
    // "already exists".
    proxy.lose_next_reply();
    let stream = client.create_stream("once", &StreamCreateOptions::default()).await?;
    assert_eq!(stream.name, "once");
    assert_eq!(streams_when_back(&client).await?, ["once"]);

    // Stored by the first attempt; the retry stores nothing more.
    let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
    client.create_topic(&id("once"), "events", &options).await?;
    proxy.lose_next_reply();
    let mut messages = vec![IggyMessage::from_str("only")?];
    client.send_messages(&id("once"), &id("events"), &Partitioning::partition_id(0), &mut messages).await?;
    let polled = client
        .poll_messages(
            &id("once"),
            &id("events"),
            0,
            &Consumer::new(Identifier::numeric(1)?),
            &PollingStrategy::offset(0),
            PollOptions { count: 10, ..Default::default() },
        )
        .await?;
    assert_eq!(polled.messages.len(), 1, "the retried send was stored once");
    Ok(())
}
