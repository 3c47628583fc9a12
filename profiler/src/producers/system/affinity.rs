//! The calling thread pinned to a set of CPUs (sched_setaffinity, inherited by the threads
//! and the process it then starts). A host and a load generator on CPUs of their own measure
//! the host alone.

/// Pins the calling thread (and what it starts from now on) to `cpus`. Async-signal-safe:
/// a child may call it between fork and exec.
pub fn pin_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set; every CPU was checked to be below
    // CPU_SETSIZE when the list was parsed.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
