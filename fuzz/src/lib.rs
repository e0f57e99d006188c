//! What the fuzz targets share: splitting one input into several files, and writing files
//! into simulated storage.

use std::path::Path;

use futures_executor::block_on;
use rill_adapter_sim::SimStorage;
use rill_application::memory_pool::PoolSlice;
use rill_application::ports::{Storage, StorageFile};

/// Separates the files of one input (seeds are built the same way: file, separator, file).
pub const FILE_SEPARATOR: &[u8] = b"\xffRILL-FILE\xff";

/// The first `count` files of `data`, split at [`FILE_SEPARATOR`]; missing ones are empty.
pub fn split_files(data: &[u8], count: usize) -> Vec<&[u8]> {
    let mut files = Vec::with_capacity(count);
    let mut rest = data;
    while files.len() + 1 < count {
        match rest.windows(FILE_SEPARATOR.len()).position(|window| window == FILE_SEPARATOR) {
            Some(at) => {
                files.push(&rest[..at]);
                rest = &rest[at + FILE_SEPARATOR.len()..];
            }
            None => break,
        }
    }
    files.push(rest);
    files.resize(count, &[]);
    files
}

/// Writes `bytes` as the file at `path` (parents created).
pub fn write_file(storage: &SimStorage, path: &Path, bytes: &[u8]) {
    block_on(async {
        storage.create_dir_all(path.parent().expect("a file path has a parent")).await.expect("create dir");
        let file = storage.open(path).await.expect("open");
        let (result, _) = file.write_at(vec![PoolSlice::plain(bytes.to_vec())], 0).await;
        result.expect("write");
        file.sync().await.expect("sync");
    });
}
