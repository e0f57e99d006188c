//! Thread-per-core behaviour seen from outside: connections are spread over the shards (all
//! of them on a small machine, the peers of shard 0 on a larger one), and partitions owned by
//! every shard are served from any connection.

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, id, poll_all, sample_message, topic_options};

fn sharded(shards: u32) -> anyhow::Result<TestServer> {
    let count = shards.to_string();
    TestServer::start_with_env(&[
        ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", count.as_str()),
        ("IGGY_SYSTEM_SHARDING_PIN_THREADS", "false"),
    ])
}

/// The shard each accepted connection was served by, from the server's log.
fn serving_shards(server: &TestServer) -> Vec<String> {
    server
        .logs()
        .lines()
        .filter(|line| line.contains("client connected"))
        .filter_map(|line| line.split_whitespace().find_map(|field| field.strip_prefix("shard=")).map(str::to_owned))
        .collect()
}

/// Opens `count` connections and returns the shard serving each, as logged.
async fn connect_many(server: &TestServer, count: usize) -> anyhow::Result<(Vec<IggyClient>, Vec<String>)> {
    let mut clients = Vec::new();
    for _ in 0..count {
        let client = connect_root(&server.tcp_address()).await?;
        client.get_me().await?;
        clients.push(client);
    }
    let shards = serving_shards(server);
    assert!(shards.len() >= count, "connections not logged: {shards:?}\n{}", server.logs());
    Ok((clients, shards))
}

#[tokio::test]
async fn a_small_machine_serves_connections_on_every_shard() -> anyhow::Result<()> {
    let server = sharded(3)?;
    let (_clients, shards) = connect_many(&server, 6).await?;
    for shard in ["0", "1", "2"] {
        assert!(shards.iter().any(|s| s == shard), "shard {shard} served none: {shards:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_larger_machine_keeps_shard_zero_for_listeners() -> anyhow::Result<()> {
    let server = sharded(5)?;
    let (_clients, shards) = connect_many(&server, 8).await?;
    assert!(shards.iter().all(|shard| shard != "0"), "shard 0 kept a plaintext connection: {shards:?}");
    for shard in ["1", "2", "3", "4"] {
        assert!(shards.iter().any(|s| s == shard), "not spread over peers: {shards:?}");
    }
    Ok(())
}

#[tokio::test]
async fn one_shard_serves_everything_itself() -> anyhow::Result<()> {
    let server = sharded(1)?;
    let client = connect_root(&server.tcp_address()).await?;
    client.get_me().await?;
    assert!(serving_shards(&server).iter().all(|shard| shard == "0"));
    Ok(())
}

#[tokio::test]
async fn partitions_of_every_shard_answer_any_connection() -> anyhow::Result<()> {
    let server = sharded(3)?;
    let writer = connect_root(&server.tcp_address()).await?;
    let reader = connect_root(&server.tcp_address()).await?;
    for stream in 0..3u32 {
        writer.create_stream(&format!("stream-{stream}")).await?;
        writer.create_topic(&id(stream), "events", &topic_options(4)).await?;
    }
    // 12 partitions spread over three shards; most of these requests travel the bus to
    // their owner and back.
    for stream in 0..3u32 {
        for partition in 0..4u32 {
            let seed = u64::from(stream * 100 + partition * 10);
            let mut batch: Vec<IggyMessage> = (seed..seed + 10).map(sample_message).collect();
            writer.send_messages(&id(stream), &id(0), &Partitioning::partition_id(partition), &mut batch).await?;
        }
    }
    for stream in 0..3u32 {
        for partition in 0..4u32 {
            let polled = poll_all(&reader, &id(stream), &id(0), partition).await?;
            let seed = u64::from(stream * 100 + partition * 10);
            let ids: Vec<u128> = polled.iter().map(|m| m.header.id).collect();
            assert_eq!(
                ids,
                (seed + 1..seed + 11).map(u128::from).collect::<Vec<_>>(),
                "stream {stream} partition {partition}"
            );
        }
    }
    let stats = reader.get_stats().await?;
    assert_eq!((stats.streams_count, stats.partitions_count, stats.messages_count), (3, 12, 120));
    Ok(())
}

/// Shards the server logged moving a connection to.
fn move_targets(server: &TestServer) -> Vec<String> {
    let logs = server.logs();
    let moved = logs.lines().filter(|line| line.contains("client moved"));
    moved
        .filter_map(|line| line.split_whitespace().find_map(|field| field.strip_prefix("shard=")).map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_connection_moves_to_the_shard_owning_its_partition_and_keeps_its_session() -> anyhow::Result<()> {
    let server = sharded(2)?;
    let admin = connect_root(&server.tcp_address()).await?;
    admin.create_stream("moving").await?;
    admin.create_topic(&id(0), "events", &topic_options(1)).await?;
    // Placement alternates over both shards, so one of these two is served away from the
    // partition's owner; its sends and polls cross the bus until it moves.
    let (clients, _) = connect_many(&server, 2).await?;
    for (index, client) in clients.iter().enumerate() {
        let me = client.get_me().await?;
        for round in 0..40u64 {
            let seed = (index as u64) * 1000 + round;
            let mut batch = vec![sample_message(seed)];
            client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await?;
        }
        let polled = poll_all(client, &id(0), &id(0), 0).await?;
        assert_eq!(polled.len(), 40 * (index + 1), "everything sent so far reads back");
        assert_eq!(client.get_me().await?.client_id, me.client_id, "the session went along");
    }
    let targets = move_targets(&server);
    assert_eq!(targets.len(), 1, "exactly the connection on the other shard moved:\n{}", server.logs());
    // Moved once, it stays: more traffic moves nothing.
    let mut batch: Vec<IggyMessage> = (0..5).map(sample_message).collect();
    for _ in 0..40 {
        clients[0].send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await?;
    }
    assert_eq!(move_targets(&server), targets);
    Ok(())
}

/// A server on two shards with WebSocket listening on `address` too.
fn two_shards_with_websocket(address: &str) -> anyhow::Result<TestServer> {
    TestServer::start_with_env(&[
        ("IGGY_SYSTEM_SHARDING_CPU_ALLOCATION", "2"),
        ("IGGY_SYSTEM_SHARDING_PIN_THREADS", "false"),
        ("IGGY_WEBSOCKET_ENABLED", "true"),
        ("IGGY_WEBSOCKET_ADDRESS", address),
    ])
}

/// A root client over WebSocket at `address`.
async fn connect_websocket(address: &str) -> anyhow::Result<IggyClient> {
    let config = WebSocketClientConfig { server_address: address.to_owned(), ..WebSocketClientConfig::default() };
    let client = IggyClient::new(ClientWrapper::WebSocket(WebSocketClient::create(std::sync::Arc::new(config))?));
    client.connect().await?;
    client.login_user(rill_tests::ROOT_USERNAME, rill_tests::ROOT_PASSWORD).await?;
    Ok(client)
}

#[tokio::test]
async fn a_websocket_connection_moves_to_its_partition_and_keeps_its_session() -> anyhow::Result<()> {
    let address = format!("127.0.0.1:{}", rill_tests::free_port());
    let server = two_shards_with_websocket(&address)?;
    let admin = connect_root(&server.tcp_address()).await?;
    admin.create_stream("moving").await?;
    admin.create_topic(&id(0), "events", &topic_options(1)).await?;
    // Two WebSocket connections land on the two shards; the one away from the partition
    // moves after its run of sends. Payloads past 64 KiB take the 64-bit frame length.
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(connect_websocket(&address).await?);
    }
    let big = |seed: u64| {
        let payload: Vec<u8> = (0..100_000u64).map(|i| ((i * 31 + seed) % 251) as u8).collect();
        IggyMessage::builder().id(u128::from(seed) + 1).payload(payload.into()).build().expect("a message")
    };
    let mut sent = Vec::new();
    for (index, client) in clients.iter().enumerate() {
        let me = client.get_me().await?;
        for round in 0..40u64 {
            let seed = (index as u64) * 1000 + round;
            let mut batch = vec![if round % 8 == 0 { big(seed) } else { sample_message(seed) }];
            client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await?;
            // As sent: the client stamped it.
            sent.extend(batch);
        }
        let polled = poll_all(client, &id(0), &id(0), 0).await?;
        assert_eq!(polled.len(), sent.len(), "everything sent so far reads back");
        for (got, sent) in polled.iter().zip(&sent) {
            rill_tests::assert_same_message(sent, got, "after the move");
        }
        assert_eq!(client.get_me().await?.client_id, me.client_id, "the session went along");
    }
    let moved: Vec<String> =
        server.logs().lines().filter(|line| line.contains("client moved")).map(str::to_owned).collect();
    assert_eq!(moved.len(), 1, "exactly the connection on the other shard moved:\n{}", server.logs());
    assert!(moved[0].contains("websocket"), "{moved:?}");
    Ok(())
}

/// Copies of the connected sockets the server process `pid` holds on `port`, taken with
/// `pidfd_getfd` (the test is the server's parent, which may).
fn server_connections_on(pid: u32, port: u16) -> anyhow::Result<Vec<std::os::fd::OwnedFd>> {
    use rustix::net::{getpeername, getsockname};
    use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};
    let pid = Pid::from_raw(pid as i32).expect("a process id is positive");
    let pidfd = pidfd_open(pid, PidfdFlags::empty())?;
    let mut sockets = Vec::new();
    // A plaintext TCP connection's socket is held twice (the duplicate its send replies
    // may be written to from other shards): one descriptor per socket is kept.
    let mut seen = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let entry = entry?;
        let target = std::fs::read_link(entry.path()).map(|t| t.to_string_lossy().into_owned()).unwrap_or_default();
        let Some(number) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if !target.starts_with("socket:") || !seen.insert(target) {
            continue;
        }
        // A descriptor the server closed since the listing is not one of the connections
        // (those stay open); a refusal would leave none, which the count below reports.
        let Ok(copy) = pidfd_getfd(&pidfd, number, PidfdGetfdFlags::empty()) else { continue };
        let local = getsockname(&copy).ok().and_then(|a| std::net::SocketAddr::try_from(a).ok());
        if local.is_some_and(|a| a.port() == port) && getpeername(&copy).is_ok_and(|peer| peer.is_some()) {
            sockets.push(copy);
        }
    }
    Ok(sockets)
}

#[tokio::test]
async fn every_client_socket_sends_without_delay_whichever_shard_serves_it() -> anyhow::Result<()> {
    // Nagle's algorithm holds the last partial segment of a reply until the client ACKs
    // the ones before it, which a client delaying its ACKs turns into a stall. The option
    // is set where the connection is accepted, so a connection handed to another shard
    // must carry it too.
    let ws_port = rill_tests::free_port();
    let ws_address = format!("127.0.0.1:{ws_port}");
    let server = two_shards_with_websocket(&ws_address)?;
    let (_tcp_clients, shards) = connect_many(&server, 4).await?;
    assert!(shards.iter().any(|shard| shard == "1"), "no connection handed to shard 1: {shards:?}");
    let mut ws_clients = Vec::new();
    for _ in 0..4 {
        let client = connect_websocket(&ws_address).await?;
        client.get_me().await?;
        ws_clients.push(client);
    }
    let pid = server.pid().expect("a running server");
    for (transport, port, expected) in [("tcp", server.port(), 4), ("websocket", ws_port, 4)] {
        let sockets = server_connections_on(pid, port)?;
        assert_eq!(sockets.len(), expected, "{transport} connections held by the server");
        for socket in &sockets {
            assert!(rustix::net::sockopt::tcp_nodelay(socket)?, "a {transport} connection has Nagle's algorithm on");
        }
    }
    Ok(())
}
