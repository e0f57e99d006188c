//! Direct log files on a real filesystem (under the target directory, which is on the
//! build's disk rather than a tmpfs): appends of every size land byte-exact, the length
//! reported is what was written while the file on disk runs on with zero padding to the
//! block, truncations and rewrites in the middle keep later appends right, and a reopened
//! padded file is what recovery sees and cuts. Reservations (plain and direct files) take
//! blocks past the end without moving it, and a truncation gives them back. A reused file
//! takes appends from its start over its own blocks, each followed by a zeroed guard.

use std::path::PathBuf;

use rill_adapter_storage_uring::UringStorage;
use rill_application::memory_pool::{MemoryPool, PoolSlice};
use rill_application::ports::{Storage, StorageFile};

fn run<F: std::future::Future>(future: F) -> F::Output {
    compio::runtime::Runtime::new().expect("a compio runtime").block_on(future)
}

fn fresh_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("direct-log");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i % 251) as u8)).collect()
}

async fn read_all<F: StorageFile>(file: &F, len: usize) -> Vec<u8> {
    let (result, buf) = file.read_exact_at(PoolSlice::plain(vec![0; len]), 0).await;
    result.expect("read back");
    buf.to_vec()
}

async fn append<F: StorageFile>(file: &F, position: usize, parts: &[Vec<u8>]) {
    let bufs = parts.iter().map(|p| PoolSlice::plain(p.clone())).collect();
    let (result, _) = file.write_at(bufs, position as u64).await;
    result.expect("append");
}

/// Plain and pooled staging (pool buffers in a test binary need not be page-aligned; the
/// server's allocator makes them so), with no recent writes kept, a few, and plenty.
fn storages() -> Vec<UringStorage> {
    let pool = MemoryPool::new(512 << 20, 4).expect("pool").leak();
    vec![
        UringStorage::default(),
        UringStorage::default().with_pool(pool),
        UringStorage::default().keeping_recent_writes(40 << 10),
        UringStorage::default().with_pool(pool).keeping_recent_writes(64 << 20),
    ]
}

#[test]
fn appends_of_every_size_read_back_exactly_and_pad_the_file_to_the_block() {
    for (n, storage) in storages().into_iter().enumerate() {
        let path = fresh_path(&format!("sizes-{n}.log"));
        run(async {
            let file = storage.open_direct(&path).await.unwrap();
            let mut expected = Vec::new();
            let sizes = [1, 100, 4095, 1, 4096, 5000, 3, 1 << 20, 7, 8191, 12_288];
            for (i, &size) in sizes.iter().enumerate() {
                // Two buffers per append, as a vectored segment write hands them over.
                let parts = vec![bytes(i as u8, size / 2), bytes(i as u8 + 100, size - size / 2)];
                append(&file, expected.len(), &parts).await;
                expected.extend(parts.concat());
                assert_eq!(file.len().await.unwrap(), expected.len() as u64, "after append {i}");
                assert_eq!(read_all(&file, expected.len()).await, expected, "after append {i}");
                let on_disk = std::fs::read(&path).unwrap();
                assert_eq!(on_disk.len() as u64, (expected.len() as u64).div_ceil(4096) * 4096);
                assert!(on_disk[expected.len()..].iter().all(|&b| b == 0), "padding is zeros");
            }
            file.sync().await.unwrap();
        });
    }
}

#[test]
fn truncation_and_rewrites_keep_later_appends_right() {
    for (n, storage) in storages().into_iter().enumerate() {
        truncation_and_rewrites(storage, fresh_path(&format!("truncate-{n}.log")));
    }
}

fn truncation_and_rewrites(storage: UringStorage, path: PathBuf) {
    run(async {
        let file = storage.open_direct(&path).await.unwrap();
        let mut expected = bytes(1, 10_000);
        append(&file, 0, std::slice::from_ref(&expected)).await;
        // A failed append is cut back to where it began: mid-block.
        file.truncate(6_000).await.unwrap();
        expected.truncate(6_000);
        assert_eq!(file.len().await.unwrap(), 6_000);
        let more = bytes(2, 3_000);
        append(&file, 6_000, std::slice::from_ref(&more)).await;
        expected.extend(&more);
        // Recovery may rewrite a range in place (not an append).
        let patch = bytes(3, 50);
        append(&file, 100, std::slice::from_ref(&patch)).await;
        expected[100..150].copy_from_slice(&patch);
        let last = bytes(4, 777);
        append(&file, expected.len(), std::slice::from_ref(&last)).await;
        expected.extend(&last);
        assert_eq!(file.len().await.unwrap(), expected.len() as u64);
        assert_eq!(read_all(&file, expected.len()).await, expected);
        // The segment's seal: the padding is cut and the file is exactly what was written.
        file.truncate(expected.len() as u64).await.unwrap();
        file.sync().await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
    });
}

#[test]
fn a_reopened_padded_file_shows_its_padding_until_cut_then_appends_continue() {
    let storage = UringStorage::default();
    let path = fresh_path("reopen.log");
    run(async {
        let written = bytes(5, 5_000);
        {
            let file = storage.open_direct(&path).await.unwrap();
            append(&file, 0, std::slice::from_ref(&written)).await;
            file.sync().await.unwrap();
        }
        // As after a crash: the new descriptor sees the padded length.
        let file = storage.open_direct(&path).await.unwrap();
        assert_eq!(file.len().await.unwrap(), 8_192);
        file.truncate(5_000).await.unwrap();
        let more = bytes(6, 4_000);
        append(&file, 5_000, std::slice::from_ref(&more)).await;
        let expected = [written, more].concat();
        assert_eq!(read_all(&file, expected.len()).await, expected);
    });
}

#[test]
fn the_latest_direct_writes_are_read_from_memory_and_older_ones_from_the_file() {
    let storage = UringStorage::default().keeping_recent_writes(64 << 10);
    let path = fresh_path("recent.log");
    run(async {
        let file = storage.open_direct(&path).await.unwrap();
        let mut expected = Vec::new();
        for i in 0..40u8 {
            let part = bytes(i, 3_000);
            append(&file, expected.len(), std::slice::from_ref(&part)).await;
            expected.extend(part);
        }
        // Change every byte on disk behind the adapter's back.
        std::fs::write(&path, vec![0xEE; expected.len()]).unwrap();
        let at = expected.len() - 20_000;
        let (result, recent) = file.read_exact_at(PoolSlice::plain(vec![0; 20_000]), at as u64).await;
        result.unwrap();
        assert_eq!(&recent[..], &expected[at..], "the last 20 KB come from memory");
        let (result, old) = file.read_exact_at(PoolSlice::plain(vec![0; 100]), 0).await;
        result.unwrap();
        assert_eq!(&old[..], &[0xEE; 100][..], "the first bytes were evicted: read from the file");
        // A truncation forgets what it cut; appends after it are kept again.
        file.truncate(at as u64).await.unwrap();
        let more = bytes(99, 5_000);
        append(&file, at, std::slice::from_ref(&more)).await;
        let (result, back) = file.read_exact_at(PoolSlice::plain(vec![0; 5_000]), at as u64).await;
        result.unwrap();
        assert_eq!(&back[..], &more[..]);
    });
}

/// Bytes of disk blocks the file holds.
fn allocated(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn a_reservation_takes_blocks_past_the_end_until_a_truncation_gives_them_back() {
    for (n, direct) in [(0, false), (1, true)] {
        let storage = UringStorage::default();
        let path = fresh_path(&format!("reserve-{n}.log"));
        run(async {
            let file = match direct {
                true => storage.open_direct(&path).await.unwrap(),
                false => storage.open(&path).await.unwrap(),
            };
            let first = bytes(7, 10_000);
            append(&file, 0, std::slice::from_ref(&first)).await;
            let on_disk = std::fs::metadata(&path).unwrap().len();
            assert!(allocated(&path) < 1 << 20);
            file.reserve(0, 8 << 20).await.expect("ext4 reserves");
            // The blocks are taken; neither length moved.
            assert!(allocated(&path) >= 8 << 20, "direct {direct}: {} bytes allocated", allocated(&path));
            assert_eq!(file.len().await.unwrap(), 10_000);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), on_disk);
            let second = bytes(8, 1 << 20);
            append(&file, 10_000, std::slice::from_ref(&second)).await;
            let expected = [first, second].concat();
            assert_eq!(read_all(&file, expected.len()).await, expected);
            // Truncating to the file's own length gives back what lies past it.
            file.truncate(expected.len() as u64).await.unwrap();
            assert!(allocated(&path) < 2 << 20, "direct {direct}: {} bytes allocated", allocated(&path));
            assert_eq!(std::fs::read(&path).unwrap(), expected);
        });
    }
}

#[test]
fn a_reused_file_takes_appends_from_its_start_over_its_blocks_and_guards_each_end_with_zeros() {
    use rill_application::ports::storage::REUSE_GUARD_BYTES;
    for (n, storage) in storages().into_iter().enumerate() {
        let spare = fresh_path(&format!("spare-{n}.log"));
        let path = fresh_path(&format!("reused-{n}.log"));
        let old = bytes(90, 3 << 20);
        std::fs::write(&spare, &old).unwrap();
        let held = allocated(&spare);
        run(async {
            let file = storage.reuse_direct(&spare, &path).await.unwrap();
            assert!(!spare.exists(), "moved");
            assert_eq!(file.len().await.unwrap(), 0, "appends start at the file's start");
            // 4,096 - 100 bytes end short of a guard's room in their block; 100 more end on
            // the block boundary; 5,000 more end anywhere.
            let mut expected = Vec::new();
            for (seed, len) in [(1, 4_096 - 100), (2, 100), (3, 5_000)] {
                let part = bytes(seed, len);
                append(&file, expected.len(), std::slice::from_ref(&part)).await;
                expected.extend_from_slice(&part);
                let on_disk = std::fs::read(&path).unwrap();
                let end = expected.len();
                assert_eq!(on_disk.len(), old.len(), "n {n}: the file keeps its length");
                assert_eq!(&on_disk[..end], &expected[..], "n {n}");
                let guard = &on_disk[end..end + REUSE_GUARD_BYTES];
                assert!(guard.iter().all(|&b| b == 0), "n {n}: zeros after the append ending at {end}");
                let past = end.div_ceil(4096) * 4096 + 4096;
                assert_eq!(&on_disk[past..past + 64], &old[past..past + 64], "n {n}: the old bytes beyond");
            }
            assert_eq!(file.len().await.unwrap(), expected.len() as u64);
            assert_eq!(read_all(&file, expected.len()).await, expected);
            assert_eq!(allocated(&path), held, "n {n}: written over its own blocks");
            file.truncate(expected.len() as u64).await.unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), expected, "n {n}: a cut leaves only what was written");
        });
    }
}
