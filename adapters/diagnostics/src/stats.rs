//! Host metrics from sysinfo: a sampler thread refreshes the process's CPU, memory, IO and
//! thread figures and the host's memory every second, and the data directory's size every
//! ten, so a shard asking for stats only copies the latest reading and never waits on
//! `/proc` or a directory walk.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rill_application::HostInfo;
use rill_application::ports::{HostMetrics, HostSample};
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

const REFRESH: Duration = Duration::from_secs(1);
/// Directory walks are heavier than `/proc` reads: one every this many refreshes.
const WALK_EVERY: u32 = 10;

/// The latest host reading, shared with the sampler thread.
#[derive(Debug, Clone, Default)]
pub struct HostStats {
    latest: Arc<Mutex<HostSample>>,
}

impl HostStats {
    /// Takes a first reading now and starts the sampler thread (`rill-host-stats`).
    pub fn start(data_path: impl Into<PathBuf>) -> std::io::Result<Self> {
        let stats = Self::default();
        let mut sampler = Sampler::new(data_path.into());
        sampler.refresh(&stats.latest, true);
        let latest = stats.latest.clone();
        std::thread::Builder::new().name("rill-host-stats".into()).spawn(move || {
            for round in 1u32.. {
                std::thread::sleep(REFRESH);
                sampler.refresh(&latest, round % WALK_EVERY == 0);
            }
        })?;
        Ok(stats)
    }
}

impl HostMetrics for HostStats {
    fn sample(&self) -> HostSample {
        *self.latest.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

struct Sampler {
    system: System,
    pid: Option<Pid>,
    data_path: PathBuf,
    data_directory_bytes: u64,
}

impl Sampler {
    fn new(data_path: PathBuf) -> Self {
        Self { system: System::new(), pid: sysinfo::get_current_pid().ok(), data_path, data_directory_bytes: 0 }
    }

    fn refresh(&mut self, latest: &Mutex<HostSample>, walk: bool) {
        self.system.refresh_memory();
        self.system.refresh_cpu_usage();
        let mut sample = HostSample {
            total_cpu_usage: self.system.global_cpu_usage(),
            total_memory: self.system.total_memory(),
            available_memory: self.system.available_memory(),
            ..HostSample::default()
        };
        if let Some(pid) = self.pid {
            let what = ProcessRefreshKind::nothing().with_cpu().with_memory().with_disk_usage().with_tasks();
            self.system.refresh_processes_specifics(ProcessesToUpdate::Some(&[pid]), true, what);
            if let Some(process) = self.system.process(pid) {
                let disk = process.disk_usage();
                sample.cpu_usage = process.cpu_usage();
                sample.memory_usage = process.memory();
                sample.read_bytes = disk.total_read_bytes;
                sample.written_bytes = disk.total_written_bytes;
                sample.threads_count = process.tasks().map_or(1, |tasks| tasks.len().max(1) as u32);
            }
        }
        if walk {
            self.data_directory_bytes = directory_bytes(&self.data_path);
        }
        sample.data_directory_bytes = self.data_directory_bytes;
        *latest.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = sample;
    }
}

/// Bytes of every regular file under `root` (links are not followed; unreadable
/// directories count as empty).
pub fn directory_bytes(root: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(entry.path()),
                Ok(kind) if kind.is_file() => total += entry.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

/// The host's static facts: name, operating system (its name and version as the
/// distribution gives them), kernel and total memory.
pub fn host_info() -> HostInfo {
    let mut system = System::new();
    system.refresh_memory();
    HostInfo {
        hostname: System::host_name().unwrap_or_default(),
        os_name: System::name().unwrap_or_else(|| std::env::consts::OS.to_owned()),
        os_version: System::os_version().unwrap_or_default(),
        kernel_version: System::kernel_version().unwrap_or_default(),
        total_memory: system.total_memory(),
    }
}
