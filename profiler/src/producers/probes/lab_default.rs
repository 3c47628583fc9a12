//! The probe mode of a lab run no flag decides, by what the kernel allows.
//!
//! Any syscall tracepoint, once attached, sends every syscall of every task on the machine
//! down the kernel's slow path (`syscall_regfunc` sets the work flag on all of them; mainline
//! has no per-task variant): +66 to +128 ns a syscall here, whatever the program does. Where
//! the memory calls' programs attach as function probes (fexit or kretprobes on the six
//! syscall functions), no other syscall pays, and a lab run traces every call (`calls`).
//! Where only tracepoints attach, the tax alone put a lab run of cmds/overhead.cmds above 3%
//! of the host's CPU (docs/findings/2026-12-06-a-lab-run-without-the-fault-program.md), so
//! the default is `host-only` and `--probes calls` asks for the calls anyway.

use crate::record::probes::{Mechanism, Outcome, Probe, ProbeMode};

use super::object;
use super::plan::{Allowed, Attacher, PROBES};

/// The mode of a lab run no flag decides, and why, in words for the run's head.
pub fn choose() -> (ProbeMode, String) {
    match untaxed_calls() {
        Ok(mechanism) => (
            ProbeMode::Calls,
            format!(
                "the default where the memory calls' programs attach as function probes \
                 ({mechanism} here), which no other syscall pays for"
            ),
        ),
        Err(refused) => (
            ProbeMode::HostOnly,
            format!(
                "the default on this kernel, which refuses function probes on the memory \
                 calls ({refused}): their tracepoints would send every syscall of every \
                 process down the kernel's slow path, +66 to +128 ns each; --probes calls \
                 traces them anyway"
            ),
        ),
    }
}

/// The mechanism the memory calls' programs attach by without a syscall tracepoint, or each
/// refusal. Tried for real on a throwaway copy of the object (dropping it detaches), since a
/// platform's policy can refuse a program the verifier passed.
fn untaxed_calls() -> Result<Mechanism, String> {
    let settings = object::Settings {
        tgid: std::process::id(),
        max_entries: 1,
        stream_events: false,
        mark_slots: None,
        attribute_calls: false,
        time: None,
        syscall_latency: false,
        stacks: false,
    };
    let mut ebpf = object::load(&settings).map_err(|e| format!("{e:#}"))?;
    let syscalls = PROBES
        .iter()
        .find(|plan| plan.probe == Probe::Syscalls)
        .expect("the syscalls probe has a plan");
    let untaxed = Allowed::Only(vec![Mechanism::Fentry, Mechanism::Kprobe]);
    let status = Attacher::default().attach(&mut ebpf, syscalls, &untaxed);
    match status.attached {
        true => Ok(status.mechanism),
        false => Err(status
            .attempts
            .iter()
            .filter(|attempt| attempt.outcome == Outcome::Failed)
            // The kernel's reason, without the verifier's log the loader appends.
            .map(|attempt| {
                let reason = attempt.detail.split(". Verifier output").next();
                format!("{}: {}", attempt.mechanism, reason.unwrap_or_default())
            })
            .collect::<Vec<_>>()
            .join("; ")),
    }
}
