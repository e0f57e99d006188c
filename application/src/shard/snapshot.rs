//! GET_SNAPSHOT_FILE: the parts the diagnostics port collects, packed into a zip archive on
//! the offload thread (collecting reads files and `/proc`; deflating is CPU work).

use std::io::Write;

use rill_domain::answer::Answer;
use rill_domain::constants::{HEADER_SIZE, MAX_FRAME_SIZE};
use rill_domain::error::ErrorCode;
use rill_domain::snapshot::{SnapshotCompression, SnapshotType};
use zip::write::{SimpleFileOptions, ZipWriter};
use zip::{CompressionMethod, DateTime};

use super::Shard;
use crate::ports::{Diagnostics, Env, Offload, ShardReply};

impl<E: Env> Shard<E> {
    /// Collects `types` and answers the archive's bytes. Stored and Deflated archives are
    /// built; the other methods the protocol names answer FeatureUnavailable.
    pub async fn get_snapshot(&self, compression: SnapshotCompression, types: Vec<SnapshotType>) -> ShardReply {
        let method = match compression {
            SnapshotCompression::Stored => CompressionMethod::Stored,
            SnapshotCompression::Deflated => CompressionMethod::Deflated,
            _ => return Err(ErrorCode::FeatureUnavailable),
        };
        let diagnostics = self.diagnostics.clone();
        let written = zip_time(self.now_us() / 1_000_000);
        self.offload.run(move || pack(&diagnostics, method, written, &types)).await.map(Answer::Snapshot)
    }
}

/// One archive entry per part, in the order given, each stamped `written`. Fails when the
/// archive would not fit in a reply frame.
pub fn pack(
    diagnostics: &impl Diagnostics,
    method: CompressionMethod,
    written: DateTime,
    types: &[SnapshotType],
) -> Result<Vec<u8>, ErrorCode> {
    let options = SimpleFileOptions::default().compression_method(method).large_file(false).last_modified_time(written);
    let mut archive = ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for &part in types {
        archive.start_file(part.file_name(), options).map_err(failed)?;
        archive.write_all(&diagnostics.collect(part)).map_err(failed)?;
    }
    let bytes = archive.finish().map_err(failed)?.into_inner();
    if bytes.len() > MAX_FRAME_SIZE - HEADER_SIZE {
        tracing::warn!(bytes = bytes.len(), "snapshot archive too large for one reply frame");
        return Err(ErrorCode::Error);
    }
    Ok(bytes)
}

/// Writing into memory only fails on a zip-format limit; the client learns no more than that.
fn failed<E>(_: E) -> ErrorCode {
    ErrorCode::Error
}

/// A Unix time as the zip format's local date and time (read as UTC, seconds in steps of
/// two); the format's earliest time (1980) when it cannot be represented.
fn zip_time(unix_seconds: u64) -> DateTime {
    // Days to a civil date: Howard Hinnant's days_from_civil, inverted.
    let (days, secs) = ((unix_seconds / 86_400) as i64, unix_seconds % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (hour, minute, second) = ((secs / 3600) as u8, (secs % 3600 / 60) as u8, (secs % 60) as u8);
    u16::try_from(year)
        .ok()
        .and_then(|year| DateTime::from_date_and_time(year, month, day, hour, minute, second).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[derive(Clone)]
    struct Parts;

    impl Diagnostics for Parts {
        fn collect(&self, part: SnapshotType) -> Vec<u8> {
            part.file_name().repeat(50).into_bytes()
        }
    }

    fn entries(archive: &[u8]) -> Vec<(String, CompressionMethod, Vec<u8>)> {
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(archive)).expect("a zip archive");
        (0..zip.len())
            .map(|index| {
                let mut file = zip.by_index(index).expect("entry");
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).expect("entry bytes (the crc is checked at the end)");
                (file.name().expect("utf-8 name").to_string(), file.compression(), bytes)
            })
            .collect()
    }

    #[test]
    fn every_part_becomes_one_entry_with_the_asked_method() {
        let types = [SnapshotType::ProcessList, SnapshotType::ServerConfig];
        for method in [CompressionMethod::Stored, CompressionMethod::Deflated] {
            let archive = pack(&Parts, method, DateTime::default(), &types).unwrap();
            let got = entries(&archive);
            assert_eq!(got.len(), 2);
            for ((name, used, bytes), part) in got.into_iter().zip(types) {
                assert_eq!(name, part.file_name());
                assert_eq!(used, method);
                assert_eq!(bytes, Parts.collect(part));
            }
        }
    }

    #[test]
    fn deflate_shrinks_repetitive_parts() {
        let every = SnapshotType::EVERY;
        let stored = pack(&Parts, CompressionMethod::Stored, DateTime::default(), &every).unwrap();
        let deflated = pack(&Parts, CompressionMethod::Deflated, DateTime::default(), &every).unwrap();
        assert!(deflated.len() * 3 < stored.len(), "{} vs {}", deflated.len(), stored.len());
    }

    #[test]
    fn unix_times_become_civil_dates() {
        let at = |seconds| {
            let t = zip_time(seconds);
            (t.year(), t.month(), t.day(), t.hour(), t.minute(), t.second())
        };
        assert_eq!(at(0), (1980, 1, 1, 0, 0, 0), "before 1980: the format's earliest time");
        assert_eq!(at(951_782_400), (2000, 2, 29, 0, 0, 0), "a leap day");
        // The format keeps seconds in steps of two.
        assert_eq!(at(1_795_971_845), (2026, 11, 29, 17, 4, 4));
        assert_eq!(at(4_107_542_399), (2100, 2, 28, 23, 59, 58), "2100 is not a leap year");
    }

    #[test]
    fn entries_carry_the_given_time() {
        let written = zip_time(1_795_971_844);
        let archive = pack(&Parts, CompressionMethod::Stored, written, &[SnapshotType::Test]).unwrap();
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(archive)).unwrap();
        assert_eq!(zip.by_index(0).unwrap().last_modified(), Some(written));
    }
}
