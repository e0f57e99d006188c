//! The configuration file and the `IGGY_*` environment: any text is loaded into a config
//! or refused with an error, never a panic.

#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use rill_fuzz::split_files;

fuzz_target!(|data: &[u8]| {
    let files = split_files(data, 2);
    let Ok(text) = std::str::from_utf8(files[0]) else { return };
    // The second part: `KEY=VALUE` lines as environment variables.
    let env: BTreeMap<String, String> = String::from_utf8_lossy(files[1])
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
    let _ = rill_bootstrap::config::load(Some(("fuzz.toml", text)), &env);
});
