//! Where the kernel keeps a task's FS base, thread id and process id: offsets in its
//! `struct task_struct`, read from the running kernel's BTF. The programs add the FS base's
//! to the current task's address to find the thread pointer, and from there the host's mark
//! slot in the thread's TLS; the scheduler's programs read the ids of tasks other than the
//! current one. The layout differs between kernels and configurations, so it is read, never
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

fn task_struct() -> Result<(Btf, btf_rs::Struct)> {
    let btf =
        Btf::from_file(VMLINUX).with_context(|| format!("reading the kernel's BTF ({VMLINUX})"))?;
    let task = named_struct(&btf, "task_struct")?;
    Ok((btf, task))
}

fn read() -> Result<u64> {
    let (btf, task) = task_struct()?;
    let (thread_at, thread) = member(&btf, &task, "thread")?;
    let Type::Struct(thread) = thread else {
        bail!("task_struct.thread is not a struct");
    };
    let (fsbase_at, _) = member(&btf, &thread, "fsbase")?;
    Ok(thread_at + fsbase_at)
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

    /// The ids are two 4-byte fields, the process's right after the thread's.
    #[test]
    fn finds_the_thread_and_process_ids_in_this_kernels_task_struct() {
        let (pid, tgid) = super::ids_offsets().unwrap();
        assert_eq!(tgid, pid + 4, "pid at {pid}, tgid at {tgid}");
    }
}
