//! The root password seed: from the environment, the default credentials, or generated.

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
