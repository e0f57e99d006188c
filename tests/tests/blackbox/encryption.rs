//! Encryption at rest through the official client: with `[system.encryption]` on, payloads
//! and user headers never reach the data directory in clear, polls return them as sent,
//! and a start with another key, or without encryption, on that data is refused with a
//! message; a malformed key stops the start too.

use std::collections::BTreeMap;
use std::str::FromStr;

use iggy::prelude::*;
use rill_tests::{
    TestServer, assert_same_message, connect_root, files_under, id, message, run_until_exit, topic_options,
};

const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const OTHER_KEY: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";

fn canary(n: u32) -> IggyMessage {
    let headers = BTreeMap::from([(
        HeaderKey::from_str("trace").unwrap(),
        HeaderValue::from_str(&format!("header-canary-{n}")).unwrap(),
    )]);
    message(n as u128 + 1, format!("payload-canary-{n}-{}", "x".repeat(n as usize % 50)).into_bytes(), Some(headers))
}

#[tokio::test]
async fn sealed_at_rest_served_in_clear_and_the_key_is_checked_at_every_start() -> anyhow::Result<()> {
    let encrypted = [("IGGY_SYSTEM_ENCRYPTION_ENABLED", "true"), ("IGGY_SYSTEM_ENCRYPTION_KEY", KEY)];
    let mut server = TestServer::start_with_env(&encrypted)?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("vault").await?;
    client.create_topic(&id(0), "t", &topic_options(2)).await?;
    let mut first: Vec<IggyMessage> = (0..40).map(canary).collect();
    client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut first).await?;
    let mut sent: Vec<IggyMessage> = (0..40).map(canary).collect();
    client.send_messages(&id(0), &id(0), &Partitioning::partition_id(1), &mut sent).await?;
    let consumer = Consumer::new(id(1));
    let strategy = PollingStrategy::offset(0);
    let polled = client.poll_messages(&id(0), &id(0), Some(1), &consumer, &strategy, 100, false).await?;
    assert_eq!(polled.messages.len(), 40);
    for (sent, got) in sent.iter().zip(&polled.messages) {
        assert_same_message(sent, got, "an encrypted partition's poll");
    }
    drop(client);
    server.stop_graceful()?;
    let mut stored = 0;
    for path in files_under(&server.data_dir()) {
        let bytes = std::fs::read(&path)?;
        stored += bytes.len();
        for canary in [&b"payload-canary"[..], b"header-canary"] {
            assert!(!bytes.windows(canary.len()).any(|w| w == canary), "{} holds plain text", path.display());
        }
    }
    assert!(stored > 40 * 2 * 64, "the messages are on disk ({stored} bytes)");

    let (code, stderr) = run_until_exit(
        &server.data_dir(),
        &[("IGGY_SYSTEM_ENCRYPTION_ENABLED", "true"), ("IGGY_SYSTEM_ENCRYPTION_KEY", OTHER_KEY)],
    )?;
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("not the key"), "a wrong key is named: {stderr}");
    let (code, stderr) = run_until_exit(&server.data_dir(), &[])?;
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("holds encrypted messages"), "{stderr}");

    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    let polled = client.poll_messages(&id(0), &id(0), Some(1), &consumer, &strategy, 100, false).await?;
    assert_eq!(polled.messages.len(), 40, "the right key serves the data after a restart");
    for (sent, got) in sent.iter().zip(&polled.messages) {
        assert_same_message(sent, got, "after a restart");
    }
    Ok(())
}

#[test]
fn a_missing_or_malformed_key_stops_the_start() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    for (key, says) in [("", "needs `system.encryption.key`"), ("not base64!", "not base64"), ("AAEC", "3 bytes")] {
        let (code, stderr) = run_until_exit(
            data.path(),
            &[("IGGY_SYSTEM_ENCRYPTION_ENABLED", "true"), ("IGGY_SYSTEM_ENCRYPTION_KEY", key)],
        )?;
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(says), "key `{key}`: {stderr}");
    }
    Ok(())
}
