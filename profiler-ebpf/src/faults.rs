//! User page faults of the host: count and writes; majors where the mechanism sees them.
//!
//! Mechanisms: fexit on `handle_mm_fault` (sees the result, so also majors and retries), tp_btf
//! `page_fault_user`, or the classic `exceptions:page_fault_user` tracepoint.

use aya_ebpf::{
    EbpfContext as _,
    macros::{btf_tracepoint, fexit, tracepoint},
    programs::{BtfTracePointContext, FExitContext, TracePointContext},
};
use skillprof_common::{C_FAULTS, C_FAULTS_MAJOR, C_FAULTS_WRITE, EV_FAULT, EV_FAULT_FEXIT};

use crate::{add, counters, current_entry, emit, ids, is_host};

/// x86 page-fault error code: the access was a write.
const X86_PF_WRITE: u64 = 1 << 1;

/// `enum fault_flag` (stable since 5.x): a write; a fault from user mode.
const FAULT_FLAG_WRITE: u32 = 1 << 0;
const FAULT_FLAG_USER: u32 = 1 << 6;
/// `vm_fault_t` bits: a major fault; retry (the fault is handled again by a later call).
const VM_FAULT_MAJOR: u32 = 0x4;
const VM_FAULT_RETRY: u32 = 0x400;

#[inline(always)]
fn fault(tid: u32, address: u64, write: bool, major: bool, kind: u32, b: u64, c: u64) {
    let entry = current_entry();
    if let Some(counters) = counters(entry) {
        add(counters, C_FAULTS, 1);
        if write {
            add(counters, C_FAULTS_WRITE, 1);
        }
        if major {
            add(counters, C_FAULTS_MAJOR, 1);
        }
    }
    emit(entry, tid, kind, 0, address, b, c);
}

/// `exceptions:page_fault_user`: address @8, ip @16, error_code @24.
#[repr(C)]
struct PageFaultUser {
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
    let record = ctx.as_ptr().cast::<PageFaultUser>();
    // SAFETY: tracepoint programs read their record directly; the verifier bounds-checks it.
    let (address, error_code) = unsafe { ((*record).address, (*record).error_code) };
    fault(
        tid,
        address,
        error_code & X86_PF_WRITE != 0,
        false,
        EV_FAULT,
        error_code,
        0,
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
    fault(
        tid,
        address,
        error_code & X86_PF_WRITE != 0,
        false,
        EV_FAULT,
        error_code,
        0,
    );
    0
}

/// `vm_fault_t handle_mm_fault(vma, address, flags, regs)`: counts the faults from user mode
/// whose handling finished (not the calls that ask to be retried), which is what the
/// exception tracepoint counts; it also sees whether the fault was major.
#[fexit(function = "handle_mm_fault")]
pub fn fexit_handle_mm_fault(ctx: FExitContext) -> i32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let address: u64 = ctx.arg(1);
    let flags: u32 = ctx.arg(2);
    let ret: u32 = ctx.arg(4);
    if flags & FAULT_FLAG_USER == 0 || ret & VM_FAULT_RETRY != 0 {
        return 0;
    }
    fault(
        tid,
        address,
        flags & FAULT_FLAG_WRITE != 0,
        ret & VM_FAULT_MAJOR != 0,
        EV_FAULT_FEXIT,
        flags as u64,
        ret as u64,
    );
    0
}
