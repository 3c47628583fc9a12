//! The classic tracepoint programs read their records at fixed offsets. Before attaching one,
//! the offsets are checked against the kernel's own description of the record
//! (`/sys/kernel/tracing/events/<category>/<name>/format`): a kernel that moved a field makes
//! the attach fail with the reason, instead of counting garbage.

use std::fs;

use anyhow::{Context as _, Result, bail};

/// (field, offset, size) the programs read, per tracepoint.
fn expected(category: &str, name: &str) -> &'static [(&'static str, usize, usize)] {
    match (category, name) {
        ("syscalls", n) if n.starts_with("sys_enter_") => &[("__syscall_nr", 8, 4)],
        ("syscalls", n) if n.starts_with("sys_exit_") => &[("__syscall_nr", 8, 4), ("ret", 16, 8)],
        ("exceptions", "page_fault_user" | "page_fault_kernel") => {
            &[("address", 8, 8), ("error_code", 24, 8)]
        }
        ("vmscan", "mm_vmscan_kswapd_wake") => &[("nid", 8, 4), ("order", 16, 4)],
        ("vmscan", "mm_vmscan_kswapd_sleep") => &[("nid", 8, 4)],
        ("vmscan", "mm_vmscan_wakeup_kswapd") => {
            &[("nid", 8, 4), ("order", 16, 4), ("gfp_flags", 24, 8)]
        }
        ("vmscan", "mm_vmscan_direct_reclaim_end" | "mm_vmscan_memcg_reclaim_end") => {
            &[("nr_reclaimed", 8, 8)]
        }
        ("vmscan", "mm_vmscan_lru_shrink_inactive") => &[
            ("nid", 8, 4),
            ("nr_scanned", 16, 8),
            ("nr_reclaimed", 24, 8),
        ],
        ("vmscan", "mm_vmscan_lru_shrink_active") => &[
            ("nid", 8, 4),
            ("nr_taken", 16, 8),
            ("nr_deactivated", 32, 8),
        ],
        ("vmscan", "mm_shrink_slab_end") => &[("retval", 48, 4)],
        ("vmscan", "mm_vmscan_throttled") => {
            &[("nid", 8, 4), ("usec_delayed", 16, 4), ("reason", 20, 4)]
        }
        ("signal", "signal_deliver" | "signal_generate") => &[("sig", 8, 4)],
        ("kmem", "rss_stat") => &[
            ("mm_id", 8, 4),
            ("curr", 12, 4),
            ("member", 16, 4),
            ("size", 24, 8),
        ],
        _ => &[],
    }
}

/// Fails unless every field the program reads is where it expects it.
pub fn check(category: &str, name: &str) -> Result<()> {
    let fields = expected(category, name);
    if fields.is_empty() {
        return Ok(());
    }
    let path = format!("/sys/kernel/tracing/events/{category}/{name}/format");
    let format = fs::read_to_string(&path)
        .with_context(|| format!("reading {path} (is the tracepoint in this kernel?)"))?;
    if category == "syscalls" && name.starts_with("sys_enter_") && name != "sys_enter_exit_group" {
        // The arguments follow the number, 8-byte aligned: the first one at 16.
        if !format.contains("offset:16;\tsize:8;") {
            bail!("{path}: the first syscall argument is not at offset 16");
        }
    }
    for &(field, offset, size) in fields {
        let found = parse(&format).find(|(n, _, _)| *n == field);
        match found {
            Some((_, o, s)) if o == offset && s == size => {}
            Some((_, o, s)) => bail!(
                "{path}: field {field} is at offset {o} (size {s}); the program reads offset \
                 {offset} (size {size})"
            ),
            None => bail!("{path}: no field {field}"),
        }
    }
    Ok(())
}

/// (name, offset, size) of every `field:` line.
fn parse(format: &str) -> impl Iterator<Item = (&str, usize, usize)> {
    format.lines().filter_map(|line| {
        let line = line.trim();
        let decl = line.strip_prefix("field:")?.split(';').next()?;
        let name = decl.rsplit([' ', '*']).next()?;
        let name = name.split('[').next()?;
        let number = |key: &str| -> Option<usize> {
            line.split(';')
                .find_map(|part| part.trim().strip_prefix(key))
                .and_then(|n| n.parse().ok())
        };
        Some((name, number("offset:")?, number("size:")?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_format_lines() {
        let format = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
                      \tfield:struct shrinker * shr;\toffset:8;\tsize:8;\tsigned:0;\n\
                      \tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n";
        let fields: Vec<_> = parse(format).collect();
        assert_eq!(
            fields,
            [("common_type", 0, 2), ("shr", 8, 8), ("args", 16, 48)]
        );
    }
}
