//! /proc/interrupts: the TLB shootdowns, the interrupts one CPU sends the others when a
//! process's mappings change (munmap, mprotect, madvise(DONTNEED)) while its threads may have
//! them cached: what an allocator that maps and unmaps per instance costs the other CPUs.

use std::fs;
use std::path::Path;

/// TLB shootdown interrupts so far, summed over the CPUs (the `TLB:` line); `None` where the
/// kernel has no such line (not x86) or the file cannot be read.
pub fn tlb_shootdowns(proc_root: &Path) -> Option<u64> {
    let text = fs::read_to_string(proc_root.join("interrupts")).ok()?;
    parse_tlb(&text)
}

fn parse_tlb(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|line| line.trim_start().starts_with("TLB:"))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .map_while(|field| field.parse::<u64>().ok())
            .sum(),
    )
}

#[cfg(test)]
mod tests {
    use super::parse_tlb;

    #[test]
    fn sums_the_tlb_line_over_the_cpus_and_stops_at_its_name() {
        let text = "           CPU0       CPU1\n  0:         38          0   IO-APIC   2-edge      timer\n\
                    TLB:       1200        34   TLB shootdowns\nERR:          0\n";
        assert_eq!(parse_tlb(text), Some(1234));
        assert_eq!(parse_tlb("  0:  1  2  IO-APIC\n"), None);
    }
}
