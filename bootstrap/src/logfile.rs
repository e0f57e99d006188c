//! The server's log file: `rill.log` in `<system.path>/<system.logging.path>`, rotated when
//! it would pass `max_file_size` (the old file becomes `rill.<unix ms>.<n>.log`); rotated files
//! older than `retention`, then the oldest while all of them and the current file pass
//! `max_total_size`, are removed at start, at each rotation and every
//! `rotation_check_interval`. Sizes of 0 and a zero retention mean no limit (Iggy's keys).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

const CURRENT: &str = "rill.log";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub dir: PathBuf,
    /// 0: never rotate.
    pub max_file_bytes: u64,
    /// 0: keep every rotated file (up to `retention`).
    pub max_total_bytes: u64,
    /// Zero: keep rotated files whatever their age.
    pub retention: Duration,
    pub check_interval: Duration,
}

pub struct RotatingFile {
    settings: LogSettings,
    file: File,
    written: u64,
    checked: Instant,
}

impl RotatingFile {
    pub fn open(settings: LogSettings) -> io::Result<Self> {
        std::fs::create_dir_all(&settings.dir)?;
        let file = OpenOptions::new().create(true).append(true).open(settings.dir.join(CURRENT))?;
        let written = file.metadata()?.len();
        let log = Self { settings, file, written, checked: Instant::now() };
        log.prune();
        Ok(log)
    }

    pub fn path(&self) -> PathBuf {
        self.settings.dir.join(CURRENT)
    }

    fn rotate(&mut self) -> io::Result<()> {
        let millis = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        // Fixed-width fields, so name order is rotation order (two rotations may share a
        // millisecond).
        let mut target = self.settings.dir.join(format!("rill.{millis:013}.0000.log"));
        for n in 1..10_000 {
            if !target.exists() {
                break;
            }
            target = self.settings.dir.join(format!("rill.{millis:013}.{n:04}.log"));
        }
        self.file.flush()?;
        std::fs::rename(self.path(), &target)?;
        self.file = OpenOptions::new().create(true).append(true).open(self.path())?;
        self.written = 0;
        self.prune();
        Ok(())
    }

    /// Removes rotated files past the retention age, then the oldest past the total size.
    /// Best effort: a file that cannot be removed stays for the next pass.
    fn prune(&self) {
        let mut rotated = rotated_files(&self.settings.dir);
        let now = SystemTime::now();
        if !self.settings.retention.is_zero() {
            rotated.retain(|(path, _, modified)| {
                let expired = now.duration_since(*modified).is_ok_and(|age| age > self.settings.retention);
                !(expired && std::fs::remove_file(path).is_ok())
            });
        }
        if self.settings.max_total_bytes == 0 {
            return;
        }
        // Room is kept for the current file to grow to its own limit, so the total holds
        // until the next rotation too.
        let reserve = self.written.max(self.settings.max_file_bytes);
        let mut total: u64 = reserve + rotated.iter().map(|(_, len, _)| len).sum::<u64>();
        for (path, len, _) in rotated {
            if total <= self.settings.max_total_bytes {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

/// Rotated log files, oldest first: (path, bytes, modified).
fn rotated_files(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<(PathBuf, u64, SystemTime)> = entries
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name != CURRENT && name.starts_with("rill.") && name.ends_with(".log")
        })
        .filter_map(|entry| {
            let metadata = entry.metadata().ok()?;
            Some((entry.path(), metadata.len(), metadata.modified().ok()?))
        })
        .collect();
    // The names carry the rotation time at a fixed width: name order is age order.
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let limit = self.settings.max_file_bytes;
        if limit != 0 && self.written > 0 && self.written + buf.len() as u64 > limit {
            self.rotate()?;
        }
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.checked.elapsed() >= self.settings.check_interval {
            self.checked = Instant::now();
            self.prune();
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &Path, max_file_bytes: u64, max_total_bytes: u64) -> LogSettings {
        LogSettings {
            dir: dir.to_path_buf(),
            max_file_bytes,
            max_total_bytes,
            retention: Duration::ZERO,
            check_interval: Duration::from_secs(3600),
        }
    }

    fn test_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rill-logfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn writing_past_the_limits_rotates_and_keeps_the_total_under_its_cap() {
        let dir = test_dir("caps");
        let mut log = RotatingFile::open(settings(&dir, 1000, 3500)).unwrap();
        let line = [b'x'; 99];
        for _ in 0..200 {
            log.write_all(&line).unwrap();
            log.write_all(b"\n").unwrap();
        }
        let current = std::fs::metadata(log.path()).unwrap().len();
        assert!(current <= 1000, "the current file stays under max_file_size: {current}");
        let rotated = rotated_files(&dir);
        assert!(!rotated.is_empty());
        assert!(rotated.iter().all(|(_, len, _)| *len <= 1000));
        let total = current + rotated.iter().map(|(_, len, _)| len).sum::<u64>();
        assert!(total <= 3500, "every log file together stays under max_total_size: {total}");
        assert!(total >= 1500, "and no more than needed was removed: {total}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rotated_files_past_the_retention_age_go_and_zero_limits_keep_everything() {
        let dir = test_dir("age");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rill.0000000000001.0000.log"), b"old").unwrap();
        std::fs::write(dir.join("other.txt"), b"not a log").unwrap();
        let keep = RotatingFile::open(settings(&dir, 0, 0)).unwrap();
        assert_eq!(rotated_files(&dir).len(), 1, "no limits: nothing removed");
        drop(keep);
        std::thread::sleep(Duration::from_millis(50));
        let aged = LogSettings { retention: Duration::from_millis(10), ..settings(&dir, 0, 0) };
        let mut log = RotatingFile::open(aged).unwrap();
        assert!(rotated_files(&dir).is_empty(), "the old rotated file is past its retention");
        assert!(dir.join("other.txt").exists(), "only log files are touched");
        log.write_all(b"after\n").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
