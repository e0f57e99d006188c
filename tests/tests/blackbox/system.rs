//! System and session commands through the official 0.11.0 client: ping, me, stats, cluster metadata, option catalogs, snapshots, clients, login, logout and the pre-login guard.

use std::time::Duration;

use iggy::prelude::*;
use rill_tests::{
    ROOT_PASSWORD, ROOT_USERNAME, TestServer, connect_anonymous, connect_root, create_stream_and_topic, error_code, id,
    sample_message,
};

const GET_STATS_CODE: u32 = 10;
const GET_ME_CODE: u32 = 20;
const GET_CLIENTS_CODE: u32 = 22;
const GET_STREAMS_CODE: u32 = 201;

const UNAUTHENTICATED: u32 = 40;
const INVALID_CREDENTIALS: u32 = 42;
const FEATURE_UNAVAILABLE: u32 = 5;
const UNAUTHORIZED: u32 = 41;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_works_before_and_after_login() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_anonymous(&server.tcp_address()).await?;
    client.ping().await?;
    client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;
    client.ping().await?;
    client.ping().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_returns_root_user_and_get_me_describes_the_connection() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_anonymous(&server.tcp_address()).await?;
    let identity = client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;
    assert_eq!(identity.user_id, 0, "the root user has id 0");
    if !rill_tests::transport::is_binary() {
        // HTTP has no connection to describe: the SDK refuses get_me itself.
        assert_eq!(error_code(client.get_me().await, "get_me over HTTP"), FEATURE_UNAVAILABLE);
        return Ok(());
    }

    let me = client.get_me().await?;
    assert_eq!(me.user_id, Some(0), "get_me user");
    assert_eq!(me.transport, rill_tests::transport::client_transport_name(), "get_me transport");
    assert!(me.address.starts_with("127.0.0.1:"), "get_me address: {}", me.address);
    assert_eq!(me.consumer_groups_count, 0);
    assert!(me.consumer_groups.is_empty());

    let again = client.get_me().await?;
    assert_eq!(again.client_id, me.client_id, "client id is stable on one connection");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_stats_counts_resources() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let empty = client.get_stats().await?;
    assert_eq!(empty.streams_count, 0);
    assert_eq!(empty.topics_count, 0);
    assert_eq!(empty.partitions_count, 0);
    assert_eq!(empty.messages_count, 0);

    let (stream, topic) = create_stream_and_topic(&client, "stats-a", "t", 3).await?;
    client.create_stream("stats-b").await?;
    let mut messages: Vec<IggyMessage> = (0..25).map(sample_message).collect();
    client.send_messages(&id(stream), &id(topic), &Partitioning::partition_id(1), &mut messages).await?;

    let stats = client.get_stats().await?;
    assert_eq!(stats.streams_count, 2, "streams");
    assert_eq!(stats.topics_count, 1, "topics");
    assert_eq!(stats.partitions_count, 3, "partitions");
    assert_eq!(stats.messages_count, 25, "messages");
    if rill_tests::transport::is_binary() {
        // Connected clients are binary connections; HTTP requests are not sessions.
        assert!(stats.clients_count >= 1, "clients: {}", stats.clients_count);
    }
    assert_eq!(stats.consumer_groups_count, 0);
    assert_eq!(Some(stats.process_id), server.pid(), "process id");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_stats_reports_the_process_and_the_host() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let (stream, topic) = create_stream_and_topic(&client, "load", "t", 1).await?;
    let stats = client.get_stats().await?;
    assert!(stats.memory_usage.as_bytes_u64() > 0, "process memory: {stats:?}");
    assert!(stats.total_memory.as_bytes_u64() > stats.memory_usage.as_bytes_u64(), "host memory: {stats:?}");
    let available = stats.available_memory.as_bytes_u64();
    assert!(available > 0 && available <= stats.total_memory.as_bytes_u64(), "available memory: {stats:?}");
    assert!(stats.threads_count >= 2, "the shards and helper threads: {stats:?}");
    assert!(!stats.os_name.is_empty() && !stats.os_version.is_empty() && !stats.kernel_version.is_empty());
    assert!(stats.cpu_usage.is_finite() && stats.total_cpu_usage.is_finite());
    // The CPU figure covers the last second: keep the server busy until it shows.
    rill_tests::eventually(Duration::from_secs(15), "a CPU figure above zero", || async {
        let mut batch: Vec<IggyMessage> = (0..1000).map(sample_message).collect();
        client.send_messages(&id(stream), &id(topic), &Partitioning::partition_id(0), &mut batch).await?;
        Ok(client.get_stats().await?.cpu_usage > 0.0)
    })
    .await?;
    rill_tests::eventually(Duration::from_secs(5), "free and total disk space", || async {
        let stats = client.get_stats().await?;
        let (free, total) = (stats.free_disk_space.as_bytes_u64(), stats.total_disk_space.as_bytes_u64());
        Ok(free > 0 && total >= free)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_all_kinds_of_traffic_every_pooled_buffer_is_back() -> anyhow::Result<()> {
    let server = TestServer::start_with_env(&[("IGGY_HTTP_ENABLED", "true")])?;
    let http = rill_tests::transport::http_address(&server.tcp_address()).expect("endpoints");
    let client = connect_root(&server.tcp_address()).await?;
    let token = client.create_personal_access_token("pool", IggyExpiry::NeverExpire).await?.token;
    let (stream, topic) = create_stream_and_topic(&client, "pool", "t", 2).await?;
    let consumer = Consumer::new(id(1));
    for partition in 0..2 {
        for round in 0..4u64 {
            let mut batch: Vec<IggyMessage> = (0..(50 + round * 100)).map(sample_message).collect();
            client.send_messages(&id(stream), &id(topic), &Partitioning::partition_id(partition), &mut batch).await?;
        }
        for (offset, count) in [(0, 1000), (3, 1), (120, 70), (5000, 5)] {
            let strategy = PollingStrategy::offset(offset);
            client.poll_messages(&id(stream), &id(topic), Some(partition), &consumer, &strategy, count, false).await?;
        }
    }
    // Errors: a partition and a topic that do not exist, then frames no client sends.
    let strategy = PollingStrategy::offset(0);
    assert!(client.poll_messages(&id(stream), &id(topic), Some(7), &consumer, &strategy, 1, false).await.is_err());
    let mut lost = vec![sample_message(1)];
    assert!(client.send_messages(&id(stream), &id(99), &Partitioning::partition_id(0), &mut lost).await.is_err());
    for garbage in [rill_tests::raw::garbage(300, 7), rill_tests::raw::garbage(4096, 8)] {
        let _ = rill_tests::raw::exchange(&server.tcp_address(), &garbage);
    }
    for partition in 0..2 {
        client.flush_unsaved_buffer(&id(stream), &id(topic), partition, true).await?;
    }
    drop(client);
    rill_tests::eventually(Duration::from_secs(10), "no pooled buffer in use", || async {
        let (_, text) = rill_tests::http::get(&http, "/metrics", Some(&token))?;
        Ok(rill_tests::http::metric(&text, "rill_memory_pool_in_use_buffers") == Some(0))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_metadata_reports_exactly_one_healthy_leader() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let metadata = client.get_cluster_metadata().await?;
    assert_eq!(metadata.nodes.len(), 1, "single node: {metadata:?}");
    let node = &metadata.nodes[0];
    assert_eq!(node.role, ClusterNodeRole::Leader);
    assert_eq!(node.status, ClusterNodeStatus::Healthy);
    assert_eq!(node.endpoints.tcp, server.port(), "advertised TCP port");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_clients_and_get_client_list_connections() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let first = connect_root(&server.tcp_address()).await?;
    let second = connect_root(&server.tcp_address()).await?;
    if !rill_tests::transport::is_binary() {
        // HTTP requests open no session: nothing to list, and no client by that id.
        assert!(first.get_clients().await?.is_empty(), "no binary connections");
        assert!(first.get_client(1).await?.is_none(), "unknown client id");
        return Ok(());
    }
    let first_me = first.get_me().await?;
    let second_me = second.get_me().await?;
    assert_ne!(first_me.client_id, second_me.client_id, "two connections, two ids");

    let clients = first.get_clients().await?;
    for me in [&first_me, &second_me] {
        let listed = clients
            .iter()
            .find(|c| c.client_id == me.client_id)
            .unwrap_or_else(|| panic!("client {} missing from {clients:?}", me.client_id));
        assert_eq!(listed.address, me.address);
        assert_eq!(listed.user_id, Some(0));
        assert_eq!(listed.transport, rill_tests::transport::client_transport_name());
    }

    let details = first.get_client(second_me.client_id).await?;
    let details = details.expect("get_client of a connected client");
    assert_eq!(details.client_id, second_me.client_id);
    assert_eq!(details.address, second_me.address);

    let missing = first.get_client(987_654_321).await?;
    assert!(missing.is_none(), "unknown client id: {missing:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_with_wrong_password_or_unknown_user_fails() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let address = server.tcp_address();

    let client = connect_anonymous(&address).await?;
    let wrong_password = client.login_user(ROOT_USERNAME, "not-the-password").await;
    assert_eq!(error_code(wrong_password, "wrong password"), INVALID_CREDENTIALS);

    let client = connect_anonymous(&address).await?;
    let unknown_user = client.login_user("nobody-here", ROOT_PASSWORD).await;
    assert_eq!(error_code(unknown_user, "unknown user"), INVALID_CREDENTIALS);

    // The failures do not lock the account out.
    let client = connect_root(&address).await?;
    client.get_streams().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_before_login_are_refused_by_the_server() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_anonymous(&server.tcp_address()).await?;
    if !rill_tests::transport::is_binary() {
        // Without a bearer token the HTTP client sends the request as is: the server refuses.
        assert_eq!(error_code(client.get_stats().await, "stats before login"), UNAUTHENTICATED);
        assert_eq!(error_code(client.get_clients().await, "clients before login"), UNAUTHENTICATED);
        assert_eq!(error_code(client.get_streams().await, "streams before login"), UNAUTHENTICATED);
        client.ping().await?;
        client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;
        assert!(client.get_streams().await?.is_empty(), "no streams yet");
        return Ok(());
    }
    // The typed API refuses locally before login, so the raw path is used to make
    // sure the server itself enforces authentication.
    for code in [GET_STATS_CODE, GET_ME_CODE, GET_CLIENTS_CODE, GET_STREAMS_CODE] {
        let result = client.send_binary_request(code, Vec::new().into()).await;
        assert_eq!(error_code(result, &format!("code {code} before login")), UNAUTHENTICATED);
    }
    // The connection is still usable: ping, then a login.
    client.ping().await?;
    client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;
    let streams = client.send_binary_request(GET_STREAMS_CODE, Vec::new().into()).await?;
    assert!(streams.is_empty(), "no streams yet");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logout_ends_the_session_and_login_restores_it() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("before-logout").await?;
    client.logout_user().await?;

    let result = match rill_tests::transport::is_binary() {
        true => client.send_binary_request(GET_STREAMS_CODE, Vec::new().into()).await.map(|_| ()),
        false => client.get_streams().await.map(|_| ()),
    };
    assert_eq!(error_code(result, "get streams after logout"), UNAUTHENTICATED);
    client.ping().await?;

    client.login_user(ROOT_USERNAME, ROOT_PASSWORD).await?;
    let streams = client.get_streams().await?;
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].name, "before-logout");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_options_lists_what_create_topic_accepts() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    let catalog = client.describe_options(OptionsScope::Topic).await?;
    let keys: Vec<&str> = catalog.iter().map(|spec| spec.key.as_str()).collect();
    // Every key of the 0.11.0 client's catalog, plus the edge clients' enforce_fsync.
    for key in [
        "compression_algorithm",
        "consumer_offset_durability",
        "durability",
        "enforce_fsync",
        "max_topic_size",
        "message_expiry",
        "messages_required_to_save",
        "preallocate_segments",
        "segment_size",
        "size_of_messages_required_to_save",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    let spec = |key: &str| catalog.iter().find(|spec| spec.key == key).expect("listed");
    assert_eq!(spec("segment_size").kind, HeaderKind::Uint64);
    assert_eq!(spec("segment_size").default_value, (1u64 << 30).to_le_bytes());
    assert_eq!(spec("messages_required_to_save").kind, HeaderKind::Uint32);
    assert_eq!(spec("messages_required_to_save").default_value, 1024u32.to_le_bytes());
    assert_eq!(spec("durability").kind, HeaderKind::String);
    assert_eq!(spec("durability").default_value, b"replicated");
    assert!(catalog.iter().all(|spec| !spec.description.is_empty()), "every key is described");

    // Streams and users take no options: their catalogs are empty.
    assert!(client.describe_options(OptionsScope::Stream).await?.is_empty());
    assert!(client.describe_options(OptionsScope::User).await?.is_empty());
    Ok(())
}

/// The archive's entries, by name, with the method each was stored with.
fn unzip(archive: Vec<u8>) -> anyhow::Result<Vec<(String, zip::CompressionMethod, String)>> {
    use std::io::Read;
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(archive))?;
    let mut entries = Vec::new();
    for index in 0..zip.len() {
        let mut file = zip.by_index(index)?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        entries.push((file.name()?.to_string(), file.compression(), text));
    }
    Ok(entries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_returns_a_zip_of_the_asked_parts() -> anyhow::Result<()> {
    const SECRET: &str = "a-jwt-secret-no-snapshot-may-carry-0123456789";
    let server = TestServer::start_with_env(&[("IGGY_HTTP_JWT_ENCODING_SECRET", SECRET)])?;
    let client = connect_root(&server.tcp_address()).await?;
    create_stream_and_topic(&client, "snap", "shot", 1).await?;

    let all = client.snapshot(SnapshotCompression::Deflated, vec![SystemSnapshotType::All]).await?;
    let entries = unzip(all.0)?;
    let names: Vec<&str> = entries.iter().map(|(name, _, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "filesystem_overview.txt",
            "process_list.txt",
            "resource_usage.txt",
            "test.txt",
            "server_logs.txt",
            "server_config.toml"
        ]
    );
    let part = |name: &str| &entries.iter().find(|(n, _, _)| n == name).expect("listed").2;
    assert!(entries.iter().all(|(_, method, _)| *method == zip::CompressionMethod::Deflated));
    assert!(part("filesystem_overview.txt").contains("metadata/journal.wal"), "{}", part("filesystem_overview.txt"));
    assert!(part("process_list.txt").contains("rill-server"), "{}", part("process_list.txt"));
    assert!(part("resource_usage.txt").contains("VmRSS:"));
    assert!(part("server_config.toml").contains("[tcp]"), "{}", part("server_config.toml"));
    assert!(part("server_config.toml").contains("encoding_secret = \"<redacted>\""));
    assert!(entries.iter().all(|(_, _, text)| !text.contains(SECRET)), "the JWT secret leaked into a snapshot");
    assert!(part("server_logs.txt").contains("INFO"), "{}", part("server_logs.txt"));

    let stored = client.snapshot(SnapshotCompression::Stored, vec![SystemSnapshotType::ServerConfig]).await?;
    let stored = unzip(stored.0)?;
    assert_eq!(stored.len(), 1);
    assert_eq!((stored[0].0.as_str(), stored[0].1), ("server_config.toml", zip::CompressionMethod::Stored));

    // Methods Rill does not build are refused, and so is a user without read_servers.
    let zstd = client.snapshot(SnapshotCompression::Zstd, vec![SystemSnapshotType::Test]).await;
    assert_eq!(error_code(zstd, "zstd snapshot"), FEATURE_UNAVAILABLE);
    client.create_user("plain", "plain-pass", UserStatus::Active, None).await?;
    let plain = rill_tests::connect_user(&server.tcp_address(), "plain", "plain-pass").await?;
    let denied = plain.snapshot(SnapshotCompression::Stored, vec![SystemSnapshotType::Test]).await;
    assert_eq!(error_code(denied, "snapshot without read_servers"), UNAUTHORIZED);
    Ok(())
}
