//! `[system.sharding] cpu_allocation`: how many shards run and which cores they are pinned
//! to. Parsing and the core arithmetic are pure; the NUMA topology comes from an adapter.

/// A parsed `cpu_allocation` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuAllocation {
    /// One shard per available core.
    All,
    /// `N` shards pinned to cores `0..N`.
    Count(usize),
    /// Shards pinned to cores `start..end` (end exclusive).
    Range { start: usize, end: usize },
    /// Every core of every NUMA node.
    NumaAuto,
    /// Selected NUMA nodes, optionally the first `cores` of each, optionally without
    /// hyper-thread siblings.
    Numa { nodes: Vec<usize>, cores_per_node: Option<usize>, no_ht: bool },
}

/// Why an allocation cannot be used; the message is shown at start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    #[error("invalid cpu_allocation `{value}`: {reason}")]
    Malformed { value: String, reason: &'static str },
    #[error("cpu_allocation `{value}` needs core {core}, but this machine has {available} cores (0..{available})")]
    NotEnoughCores { value: String, core: usize, available: usize },
}

fn malformed(value: &str, reason: &'static str) -> AllocationError {
    AllocationError::Malformed { value: value.to_owned(), reason }
}

impl CpuAllocation {
    /// Parses the string form (`"all"`, `"4"`, `"5..8"`, `"numa:auto"`,
    /// `"numa:nodes=0,1;cores=4;no_ht=true"`).
    pub fn parse(value: &str) -> Result<Self, AllocationError> {
        let text = value.trim();
        if text == "all" {
            return Ok(Self::All);
        }
        if let Ok(count) = text.parse::<usize>() {
            return Self::count(count, value);
        }
        if let Some((start, end)) = text.split_once("..") {
            let start: usize =
                start.trim().parse().map_err(|_| malformed(value, "a range is `start..end` with whole numbers"))?;
            let end: usize =
                end.trim().parse().map_err(|_| malformed(value, "a range is `start..end` with whole numbers"))?;
            if end <= start {
                return Err(malformed(value, "the range is empty: end must be greater than start"));
            }
            return Ok(Self::Range { start, end });
        }
        if let Some(spec) = text.strip_prefix("numa:") {
            return Self::parse_numa(spec, value);
        }
        Err(malformed(
            value,
            "expected \"all\", a core count, a range \"a..b\", \"numa:auto\" or \"numa:nodes=..;cores=..;no_ht=..\"",
        ))
    }

    /// The integer form, `cpu_allocation = 4`.
    pub fn count(count: usize, value: &str) -> Result<Self, AllocationError> {
        if count == 0 {
            return Err(malformed(value, "at least one shard is needed"));
        }
        Ok(Self::Count(count))
    }

    fn parse_numa(spec: &str, value: &str) -> Result<Self, AllocationError> {
        if spec == "auto" {
            return Ok(Self::NumaAuto);
        }
        let (mut nodes, mut cores_per_node, mut no_ht) = (None, None, false);
        for part in spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, setting) = part
                .split_once('=')
                .ok_or_else(|| malformed(value, "numa settings are key=value pairs separated by `;`"))?;
            match key.trim() {
                "nodes" => {
                    let parsed: Result<Vec<usize>, _> = setting.split(',').map(|n| n.trim().parse()).collect();
                    nodes =
                        Some(parsed.map_err(|_| malformed(value, "nodes is a comma-separated list of node numbers"))?);
                }
                "cores" => {
                    let cores: usize =
                        setting.trim().parse().map_err(|_| malformed(value, "cores is a whole number"))?;
                    if cores == 0 {
                        return Err(malformed(value, "cores must be at least 1"));
                    }
                    cores_per_node = Some(cores);
                }
                "no_ht" => no_ht = setting.trim().parse().map_err(|_| malformed(value, "no_ht is true or false"))?,
                _ => return Err(malformed(value, "unknown numa key (expected nodes, cores or no_ht)")),
            }
        }
        let nodes = nodes.ok_or_else(|| malformed(value, "numa: needs `auto` or `nodes=...`"))?;
        if nodes.is_empty() {
            return Err(malformed(value, "nodes must name at least one node"));
        }
        Ok(Self::Numa { nodes, cores_per_node, no_ht })
    }

    pub fn is_numa(&self) -> bool {
        matches!(self, Self::NumaAuto | Self::Numa { .. })
    }

    /// The cores to pin shards to, for the non-NUMA modes, given the cores this process may
    /// run on. Shard `i` runs on the `i`-th core returned.
    pub fn cores(&self, available: &[usize], value: &str) -> Result<Vec<usize>, AllocationError> {
        let wanted: Vec<usize> = match self {
            Self::All => return Ok(available.to_vec()),
            Self::Count(count) => (0..*count).collect(),
            Self::Range { start, end } => (*start..*end).collect(),
            Self::NumaAuto | Self::Numa { .. } => {
                return Err(malformed(value, "NUMA allocations are resolved from the machine's topology"));
            }
        };
        for &core in &wanted {
            if !available.contains(&core) {
                return Err(AllocationError::NotEnoughCores {
                    value: value.to_owned(),
                    core,
                    available: available.len(),
                });
            }
        }
        Ok(wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_mode() {
        assert_eq!(CpuAllocation::parse("all"), Ok(CpuAllocation::All));
        assert_eq!(CpuAllocation::parse("3"), Ok(CpuAllocation::Count(3)));
        assert_eq!(CpuAllocation::parse("5..8"), Ok(CpuAllocation::Range { start: 5, end: 8 }));
        assert_eq!(CpuAllocation::parse("numa:auto"), Ok(CpuAllocation::NumaAuto));
        assert_eq!(
            CpuAllocation::parse("numa:nodes=0,1;cores=4;no_ht=true"),
            Ok(CpuAllocation::Numa { nodes: vec![0, 1], cores_per_node: Some(4), no_ht: true })
        );
        assert_eq!(
            CpuAllocation::parse("numa:nodes=1"),
            Ok(CpuAllocation::Numa { nodes: vec![1], cores_per_node: None, no_ht: false })
        );
    }

    #[test]
    fn rejects_malformed_values_with_reasons() {
        for bad in [
            "",
            "some",
            "0",
            "8..5",
            "3..3",
            "a..b",
            "numa:",
            "numa:nodes=",
            "numa:nodes=x",
            "numa:cores=0;nodes=0",
            "numa:colour=red",
            "numa:nodes=0;no_ht=maybe",
        ] {
            let error = CpuAllocation::parse(bad).unwrap_err();
            assert!(error.to_string().contains(&format!("`{bad}`")), "{error}");
        }
    }

    #[test]
    fn resolves_cores_and_refuses_missing_ones() {
        let available = [0, 1];
        assert_eq!(CpuAllocation::All.cores(&available, "all"), Ok(vec![0, 1]));
        assert_eq!(CpuAllocation::Count(1).cores(&available, "1"), Ok(vec![0]));
        assert_eq!(CpuAllocation::Range { start: 1, end: 2 }.cores(&available, "1..2"), Ok(vec![1]));
        let error = CpuAllocation::Count(4).cores(&available, "4").unwrap_err();
        assert_eq!(error, AllocationError::NotEnoughCores { value: "4".into(), core: 2, available: 2 });
        assert!(error.to_string().contains("has 2 cores"));
        assert!(CpuAllocation::Range { start: 5, end: 8 }.cores(&available, "5..8").is_err());
    }
}
