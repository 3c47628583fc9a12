//! What skillprof changes on the machine, and how each change is undone on every exit path,
//! SIGKILL included: guardian processes (`guardian`, forked with `fork`) that restore a sysctl
//! (`sysctl`), remove a swap file (`swapfile`) or a cgroup (`cgroup`) when skillprof's pipe to
//! them closes. The runner (its changes held as one guard, `run_changes`), the host starter,
//! the load network and the pressure experiment all change the machine through this module;
//! it knows nothing of them.

pub mod affinity;
pub mod cgroup;
pub mod fork;
pub mod guardian;
pub mod run_changes;
pub mod swapfile;
pub mod sysctl;

/// Holding a band squeezes every process on the machine, cgroups and sysctls are the
/// machine's: those need root.
pub fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
