//! GET_SNAPSHOT_FILE's request: which troubleshooting files to collect and how to pack them,
//! with the codes of protocol 0.11 and the file name each part gets in the archive.

/// The archive's compression method (the request's first byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotCompression {
    Stored = 1,
    Deflated = 2,
    Bzip2 = 3,
    Zstd = 4,
    Lzma = 5,
    Xz = 6,
}

impl SnapshotCompression {
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::Stored,
            2 => Self::Deflated,
            3 => Self::Bzip2,
            4 => Self::Zstd,
            5 => Self::Lzma,
            6 => Self::Xz,
            _ => return None,
        })
    }
}

/// One part of a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SnapshotType {
    FilesystemOverview = 1,
    ProcessList = 2,
    ResourceUsage = 3,
    Test = 4,
    ServerLogs = 5,
    ServerConfig = 6,
}

/// The code that asks for every part.
pub const ALL_TYPES: u8 = 100;

impl SnapshotType {
    pub const EVERY: [Self; 6] = [
        Self::FilesystemOverview,
        Self::ProcessList,
        Self::ResourceUsage,
        Self::Test,
        Self::ServerLogs,
        Self::ServerConfig,
    ];

    pub fn code(self) -> u8 {
        self as u8
    }

    /// The part's file in the archive.
    pub fn file_name(self) -> &'static str {
        match self {
            Self::FilesystemOverview => "filesystem_overview.txt",
            Self::ProcessList => "process_list.txt",
            Self::ResourceUsage => "resource_usage.txt",
            Self::Test => "test.txt",
            Self::ServerLogs => "server_logs.txt",
            Self::ServerConfig => "server_config.toml",
        }
    }
}

/// The parts a list of type codes asks for, in code order without repeats; 100 means all.
/// `None` for an empty list or an unknown code, so a typo is refused rather than dropped.
pub fn parse_types(codes: &[u8]) -> Option<Vec<SnapshotType>> {
    if codes.is_empty() {
        return None;
    }
    let mut types = Vec::new();
    for &code in codes {
        if code == ALL_TYPES {
            types.extend(SnapshotType::EVERY);
            continue;
        }
        types.push(*SnapshotType::EVERY.iter().find(|kind| kind.code() == code)?);
    }
    types.sort_unstable();
    types.dedup();
    Some(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_expands_and_repeats_collapse() {
        assert_eq!(parse_types(&[100]), Some(SnapshotType::EVERY.to_vec()));
        assert_eq!(parse_types(&[6, 1, 6]), Some(vec![SnapshotType::FilesystemOverview, SnapshotType::ServerConfig]));
        assert_eq!(parse_types(&[5, 100]).map(|t| t.len()), Some(6));
    }

    #[test]
    fn empty_and_unknown_lists_are_refused() {
        assert_eq!(parse_types(&[]), None);
        assert_eq!(parse_types(&[1, 7]), None);
        assert_eq!(parse_types(&[0]), None);
        assert_eq!(SnapshotCompression::from_code(0), None);
        assert_eq!(SnapshotCompression::from_code(7), None);
        assert_eq!(SnapshotCompression::from_code(2), Some(SnapshotCompression::Deflated));
    }
}
