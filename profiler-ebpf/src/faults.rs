//! Page faults of the host: user-mode faults (count, writes; majors where the mechanism sees
//! them), and kernel-mode faults on its user addresses, which the kernel counts in the host's
//! minflt too (a read(2) into a fresh buffer faults inside copy_to_user).
//!
//! Mechanisms: fexit on `handle_mm_fault` (sees the result, so also majors and retries), tp_btf
//! `page_fault_user` + `page_fault_kernel`, or the classic `exceptions:page_fault_{user,kernel}`
//! tracepoints.

use aya_ebpf::{
    EbpfContext as _,
    macros::{btf_tracepoint, fexit, tracepoint},
    programs::{BtfTracePointContext, FExitContext, TracePointContext, tracing::StackIdContext},
};
use skillprof_common::{
    EventBody, FaultCounts, HandledFaultEvent, KernelFaultEvent, STACK_FAULT, UserFaultEvent,
};

use crate::{add, add_by, counters, current_entry, emit, ids, is_host, stacks};

/// x86 page-fault error code: the access was a write.
const X86_PF_WRITE: u64 = 1 << 1;

/// `enum fault_flag` (stable since 5.x): a write; a fault from user mode.
const FAULT_FLAG_WRITE: u32 = 1 << 0;
const FAULT_FLAG_USER: u32 = 1 << 6;
/// `vm_fault_t` bits: a major fault; retry (the fault is handled again by a later call).
const VM_FAULT_MAJOR: u32 = 0x4;
const VM_FAULT_RETRY: u32 = 0x400;

/// Counts one fault: its stack (`--stacks`), then `counted` applied to the entry's fault
/// counters. Returns the entry. A fault is not attributed to a skill here: the host's ledger
/// has each skill's faults from its threads' own counters, and a lookup of the thread's skill
/// would cost every fault as much again as the rest of this program.
#[inline(always)]
fn count<C: StackIdContext>(ctx: &C, tid: u32, counted: impl Fn(&mut FaultCounts)) -> u32 {
    let entry = current_entry();
    stacks::sample(ctx, tid, entry, STACK_FAULT);
    if let Some(counters) = counters(entry) {
        counted(&mut counters.faults);
    }
    entry
}

#[inline(always)]
fn fault<const PREEMPTIBLE: bool, C: StackIdContext, E: EventBody + 'static>(
    ctx: &C,
    tid: u32,
    write: bool,
    major: bool,
    event: E,
) {
    let entry = count(ctx, tid, |faults| {
        add_by::<PREEMPTIBLE>(&mut faults.user, 1);
        if write {
            add_by::<PREEMPTIBLE>(&mut faults.user_write, 1);
        }
        if major {
            add_by::<PREEMPTIBLE>(&mut faults.major, 1);
        }
    });
    emit(entry, tid, event);
}

/// A fault taken in kernel mode. Only those on user addresses (the lower half of the address
/// space) are the host's memory: the kernel's own addresses never fault into its minflt.
#[inline(always)]
fn kernel_fault<const PREEMPTIBLE: bool, C: StackIdContext>(
    ctx: &C,
    tid: u32,
    address: u64,
    write: bool,
) {
    if address >> 63 != 0 || stacks::walking() {
        return;
    }
    let entry = count(ctx, tid, |faults| {
        add_by::<PREEMPTIBLE>(&mut faults.kernel, 1)
    });
    emit(
        entry,
        tid,
        KernelFaultEvent {
            address,
            write: write as u64,
        },
    );
}

/// `exceptions:page_fault_{user,kernel}`: address @8, ip @16, error_code @24.
#[repr(C)]
struct PageFault {
    _common: u64,
    address: u64,
    _ip: u64,
    error_code: u64,
}

#[tracepoint]
pub fn tp_page_fault_user(ctx: TracePointContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let record = ctx.as_ptr().cast::<PageFault>();
    // SAFETY: tracepoint programs read their record directly; the verifier bounds-checks it.
    let (address, error_code) = unsafe { ((*record).address, (*record).error_code) };
    fault::<false, _, _>(
        &ctx,
        tid,
        error_code & X86_PF_WRITE != 0,
        false,
        UserFaultEvent {
            address,
            error_code,
        },
    );
    0
}

/// `page_fault_user(unsigned long address, struct pt_regs *regs, unsigned long error_code)`.
#[btf_tracepoint(function = "page_fault_user")]
pub fn btf_page_fault_user(ctx: BtfTracePointContext) -> i32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let address: u64 = ctx.arg(0);
    let error_code: u64 = ctx.arg(2);
    fault::<false, _, _>(
        &ctx,
        tid,
        error_code & X86_PF_WRITE != 0,
        false,
        UserFaultEvent {
            address,
            error_code,
        },
    );
    0
}

#[tracepoint]
pub fn tp_page_fault_kernel(ctx: TracePointContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let record = ctx.as_ptr().cast::<PageFault>();
    // SAFETY: as in `tp_page_fault_user`.
    let (address, error_code) = unsafe { ((*record).address, (*record).error_code) };
    kernel_fault::<false, _>(&ctx, tid, address, error_code & X86_PF_WRITE != 0);
    0
}

/// `page_fault_kernel(unsigned long address, struct pt_regs *regs, unsigned long error_code)`.
#[btf_tracepoint(function = "page_fault_kernel")]
pub fn btf_page_fault_kernel(ctx: BtfTracePointContext) -> i32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let error_code: u64 = ctx.arg(2);
    kernel_fault::<false, _>(&ctx, tid, ctx.arg(0), error_code & X86_PF_WRITE != 0);
    0
}

/// `vm_fault_t handle_mm_fault(vma, address, flags, regs)`: counts the faults whose handling
/// finished (not the calls that ask to be retried), which is what the exception tracepoints
/// count; it also sees whether the fault was major. A fault without `FAULT_FLAG_USER` but with
/// registers is a kernel-mode exception on a user address; without registers it comes from
/// get_user_pages, which no exception tracepoint sees: it has a counter of its own, so the
/// counts the mechanisms share stay comparable.
#[fexit(function = "handle_mm_fault")]
pub fn fexit_handle_mm_fault(ctx: FExitContext) -> i32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let address: u64 = ctx.arg(1);
    let flags: u32 = ctx.arg(2);
    let regs: u64 = ctx.arg(3);
    let ret: u32 = ctx.arg(4);
    if ret & VM_FAULT_RETRY != 0 {
        return 0;
    }
    if flags & FAULT_FLAG_USER == 0 {
        if regs != 0 {
            kernel_fault::<true, _>(&ctx, tid, address, flags & FAULT_FLAG_WRITE != 0);
        } else {
            count(&ctx, tid, |faults| add(&mut faults.gup, 1));
        }
        return 0;
    }
    fault::<true, _, _>(
        &ctx,
        tid,
        flags & FAULT_FLAG_WRITE != 0,
        ret & VM_FAULT_MAJOR != 0,
        HandledFaultEvent {
            address,
            flags: flags as u64,
            result: ret as u64,
        },
    );
    0
}
