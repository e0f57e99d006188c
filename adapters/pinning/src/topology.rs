//! NUMA topology through hwloc (feature `numa`): reading the nodes and their physical cores,
//! and binding a pinned thread's memory to its core's node.

use hwlocality::Topology;
use hwlocality::cpu::cpuset::CpuSet;
use hwlocality::memory::binding::{MemoryBindingFlags, MemoryBindingPolicy};
use hwlocality::object::types::ObjectType;

use crate::layout::NumaNode;

/// The machine's NUMA nodes, ascending by OS index, with each physical core reduced to the
/// OS CPUs in `available` (the process's affinity, which can be narrower than what hwloc
/// calls allowed, e.g. under `taskset`).
pub fn read_nodes(available: &[usize]) -> Result<Vec<NumaNode>, String> {
    let topology = Topology::new().map_err(|error| format!("cannot read the NUMA topology with hwloc: {error}"))?;
    // Some platforms or hwloc filters report no Core objects; each PU then stands alone.
    let physical_type =
        if topology.objects_with_type(ObjectType::Core).len() > 0 { ObjectType::Core } else { ObjectType::PU };
    let physical_cores: Vec<Vec<usize>> = topology
        .objects_with_type(physical_type)
        .filter_map(|object| object.cpuset())
        .map(|cpuset| cpuset.iter_set().map(usize::from).filter(|cpu| available.contains(cpu)).collect())
        .collect();
    let mut nodes: Vec<NumaNode> = topology
        .objects_with_type(ObjectType::NUMANode)
        .filter_map(|node| {
            let os_index = node.os_index()?;
            // A memory-only node (HBM, CXL) has no CPUs and so no cores.
            let node_cpus: Vec<usize> =
                node.cpuset().map(|set| set.iter_set().map(usize::from).collect()).unwrap_or_default();
            let cores = physical_cores
                .iter()
                .map(|siblings| siblings.iter().copied().filter(|cpu| node_cpus.contains(cpu)).collect::<Vec<_>>())
                .filter(|siblings| !siblings.is_empty())
                .collect();
            Some(NumaNode { os_index, physical_cores: cores })
        })
        .collect();
    nodes.sort_by_key(|node| node.os_index);
    Ok(nodes)
}

/// Makes the calling thread's future allocations prefer the NUMA node local to `core`.
///
/// Best effort: hwloc's plain `Bind` policy is a preference on Linux (`MPOL_PREFERRED`), so
/// allocations still succeed when the node is full, and a kernel or container that refuses
/// memory policies leaves the thread with the default first-touch policy, which already
/// places pages near a pinned thread. Either way the CPU pinning stands, so failures here are
/// not reported.
pub fn bind_memory_near(core: usize) {
    let Ok(topology) = Topology::new() else { return };
    let mut cpuset = CpuSet::new();
    cpuset.set(core);
    let _ignored = topology.bind_memory(&cpuset, MemoryBindingPolicy::Bind, MemoryBindingFlags::THREAD);
}
