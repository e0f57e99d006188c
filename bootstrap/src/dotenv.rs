//! `.env` files, as Iggy reads them: `KEY=value` lines (an `export ` prefix, `#` comments,
//! blank lines and single- or double-quoted values allowed). The file named by
//! `IGGY_ENV_PATH`, else `.env` in the working directory, if there is one. Variables already
//! in the environment win over the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The `.env` file to read: `IGGY_ENV_PATH`, or `./.env` when it exists.
pub fn path(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    match env.get("IGGY_ENV_PATH") {
        Some(path) => Some(PathBuf::from(path)),
        None => Path::new(".env").is_file().then(|| PathBuf::from(".env")),
    }
}

/// Parses a `.env` text; a line that is not `KEY=value` is an error naming its number.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {}: expected KEY=value", index + 1));
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("line {}: `{key}` is not a variable name", index + 1));
        }
        pairs.push((key.to_owned(), unquote(value.trim())));
    }
    Ok(pairs)
}

/// A quoted value loses its quotes (and, unquoted, a trailing ` # comment`).
fn unquote(value: &str) -> String {
    for quote in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(quote).and_then(|rest| rest.strip_suffix(quote)) {
            return inner.to_owned();
        }
    }
    value.split(" #").next().unwrap_or(value).trim_end().to_owned()
}

/// Adds the file's variables that the environment does not set; returns how many.
pub fn merge(env: &mut BTreeMap<String, String>, pairs: Vec<(String, String)>) -> usize {
    let mut added = 0;
    for (key, value) in pairs {
        if let std::collections::btree_map::Entry::Vacant(slot) = env.entry(key) {
            slot.insert(value);
            added += 1;
        }
    }
    added
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_comments_quotes_and_exports() {
        let text = "# a comment\n\nIGGY_TCP_ADDRESS=127.0.0.1:9000\nexport IGGY_SYSTEM_PATH = \"/var/lib/rill\"\n\
                    IGGY_HTTP_ENABLED=false # off here\nRUST_LOG='debug'\n";
        let pairs = parse(text).unwrap();
        assert_eq!(
            pairs,
            vec![
                ("IGGY_TCP_ADDRESS".into(), "127.0.0.1:9000".into()),
                ("IGGY_SYSTEM_PATH".into(), "/var/lib/rill".into()),
                ("IGGY_HTTP_ENABLED".into(), "false".into()),
                ("RUST_LOG".into(), "debug".into()),
            ]
        );
        assert!(parse("JUST A LINE\n").unwrap_err().contains("line 1"));
        assert!(parse("A-B=1\n").unwrap_err().contains("A-B"));
    }

    #[test]
    fn the_environment_wins_over_the_file() {
        let mut env = BTreeMap::from([("IGGY_TCP_ADDRESS".to_owned(), "127.0.0.1:1".to_owned())]);
        let added = merge(&mut env, parse("IGGY_TCP_ADDRESS=127.0.0.1:2\nIGGY_SYSTEM_PATH=/d\n").unwrap());
        assert_eq!(added, 1);
        assert_eq!(env["IGGY_TCP_ADDRESS"], "127.0.0.1:1");
        assert_eq!(env["IGGY_SYSTEM_PATH"], "/d");
    }
}
