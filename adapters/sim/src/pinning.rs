//! `SimPinning`: a `Pinning` adapter over a made-up machine. It never touches the OS; it
//! records every pin so tests can check which shard thread asked for which core.

use std::io;
use std::sync::{Arc, Mutex};

use rill_application::ports::Pinning;
use rill_domain::cpu_allocation::CpuAllocation;

/// A simulated machine's cores and, optionally, its NUMA nodes. Clones share the pin record,
/// so a test keeps one clone and hands the other to the shards, whose threads may pin
/// concurrently (hence a mutex rather than a `RefCell`).
#[derive(Debug, Clone)]
pub struct SimPinning {
    available: Vec<usize>,
    /// Node `i` of the layout is NUMA node `i`, listing its cores in order.
    numa_layout: Option<Vec<Vec<usize>>>,
    pins: Arc<Mutex<Vec<usize>>>,
}

impl SimPinning {
    /// A machine whose process may run on `available`; `numa_layout` is `None` to act like a
    /// build without NUMA support.
    pub fn new(available: Vec<usize>, numa_layout: Option<Vec<Vec<usize>>>) -> Self {
        Self { available, numa_layout, pins: Arc::default() }
    }

    /// Every core pinned to so far, in the order the pins happened.
    pub fn pins(&self) -> Vec<usize> {
        self.pins.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    fn resolve_selected(
        layout: &[Vec<usize>],
        nodes: &[usize],
        cores_per_node: Option<usize>,
    ) -> Result<Vec<usize>, String> {
        let mut cores = Vec::new();
        for &node in nodes {
            let node_cores = layout.get(node).ok_or_else(|| {
                format!("NUMA node {node} does not exist; the simulated machine has {} nodes", layout.len())
            })?;
            let count = cores_per_node.unwrap_or(node_cores.len());
            if count > node_cores.len() {
                return Err(format!("NUMA node {node} has {} cores, {count} requested", node_cores.len()));
            }
            cores.extend_from_slice(&node_cores[..count]);
        }
        Ok(cores)
    }
}

impl Pinning for SimPinning {
    fn available_cores(&self) -> io::Result<Vec<usize>> {
        Ok(self.available.clone())
    }

    fn numa_cores(&self, allocation: &CpuAllocation) -> Result<Vec<usize>, String> {
        let Some(layout) = &self.numa_layout else {
            return Err("the simulated machine has no NUMA layout (build with `--features numa`)".to_owned());
        };
        match allocation {
            CpuAllocation::NumaAuto => Ok(layout.iter().flatten().copied().collect()),
            // The layout lists cores without hyper-thread siblings, so `no_ht` has nothing
            // to remove here; the real adapter's sibling handling is tested against hwloc.
            CpuAllocation::Numa { nodes, cores_per_node, no_ht: _ } => {
                Self::resolve_selected(layout, nodes, *cores_per_node)
            }
            other => Err(format!("{other:?} is not a NUMA allocation")),
        }
    }

    fn pin_current_thread(&self, core: usize) -> io::Result<()> {
        if !self.available.contains(&core) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot pin this thread to core {core}: not available"),
            ));
        }
        self.pins.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(core);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> SimPinning {
        SimPinning::new(vec![0, 1, 2, 3], Some(vec![vec![0, 1], vec![2, 3]]))
    }

    #[test]
    fn records_pins_across_clones_and_threads() {
        let pinning = two_nodes();
        let shard_side = pinning.clone();
        std::thread::spawn(move || shard_side.pin_current_thread(2).unwrap()).join().unwrap();
        pinning.pin_current_thread(0).unwrap();
        assert_eq!(pinning.pins(), vec![2, 0]);
        let error = pinning.pin_current_thread(9).unwrap_err();
        assert!(error.to_string().contains("core 9"), "{error}");
        assert_eq!(pinning.pins(), vec![2, 0]);
    }

    #[test]
    fn resolves_numa_allocations_from_the_layout() {
        let pinning = two_nodes();
        assert_eq!(pinning.numa_cores(&CpuAllocation::NumaAuto), Ok(vec![0, 1, 2, 3]));
        let second_node_first_core = CpuAllocation::Numa { nodes: vec![1], cores_per_node: Some(1), no_ht: true };
        assert_eq!(pinning.numa_cores(&second_node_first_core), Ok(vec![2]));
        let unknown = CpuAllocation::Numa { nodes: vec![0, 5], cores_per_node: None, no_ht: false };
        assert!(pinning.numa_cores(&unknown).unwrap_err().contains("node 5"));
        let too_many = CpuAllocation::Numa { nodes: vec![0], cores_per_node: Some(3), no_ht: false };
        assert!(pinning.numa_cores(&too_many).is_err());
        let flat = SimPinning::new(vec![0], None);
        assert!(flat.numa_cores(&CpuAllocation::NumaAuto).unwrap_err().contains("--features numa"));
    }
}
