//! Where a thread's own counters sit in the kernel's `struct task_struct`, from the kernel's
//! BTF: the marker's uprobe reads them at each mark (faults and CPU per skill without a
//! program per fault). The layout differs by kernel and configuration, so it is looked up,
//! never assumed.

use anyhow::{Context as _, Result, bail};
use btf_rs::{Btf, Type};

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Byte offsets of `min_flt`, `maj_flt` and `se.sum_exec_runtime` in `struct task_struct`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskOffsets {
    pub min_flt: u32,
    pub maj_flt: u32,
    pub cpu_ns: u32,
}

impl TaskOffsets {
    pub fn read() -> Result<TaskOffsets> {
        let btf = Btf::from_file(VMLINUX_BTF).with_context(|| format!("reading {VMLINUX_BTF}"))?;
        let task = member_offsets(&btf, "task_struct", &["min_flt", "maj_flt", "se"])?;
        let se = member_offsets(&btf, "sched_entity", &["sum_exec_runtime"])?;
        Ok(TaskOffsets {
            min_flt: task[0],
            maj_flt: task[1],
            cpu_ns: task[2] + se[0],
        })
    }
}

/// The byte offset of each of `members` in the struct `name`.
fn member_offsets(btf: &Btf, name: &str, members: &[&str]) -> Result<Vec<u32>> {
    let types = btf
        .resolve_types_by_name(name)
        .with_context(|| format!("no {name} in the kernel's BTF"))?;
    let Some(Type::Struct(found)) = types.iter().find(|t| matches!(t, Type::Struct(_))) else {
        bail!("{name} is not a struct in the kernel's BTF");
    };
    members
        .iter()
        .map(|wanted| {
            let member = found
                .members
                .iter()
                .find(|member| btf.resolve_name(*member).is_ok_and(|n| n == *wanted))
                .with_context(|| format!("{name} has no member {wanted} in the kernel's BTF"))?;
            let bits = member.bit_offset();
            if bits % 8 != 0 {
                bail!("{name}.{wanted} is a bit field");
            }
            Ok(bits / 8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This kernel's layout: the counters are u64s in the task, each at its own place.
    #[test]
    fn the_running_kernel_s_task_struct_has_the_counters() {
        let offsets = TaskOffsets::read().unwrap();
        for offset in [offsets.min_flt, offsets.maj_flt, offsets.cpu_ns] {
            assert!(offset > 0 && offset % 8 == 0, "{offsets:?}");
        }
        assert_eq!(offsets.maj_flt, offsets.min_flt + 8, "{offsets:?}");
    }
}
