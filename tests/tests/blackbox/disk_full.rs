//! A full disk through the official client: the server runs on a small tmpfs (mounted here
//! when the tests run as root, as CI does) and is filled on a persisted topic. Sends fail
//! with a clear error (4010 below the free-space floor, 4006 when a write hits ENOSPC), the
//! server stays up and serves polls, every acknowledged message is there, and once space is
//! freed sends (and, after a full disk, metadata changes) succeed again without a restart.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, eventually, id, poll_all};

/// CannotAppendMessage: the volume is below its free-space floor.
const BELOW_FLOOR: u32 = 4010;
/// CannotSaveMessagesToSegment: the write itself failed.
const WRITE_FAILED: u32 = 4006;

/// A tmpfs of `megabytes`, unmounted when dropped.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    /// `None` when this process may not mount (not root): the test then says so and ends.
    fn mount(megabytes: u32) -> Option<Self> {
        let path = std::env::temp_dir().join(format!("rill-full-{}-{}", std::process::id(), rill_tests::free_port()));
        std::fs::create_dir_all(&path).ok()?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(&path)
            .status()
            .is_ok_and(|status| status.success());
        if !mounted {
            eprintln!("disk-full tests need root to mount a tmpfs; not run here");
            let _ = std::fs::remove_dir(&path);
            return None;
        }
        Some(Self { path })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// Fills `path` with a file of `bytes`, to be removed later to free space.
fn ballast(path: &Path, bytes: usize) -> anyhow::Result<PathBuf> {
    let file = path.join("ballast");
    std::fs::write(&file, vec![0x5a; bytes])?;
    Ok(file)
}

fn message(offset: u64) -> IggyMessage {
    let payload = format!("{offset:0>1000}").into_bytes();
    IggyMessage::builder().id(u128::from(offset + 1)).payload(payload.into()).build().expect("message")
}

/// Sends 100-message batches until one fails; returns the acknowledged count and the code.
async fn send_until_refused(client: &IggyClient, from: u64) -> anyhow::Result<(u64, u32)> {
    let mut next = from;
    for _ in 0..10_000 {
        let mut batch: Vec<IggyMessage> = (next..next + 100).map(message).collect();
        match client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await {
            Ok(_) => next += 100,
            Err(error) => return Ok((next, error.as_code())),
        }
    }
    anyhow::bail!("the disk never filled")
}

/// Every acknowledged message is stored, once, at its offset.
async fn assert_all_there(client: &IggyClient, acknowledged: u64) -> anyhow::Result<()> {
    let stored = poll_all(client, &id(0), &id(0), 0).await?;
    assert_eq!(stored.len() as u64, acknowledged, "every acknowledged message, nothing else");
    for (offset, got) in (0u64..).zip(&stored) {
        assert_eq!(got.header.offset, offset);
        assert_eq!(got.payload, message(offset).payload, "offset {offset}");
    }
    Ok(())
}

async fn persisted_topic(client: &IggyClient) -> anyhow::Result<()> {
    client.create_stream("s").await?;
    let options = TopicCreateOptions {
        partitions_count: Some(1),
        segment_size: Some(IggyByteSize::from(4u64 << 20)),
        durability: Durability::Persisted,
        ..TopicCreateOptions::default()
    };
    client.create_topic(&id(0), "t", &options).await?;
    Ok(())
}

fn server_on(disk: &SmallDisk, min_free: &str) -> anyhow::Result<TestServer> {
    let data = disk.path.join("data");
    let data = data.to_string_lossy();
    TestServer::start_with_env(&[
        ("IGGY_SYSTEM_PATH", &data),
        ("IGGY_SYSTEM_DISK_MIN_FREE_SPACE", min_free),
        ("IGGY_SYSTEM_DISK_CHECK_INTERVAL", "100 ms"),
        ("IGGY_SYSTEM_MEMORY_POOL_SIZE", "512 MiB"),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_floor_sends_are_refused_early_and_resume_when_space_is_freed() -> anyhow::Result<()> {
    let Some(disk) = SmallDisk::mount(48) else { return Ok(()) };
    let ballast = ballast(&disk.path, 20 << 20)?;
    let mut server = server_on(&disk, "12 MiB")?;
    let client = connect_root(&server.tcp_address()).await?;
    persisted_topic(&client).await?;
    let (acknowledged, code) = send_until_refused(&client, 0).await?;
    assert_eq!(code, BELOW_FLOOR, "refused for the floor, before the disk is full");
    assert!(acknowledged > 0);
    assert_all_there(&client, acknowledged).await?;
    // Metadata keeps its room: a stream can still be created.
    client.create_stream("still-room").await?;
    std::fs::remove_file(&ballast)?;
    // The floor is read every 100 ms: the next reading lets sends in again.
    let next = acknowledged + 100;
    eventually(Duration::from_secs(10), "sends accepted once space is freed", || async {
        let mut batch: Vec<IggyMessage> = (acknowledged..next).map(message).collect();
        Ok(client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await.is_ok())
    })
    .await?;
    assert_all_there(&client, next).await?;
    server.kill9()?;
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert_all_there(&client, next).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_the_send_keeps_the_server_up_and_loses_nothing() -> anyhow::Result<()> {
    let Some(disk) = SmallDisk::mount(40) else { return Ok(()) };
    let ballast = ballast(&disk.path, 16 << 20)?;
    let mut server = server_on(&disk, "0 B")?;
    let client = connect_root(&server.tcp_address()).await?;
    persisted_topic(&client).await?;
    let (acknowledged, code) = send_until_refused(&client, 0).await?;
    assert_eq!(code, WRITE_FAILED, "the write that hit ENOSPC is refused");
    // Still refused while the disk is full, and the server keeps serving polls.
    let (again, code) = send_until_refused(&client, acknowledged).await?;
    assert_eq!((again, code), (acknowledged, WRITE_FAILED));
    assert_all_there(&client, acknowledged).await?;
    client.ping().await?;
    // Metadata changes fail too once not a page is left (the journal write hits ENOSPC).
    let filler = fill(&disk.path)?;
    let mut refused = None;
    for attempt in 0..100 {
        if let Err(error) = client.create_stream(&format!("while-full-{attempt}")).await {
            refused = Some(error.as_code());
            break;
        }
    }
    assert_eq!(refused, Some(IO_ERROR), "a metadata change refused on a full disk");
    std::fs::remove_file(&filler)?;
    std::fs::remove_file(&ballast)?;
    let mut batch: Vec<IggyMessage> = (acknowledged..acknowledged + 100).map(message).collect();
    client.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await?;
    assert_all_there(&client, acknowledged + 100).await?;
    // The metadata journal opens again within seconds of the space coming back.
    eventually(Duration::from_secs(10), "metadata changes taken again once space is freed", || async {
        Ok(client.create_stream("after-full").await.is_ok())
    })
    .await?;
    server.kill9()?;
    server.restart()?;
    let client = connect_root(&server.tcp_address()).await?;
    assert!(client.get_stream(&Identifier::named("after-full")?).await?.is_some(), "kept over a kill -9");
    assert_all_there(&client, acknowledged + 100).await
}

/// IoError: the metadata journal could not be written.
const IO_ERROR: u32 = 13000;

/// Fills what is left of `path`'s volume, page by page, until a write fails.
fn fill(path: &Path) -> anyhow::Result<PathBuf> {
    use std::io::Write;
    let file = path.join("filler");
    let mut out = std::fs::File::create(&file)?;
    let page = [0xa5u8; 4096];
    while out.write_all(&page).and_then(|()| out.flush()).is_ok() {}
    Ok(file)
}
