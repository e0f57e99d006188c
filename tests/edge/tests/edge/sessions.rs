//! 0.12 sessions outlive their connection: a client whose connection is cut reconnects and
//! binds its session again (BIND_SESSION), keeping its session number; after a server
//! restart, which keeps no session, it registers again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use iggy::prelude::*;
use rill_edge_tests::{ROOT_PASSWORD, ROOT_USERNAME, TestServer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// A TCP relay in front of the server whose connections the test can cut.
struct Proxy {
    address: String,
    relays: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Proxy {
    async fn start(upstream: String) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let relays: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let registry = relays.clone();
        tokio::spawn(async move {
            while let Ok((mut downstream, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let relay = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut downstream, &mut server).await;
                    }
                });
                registry.lock().expect("relays").push(relay.abort_handle());
            }
        });
        Ok(Self { address, relays })
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
