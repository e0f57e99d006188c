//! Process set-up from the host: the root password seed (from the environment, the default
//! credentials, or generated) and the open-files limit.

use rand::Rng;
use rand::distr::Alphanumeric;
use rill_application::credentials::RootSeed;

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

/// Raises the soft open-files limit to the hard one: every connection holds a descriptor,
/// and distributions default the soft limit to 1024, far below `connections.max_connections`.
/// Returns the limit in force; failing to raise it is reported, never fatal.
pub fn raise_open_files_limit() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard
        && let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(%error, soft, hard, "cannot raise the open-files limit");
        return Some(soft);
    }
    Some(hard)
}
