//! One entry in words.
//!
//! > add_py: 17,637 ms, +318 MiB RSS (peak 330 MiB); 1 execution: 0.9 s waiting for the host
//! > to list the skill, 2 ms instantiate + 3 ms call in the host, the other 16.6 s compiling
//! > and on the wire (compile dominated); 1,920 mmap (9.8 GiB virtual), 81,211 page faults
//! > (97% write); no reclaim.

use crate::record::Row;
use crate::words::{bytes, change, count, many, ms};

use super::{Cells, stop};

pub fn paragraph(row: &Row) -> String {
    let cells = Cells::new(row);
    let cmd = cells.text("cmd").unwrap_or("?");
    if cmd == "stop" {
        return stop::sentence(&cells);
    }
    let mut parts = vec![memory(&cells)];
    parts.extend(time(&cells));
    parts.extend(cpu(&cells));
    parts.extend(requests_failed(&cells));
    parts.extend(reserved(&cells));
    parts.extend(address_space(&cells));
    parts.extend(faults(&cells));
    parts.push(reclaim(&cells));
    parts.extend(pressure(&cells));
    format!("{cmd}: {}.", parts.join("; "))
}

fn memory(cells: &Cells) -> String {
    let took = cells
        .num("took_ms")
        .map_or("?".to_owned(), |t| format!("{} ms", count(t)));
    let rss = cells
        .num("rss_diff_kb")
        .map_or("RSS unknown".to_owned(), |kb| {
            format!("{} RSS", change(kb * 1024.0))
        });
    match (cells.num("rss_peak_kb"), cells.num("rss_after_kb")) {
        (Some(peak), Some(after)) if peak > after * 1.05 => {
            format!("{took}, {rss} (peak {} on the way)", bytes(peak * 1024.0))
        }
        _ => format!("{took}, {rss}"),
    }
}

/// Where the wall time went: waiting for the host to list skills, the host's own
/// instantiate and call time, and what is left (compilation, queueing, HTTP).
fn time(cells: &Cells) -> Option<String> {
    let executions = cells.some("executions")?;
    let took = cells.num("took_ms")?;
    let mut text = format!(
        "{} execution{}",
        count(executions),
        if executions == 1.0 { "" } else { "s" }
    );
    if executions > 1.0
        && let (Some(p50), Some(p99)) = (cells.num("execute_p50_ms"), cells.num("execute_p99_ms"))
    {
        text.push_str(&format!(" (p50 {}, p99 {})", ms(p50), ms(p99)));
    }
    let listing = cells.num("listing_ms").unwrap_or(0.0);
    let (Some(instantiate), Some(call)) =
        (cells.num("host_instantiate_ms"), cells.num("host_call_ms"))
    else {
        return Some(text);
    };
    let mut split = Vec::new();
    if listing > 0.0 {
        split.push(format!(
            "{} waiting for the host to list skills",
            ms(listing)
        ));
    }
    split.push(format!(
        "{} instantiate + {} call in the host",
        ms(instantiate),
        ms(call)
    ));
    // Concurrent executions overlap, so their summed host time can exceed the wall time:
    // only a sequential remainder means anything, and a few ms of it are the HTTP round trips.
    let rest = took - listing - instantiate - call;
    if rest >= 100.0 && rest > took * 0.5 {
        split.push(format!(
            "the other {} compiling and on the wire (compile dominated)",
            ms(rest)
        ));
    }
    Some(format!("{text}: {}", split.join(", ")))
}

/// Whether the host was on a CPU for its wall time, and how busy the machine was: a slow
/// entry without memory evidence is often one that waited for a CPU. CPU time is counted in
/// 10 ms ticks, so only entries of 100 ms and more are worth saying it of.
fn cpu(cells: &Cells) -> Option<String> {
    let took = cells.num("took_ms").filter(|took| *took >= 100.0)?;
    let host = cells.num("host_cpu_ms")?;
    let mut text = format!(
        "the host used {} of CPU ({:.0}% of one CPU)",
        ms(host),
        100.0 * host / took
    );
    if let Some(busy) = cells.num("cpu_busy_pct") {
        text.push_str(&format!(", the machine's CPUs were {busy:.0}% busy"));
        if let Some(steal) = cells.num("cpu_steal_pct").filter(|steal| *steal >= 1.0) {
            text.push_str(&format!(" and {steal:.0}% stolen by the hypervisor"));
        }
    }
    Some(text)
}

fn requests_failed(cells: &Cells) -> Option<String> {
    let errors = cells.some("request_errors")?;
    let first = cells.text("first_error").unwrap_or("");
    Some(format!(
        "{} request(s) FAILED, first: {first}",
        count(errors)
    ))
}

/// Address space the host holds without using it: the pooling allocator reserves every slot
/// up front (terabytes of VMS, no RSS); on demand, each compiled skill reserves its own.
/// Said when it is large or moved by a GiB or more.
fn reserved(cells: &Cells) -> Option<String> {
    const GIB: f64 = (1u64 << 30) as f64;
    let vms = cells.some("vms_after_kb")? * 1024.0;
    let moved = cells.num("vms_diff_kb").unwrap_or(0.0) * 1024.0;
    (vms >= 1024.0 * GIB || moved.abs() >= GIB).then(|| {
        format!(
            "{} of address space reserved ({} in the entry)",
            bytes(vms),
            change(moved)
        )
    })
}

/// mmap, munmap, madvise and mprotect, with their bytes: how the address space moved.
fn address_space(cells: &Cells) -> Option<String> {
    let mut calls = Vec::new();
    for (syscall, what) in [
        ("mmap", "virtual"),
        ("munmap", "unmapped"),
        ("mremap", "remapped"),
    ] {
        if let Some(n) = cells.some(&format!("{syscall}_calls")) {
            let size = cells
                .num(&format!("{syscall}_bytes"))
                .map_or(String::new(), |b| format!(" ({} {what})", bytes(b)));
            calls.push(format!("{} {syscall}{size}", count(n)));
        }
    }
    if let Some(n) = cells.some("madv_dontneed_calls") {
        let size = cells
            .num("madv_dontneed_bytes")
            .map_or(String::new(), |b| format!(", {}", bytes(b)));
        // The pooling allocator decommits a slot this way when an instance ends, for reuse.
        calls.push(format!("{} madvise(DONTNEED){size} given back", count(n)));
    }
    if let Some(n) = cells.some("mprotect_calls") {
        calls.push(format!("{} mprotect", count(n)));
    }
    (!calls.is_empty()).then(|| calls.join(", "))
}

/// Every fault the kernel counts in the host's minflt: user mode and, where the probes saw
/// them, kernel mode on its user addresses.
fn faults(cells: &Cells) -> Option<String> {
    let user = cells.some("faults_user")?;
    let kernel = cells.some("faults_kernel");
    let faults = user + kernel.unwrap_or(0.0);
    let mut text = format!("{} page faults", many(faults));
    if let Some(writes) = cells.num("faults_user_write") {
        text.push_str(&format!(" ({:.0}% write", 100.0 * writes / user));
        if let Some(kernel) = kernel {
            text.push_str(&format!(", {} in kernel mode", count(kernel)));
        }
        if let Some(major) = cells.some("majflt_perf") {
            text.push_str(&format!(", {} major", count(major)));
        }
        text.push(')');
    }
    if let Some(executions) = cells.some("executions") {
        text.push_str(&format!(", {} per execution", count(faults / executions)));
    }
    Some(text)
}

/// Reclaim, stalls and how close free memory came to the watermarks; "no reclaim" when the
/// probes saw none.
fn reclaim(cells: &Cells) -> String {
    let mut seen = Vec::new();
    if let Some(n) = cells.some("direct_reclaim_count") {
        let time = cells
            .num("direct_reclaim_ms")
            .map_or(String::new(), |t| format!(", {}", ms(t)));
        let pages = cells
            .num("direct_reclaim_pages")
            .map_or(String::new(), |p| format!(", {} pages", count(p)));
        seen.push(format!("direct reclaim {}×{time}{pages}", count(n)));
    }
    if let Some(n) = cells.some("memcg_reclaim_count") {
        seen.push(format!("memcg reclaim {}×", count(n)));
    }
    if let Some(n) = cells.some("kswapd_wakes") {
        let awake = cells
            .num("kswapd_awake_ms")
            .map_or(String::new(), |t| format!(", awake {}", ms(t)));
        seen.push(format!("kswapd woke {}×{awake}", count(n)));
    }
    // Over every reclaim context; lru_host_* is a subset of these.
    let lru = |what: &str| -> f64 {
        ["kswapd", "direct", "memcg", "other"]
            .iter()
            .filter_map(|ctx| cells.num(&format!("lru_{ctx}_{what}")))
            .sum()
    };
    let (scanned, reclaimed) = (lru("scanned"), lru("reclaimed"));
    if scanned > 0.0 {
        seen.push(format!(
            "LRU {} pages scanned, {} reclaimed",
            count(scanned),
            count(reclaimed)
        ));
    }
    // PSI counts in µs; stalls under 0.1 ms would read "0.0 ms" and mean nothing here.
    if let Some(us) = cells.num("psi_some_us").filter(|us| *us >= 100.0) {
        seen.push(format!("tasks stalled on memory for {}", ms(us / 1000.0)));
    }
    if let Some(band) = cells
        .text("zones_lowest_band")
        .filter(|band| *band != "baseline")
    {
        seen.push(format!("free memory fell into the {band} band"));
    }
    if seen.is_empty() {
        let probed = cells.num("direct_reclaim_count").is_some();
        return if probed {
            "no reclaim".to_owned()
        } else {
            "reclaim not probed".to_owned()
        };
    }
    seen.join(", ")
}

/// What the balloon held during the entry, when one was: the band it aimed at, how much
/// memory it took, and how often free memory really was in the band.
fn pressure(cells: &Cells) -> Option<String> {
    let band = cells.text("pressure_band")?;
    let mut text = format!("under pressure: a balloon aimed at the {band} band");
    if let Some(kb) = cells.num("pressure_balloon_kb") {
        text.push_str(&format!(" holding {}", bytes(kb * 1024.0)));
    }
    if let Some(pct) = cells.num("pressure_in_band_pct") {
        text.push_str(&format!(", free memory in the band {pct:.0}% of the time"));
    }
    if let Some(why) = cells.text("pressure_aborted") {
        text.push_str(&format!(" (ABORTED: {why})"));
    } else if let Some(why) = cells.text("pressure_eased") {
        text.push_str(&format!(" (eased: {why})"));
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[(&str, &str)]) -> Row {
        let mut row = Row::default();
        for (name, value) in cells {
            row.text(*name, *value);
        }
        row
    }

    #[test]
    fn an_add_reads_as_memory_time_address_space_and_faults() {
        let text = paragraph(&row(&[
            ("cmd", "add_py"),
            ("took_ms", "17637.2"),
            ("rss_diff_kb", "325384"),
            ("rss_after_kb", "336288"),
            ("rss_peak_kb", "336300"),
            ("executions", "1"),
            ("listing_ms", "900"),
            ("host_instantiate_ms", "2"),
            ("host_call_ms", "3"),
            ("host_cpu_ms", "16420"),
            ("cpu_busy_pct", "97.6"),
            ("cpu_steal_pct", "4.2"),
            ("mmap_calls", "1920"),
            ("mmap_bytes", "10522669875"),
            ("faults_user", "81211"),
            ("faults_user_write", "78774"),
            ("faults_kernel", "0"),
            ("direct_reclaim_count", "0"),
            ("zones_lowest_band", "baseline"),
        ]));
        assert_eq!(
            text,
            "add_py: 17,637 ms, +318 MiB RSS; 1 execution: 900 ms waiting for the host to list \
             skills, 2.0 ms instantiate + 3.0 ms call in the host, the other 16,732 ms compiling \
             and on the wire (compile dominated); the host used 16,420 ms of CPU (93% of one \
             CPU), the machine's CPUs were 98% busy and 4% stolen by the hypervisor; 1,920 mmap (9.80 GiB virtual); 81,211 page \
             faults (97% write), 81,211 per execution; no reclaim."
        );
    }

    #[test]
    fn a_pooling_host_says_what_it_reserved() {
        let text = paragraph(&row(&[
            ("cmd", "10 execute_all Cecilia 0 0"),
            ("took_ms", "250"),
            ("rss_diff_kb", "200"),
            ("vms_after_kb", "17179869184"),
            ("vms_diff_kb", "0"),
        ]));
        assert!(
            text.contains("16.0 TiB of address space reserved (±0 in the entry)"),
            "{text}"
        );
        let on_demand = paragraph(&row(&[
            ("cmd", "skills"),
            ("took_ms", "1"),
            ("vms_after_kb", "4194304"),
            ("vms_diff_kb", "0"),
        ]));
        assert!(!on_demand.contains("reserved"), "{on_demand}");
    }

    #[test]
    fn unmeasured_cells_are_left_unsaid() {
        let text = paragraph(&row(&[
            ("cmd", "skills"),
            ("took_ms", "0.2"),
            ("rss_diff_kb", "0"),
            ("faults_user", ""),
        ]));
        assert_eq!(text, "skills: 0 ms, ±0 RSS; reclaim not probed.");
    }

    #[test]
    fn kernel_mode_faults_count_in_the_total() {
        let text = paragraph(&row(&[
            ("cmd", "add_rs"),
            ("took_ms", "90"),
            ("rss_diff_kb", "2048"),
            ("faults_user", "2466"),
            ("faults_user_write", "2000"),
            ("faults_kernel", "32"),
        ]));
        assert!(
            text.contains("2,498 page faults (81% write, 32 in kernel mode)"),
            "{text}"
        );
    }

    #[test]
    fn a_balloon_says_which_band_it_held() {
        let text = paragraph(&row(&[
            ("cmd", "add_rs"),
            ("took_ms", "900"),
            ("rss_diff_kb", "2048"),
            ("pressure_band", "promo"),
            ("pressure_balloon_kb", "22020096"),
            ("pressure_in_band_pct", "96.4"),
            ("pressure_aborted", ""),
        ]));
        assert!(
            text.ends_with(
                "under pressure: a balloon aimed at the promo band holding 21.0 GiB, free \
                 memory in the band 96% of the time."
            ),
            "{text}"
        );
        let without = paragraph(&row(&[("cmd", "skills"), ("pressure_band", "")]));
        assert!(!without.contains("pressure"), "{without}");
    }

    #[test]
    fn pressure_shows_up_as_reclaim_and_bands() {
        let text = paragraph(&row(&[
            ("cmd", "p_execute_all Damian 666666 0 90"),
            ("took_ms", "5000"),
            ("rss_diff_kb", "-4"),
            ("direct_reclaim_count", "12"),
            ("direct_reclaim_ms", "41.5"),
            ("direct_reclaim_pages", "3000"),
            ("kswapd_wakes", "3"),
            ("kswapd_awake_ms", "800"),
            ("lru_kswapd_scanned", "9000"),
            ("lru_kswapd_reclaimed", "8000"),
            ("psi_some_us", "52000"),
            ("zones_lowest_band", "low"),
            ("request_errors", "2"),
            ("first_error", "execute sample_py1: 500 out of memory"),
        ]));
        assert!(
            text.contains("2 request(s) FAILED, first: execute sample_py1: 500 out of memory"),
            "{text}"
        );
        assert!(
            text.contains("direct reclaim 12×, 42 ms, 3,000 pages"),
            "{text}"
        );
        assert!(text.contains("kswapd woke 3×, awake 800 ms"), "{text}");
        assert!(
            text.contains("LRU 9,000 pages scanned, 8,000 reclaimed"),
            "{text}"
        );
        assert!(text.contains("tasks stalled on memory for 52 ms"), "{text}");
        assert!(
            text.contains("free memory fell into the low band"),
            "{text}"
        );
    }
}
