//! Troubleshooting data from the host, for snapshots (GET_SNAPSHOT_FILE): a listing of the
//! data directory, the process table and resource figures from `/proc`, the tail of the
//! server's log and its effective configuration (which the server writes with its secrets
//! already masked). `stats` holds the host metrics GET_STATS reports.

mod stats;

pub use stats::{HostStats, directory_bytes, host_info};

use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use rill_application::ports::Diagnostics;
use rill_domain::snapshot::SnapshotType;

/// The log's last bytes a snapshot carries: enough for the recent past, far below the
/// 64 MiB reply frame.
pub const LOG_TAIL_BYTES: u64 = 16 * 1024 * 1024;
/// Entries of the data-directory listing before it stops, for the same reason.
pub const MAX_LISTED_ENTRIES: usize = 100_000;

/// Reads the server's data directory (`logs/rill.log`, `runtime/current_config.toml`) and
/// `/proc`. Cheap to clone: the use case moves a copy to the offload thread.
#[derive(Debug, Clone)]
pub struct HostDiagnostics {
    data_path: PathBuf,
    proc_path: PathBuf,
    log_tail_bytes: u64,
}

impl HostDiagnostics {
    pub fn new(data_path: impl Into<PathBuf>) -> Self {
        Self { data_path: data_path.into(), proc_path: PathBuf::from("/proc"), log_tail_bytes: LOG_TAIL_BYTES }
    }
}

impl Diagnostics for HostDiagnostics {
    fn collect(&self, part: SnapshotType) -> Vec<u8> {
        let collected = match part {
            SnapshotType::FilesystemOverview => filesystem_overview(&self.data_path).map(String::into_bytes),
            SnapshotType::ProcessList => process_list(&self.proc_path).map(String::into_bytes),
            SnapshotType::ResourceUsage => Ok(resource_usage(&self.proc_path).into_bytes()),
            SnapshotType::Test => Ok(b"rill snapshot test part\n".to_vec()),
            SnapshotType::ServerLogs => log_tail(&self.data_path.join("logs").join("rill.log"), self.log_tail_bytes),
            // Bootstrap masks secrets before it writes this file, so it is shipped as is.
            SnapshotType::ServerConfig => std::fs::read(self.data_path.join("runtime").join("current_config.toml")),
        };
        collected.unwrap_or_else(|error| format!("{}: not collected: {error}\n", part.file_name()).into_bytes())
    }
}

/// Every file and directory under `root` (each directory's entries in name order, then its
/// subdirectories, depth first): size, modification time (Unix seconds) and the path
/// relative to `root`. Symbolic links are listed, not followed.
fn filesystem_overview(root: &Path) -> std::io::Result<String> {
    let mut out = format!("{:>14} {:>12} path (under {})\n", "bytes", "modified", root.display());
    let (mut listed, mut total_bytes) = (0usize, 0u64);
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        // One unreadable directory below the root is noted, not the end of the listing.
        let mut entries: Vec<_> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries.filter_map(Result::ok).collect(),
            Err(error) if dir == root => return Err(error),
            Err(error) => {
                let _ = writeln!(out, "{:>27} {}/ unreadable: {error}", "", dir.display());
                continue;
            }
        };
        entries.sort_by_key(|entry| entry.file_name());
        let mut subdirs = Vec::new();
        for entry in entries {
            let Ok(meta) = entry.metadata() else { continue };
            let path = entry.path();
            if meta.is_dir() {
                subdirs.push(path.clone());
            } else {
                total_bytes += meta.len();
            }
            listed += 1;
            if listed <= MAX_LISTED_ENTRIES {
                let modified = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok());
                let relative = path.strip_prefix(root).unwrap_or(&path).display();
                let slash = if meta.is_dir() { "/" } else { "" };
                let _ =
                    writeln!(out, "{:>14} {:>12} {relative}{slash}", meta.len(), modified.map_or(0, |d| d.as_secs()));
            }
        }
        pending.extend(subdirs.into_iter().rev());
    }
    if listed > MAX_LISTED_ENTRIES {
        let _ = writeln!(out, "... {} more entries not listed", listed - MAX_LISTED_ENTRIES);
    }
    let _ = writeln!(out, "{listed} entries, {total_bytes} bytes in files");
    Ok(out)
}

/// One line per process: pid, parent, state, threads, resident memory and command line.
fn process_list(proc_path: &Path) -> std::io::Result<String> {
    let mut pids: Vec<u32> =
        std::fs::read_dir(proc_path)?.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok()).collect();
    pids.sort_unstable();
    let mut out = format!("{:>8} {:>8} {:<5} {:>7} {:>12} command\n", "pid", "ppid", "state", "threads", "rss_kib");
    for pid in pids {
        let dir = proc_path.join(pid.to_string());
        // A process may end between the listing and these reads; skip it then.
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else { continue };
        let field = |name: &str| status_field(&status, name).unwrap_or("-").to_string();
        let state = field("State").chars().next().unwrap_or('-');
        let rss = field("VmRSS").trim_end_matches(" kB").to_string();
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let mut command = String::from_utf8_lossy(&cmdline).replace('\0', " ").trim().to_string();
        if command.is_empty() {
            command = format!("[{}]", field("Name"));
        }
        let _ = writeln!(out, "{pid:>8} {:>8} {state:<5} {:>7} {rss:>12} {command}", field("PPid"), field("Threads"));
    }
    Ok(out)
}

fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|line| Some(line.strip_prefix(name)?.strip_prefix(':')?.trim()))
}

/// The host's load, uptime and memory, and this process's own status and IO counters.
fn resource_usage(proc_path: &Path) -> String {
    let mut out = String::new();
    for (title, file) in [
        ("load average", "loadavg"),
        ("uptime (seconds, idle seconds)", "uptime"),
        ("memory", "meminfo"),
        ("this process", "self/status"),
        ("this process's IO", "self/io"),
    ] {
        let text =
            std::fs::read_to_string(proc_path.join(file)).unwrap_or_else(|error| format!("unreadable: {error}\n"));
        let _ = write!(out, "## {title} ({})\n{text}\n", proc_path.join(file).display());
    }
    out
}

/// The last `limit` bytes of the log, with a line saying how much came before.
fn log_tail(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let skipped = len.saturating_sub(limit);
    let mut out = if skipped > 0 {
        format!("[the first {skipped} bytes of {} are left out]\n", path.display()).into_bytes()
    } else {
        Vec::new()
    };
    file.seek(SeekFrom::Start(skipped))?;
    file.take(limit).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests;
