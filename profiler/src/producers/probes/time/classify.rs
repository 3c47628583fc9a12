//! What a stack's code was doing, and why a thread waited, read from its named frames: the
//! groups explain.md speaks in ("61% of the host's CPU compiling (register allocation
//! 22%), 18% in the kernel zeroing pages in faults"). Frames are matched by the names
//! kallsyms and the host's symbols give them; a function renamed in another kernel or
//! wasmtime falls into the group around it (kernel, host), never into a wrong one.

use crate::record::time::{Frame, FrameKind, TimeState, Wait, Work};

/// What the code of a CPU sample was doing, and for a compile, which part of it; `frames`
/// outermost first (the user stack, then the kernel's).
pub fn work_of(frames: &[&Frame]) -> (Work, Option<&'static str>) {
    let kernel: Vec<&str> = frames
        .iter()
        .filter(|f| f.kind == FrameKind::Kernel)
        .map(|f| f.name.as_str())
        .collect();
    if !kernel.is_empty() {
        return (kernel_work(&kernel), None);
    }
    let user: Vec<&Frame> = frames.to_vec();
    if let Some(part) = compile_part(&user) {
        return (Work::Compile, Some(part));
    }
    let Some(innermost) = user.last() else {
        return (Work::Host, None);
    };
    if innermost.kind == FrameKind::Wasm {
        return (Work::Wasm, None);
    }
    let name = innermost.name.as_str();
    if is_malloc(name) {
        (Work::Malloc, None)
    } else if is_memcpy(name) {
        (Work::Memcpy, None)
    } else if is_serving(name) {
        (Work::Serving, None)
    } else if user.iter().any(|f| is_runtime(&f.name)) {
        (Work::Runtime, None)
    } else {
        (Work::Host, None)
    }
}

/// wasmtime's own runtime (its compiler's crates are a compile's, found before).
fn is_runtime(name: &str) -> bool {
    let name = name.trim_start_matches('<');
    [
        "wasmtime::",
        "wasmtime_internal_",
        "wasmtime_wasi",
        "wasmtime_environ",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

/// A sample in the kernel, by its innermost recognisable frames.
fn kernel_work(kernel: &[&str]) -> Work {
    let any = |pred: &dyn Fn(&str) -> bool| kernel.iter().any(|name| pred(name));
    let faulting = any(&|n| {
        matches!(
            n,
            "exc_page_fault" | "asm_exc_page_fault" | "do_user_addr_fault" | "handle_mm_fault"
        )
    });
    if faulting && any(&|n| n.starts_with("clear_page") || n.starts_with("clear_user")) {
        return Work::PageZeroing;
    }
    if any(&|n| {
        n.starts_with("flush_tlb")
            || n.starts_with("native_flush_tlb")
            || n.starts_with("smp_call_function")
            || n == "flush_smp_call_function_queue"
    }) {
        return Work::TlbFlush;
    }
    if faulting {
        return Work::PageFaults;
    }
    if any(&|n| {
        matches!(
            n,
            "__x64_sys_mmap"
                | "__x64_sys_munmap"
                | "__x64_sys_mprotect"
                | "__x64_sys_madvise"
                | "__x64_sys_mremap"
                | "__x64_sys_brk"
                | "__x64_sys_process_madvise"
                | "do_mmap"
                | "do_vmi_munmap"
                | "vm_mmap_pgoff"
                | "do_mprotect_pkey"
                | "do_madvise"
        )
    }) {
        return Work::MemoryCalls;
    }
    if any(&|n| {
        n.starts_with("tcp_")
            || n.starts_with("sock_")
            || n.starts_with("inet_")
            || n.starts_with("__sys_send")
            || n.starts_with("__sys_recv")
            || n.starts_with("ep_")
            || n.starts_with("do_epoll")
            || n.starts_with("__x64_sys_epoll")
            || n.starts_with("futex")
    }) {
        return Work::Serving;
    }
    Work::Kernel
}

/// Which part of a compile a user stack is in, if it is in one: the innermost frame of a
/// compiler's crate says which.
fn compile_part(user: &[&Frame]) -> Option<&'static str> {
    let mut part = None;
    for frame in user.iter().filter(|f| f.kind == FrameKind::Native) {
        let name = frame.name.as_str();
        let this = if name.contains("regalloc2::") {
            "register allocation"
        } else if name.contains("cranelift_codegen::egraph")
            || name.contains("cranelift_codegen::opts")
        {
            "optimisation (e-graph)"
        } else if name.contains("cranelift_codegen::isa") && name.contains("lower")
            || name.contains("cranelift_codegen::machinst::lower")
            || name.contains("isle")
        {
            "instruction selection"
        } else if name.contains("cranelift_codegen::machinst::buffer")
            || name.contains("cranelift_codegen::machinst::vcode")
            || name.contains("emit")
                && (name.contains("cranelift_codegen") || name.contains("cranelift"))
        {
            "code emission"
        } else if name.contains("cranelift_frontend")
            || name.contains("translate")
                && (name.contains("cranelift") || name.contains("wasmtime_environ"))
        {
            "wasm translation"
        } else if name.contains("wasmparser::validator") {
            "validation"
        } else if name.contains("cranelift") || name.contains("wasmtime_environ::compile") {
            part.unwrap_or("other compile work")
        } else {
            continue;
        };
        part = Some(this);
    }
    part
}

fn is_malloc(name: &str) -> bool {
    let name = name.trim_start_matches("__libc_");
    matches!(
        name,
        "malloc"
            | "free"
            | "realloc"
            | "calloc"
            | "cfree"
            | "_int_malloc"
            | "_int_free"
            | "_int_realloc"
            | "malloc_consolidate"
            | "sysmalloc"
            | "unlink_chunk"
            | "tcache_get"
            | "tcache_put"
            | "_int_free_merge_chunk"
            | "_int_free_create_chunk"
            | "_int_free_maybe_consolidate"
    ) || name.starts_with("je_")
        || name.starts_with("_rjem_")
}

fn is_memcpy(name: &str) -> bool {
    [
        "memcpy",
        "memmove",
        "memset",
        "__memcpy",
        "__memmove",
        "__memset",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

fn is_serving(name: &str) -> bool {
    [
        "hyper::",
        "tokio::",
        "mio::",
        "h2::",
        "httparse::",
        "std::net::",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

/// Why a thread in `state` was off its CPU, from its kernel stack as it left (outermost
/// first); `None` where nothing says (no stack walked, and not runnable).
pub fn wait_of(state: TimeState, kernel: &[&Frame]) -> Option<Wait> {
    if state == TimeState::Runnable {
        return Some(Wait::Cpu);
    }
    if kernel.is_empty() {
        return None;
    }
    let any = |pred: &dyn Fn(&str) -> bool| kernel.iter().any(|f| pred(&f.name));
    // A stop is taken on the way back to user space, outside any other wait.
    if any(&|n| n == "do_signal_stop" || n == "ptrace_stop") {
        return Some(Wait::Stopped);
    }
    let rwsem = any(&|n| n.starts_with("rwsem_down_") || n == "down_read" || n == "down_write");
    let takes_mm_lock = |n: &str| {
        n.starts_with("lock_mm_and_find_vma")
            || n.starts_with("mmap_read_lock")
            || n.starts_with("mmap_write_lock")
            || matches!(
                n,
                "vm_mmap_pgoff"
                    | "__vm_munmap"
                    | "do_mprotect_pkey"
                    | "do_madvise"
                    | "__x64_sys_mremap"
                    | "__x64_sys_brk"
            )
    };
    let on_mm = any(&takes_mm_lock);
    // A sleeping task's stack walked from outside (`--off-cpu waits`) leaves out the
    // scheduler's and the locks' own functions (the kernel's `__sched` section, rwsem's slow
    // paths with them): a task blocked right in a function that takes mmap_lock waits for it.
    let asleep_taking_mm_lock =
        state == TimeState::Blocked && kernel.last().is_some_and(|f| takes_mm_lock(&f.name));
    Some(if (rwsem && on_mm) || asleep_taking_mm_lock {
        Wait::MmapLock
    } else if any(&|n| {
        matches!(
            n,
            "exc_page_fault" | "asm_exc_page_fault" | "do_user_addr_fault" | "handle_mm_fault"
        )
    }) {
        Wait::PageFault
    } else if any(&|n| n.starts_with("futex")) {
        Wait::Futex
    } else if any(&|n| {
        n.starts_with("ep_poll")
            || n.starts_with("do_epoll")
            || n == "do_sys_poll"
            || n == "do_select"
    }) {
        Wait::Epoll
    } else if any(&|n| {
        n.starts_with("tcp_")
            || n.starts_with("inet_")
            || n.starts_with("sock_")
            || n.starts_with("unix_stream")
            || n.starts_with("__sys_accept")
    }) {
        Wait::Network
    } else if any(&|n| n.contains("nanosleep") || n == "schedule_hrtimeout_range") {
        Wait::Sleep
    } else if any(&|n| {
        n == "io_schedule"
            || n.starts_with("folio_wait")
            || n.starts_with("wait_on_page")
            || n.starts_with("pipe_")
            || n.starts_with("blk_")
    }) {
        Wait::Io
    } else {
        Wait::Other
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[(&str, FrameKind)]) -> Vec<Frame> {
        names
            .iter()
            .map(|&(name, kind)| Frame {
                name: name.to_owned(),
                kind,
            })
            .collect()
    }

    fn work(names: &[(&str, FrameKind)]) -> (Work, Option<&'static str>) {
        let frames = frames(names);
        work_of(&frames.iter().collect::<Vec<_>>())
    }

    use FrameKind::{Kernel, Native, Wasm};

    #[test]
    fn a_fault_that_zeroes_a_page_is_page_zeroing_whatever_the_user_code() {
        assert_eq!(
            work(&[
                ("sample_rs1!sample_rs::resident_chunk", Wasm),
                ("asm_exc_page_fault", Kernel),
                ("exc_page_fault", Kernel),
                ("handle_mm_fault", Kernel),
                ("clear_page_erms", Kernel),
            ]),
            (Work::PageZeroing, None)
        );
        assert_eq!(
            work(&[
                ("asm_exc_page_fault", Kernel),
                ("handle_mm_fault", Kernel),
                ("_raw_spin_lock", Kernel)
            ])
            .0,
            Work::PageFaults
        );
    }

    #[test]
    fn a_compile_is_named_by_its_innermost_compiler_part() {
        assert_eq!(
            work(&[
                (
                    "rayon_core::registry::WorkerThread::wait_until_cold",
                    Native
                ),
                (
                    "wasmtime_internal_cranelift::compiler::Compiler::compile_function",
                    Native
                ),
                ("cranelift_codegen::context::Context::compile", Native),
                ("regalloc2::ion::process::Env::process_bundles", Native),
                ("memcpy", Native),
            ]),
            (Work::Compile, Some("register allocation"))
        );
    }

    #[test]
    fn wasm_innermost_is_the_skills_code_and_malloc_innermost_is_the_allocator() {
        assert_eq!(
            work(&[
                ("tokio::runtime::task::raw::poll", Native),
                ("sample_rs1!run", Wasm)
            ])
            .0,
            Work::Wasm
        );
        assert_eq!(
            work(&[("skillhost::api::execute", Native), ("_int_malloc", Native)]).0,
            Work::Malloc
        );
    }

    #[test]
    fn wasmtime_below_the_host_code_is_its_runtime() {
        assert_eq!(
            work(&[
                ("skillhost::invoke::Invocation::run", Native),
                (
                    "<wasmtime::runtime::component::instance::InstancePre<…>>::instantiate_async",
                    Native
                ),
                ("skillhost::request::RequestState::new", Native),
            ])
            .0,
            Work::Runtime
        );
        assert_eq!(work(&[("skillhost::api::route", Native)]).0, Work::Host);
    }

    #[test]
    fn a_wait_is_named_by_its_kernel_stack() {
        let wait = |names: &[&str]| {
            let frames = frames(&names.iter().map(|n| (*n, Kernel)).collect::<Vec<_>>());
            wait_of(TimeState::Sleeping, &frames.iter().collect::<Vec<_>>())
        };
        assert_eq!(
            wait(&["do_syscall_64", "__x64_sys_futex", "futex_wait", "schedule"]),
            Some(Wait::Futex)
        );
        assert_eq!(
            wait(&[
                "do_syscall_64",
                "do_epoll_wait",
                "ep_poll",
                "schedule_hrtimeout_range"
            ]),
            Some(Wait::Epoll)
        );
        assert_eq!(
            wait(&[
                "exc_page_fault",
                "lock_mm_and_find_vma",
                "rwsem_down_read_slowpath",
                "schedule"
            ]),
            Some(Wait::MmapLock)
        );
        assert_eq!(
            wait(&[
                "do_syscall_64",
                "__x64_sys_clock_nanosleep",
                "do_nanosleep",
                "schedule"
            ]),
            Some(Wait::Sleep)
        );
        // A stack walked from outside a sleeping task ends before the scheduler's and the
        // rwsem's functions: blocked right where mmap_lock is taken.
        let blocked = |names: &[&str]| {
            let frames = frames(&names.iter().map(|n| (*n, Kernel)).collect::<Vec<_>>());
            wait_of(TimeState::Blocked, &frames.iter().collect::<Vec<_>>())
        };
        for innermost in ["do_mprotect_pkey", "vm_mmap_pgoff", "__vm_munmap"] {
            assert_eq!(
                blocked(&["do_syscall_64", "__x64_sys_x", innermost]),
                Some(Wait::MmapLock)
            );
        }
        assert_eq!(
            blocked(&[
                "asm_exc_page_fault",
                "exc_page_fault",
                "lock_mm_and_find_vma"
            ]),
            Some(Wait::MmapLock)
        );
        // SIGSTOP wakes a thread out of its futex and stops it on its way back to user space.
        assert_eq!(
            wait(&[
                "do_syscall_64",
                "syscall_exit_to_user_mode",
                "arch_do_signal_or_restart",
                "get_signal",
                "do_signal_stop",
                "schedule"
            ]),
            Some(Wait::Stopped)
        );
        assert_eq!(wait(&[]), None);
        assert_eq!(wait_of(TimeState::Runnable, &[]), Some(Wait::Cpu));
    }
}
