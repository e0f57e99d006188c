//! The NUMA layout as plain data, and the rules that turn a NUMA `cpu_allocation` into one
//! core per shard. Kept apart from hwloc so the rules are tested on any machine.

use rill_domain::cpu_allocation::CpuAllocation;

/// One NUMA node: its OS index and its physical cores, each as the OS CPU indexes (PUs,
/// hyper-thread siblings) this process may run on, ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    pub os_index: usize,
    pub physical_cores: Vec<Vec<usize>>,
}

impl NumaNode {
    /// Every usable OS CPU of the node, ascending. Ascending OS order is what Linux numbers
    /// first across physical cores and then across their siblings, so "the first N" of this
    /// list spreads over physical cores before doubling up.
    fn cpus(&self) -> Vec<usize> {
        let mut cpus: Vec<usize> = self.physical_cores.iter().flatten().copied().collect();
        cpus.sort_unstable();
        cpus
    }

    /// One OS CPU per physical core (its lowest-numbered sibling), ascending.
    fn one_cpu_per_physical_core(&self) -> Vec<usize> {
        let mut cpus: Vec<usize> =
            self.physical_cores.iter().filter_map(|siblings| siblings.iter().min().copied()).collect();
        cpus.sort_unstable();
        cpus
    }
}

/// The allocation in its configuration spelling, for error messages.
pub fn describe(allocation: &CpuAllocation) -> String {
    match allocation {
        CpuAllocation::Numa { nodes, cores_per_node, no_ht } => {
            let nodes: Vec<String> = nodes.iter().map(usize::to_string).collect();
            let cores = cores_per_node.map(|cores| format!(";cores={cores}")).unwrap_or_default();
            format!("numa:nodes={}{cores};no_ht={no_ht}", nodes.join(","))
        }
        CpuAllocation::NumaAuto => "numa:auto".to_owned(),
        other => format!("{other:?}"),
    }
}

/// Resolves a NUMA allocation against `nodes` (sorted by OS index) to one OS CPU per shard.
pub fn resolve(nodes: &[NumaNode], allocation: &CpuAllocation) -> Result<Vec<usize>, String> {
    let value = describe(allocation);
    let cores = match allocation {
        CpuAllocation::NumaAuto => nodes.iter().flat_map(NumaNode::cpus).collect(),
        CpuAllocation::Numa { nodes: wanted, cores_per_node, no_ht } => {
            resolve_selected(nodes, wanted, *cores_per_node, *no_ht, &value)?
        }
        _ => return Err(format!("cpu_allocation `{value}` is not a NUMA allocation")),
    };
    if cores.is_empty() {
        return Err(format!("cpu_allocation `{value}`: no NUMA node has a core this process may run on"));
    }
    Ok(cores)
}

fn resolve_selected(
    nodes: &[NumaNode],
    wanted: &[usize],
    cores_per_node: Option<usize>,
    no_ht: bool,
    value: &str,
) -> Result<Vec<usize>, String> {
    let mut cores = Vec::new();
    for (position, &node_index) in wanted.iter().enumerate() {
        // A node named twice would put two shards on each of its cores.
        if wanted[..position].contains(&node_index) {
            return Err(format!("cpu_allocation `{value}` names NUMA node {node_index} twice"));
        }
        let Some(node) = nodes.iter().find(|node| node.os_index == node_index) else {
            let known: Vec<String> = nodes.iter().map(|node| node.os_index.to_string()).collect();
            return Err(format!(
                "cpu_allocation `{value}` names NUMA node {node_index}, but this machine has nodes [{}]",
                known.join(", ")
            ));
        };
        let candidates = if no_ht { node.one_cpu_per_physical_core() } else { node.cpus() };
        let taken = match cores_per_node {
            Some(count) if count > candidates.len() => {
                let unit = if no_ht { "physical cores" } else { "cores" };
                return Err(format!(
                    "cpu_allocation `{value}` asks for {count} cores on NUMA node {node_index}, \
                     but this process may use only {} {unit} there",
                    candidates.len()
                ));
            }
            Some(count) => &candidates[..count],
            None => &candidates[..],
        };
        if taken.is_empty() {
            return Err(format!(
                "cpu_allocation `{value}`: NUMA node {node_index} has no core this process may run on"
            ));
        }
        cores.extend_from_slice(taken);
    }
    Ok(cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two nodes of two physical cores each, with siblings numbered after all cores.
    fn two_nodes() -> Vec<NumaNode> {
        vec![
            NumaNode { os_index: 0, physical_cores: vec![vec![0, 4], vec![1, 5]] },
            NumaNode { os_index: 1, physical_cores: vec![vec![2, 6], vec![3, 7]] },
        ]
    }

    fn numa(nodes: Vec<usize>, cores_per_node: Option<usize>, no_ht: bool) -> CpuAllocation {
        CpuAllocation::Numa { nodes, cores_per_node, no_ht }
    }

    #[test]
    fn auto_takes_every_cpu_in_node_order() {
        assert_eq!(resolve(&two_nodes(), &CpuAllocation::NumaAuto), Ok(vec![0, 1, 4, 5, 2, 3, 6, 7]));
    }

    #[test]
    fn selected_nodes_keep_the_listed_order_and_count() {
        assert_eq!(resolve(&two_nodes(), &numa(vec![1, 0], Some(1), false)), Ok(vec![2, 0]));
        assert_eq!(resolve(&two_nodes(), &numa(vec![1], None, false)), Ok(vec![2, 3, 6, 7]));
    }

    #[test]
    fn no_ht_keeps_one_cpu_per_physical_core() {
        assert_eq!(resolve(&two_nodes(), &numa(vec![0, 1], None, true)), Ok(vec![0, 1, 2, 3]));
        let error = resolve(&two_nodes(), &numa(vec![0], Some(3), true)).unwrap_err();
        assert!(error.contains("only 2 physical cores"), "{error}");
    }

    #[test]
    fn unknown_duplicate_and_empty_nodes_are_refused() {
        let error = resolve(&two_nodes(), &numa(vec![999], None, false)).unwrap_err();
        assert!(error.contains("node 999") && error.contains("[0, 1]"), "{error}");
        let error = resolve(&two_nodes(), &numa(vec![0, 0], None, false)).unwrap_err();
        assert!(error.contains("twice"), "{error}");
        let memory_only = vec![NumaNode { os_index: 0, physical_cores: Vec::new() }];
        assert!(resolve(&memory_only, &numa(vec![0], None, false)).is_err());
        assert!(resolve(&memory_only, &CpuAllocation::NumaAuto).is_err());
        assert!(resolve(&two_nodes(), &CpuAllocation::All).is_err());
    }

    #[test]
    fn too_few_cores_names_the_node() {
        let error = resolve(&two_nodes(), &numa(vec![0, 1], Some(5), false)).unwrap_err();
        assert!(error.contains("5 cores on NUMA node 0") && error.contains("only 4 cores"), "{error}");
    }
}
