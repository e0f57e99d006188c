//! `AffinityPinning`: the production `Pinning` adapter on `sched_getaffinity` and
//! `sched_setaffinity`, with NUMA resolution from hwloc when built with the `numa` feature.

use std::io;

use nix::errno::Errno;
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;
use rill_application::ports::Pinning;
use rill_domain::cpu_allocation::CpuAllocation;

/// Pins threads with the Linux affinity calls. Stateless: every call asks the kernel (and
/// hwloc) afresh, which is cheap enough for something done once per shard at start.
#[derive(Debug, Clone, Copy, Default)]
pub struct AffinityPinning;

/// Pid 0 means "the calling thread" to the affinity calls, not the whole process.
fn calling_thread() -> Pid {
    Pid::from_raw(0)
}

fn with_context(errno: Errno, context: String) -> io::Error {
    io::Error::new(io::Error::from(errno).kind(), format!("{context}: {errno}"))
}

impl Pinning for AffinityPinning {
    fn available_cores(&self) -> io::Result<Vec<usize>> {
        // The calling thread's mask stands for the process's: it is read on the main thread,
        // which is never pinned, before the shard threads pin themselves.
        let set = sched_getaffinity(calling_thread())
            .map_err(|errno| with_context(errno, "cannot read the CPU affinity".to_owned()))?;
        Ok((0..CpuSet::count()).filter(|&cpu| set.is_set(cpu).unwrap_or(false)).collect())
    }

    fn numa_cores(&self, allocation: &CpuAllocation) -> Result<Vec<usize>, String> {
        numa_cores(self, allocation)
    }

    fn pin_current_thread(&self, core: usize) -> io::Result<()> {
        let mut set = CpuSet::new();
        // `set` refuses cores beyond the kernel's CPU_SETSIZE; the kernel refuses the rest.
        set.set(core).map_err(|errno| with_context(errno, format!("cannot pin this thread to core {core}")))?;
        sched_setaffinity(calling_thread(), &set)
            .map_err(|errno| with_context(errno, format!("cannot pin this thread to core {core}")))?;
        #[cfg(feature = "numa")]
        crate::topology::bind_memory_near(core);
        Ok(())
    }
}

#[cfg(feature = "numa")]
fn numa_cores(pinning: &AffinityPinning, allocation: &CpuAllocation) -> Result<Vec<usize>, String> {
    let available =
        pinning.available_cores().map_err(|error| format!("cannot read this process's CPU affinity: {error}"))?;
    let nodes = crate::topology::read_nodes(&available)?;
    crate::layout::resolve(&nodes, allocation)
}

#[cfg(not(feature = "numa"))]
fn numa_cores(_pinning: &AffinityPinning, allocation: &CpuAllocation) -> Result<Vec<usize>, String> {
    Err(format!(
        "cpu_allocation `{}` needs NUMA support, which this build lacks: install libhwloc-dev, libudev-dev and pkg-config, \
         then build with `cargo build --release -p rill-bootstrap --features numa`",
        crate::layout::describe(allocation)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `body` on a fresh thread so that pinning it leaves the test harness's threads alone.
    fn on_own_thread<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(body).join().expect("the test thread panicked")
    }

    #[test]
    fn available_cores_include_the_current_one() {
        let cores = AffinityPinning.available_cores().unwrap();
        assert!(!cores.is_empty());
        assert!(cores.windows(2).all(|pair| pair[0] < pair[1]), "{cores:?} is not ascending");
        let current = nix::sched::sched_getcpu().unwrap();
        assert!(cores.contains(&current), "{current} not in {cores:?}");
    }

    #[test]
    fn pinning_leaves_exactly_one_core() {
        let first = AffinityPinning.available_cores().unwrap()[0];
        let after = on_own_thread(move || {
            AffinityPinning.pin_current_thread(first).unwrap();
            (AffinityPinning.available_cores().unwrap(), nix::sched::sched_getcpu().unwrap())
        });
        assert_eq!(after, (vec![first], first));
    }

    #[test]
    fn pinning_to_a_missing_core_fails_and_names_it() {
        for core in [100_000, CpuSet::count() - 1] {
            let error = on_own_thread(move || AffinityPinning.pin_current_thread(core)).unwrap_err();
            assert!(error.to_string().contains(&format!("core {core}")), "{error}");
        }
    }

    #[cfg(not(feature = "numa"))]
    #[test]
    fn numa_without_the_feature_says_how_to_enable_it() {
        let error = AffinityPinning.numa_cores(&CpuAllocation::NumaAuto).unwrap_err();
        assert!(error.contains("--features numa") && error.contains("libhwloc-dev"), "{error}");
        assert!(error.contains("`numa:auto`"), "{error}");
    }

    #[cfg(feature = "numa")]
    #[test]
    fn numa_auto_resolves_to_available_cores() {
        let available = AffinityPinning.available_cores().unwrap();
        let cores = AffinityPinning.numa_cores(&CpuAllocation::NumaAuto).unwrap();
        assert!(!cores.is_empty());
        assert!(cores.iter().all(|core| available.contains(core)), "{cores:?} not within {available:?}");
        let node_zero = CpuAllocation::Numa { nodes: vec![0], cores_per_node: Some(1), no_ht: true };
        assert_eq!(AffinityPinning.numa_cores(&node_zero).map(|cores| cores.len()), Ok(1));
    }

    #[cfg(feature = "numa")]
    #[test]
    fn numa_unknown_node_is_refused() {
        let allocation = CpuAllocation::Numa { nodes: vec![999], cores_per_node: None, no_ht: false };
        let error = AffinityPinning.numa_cores(&allocation).unwrap_err();
        assert!(error.contains("node 999"), "{error}");
    }
}
