//! The stop in one sentence whose parts add up to its total:
//!
//! > stop: 1,220 ms = 0.1 ms signal + 38 ms drain (312 munmap, 3.20 GiB) + 0.2 ms exit +
//! > 1,151 ms address-space teardown (5.6 M pages freed, timed by exit_mmap) + 0.8 ms last
//! > thread + 31 ms reap; exit status: 0.

use crate::words::{bytes, count, many, ms};

use super::Cells;

/// The parts, in order, as the stop breakdown names them, and how a sentence says them.
const PARTS: [(&str, &str); 6] = [
    ("signal", "signal"),
    ("drain", "drain"),
    ("exit", "exit"),
    ("teardown", "address-space teardown"),
    ("last_thread", "last thread"),
    ("reap", "reap"),
];

pub fn sentence(cells: &Cells) -> String {
    let took = cells.num("took_ms").unwrap_or(0.0);
    let status = cells.text("exit_status").unwrap_or("exit status unknown");
    let killed = if cells.some("killed").is_some() {
        ", SIGKILLed after ignoring SIGTERM"
    } else {
        ""
    };
    let Some(total) = cells.num("stop_total_ms") else {
        return format!(
            "stop: {} until the host was reaped ({status}{killed}); no breakdown without probes.",
            ms(took)
        );
    };
    let parts: Vec<String> = PARTS
        .iter()
        .filter_map(|(name, words)| {
            let duration = cells.num(&format!("stop_{name}_ms"))?;
            Some(format!("{} {words}{}", ms(duration), detail(cells, name)))
        })
        .collect();
    format!(
        "stop: {} = {}; {status}{killed}.",
        ms(total),
        parts.join(" + ")
    )
}

fn detail(cells: &Cells, part: &str) -> String {
    match part {
        "drain" => match (
            cells.num("stop_drain_munmaps"),
            cells.num("stop_drain_munmap_bytes"),
        ) {
            (Some(calls), Some(size)) if calls > 0.0 => {
                format!(" ({} munmap, {})", count(calls), bytes(size))
            }
            _ => String::new(),
        },
        "teardown" => {
            let pages = cells
                .num("stop_teardown_pages")
                .map(|p| format!("{} pages freed", many(p)));
            let by = cells
                .text("stop_teardown_by")
                .map(|by| format!("timed by {by}"));
            let said: Vec<String> = pages.into_iter().chain(by).collect();
            if said.is_empty() {
                String::new()
            } else {
                format!(" ({})", said.join(", "))
            }
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use crate::explain::paragraph;
    use crate::record::Row;

    #[test]
    fn the_parts_read_in_order_with_their_evidence() {
        let mut row = Row::default();
        for (name, value) in [
            ("cmd", "stop"),
            ("took_ms", "1220.3"),
            ("exit_status", "exit status: 0"),
            ("killed", "0"),
            ("stop_total_ms", "1220.3"),
            ("stop_signal_ms", "0.1"),
            ("stop_drain_ms", "38"),
            ("stop_exit_ms", "0.2"),
            ("stop_teardown_ms", "1151"),
            ("stop_last_thread_ms", "0.8"),
            ("stop_reap_ms", "30.2"),
            ("stop_drain_munmaps", "312"),
            ("stop_drain_munmap_bytes", "3435973837"),
            ("stop_teardown_pages", "5600000"),
            ("stop_teardown_by", "exit_mmap"),
        ] {
            row.text(name, value);
        }
        assert_eq!(
            paragraph(&row),
            "stop: 1,220 ms = 0.1 ms signal + 38 ms drain (312 munmap, 3.20 GiB) + 0.2 ms exit + \
             1,151 ms address-space teardown (5.6 M pages freed, timed by exit_mmap) + 0.8 ms last \
             thread + 30 ms reap; exit status: 0."
        );
    }

    #[test]
    fn without_probes_it_says_so() {
        let mut row = Row::default();
        row.text("cmd", "stop")
            .text("took_ms", "84")
            .text("exit_status", "exit status: 0")
            .missing("stop_total_ms");
        assert_eq!(
            paragraph(&row),
            "stop: 84 ms until the host was reaped (exit status: 0); no breakdown without probes."
        );
    }
}
