//! Writes the seed corpus of the fuzz targets (fuzz/, docs/fuzzing.md) from the code
//! itself: encoded requests, batches, replica messages, metadata journal and partition files
//! written through simulated storage, REST bodies. `cargo run --example fuzz_seeds -- DIR`
//! writes `DIR/<target>/<seed>`; the configuration seeds come from the repository's TOML.

use std::fs;
use std::path::{Path, PathBuf};

use futures_executor::block_on;
use rill_adapter_sim::SimStorage;
use rill_application::memory_pool::PoolSlice;
use rill_application::partition::{PartitionLog, PartitionSettings};
use rill_application::ports::{Storage, StorageFile};
use rill_application::replication::VsrJournal;
use rill_domain::batch;
use rill_domain::identifier::Identifier;
use rill_domain::permissions::Permissions;
use rill_domain::polling::PollingStrategy;
use rill_domain::version::Dialect;
use rill_domain::vsr::{Entry, LogSuffix, Message, ROOT_CHECKSUM, Superblock, encode_message};
use rill_domain::wire::command::{Command, Consumer, MetadataOp, Partitioning, PollRequest, TopicRef};
use rill_domain::wire::header::RequestHeader;
use rill_domain::wire::tlv;

/// Separates the files of one input, as `fuzz/src/lib.rs` splits them.
const FILE_SEPARATOR: &[u8] = b"\xffRILL-FILE\xff";

/// The reference's golden login body: rust-sdk 0.11.0, user iggy, password iggy.
const GOLDEN_LOGIN_BODY: [u8; 34] = [
    0x00, 0x2c, 0x00, 0x00, 8, b'r', b'u', b's', b't', b'-', b's', b'd', b'k', 6, b'0', b'.', b'1', b'1', b'.', b'0',
    4, b'i', b'g', b'g', b'y', 4, b'i', b'g', b'g', b'y', 0, 0, 0, 0,
];

fn topic() -> TopicRef {
    TopicRef { stream: Identifier::Numeric(1), topic: Identifier::Name("orders".into()) }
}

fn sample_batch(messages: u32) -> Vec<u8> {
    let payloads: Vec<Vec<u8>> = (0..messages).map(|i| format!("message-{i}").into_bytes()).collect();
    let headers = [1u8, 0, 0, 0, b'k', 2, 1, 0, 0, 0, b'v'];
    let frames: Vec<(u128, &[u8], &[u8])> =
        payloads.iter().enumerate().map(|(i, p)| (i as u128 + 1, p.as_slice(), &headers[..])).collect();
    batch::build(&frames, 1_700_000_000_000_000)
}

fn commands<'a>(batch: &'a [u8], options: &'a [u8]) -> Vec<Command<'a>> {
    let single = Consumer::Single(Identifier::Numeric(7));
    vec![
        Command::Ping,
        Command::GetStats,
        Command::GetMe,
        Command::GetStreams,
        Command::GetTopic(topic()),
        Command::SendMessages { topic: topic(), partitioning: Partitioning::PartitionId(0), messages_count: 3, batch },
        Command::SendMessages { topic: topic(), partitioning: Partitioning::Balanced, messages_count: 3, batch },
        Command::PollMessages(PollRequest {
            consumer: single.clone(),
            topic: topic(),
            partition_id: Some(0),
            strategy: PollingStrategy::Offset(5),
            count: 100,
            auto_commit: true,
            deferred: None,
        }),
        Command::StoreConsumerOffset { consumer: single.clone(), topic: topic(), partition_id: Some(1), offset: 8 },
        Command::GetConsumerOffset {
            consumer: Consumer::Group(Identifier::Numeric(2)),
            topic: topic(),
            partition_id: None,
        },
        Command::Metadata(MetadataOp::CreateStream { name: "s".into(), options: &[] }),
        Command::Metadata(MetadataOp::CreateTopic {
            stream: Identifier::Numeric(1),
            partitions_count: 3,
            name: "t".into(),
            options,
        }),
        Command::Metadata(MetadataOp::CreateConsumerGroup { topic: topic(), name: "g".into() }),
        Command::Metadata(MetadataOp::UpdatePermissions {
            user: Identifier::Numeric(2),
            permissions: Some(Permissions::all()),
        }),
        Command::CreateUser {
            username: "u".into(),
            password: "secret".into(),
            status: 1,
            permissions: Some(Permissions::all()),
        },
        Command::CreateToken { name: "t".into(), expiry_us: 0 },
        Command::JoinConsumerGroup { topic: topic(), group: Identifier::Numeric(1) },
        Command::DeleteSegments { topic: topic(), partition_id: 1, segments_count: 2 },
    ]
}

fn frame(operation: u8, code: u32, body: &[u8]) -> Vec<u8> {
    let header = RequestHeader {
        size: 0,
        client: 0x1122_3344,
        request_checksum: 0,
        timestamp: 0,
        request: 1,
        operation,
        session: 1,
        code,
        ..RequestHeader::default()
    };
    let mut frame = header.encode(body.len()).to_vec();
    frame.extend_from_slice(body);
    frame
}

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    fs::create_dir_all(dir.join(target))?;
    fs::write(dir.join(target).join(name), bytes)
}

fn joined(files: &[&[u8]]) -> Vec<u8> {
    files.join(FILE_SEPARATOR)
}

/// Reads a file of simulated storage back whole.
fn read_back(storage: &SimStorage, path: &Path) -> Vec<u8> {
    block_on(async {
        let Ok(file) = storage.open(path).await else { return Vec::new() };
        let len = file.len().await.unwrap_or(0) as usize;
        let (result, bytes) = file.read_exact_at(PoolSlice::plain(vec![0u8; len]), 0).await;
        result.map(|()| bytes.to_vec()).unwrap_or_default()
    })
}

fn entry(op: u64, parent: u128, body: Vec<u8>) -> Entry {
    Entry {
        op,
        view: 1,
        timestamp: op * 10,
        client_id: 9,
        request_number: op,
        operation: 128,
        parent,
        body,
        checksum: 0,
    }
    .seal()
}

fn journal_seeds(dir: &Path) -> std::io::Result<()> {
    let storage = SimStorage::new();
    let meta = Path::new("/meta");
    let (mut journal, _) = block_on(VsrJournal::open(&storage, meta, false)).expect("open a new journal");
    let mut parent = ROOT_CHECKSUM;
    let mut entries = Vec::new();
    for op in 1..=4 {
        let body = Command::Metadata(MetadataOp::CreateStream { name: format!("s{op}"), options: &[] })
            .encode()
            .expect("encode")
            .body;
        let next = entry(op, parent, body);
        parent = next.checksum;
        block_on(journal.append(&next)).expect("append");
        entries.push(next);
    }
    let superblock = Superblock { view: 1, log_view: 1, commit: 4, head_op: 4, head_checksum: parent, damaged: false };
    block_on(journal.write_superblock(&storage, &superblock)).expect("superblock");
    let files = ["superblock", "checkpoint", "journal.wal"].map(|name| read_back(&storage, &meta.join(name)));
    write(dir, "metadata_journal", "clean", &[&[0u8][..], &joined(&[&files[0], &files[1], &files[2]])].concat())?;
    write(dir, "metadata_journal", "clustered", &[&[1u8][..], &joined(&[&files[0], &files[1], &files[2]])].concat())?;
    let messages = [
        Message::Prepare { view: 1, commit: 3, entry: entries[3].clone() },
        Message::PrepareOk { view: 1, replica: 2, op: 4, checksum: parent },
        Message::Commit { view: 1, commit: 4 },
        Message::StartViewChange { view: 2, replica: 1 },
        Message::DoViewChange {
            view: 2,
            replica: 1,
            log_view: 1,
            log: LogSuffix { op: 4, op_checksum: parent, commit: 4, entries: entries.clone() },
        },
        Message::StartView { view: 2, log: LogSuffix { op: 4, op_checksum: parent, commit: 4, entries } },
        Message::Recovery { replica: 0, nonce: 77 },
    ];
    for (index, message) in messages.iter().enumerate() {
        write(dir, "vsr_message", &format!("message-{index}"), &encode_message(message))?;
    }
    Ok(())
}

fn partition_seeds(dir: &Path) -> std::io::Result<()> {
    let storage = SimStorage::new();
    let settings = PartitionSettings {
        segment_size_bytes: 1 << 20,
        messages_required_to_save: 1,
        size_required_to_save_bytes: 1 << 20,
        enforce_fsync: true,
        consumer_offset_fsync: true,
        validate_checksum: true,
        deduplication: None,
        direct_log: true,
        producer_expiry_us: 3_600_000_000,
    };
    let p = Path::new("/p");
    let mut log = block_on(PartitionLog::open(&storage, p, 0, settings, false)).expect("open");
    for round in 0..8u64 {
        block_on(log.append(&storage, sample_batch(1 + round as u32).into(), 100 + round)).expect("append");
    }
    block_on(log.sync_active()).expect("sync");
    let segment = |extension: &str| read_back(&storage, &p.join(format!("{:020}.{extension}", 0)));
    let (log_file, index_file) = (segment("log"), segment("index"));
    for (flags, name) in [(0u8, "crashed"), (1, "clean"), (3, "clean-fsync")] {
        write(dir, "partition_files", name, &[&[flags][..], &joined(&[&log_file, &index_file])].concat())?;
    }
    let half = &log_file[..log_file.len() / 2];
    write(dir, "partition_files", "torn", &[&[0u8][..], &joined(&[half, &index_file])].concat())?;
    Ok(())
}

fn http_seeds(dir: &Path) -> std::io::Result<()> {
    let bodies: [(u8, &str); 13] = [
        (
            0,
            r#"{"partitioning":{"kind":"partition_id","value":"AQAAAA=="},"messages":[{"id":1,"payload":"aGVsbG8=","user_headers":[{"key":{"kind":"string","value":"aw=="},"value":{"kind":"uint32","value":"AQAAAA=="}}]}]}"#,
        ),
        (
            1,
            r#"{"name":"t","partitions_count":3,"compression_algorithm":"gzip","message_expiry":1000000,"max_topic_size":0,"options":{"durability":"persisted"}}"#,
        ),
        (
            2,
            r#"{"username":"u","password":"secret","status":"active","permissions":{"global":{"manage_servers":true,"read_servers":true,"manage_users":false,"read_users":true,"manage_streams":true,"read_streams":true,"manage_topics":true,"read_topics":true,"poll_messages":true,"send_messages":true},"streams":{"1":{"manage_stream":true,"read_stream":true,"manage_topics":true,"read_topics":true,"poll_messages":true,"send_messages":true,"topics":{"2":{"manage_topic":true,"read_topic":true,"poll_messages":true,"send_messages":true}}}}}}"#,
        ),
        (3, r#"{"username":"renamed","status":"inactive"}"#),
        (4, r#"{"permissions":null}"#),
        (5, r#"{"compression":"Deflated","snapshot_types":["All"]}"#),
        (6, r#"{"consumer_id":"7","partition_id":1,"offset":42}"#),
        (7, r#"{"name":"stream"}"#),
        (8, r#"{"partitions_count":2}"#),
        (9, r#"{"current_password":"a","new_password":"b"}"#),
        (10, r#"{"name":"token","expiry":0}"#),
        (11, r#"{"username":"iggy","password":"iggy"}"#),
        (12, r#"{"token":"abc"}"#),
    ];
    for (kind, text) in bodies {
        write(dir, "http_bodies", &format!("kind-{kind}"), &[&[kind][..], text.as_bytes()].concat())?;
    }
    Ok(())
}

/// `[version 0.12.2][sdk name][sdk version]`, as the 0.12.2 Rust client opens a login or a
/// session binding.
fn v12_version_info() -> Vec<u8> {
    let mut body = (12u32 << 10 | 2).to_le_bytes().to_vec();
    for text in ["rust-sdk", "0.11.1-edge.9"] {
        body.push(text.len() as u8);
        body.extend_from_slice(text.as_bytes());
    }
    body
}

/// The bodies only 0.12 clients send, laid out as the 0.12.2 Rust client writes them.
fn v12_seeds(dir: &Path) -> std::io::Result<()> {
    let secret = [0x5a; 32];
    let name = |text: &str| [&[text.len() as u8][..], text.as_bytes()].concat();
    let login = [v12_version_info(), secret.to_vec(), name("iggy"), name("iggy"), vec![0; 4]].concat();
    let token = [v12_version_info(), secret.to_vec(), name("a-token"), vec![0; 4]].concat();
    let bind = [
        v12_version_info(),
        7u128.to_le_bytes().to_vec(),
        3u64.to_le_bytes().to_vec(),
        12u64.to_le_bytes().to_vec(),
        secret.to_vec(),
    ]
    .concat();
    let topic_ids = [&[1u8, 4, 1, 0, 0, 0, 2][..], &name("orders")[..]].concat();
    let route = [topic_ids.clone(), 0u32.to_le_bytes().to_vec()].concat();
    let mut poll = Command::PollMessages(PollRequest {
        consumer: Consumer::Single(Identifier::Numeric(7)),
        topic: topic(),
        partition_id: Some(0),
        strategy: PollingStrategy::Next,
        count: 10,
        auto_commit: false,
        deferred: None,
    })
    .encode()
    .expect("a poll encodes")
    .body;
    for value in [
        1_000_000u64.to_le_bytes().to_vec(),
        1u32.to_le_bytes().to_vec(),
        (1u32 << 20).to_le_bytes().to_vec(),
        2_000_000u64.to_le_bytes().to_vec(),
    ] {
        poll.extend_from_slice(&value);
    }
    let mut patch = [&[1u8][..], &topic_ids, &[1], &name("max_topic_size")].concat();
    tlv::put(&mut patch, "message_expiry", tlv::KIND_STRING, b"1h");
    tlv::put(&mut patch, "name", tlv::KIND_STRING, b"renamed");
    // A fetch of partitions 0 (from offset 5) and 1 (from the next one) of "orders".
    let mut fetch = [&[1u8, 1, 4][..], &7u32.to_le_bytes(), &topic_ids].concat();
    for value in
        [&1_000_000u64.to_le_bytes()[..], &2_000_000u64.to_le_bytes(), &1u32.to_le_bytes(), &10u32.to_le_bytes()]
    {
        fetch.extend_from_slice(value);
    }
    fetch.extend_from_slice(&(1u32 << 20).to_le_bytes());
    fetch.push(1);
    fetch.extend_from_slice(&2u32.to_le_bytes());
    for (partition, kind, value) in [(0u32, 1u8, 5u64), (1, 5, 0)] {
        fetch.extend_from_slice(&partition.to_le_bytes());
        fetch.push(kind);
        fetch.extend_from_slice(&value.to_le_bytes());
        fetch.extend_from_slice(&(1u32 << 16).to_le_bytes());
        fetch.extend_from_slice(&[0; 16]);
    }
    // Metadata changes: after a cursor, topics and users only, 50 a page; and the current
    // state's next page after a token.
    let cursor = [&3u128.to_le_bytes()[..], &9u64.to_le_bytes(), &5u128.to_le_bytes(), &0u32.to_le_bytes()].concat();
    let changes = [&[2u8][..], &cursor, &[0, 0], &50u32.to_le_bytes(), &[2, 2, 6], &[0, 0]].concat();
    let page_token =
        [&cursor[..], &9u64.to_le_bytes(), &[0b10, 2], &8u16.to_le_bytes(), &[0, 0, 0, 1, 0, 0, 0, 2]].concat();
    let current = [
        &[3u8][..],
        &[0; 44],
        &[0, 0],
        &50u32.to_le_bytes(),
        &[1, 2],
        &(page_token.len() as u16).to_le_bytes(),
        &page_token,
    ]
    .concat();
    let seeds: [(&str, u8, u32, &[u8]); 10] = [
        ("metadata-changes", 2, 17, &changes),
        ("metadata-current-page", 2, 17, &current),
        ("login", 1, 0, &login),
        ("token-login", 1, 0, &token),
        ("bind-session", 2, 15, &bind),
        ("route", 2, 105, &route),
        ("deferred-poll", 2, 106, &poll),
        ("cancel", 2, 108, &[]),
        ("fetch", 2, 109, &fetch),
        ("update-resource", 150, 0, &patch),
    ];
    for (seed, operation, code, body) in seeds {
        // A seed the decoder refuses would only start the fuzzer at the first error check.
        let decodes = operation == 1 || Command::decode_in(Dialect::V12, operation, code, body).is_ok();
        assert!(decodes, "the {seed} seed decodes");
        write(dir, "request_frame_v12", seed, &frame(operation, code, body))?;
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "fuzz/corpus".into()));
    let batch = sample_batch(3);
    let mut options = Vec::new();
    tlv::put(&mut options, "compression_algorithm", tlv::KIND_STRING, b"gzip");
    for (index, command) in commands(&batch, &options).iter().enumerate() {
        // Commands only the server builds (a PING is header-only) have no encoding.
        let Ok(encoded) = command.encode() else { continue };
        write(
            &dir,
            "request_frame",
            &format!("command-{index}"),
            &frame(encoded.operation, encoded.code, &encoded.body),
        )?;
    }
    write(&dir, "request_frame", "golden-login", &frame(1, 0, &GOLDEN_LOGIN_BODY))?;
    write(&dir, "request_frame", "ping", &frame(2, 1, &[]))?;
    for count in [1, 3, 10] {
        let batch = sample_batch(count);
        write(&dir, "message_batch", &format!("batch-{count}"), &[&count.to_le_bytes()[..], &batch].concat())?;
    }
    for (index, command) in commands(&batch, &options).iter().enumerate() {
        let Ok(encoded) = command.encode() else { continue };
        let mut seed = frame(encoded.operation, encoded.code, &encoded.body);
        // A routed 0.12 request: incarnation, owner generation, metadata op.
        for (at, value) in [(200, 1_700_000_000_000_000u64), (208, 0), (216, 12)] {
            seed[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        write(&dir, "request_frame_v12", &format!("command-{index}"), &seed)?;
    }
    v12_seeds(&dir)?;
    journal_seeds(&dir)?;
    partition_seeds(&dir)?;
    http_seeds(&dir)?;
    println!("fuzz seeds written under {}", dir.display());
    Ok(())
}
