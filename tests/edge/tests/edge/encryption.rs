//! Per-stream keys (the `encryption_key` option): on a server with a key of its own, each
//! stream's messages are sealed with the stream's key, the client's or one the server drew;
//! nothing of the messages or the key reaches the data directory in clear, reads report only
//! the key's source and fingerprints, and a start with another server key is refused. A
//! server without a key refuses a stream key.

use std::str::FromStr;

use iggy::prelude::*;
use rill_edge_tests::TestServer;
use rill_edge_tests::id;

const SERVER_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const OTHER_SERVER_KEY: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
const STREAM_KEY: [u8; 32] = [0x5a; 32];

fn encrypted(key: &'static str) -> [(&'static str, &'static str); 2] {
    [("IGGY_SYSTEM_ENCRYPTION_ENABLED", "true"), ("IGGY_SYSTEM_ENCRYPTION_KEY", key)]
}

/// A derived option a stream read reports.
fn reported(stream: &Stream, key: &str) -> Option<String> {
    let value = stream.options.get(&HeaderKey::from_str(key).ok()?)?;
    value.value.as_str().ok().map(str::to_owned)
}

async fn send_and_poll(client: &IggyClient, stream: &str) -> anyhow::Result<Vec<String>> {
    let options = TopicCreateOptions { partitions_count: Some(1), ..Default::default() };
    client.create_topic(&id(stream), "events", &options).await?;
    let mut messages: Vec<IggyMessage> =
        (0..20).map(|i| IggyMessage::from_str(&format!("{stream}-canary-{i}")).expect("a message")).collect();
    client.send_messages(&id(stream), &id("events"), &Partitioning::partition_id(0), &mut messages).await?;
    poll(client, stream).await
}

async fn poll(client: &IggyClient, stream: &str) -> anyhow::Result<Vec<String>> {
    let polled = client
        .poll_messages(
            &id(stream),
            &id("events"),
            0,
            &Consumer::new(Identifier::numeric(1)?),
            &PollingStrategy::offset(0),
            PollOptions { count: 100, ..Default::default() },
        )
        .await?;
    Ok(polled.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect())
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() { files.extend(files_under(&path)) } else { files.push(path) }
    }
    files
}

#[tokio::test]
async fn a_streams_own_key_seals_its_messages_and_reads_report_only_its_fingerprint() -> anyhow::Result<()> {
    let mut server = TestServer::start_with_env(&encrypted(SERVER_KEY))?;
    let client = server.root_client().await?;
    let key = StreamEncryptionKey::try_from(&STREAM_KEY[..])?;
    let fingerprint = key.fingerprint();
    let own = StreamCreateOptions { encryption_key: Some(key), ..Default::default() };
    client.create_stream("vault", &own).await?;
    client.create_stream("drawn", &StreamCreateOptions::default()).await?;
    let expected: Vec<String> = (0..20).map(|i| format!("vault-canary-{i}")).collect();
    assert_eq!(send_and_poll(&client, "vault").await?, expected);
    assert_eq!(send_and_poll(&client, "drawn").await?.len(), 20);

    let streams = client.get_streams().await?;
    let vault = streams.iter().find(|s| s.name == "vault").expect("vault");
    assert_eq!(reported(vault, "encryption_key_source").as_deref(), Some("stream"));
    assert_eq!(
        reported(vault, "encryption_key_fingerprint"),
        Some(fingerprint.clone()),
        "the client's own fingerprint"
    );
    let kek = reported(vault, "encryption_kek_fingerprint").expect("the wrapping key's fingerprint");
    assert_eq!(kek.len(), 16);
    let drawn = streams.iter().find(|s| s.name == "drawn").expect("drawn");
    assert_eq!(reported(drawn, "encryption_key_source").as_deref(), Some("server"));
    assert_ne!(reported(drawn, "encryption_key_fingerprint"), Some(fingerprint));
    assert_eq!(reported(drawn, "encryption_kek_fingerprint"), Some(kek), "one server key wraps both");
    assert!(vault.options.keys().all(|key| !key.to_string().contains("wrapped")), "the envelope is never returned");
    drop(client);

    server.restart()?;
    let client = server.root_client().await?;
    assert_eq!(poll(&client, "vault").await?, expected, "the stream's key opens its messages after a restart");
    drop(client);
    assert!(server.restart_with_env(&encrypted(OTHER_SERVER_KEY)).is_err(), "another server key is refused");
    for path in files_under(&server.data_dir()) {
        let bytes = std::fs::read(&path)?;
        for canary in [&b"vault-canary"[..], b"drawn-canary", &STREAM_KEY] {
            assert!(
                !bytes.windows(canary.len()).any(|w| w == canary),
                "{} holds plain text or the key",
                path.display()
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_server_without_a_key_of_its_own_refuses_a_stream_key() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let client = server.root_client().await?;
    let own = StreamCreateOptions {
        encryption_key: Some(StreamEncryptionKey::try_from(&STREAM_KEY[..])?),
        ..Default::default()
    };
    let refused = client.create_stream("vault", &own).await;
    assert!(matches!(refused, Err(IggyError::StreamEncryptionUnavailable)), "{refused:?}");
    let created = client.create_stream("plain", &StreamCreateOptions::default()).await?;
    assert_eq!(reported_source(&client, &created.name).await?.as_deref(), Some("none"));
    assert_eq!(client.get_streams().await?.len(), 1, "nothing was created for the refused key");
    Ok(())
}

async fn reported_source(client: &IggyClient, name: &str) -> anyhow::Result<Option<String>> {
    let streams = client.get_streams().await?;
    Ok(streams.iter().find(|s| s.name == name).and_then(|s| reported(s, "encryption_key_source")))
}
