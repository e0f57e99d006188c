//! The metadata journal of a single node (`metadata/journal.wal`, written through the VSR
//! replica): it stays bounded by checkpoints, restarts replay it exactly, a torn last
//! entry is cut, and a corrupt entry in the middle stops the start with a clear error.

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root};

fn metadata_file(server: &TestServer, name: &str) -> std::path::PathBuf {
    server.data_dir().join("metadata").join(name)
}

async fn stream_names(address: &str) -> anyhow::Result<Vec<String>> {
    let client = connect_root(address).await?;
    let mut names: Vec<String> = client.get_streams().await?.into_iter().map(|s| s.name).collect();
    names.sort();
    Ok(names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_bound_the_journal_and_restarts_keep_every_op() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    // Past the checkpoint interval (256 ops), with deletes so ids and gaps must survive.
    for index in 0..300 {
        client.create_stream(&format!("stream-{index:03}")).await?;
    }
    for index in (0..300).step_by(3) {
        client.delete_stream(&Identifier::named(&format!("stream-{index:03}"))?).await?;
    }
    let before = stream_names(&server.tcp_address()).await?;
    assert_eq!(before.len(), 200);
    let ids_before: Vec<u32> = client.get_streams().await?.iter().map(|s| s.id).collect();

    assert!(metadata_file(&server, "checkpoint").exists(), "a checkpoint was taken");
    let journal_len = std::fs::metadata(metadata_file(&server, "journal.wal"))?.len();
    // 400 ops of about 100 bytes each would be ~40 KB; the journal holds only what follows
    // the last checkpoint.
    assert!(journal_len < 20_000, "journal.wal is {journal_len} bytes");

    server.restart()?;
    assert_eq!(stream_names(&server.tcp_address()).await?, before, "graceful restart");
    server.kill9()?;
    server.restart()?;
    assert_eq!(stream_names(&server.tcp_address()).await?, before, "restart after kill -9");
    let client = connect_root(&server.tcp_address()).await?;
    let ids_after: Vec<u32> = client.get_streams().await?.iter().map(|s| s.id).collect();
    assert_eq!(ids_after, ids_before, "ids survive");
    client.create_stream("after-restart").await?;
    assert_eq!(client.get_stream(&Identifier::named("after-restart")?).await?.map(|s| s.id), Some(0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_is_cut_and_a_corrupt_middle_entry_stops_the_start() -> anyhow::Result<()> {
    let mut server = TestServer::start()?;
    let client = connect_root(&server.tcp_address()).await?;
    for name in ["one", "two", "three"] {
        client.create_stream(name).await?;
    }
    server.stop_graceful()?;
    let journal = metadata_file(&server, "journal.wal");
    let intact = std::fs::read(&journal)?;

    // A frame whose declared length runs past the end of the file: an append cut short.
    let mut torn = intact.clone();
    torn.extend_from_slice(&[200, 0, 0, 0, 1, 2, 3, 4, 5]);
    std::fs::write(&journal, &torn)?;
    server.restart()?;
    assert_eq!(stream_names(&server.tcp_address()).await?, vec!["one", "three", "two"]);
    server.stop_graceful()?;
    assert_eq!(std::fs::read(&journal)?, intact, "the torn tail was cut");

    // A flipped byte inside the first entry, with intact entries after it.
    let mut corrupt = intact.clone();
    corrupt[30] ^= 0x40;
    std::fs::write(&journal, &corrupt)?;
    let error = server.restart().expect_err("a corrupt entry in the middle must stop the start");
    let text = format!("{error:#}");
    assert!(text.contains("corrupt entry at byte 0"), "the error names the entry: {text}");
    assert_eq!(std::fs::read(&journal)?, corrupt, "nothing was cut or rewritten");
    Ok(())
}
