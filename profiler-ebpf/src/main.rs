//! skillprof's BPF programs. They filter by the target process and aggregate in maps;
//! everything else (what to attach, how to read, what it means) belongs to userspace.
#![no_std]
#![no_main]

use aya_ebpf::{
    EbpfContext as _, Global,
    macros::{map, tracepoint},
    maps::PerCpuArray,
    programs::TracePointContext,
};
use skillprof_common::MmapTotals;

/// The tgid (process id) whose events are counted. A load-time constant set by userspace
/// with `EbpfLoader::override_global`: no map lookup on the hot path.
#[unsafe(no_mangle)]
static TARGET_TGID: Global<u32> = Global::new(0);

/// One slot, per CPU, so concurrent mmaps on different CPUs never contend.
#[map]
static MMAP_TOTALS: PerCpuArray<MmapTotals> = PerCpuArray::with_max_entries(1, 0);

/// The record every `syscalls:sys_enter_*` tracepoint passes (the kernel's
/// `struct syscall_trace_enter`): an 8-byte common header, the syscall number, then the
/// six raw arguments. See `events/syscalls/sys_enter_mmap/format` in tracefs.
#[repr(C)]
struct SyscallEnter {
    _common: u64,
    _nr: i32,
    args: [u64; 6],
}

/// `mmap(addr, len, prot, flags, fd, off)`: the length is the second argument.
const MMAP_ARG_LEN: usize = 1;

#[tracepoint(category = "syscalls", name = "sys_enter_mmap")]
pub fn sys_enter_mmap(ctx: TracePointContext) -> u32 {
    if ctx.tgid() != TARGET_TGID.load() {
        return 0;
    }
    let record = ctx.as_ptr().cast::<SyscallEnter>();
    // SAFETY: tracepoint programs may read their record directly; the verifier checks the
    // access against the record's size.
    let len = unsafe { (*record).args[MMAP_ARG_LEN] };
    if let Some(totals) = MMAP_TOTALS.get_ptr_mut(0) {
        // SAFETY: the pointer is this CPU's slot, valid for the whole program run.
        unsafe {
            (*totals).calls += 1;
            (*totals).bytes += len;
        }
    }
    0
}

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable panic path, so this is never run.
    loop {}
}
