//! The replica plane lets no one in: three real nodes with `[cluster.auth]` (and TLS) form a
//! cluster; a node with the wrong key, a stranger that fakes the handshake and an Iggy client
//! dialing the replica port are each refused and logged, and nothing they send is applied; a
//! relay that terminates TLS towards two nodes and passes their handshake along is refused
//! by both; a key rotation half done keeps the cluster whole.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::cluster::{Cluster, create_through_any, eventually, names, start_cluster_with, streams_on};
use rill_tests::connect_root_no_reconnect;

const KEY: &str = "replica-key-0123456789abcdefghij-0";
const OTHER_KEY: &str = "replica-key-ZYXWVUTSRQPONMLKJIHG-1";
const TIMEOUT: Duration = Duration::from_secs(30);

fn auth(key: &str, previous: &str) -> Vec<(&'static str, String)> {
    vec![
        ("IGGY_CLUSTER_AUTH_ENABLED", "true".into()),
        ("IGGY_CLUSTER_AUTH_SHARED_SECRET", key.into()),
        ("IGGY_CLUSTER_AUTH_PREVIOUS_SHARED_SECRET", previous.into()),
    ]
}

/// Waits until exactly the nodes in `having` list stream `name`.
async fn stream_on_nodes(cluster: &Cluster, name: &str, having: &[usize]) -> anyhow::Result<()> {
    eventually(TIMEOUT, &format!("`{name}` on nodes {having:?}"), || async {
        for node in having {
            let listed = names(&streams_on(&cluster.addresses[*node])?);
            anyhow::ensure!(listed.iter().any(|n| n == name), "node {node} lists {listed:?}");
        }
        Ok(())
    })
    .await
}

async fn logged(cluster: &Cluster, node: usize, needle: &str) -> anyhow::Result<()> {
    eventually(TIMEOUT, &format!("node {node} logs `{needle}`"), || async {
        let logs = cluster.nodes[node].logs();
        anyhow::ensure!(logs.contains(needle), "not yet:\n{logs}");
        Ok(())
    })
    .await
}

/// A peer that speaks the handshake's first step, then proves nothing: the acceptor's
/// challenge comes back, and after a made-up proof the connection is closed.
fn fake_peer(plane: &str) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect(plane)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut hello = b"RILLVSR1".to_vec();
    hello.extend_from_slice(&[1, 0]); // auth on, claiming to be replica 0
    hello.extend_from_slice(&[7u8; 32]);
    stream.write_all(&hello)?;
    let mut challenge = [0u8; 74];
    stream.read_exact(&mut challenge)?;
    anyhow::ensure!(&challenge[..8] == b"RILLVSR1", "the acceptor answers with its challenge");
    stream.write_all(&[0u8; 32])?;
    // A fake VSR frame after the fake proof: the acceptor must have hung up instead.
    let _ = stream.write_all(&[64, 0, 0, 0]);
    let mut rest = [0u8; 1];
    match stream.read(&mut rest) {
        Ok(0) | Err(_) => Ok(()),
        Ok(_) => anyhow::bail!("the acceptor kept talking to a peer without the key"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_a_stranger_and_a_client_on_the_replica_port_are_refused() -> anyhow::Result<()> {
    let cluster = start_cluster_with(&|node| if node == 2 { auth(OTHER_KEY, "") } else { auth(KEY, "") })?;
    // Two nodes with the key are a quorum of three: metadata commits without node 2.
    eventually(TIMEOUT, "create through the primary", || create_through_any(&cluster, &[0], "keyed")).await?;
    stream_on_nodes(&cluster, "keyed", &[0, 1]).await?;
    logged(&cluster, 0, "wrong shared_secret").await?;
    logged(&cluster, 2, "cannot join peer").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Node 2 has committed nothing: not even the root user the primary created, so it
    // refuses the login, or (had it one) lists no stream.
    if let Ok(body) = streams_on(&cluster.addresses[2]) {
        let outsider = names(&body);
        assert!(outsider.is_empty(), "the node without the key got metadata: {outsider:?}");
    }

    fake_peer(&cluster.planes[1])?;
    logged(&cluster, 1, "refused a connection").await?;

    // The official client pointed at a replica port gets nowhere, and the node says why.
    let client = tokio::time::timeout(Duration::from_secs(20), connect_root_no_reconnect(&cluster.planes[0])).await;
    assert!(!matches!(client, Ok(Ok(_))), "a client logged in on the replica port");
    logged(&cluster, 0, "a client speaking to the replica port").await?;
    // The cluster itself is untouched by all of it.
    eventually(TIMEOUT, "create after the intruders", || create_through_any(&cluster, &[0], "still-fine")).await?;
    stream_on_nodes(&cluster, "still-fine", &[0, 1]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_commits_on_every_node_and_refuses_plaintext() -> anyhow::Result<()> {
    let cluster = start_cluster_with(&|_| {
        let mut env = auth(KEY, "");
        env.push(("IGGY_CLUSTER_TLS_ENABLED", "true".into()));
        env
    })?;
    eventually(TIMEOUT, "create through the primary", || create_through_any(&cluster, &[0], "over-tls")).await?;
    stream_on_nodes(&cluster, "over-tls", &[0, 1, 2]).await?;
    assert!(cluster.nodes[0].logs().contains("tls=true"), "the plane says it runs TLS");
    // A peer that skips TLS never reaches the handshake.
    assert!(fake_peer(&cluster.planes[2]).is_err(), "a plaintext handshake got an answer");
    logged(&cluster, 2, "TLS handshake failed").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotation_half_done_keeps_every_node_in() -> anyhow::Result<()> {
    // Step 1 on node 0 (old key signs, new accepted); step 2 on nodes 1 and 2 (new signs,
    // old accepted): every pair still admits the other.
    let cluster = start_cluster_with(&|node| if node == 0 { auth(KEY, OTHER_KEY) } else { auth(OTHER_KEY, KEY) })?;
    eventually(TIMEOUT, "create through the primary", || create_through_any(&cluster, &[0], "rotating")).await?;
    stream_on_nodes(&cluster, "rotating", &[0, 1, 2]).await?;
    for node in 0..3 {
        let logs = cluster.nodes[node].logs();
        assert!(!logs.contains("refused a connection"), "node {node} refused a peer mid-rotation:\n{logs}");
    }
    Ok(())
}

/// What a relay between two nodes achieved.
struct Relayed {
    /// The dialing node answered the acceptor's challenge with a proof of its own.
    dialer_proved: bool,
    /// The accepting node kept the connection open after the proof and an injected frame.
    acceptor_admitted: bool,
}

/// The relay's two TLS configurations: a server one on a fresh self-signed certificate, and
/// a client one that trusts anything, both offering the plane's protocol name.
fn relay_tls() -> anyhow::Result<(std::sync::Arc<rustls::ServerConfig>, std::sync::Arc<rustls::ClientConfig>)> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    let key = rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .map_err(anyhow::Error::msg)?;
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)?;
    server.alpn_protocols = vec![b"rill-replica".to_vec()];
    // The trust the nodes' `self_signed` default has: any certificate.
    let client = rill_tests::tls::client_trusting_any_certificate(&[b"rill-replica"])?;
    Ok((std::sync::Arc::new(server), std::sync::Arc::new(client)))
}

/// Sits between a dialing node and `target` (the node it means to reach): terminates TLS
/// towards each, passes the key handshake from one to the other byte for byte, then sends
/// a proof (the dialer's, or a made-up one) and a VSR frame of its own to `target`.
fn relay(listener: std::net::TcpListener, target: &str) -> anyhow::Result<Relayed> {
    let (server, client) = relay_tls()?;
    let (dialer, _) = listener.accept()?;
    dialer.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut dialer = rustls::StreamOwned::new(rustls::ServerConnection::new(server)?, dialer);
    let acceptor = TcpStream::connect(target)?;
    acceptor.set_read_timeout(Some(Duration::from_secs(10)))?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?.to_owned();
    let mut acceptor = rustls::StreamOwned::new(rustls::ClientConnection::new(client, name)?, acceptor);
    let mut hello = [0u8; 42];
    dialer.read_exact(&mut hello)?;
    acceptor.write_all(&hello)?;
    let mut challenge = [0u8; 74];
    acceptor.read_exact(&mut challenge)?;
    dialer.write_all(&challenge)?;
    let mut proof = [0u8; 32];
    let dialer_proved = dialer.read_exact(&mut proof).is_ok();
    acceptor.write_all(&proof)?;
    let _ = acceptor.write_all(&[64, 0, 0, 0]);
    let mut rest = [0u8; 1];
    let acceptor_admitted = match acceptor.read(&mut rest) {
        Ok(0) => false,
        Err(error) => !matches!(
            error.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::BrokenPipe
        ),
        Ok(_) => true,
    };
    Ok(Relayed { dialer_proved, acceptor_admitted })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_relayed_between_two_tls_sessions_is_refused_by_both_nodes() -> anyhow::Result<()> {
    let relay_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let relay_address = relay_listener.local_addr()?.to_string();
    // Node 1 reaches node 0 only through the relay; every other link is direct.
    let routed = relay_address.clone();
    let cluster = crate::cluster::start_cluster_routed(
        3,
        &|_| {
            let mut env = auth(KEY, "");
            env.push(("IGGY_CLUSTER_TLS_ENABLED", "true".into()));
            env
        },
        &move |node, roster| {
            if node == 1 {
                roster[0] = routed.clone();
            }
        },
    )?;
    let target = cluster.planes[0].clone();
    let relayed = tokio::task::spawn_blocking(move || relay(relay_listener, &target)).await??;
    assert!(!relayed.dialer_proved, "node 1 answered a challenge made in the relay's session");
    assert!(!relayed.acceptor_admitted, "node 0 admitted the relayed connection");
    logged(&cluster, 1, "another TLS session").await?;
    logged(&cluster, 0, "refused a connection").await?;
    // The nodes themselves still form the cluster over their direct links.
    eventually(TIMEOUT, "create through the primary", || create_through_any(&cluster, &[0], "relayed")).await?;
    stream_on_nodes(&cluster, "relayed", &[0, 2]).await
}
