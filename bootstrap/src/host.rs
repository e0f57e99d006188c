//! Host facts for GET_STATS and the root password seed, read once at start.

use rand::Rng;
use rand::distr::Alphanumeric;
use rill_application::HostInfo;
use rill_application::credentials::RootSeed;

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_owned()).unwrap_or_default()
}

pub fn host_info() -> HostInfo {
    let total_memory = read_trimmed("/proc/meminfo")
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024);
    HostInfo {
        hostname: read_trimmed("/proc/sys/kernel/hostname"),
        os_name: std::env::consts::OS.to_owned(),
        os_version: read_trimmed("/proc/sys/kernel/osrelease"),
        kernel_version: read_trimmed("/proc/sys/kernel/version"),
        total_memory,
    }
}

/// The root account's seed: IGGY_ROOT_USERNAME and IGGY_ROOT_PASSWORD when both are set,
/// iggy/iggy with `--with-default-root-credentials`, otherwise a generated password.
pub fn root_seed(username: Option<String>, password: Option<String>, default_credentials: bool) -> RootSeed {
    match (username, password) {
        (Some(username), Some(password)) => RootSeed { username, password, generated: false },
        _ if default_credentials => RootSeed { username: "iggy".into(), password: "iggy".into(), generated: false },
        _ => {
            let password: String = rand::rng().sample_iter(&Alphanumeric).take(32).map(char::from).collect();
            RootSeed { username: "iggy".into(), password, generated: true }
        }
    }
}
