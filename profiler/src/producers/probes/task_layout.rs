//! Where the kernel keeps a task's FS base, thread id, process id and its waits for a CPU:
//! offsets in its `struct task_struct` (and the run queue's), read from the running kernel's
//! BTF. The programs add the FS base's to the current task's address to find the thread
//! pointer, and from there the host's mark slot in the thread's TLS; the scheduler's
//! programs read the ids and the waits of tasks other than the current one. The layout differs between kernels and configurations, so it is read, never
//! assumed.

use std::sync::OnceLock;

use anyhow::{Context as _, Result, bail};
use btf_rs::{Btf, BtfType, Type};

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// The byte offset of `thread.fsbase` in `struct task_struct` (x86_64), read once.
pub fn fsbase_offset() -> Result<u64, String> {
    static OFFSET: OnceLock<Result<u64, String>> = OnceLock::new();
    OFFSET
        .get_or_init(|| read().map_err(|e| format!("{e:#}")))
        .clone()
}

/// The byte offsets of `pid` (the thread id) and `tgid` (the process id) in
/// `struct task_struct`, read once.
pub fn ids_offsets() -> Result<(u64, u64), String> {
    static OFFSETS: OnceLock<Result<(u64, u64), String>> = OnceLock::new();
    OFFSETS
        .get_or_init(|| {
            let read = || -> Result<(u64, u64)> {
                let (btf, task) = task_struct()?;
                Ok((
                    member(&btf, &task, "pid")?.0,
                    member(&btf, &task, "tgid")?.0,
                ))
            };
            read().map_err(|e| format!("{e:#}"))
        })
        .clone()
}

/// Where a task's wait for a CPU is in the scheduler's own accounting, and the clock it is
/// measured by: offsets in `struct task_struct` of `sched_info.last_queued`,
/// `sched_info.run_delay` and `se.cfs_rq`, of `rq` in `struct cfs_rq`, and of `clock` in
/// `struct rq`. Read once; an error where the kernel has no CONFIG_SCHED_INFO or no
/// CONFIG_FAIR_GROUP_SCHED (no `se.cfs_rq`). The default, all 0, tells the programs the
/// layout is unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedInfo {
    pub last_queued: u64,
    pub run_delay: u64,
    pub cfs_rq: u64,
    pub cfs_rq_rq: u64,
    pub rq_clock: u64,
}

pub fn sched_info() -> Result<SchedInfo, String> {
    static LAYOUT: OnceLock<Result<SchedInfo, String>> = OnceLock::new();
    LAYOUT
        .get_or_init(|| {
            let read = || -> Result<SchedInfo> {
                let (btf, task) = task_struct()?;
                let at = |path: &str| path_offset(&btf, &task, path);
                Ok(SchedInfo {
                    last_queued: at("sched_info.last_queued")?,
                    run_delay: at("sched_info.run_delay")?,
                    cfs_rq: at("se.cfs_rq")?,
                    cfs_rq_rq: path_offset(&btf, &named_struct(&btf, "cfs_rq")?, "rq")?,
                    rq_clock: path_offset(&btf, &named_struct(&btf, "rq")?, "clock")?,
                })
            };
            read().map_err(|e| format!("{e:#}"))
        })
        .clone()
}

/// The byte offset of `path` (members joined by dots, through nested structs) in `of`.
fn path_offset(btf: &Btf, of: &btf_rs::Struct, path: &str) -> Result<u64> {
    let mut inside = of.clone();
    let mut offset = 0;
    let mut names = path.split('.').peekable();
    while let Some(name) = names.next() {
        let (at, found) = member(btf, &inside, name)?;
        offset += at;
        if names.peek().is_some() {
            let Type::Struct(next) = found else {
                bail!("{name} in {path} is not a struct");
            };
            inside = next;
        }
    }
    Ok(offset)
}

fn task_struct() -> Result<(Btf, btf_rs::Struct)> {
    let btf =
        Btf::from_file(VMLINUX).with_context(|| format!("reading the kernel's BTF ({VMLINUX})"))?;
    let task = named_struct(&btf, "task_struct")?;
    Ok((btf, task))
}

fn read() -> Result<u64> {
    let (btf, task) = task_struct()?;
    path_offset(&btf, &task, "thread.fsbase")
}

fn named_struct(btf: &Btf, name: &str) -> Result<btf_rs::Struct> {
    btf.resolve_types_by_name(name)
        .with_context(|| format!("the kernel's BTF has no {name}"))?
        .into_iter()
        .find_map(|found| match found {
            Type::Struct(s) if !s.members.is_empty() => Some(s),
            _ => None,
        })
        .with_context(|| format!("the kernel's BTF has no struct {name}"))
}

/// A struct member's byte offset and its type (through typedefs and qualifiers).
fn member(btf: &Btf, of: &btf_rs::Struct, name: &str) -> Result<(u64, Type)> {
    for member in &of.members {
        if btf.resolve_name(member).ok().as_deref() != Some(name) {
            continue;
        }
        let mut found = btf.resolve_chained_type(member)?;
        while let Type::Typedef(_) | Type::Volatile(_) | Type::Const(_) = found {
            let inner: &dyn BtfType = found.as_btf_type().context("a qualifier without a type")?;
            found = btf.resolve_chained_type(inner)?;
        }
        if member.bit_offset() % 8 != 0 {
            bail!("{name} is a bitfield");
        }
        return Ok((u64::from(member.bit_offset() / 8), found));
    }
    bail!("no member {name}")
}

#[cfg(test)]
mod tests {
    /// This kernel's layout: fsbase lies inside task_struct, after its first field, 8-aligned.
    #[test]
    fn finds_the_fs_base_in_this_kernels_task_struct() {
        let offset = super::fsbase_offset().unwrap();
        assert!(
            offset > 0 && offset < 64 * 1024 && offset.is_multiple_of(8),
            "{offset}"
        );
    }

    /// This kernel (CONFIG_SCHED_INFO, CONFIG_FAIR_GROUP_SCHED) has them all: run_delay
    /// follows last_queued's neighbours in `struct sched_info`, 8-aligned like every u64.
    #[test]
    fn finds_the_scheduler_accounting_of_a_wait_for_a_cpu() {
        let layout = super::sched_info().unwrap();
        for offset in [
            layout.last_queued,
            layout.run_delay,
            layout.cfs_rq,
            layout.cfs_rq_rq,
            layout.rq_clock,
        ] {
            assert!(offset.is_multiple_of(8), "{layout:?}");
        }
        assert!(
            layout.last_queued.abs_diff(layout.run_delay) < 64,
            "{layout:?}"
        );
    }

    /// The ids are two 4-byte fields, the process's right after the thread's.
    #[test]
    fn finds_the_thread_and_process_ids_in_this_kernels_task_struct() {
        let (pid, tgid) = super::ids_offsets().unwrap();
        assert_eq!(tgid, pid + 4, "pid at {pid}, tgid at {tgid}");
    }
}
