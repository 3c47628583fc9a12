//! Skill attribution, for real: skillhost's markers, a uprobe on them, and the fault and
//! syscall programs counting per skill and phase. Two skills touch different known numbers of
//! pages in parallel requests of one entry; skills.csv must give each its own pages and sum
//! to the entry. A host without markers must say so, loudly, and still profile by entry.
//! Root only (BPF): without it these fail loudly, never skip.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use skillprof::record::probes::{Mechanism, Probe};

mod common;
use common::cli::{cell, csv_rows, describe, meta, run_ok, write_cmds};
use common::require_root;

const PAGE_KB: u64 = 4;
const TIMES: u64 = 3;
const A_KB: u64 = 8192;
const B_KB: u64 = 2048;

/// What these tests do that needs root.
const ROOT: &str = "the skill attribution tests load BPF programs and a uprobe";

/// Both sample skills, then the same requests of each without and with memory to touch.
fn two_skills(dir: &Path) -> PathBuf {
    write_cmds(
        dir,
        "skills.cmds",
        &format!(
            "p_add_rs 2\n\
             p_execute {TIMES} sample_rs1:0 sample_rs2:0\n\
             p_execute {TIMES} sample_rs1:{A_KB} sample_rs2:{B_KB}\n"
        ),
    )
}

#[test]
fn two_skills_in_one_entry_get_their_own_pages_and_the_rows_sum_to_the_entry() {
    require_root(ROOT);
    let dir = tempfile::tempdir().unwrap();
    let workload = two_skills(dir.path());
    let out = dir.path().join("runs");
    // Calls per skill come from the memory calls' programs, whatever the kernel's default.
    let (output, folder) = run_ok(&workload, &out, &["--probes", "calls"]);
    let skills = csv_rows(&folder.join("skills.csv"));
    let commands = csv_rows(&folder.join("commands.csv"));

    // Every entry's rows sum to the entry's own counts of memory calls, the host row
    // included.
    let summed = [
        "mmap_calls",
        "mmap_bytes",
        "munmap_calls",
        "munmap_bytes",
        "mprotect_calls",
        "madvise_calls",
        "brk_calls",
    ];
    for (index, entry) in commands.iter().enumerate() {
        let rows: Vec<_> = skills
            .iter()
            .filter(|row| cell::<u64>(row, "entry") == index as u64)
            .collect();
        assert!(
            rows.iter().any(|row| row["skill"] == "host"),
            "entry {index} has no host row"
        );
        for column in summed {
            let sum: u64 = rows.iter().map(|row| cell::<u64>(row, column)).sum();
            assert_eq!(
                sum,
                cell::<u64>(entry, column),
                "entry {index} ({}): skills.csv's {column} sums to {sum}, commands.csv says {}",
                entry["cmd"],
                entry[column]
            );
        }
    }

    let call = |entry: u64, skill: &str| -> &BTreeMap<String, String> {
        skills
            .iter()
            .find(|row| {
                cell::<u64>(row, "entry") == entry
                    && row["skill"] == skill
                    && row["phase"] == "call"
            })
            .unwrap_or_else(|| panic!("no call row of {skill} in entry {entry}"))
    };
    let compiles = ["sample_rs1", "sample_rs2"].map(|skill| {
        skills
            .iter()
            .find(|row| {
                cell::<u64>(row, "entry") == 0 && row["skill"] == skill && row["phase"] == "compile"
            })
            .unwrap_or_else(|| panic!("{skill} was compiled in entry 0, but has no compile row"))
    });
    // The two skills are the same module, compiled at once: one compile can wait for the
    // other's and do almost nothing itself. Between them, the compile's work is theirs, and
    // publishing its code protects it: those calls are the compiling skill's, not the host's.
    let together = |column: &str| -> u64 { compiles.iter().map(|c| cell::<u64>(c, column)).sum() };
    assert!(together("task_minflt") > 100, "{compiles:?}");
    assert!(together("mprotect_calls") > 0, "{compiles:?}");
    for skill in ["sample_rs1", "sample_rs2"] {
        let compile = compiles.iter().find(|c| c["skill"] == skill).unwrap();
        assert_eq!(cell::<u64>(compile, "runs"), 1);
        for entry in [1, 2] {
            assert_eq!(
                cell::<u64>(call(entry, skill), "runs"),
                TIMES,
                "{skill} in entry {entry}"
            );
        }
    }
    // What the sample skill touched: one write per page of its MEMORY_KB, in chunks that
    // need not start on a page boundary (at most one more page per chunk of >= 100 KiB), and
    // a little allocator metadata, above what the same requests without memory faulted. That
    // baseline holds first touches entry 2 no longer pays (a thread's stack page, a buffer
    // malloc kept): a page a request fewer is still the skill's (6,143 of 6,144 seen once).
    for (skill, kb) in [("sample_rs1", A_KB), ("sample_rs2", B_KB)] {
        let with = cell::<u64>(call(2, skill), "task_minflt");
        let without = cell::<u64>(call(1, skill), "task_minflt");
        let touched = with - without;
        let pages = TIMES * kb / PAGE_KB;
        let chunks = TIMES * kb.div_ceil(100);
        assert!(
            (pages - TIMES..=pages + chunks + 16 * TIMES).contains(&touched),
            "{skill} touched {pages} pages ({TIMES} × {kb} KiB) above its baseline; \
             skills.csv says {touched} ({with} - {without})"
        );
    }

    let explain = fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explain.contains("skill attribution: by the host's markers"),
        "{explain}"
    );
    let paragraph = explain
        .lines()
        .find(|line| line.starts_with(&format!("p_execute {TIMES} sample_rs1:{A_KB}")))
        .unwrap_or_else(|| panic!("no paragraph of the mixed entry:\n{explain}"));
    // Shares of the whole host's faults: the two skills' split 4:1, all while called.
    let share = |skill: &str| -> f64 {
        let at = paragraph.find(&format!("{skill} ")).unwrap() + skill.len() + 1;
        let digits: String = paragraph[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    };
    let (a, b) = (share("sample_rs1"), share("sample_rs2"));
    assert!(
        paragraph.contains("by skill: sample_rs1 ")
            && paragraph.contains("of the faults (")
            && paragraph.contains("in call)")
            && (a / (a + b) - 0.8).abs() < 0.03,
        "sample_rs1 touched 4/5 of the skills' pages, all while called: {paragraph}"
    );
    let markers = meta(&folder)
        .probes
        .unwrap()
        .statuses
        .into_iter()
        .find(|s| s.probe == Probe::Markers)
        .unwrap();
    assert!(markers.attached, "{markers:?}\n{}", describe(&output));
    // The skill of each memory call is read from the thread's mark slot in its TLS: no
    // probe on the marks.
    assert_eq!(markers.mechanism, Mechanism::Ledger);
    assert!(
        markers
            .detail
            .contains("from the thread's mark slot in its TLS"),
        "{markers:?}"
    );
}

/// The host-only mode runs no program per fault or per mark: each skill's faults and CPU
/// come from its threads' own counters, kept by the host in its ledger. They must find what
/// each skill touched, and add up to no more than the kernel's count for the entry.
#[test]
fn in_the_host_only_mode_each_skill_s_faults_come_from_its_threads_own_counters() {
    require_root(ROOT);
    let dir = tempfile::tempdir().unwrap();
    let workload = two_skills(dir.path());
    let (_, folder) = run_ok(
        &workload,
        &dir.path().join("runs"),
        &["--probes", "host-only"],
    );
    let skills = csv_rows(&folder.join("skills.csv"));
    let commands = csv_rows(&folder.join("commands.csv"));
    let phase = |entry: u64, skill: &str, phase: &str| -> &BTreeMap<String, String> {
        skills
            .iter()
            .find(|row| {
                cell::<u64>(row, "entry") == entry && row["skill"] == skill && row["phase"] == phase
            })
            .unwrap_or_else(|| panic!("no {phase} row of {skill} in entry {entry}"))
    };
    for (index, entry) in commands.iter().enumerate().take(3) {
        let rows = skills
            .iter()
            .filter(|row| cell::<u64>(row, "entry") == index as u64);
        let sum: u64 = rows.map(|row| cell::<u64>(row, "task_minflt")).sum();
        assert!(
            sum <= cell::<u64>(entry, "minflt"),
            "entry {index}: the skills' threads took {sum} faults, the kernel counted {} for \
             the whole host",
            entry["minflt"]
        );
        // Nothing here ran a per-fault program.
        assert_eq!(entry["faults_user"], "", "{entry:?}");
    }
    // The two skills are the same module: compiled at once, one compile can wait for the
    // other's and do almost nothing itself. Between them, the compile's work is theirs.
    let compiles = ["sample_rs1", "sample_rs2"].map(|skill| phase(0, skill, "compile"));
    assert!(
        compiles.iter().map(|c| cell::<u64>(c, "task_minflt")).max() > Some(100),
        "{compiles:?}"
    );
    assert!(
        compiles
            .iter()
            .map(|c| c["task_cpu_ms"].parse::<f64>().unwrap())
            .any(|ms| ms > 1.0),
        "{compiles:?}"
    );
    for skill in ["sample_rs1", "sample_rs2"] {
        let compile = phase(0, skill, "compile");
        assert_eq!(
            compile["mmap_calls"], "",
            "no syscall program ran: {compile:?}"
        );
        // The host's failures, from its ledger: a reason counts in its own phase only.
        assert_eq!(
            (
                compile["failed_unloadable"].as_str(),
                compile["failed_trap"].as_str()
            ),
            ("0", ""),
            "{compile:?}"
        );
        let call = phase(2, skill, "call");
        assert_eq!(
            (
                call["failed_unloadable"].as_str(),
                call["failed_trap"].as_str()
            ),
            ("", "0"),
            "{call:?}"
        );
    }
    for (skill, kb) in [("sample_rs1", A_KB), ("sample_rs2", B_KB)] {
        let touched = cell::<u64>(phase(2, skill, "call"), "task_minflt")
            - cell::<u64>(phase(1, skill, "call"), "task_minflt");
        let pages = TIMES * kb / PAGE_KB;
        let chunks = TIMES * kb.div_ceil(100);
        // A difference of two entries: the baseline's requests fault their own few pages (a
        // fiber stack's depth, the guest allocator's bookkeeping), which the larger entry's
        // need not repeat page for page, so the difference may fall a page or two per
        // request short of the chunk's pages (1,534 of 1,536 in one run of 25).
        assert!(
            (pages - 4 * TIMES..=pages + chunks + 16 * TIMES).contains(&touched),
            "{skill} touched {pages} pages ({TIMES} × {kb} KiB) above its baseline; its \
             threads' counters say {touched}"
        );
    }
}

#[test]
fn a_host_without_markers_is_profiled_by_entry_and_says_so() {
    require_root(ROOT);
    let dir = tempfile::tempdir().unwrap();
    let workload = write_cmds(
        dir.path(),
        "skills.cmds",
        "add_rs\np_execute 2 sample_rs1:1024\n",
    );
    // skillhost told not to mark: a host that does not know skillprof keeps no ledger.
    let (output, folder) = run_ok(&workload, &dir.path().join("runs"), &["--", "--no-marks"]);
    let said = describe(&output);
    assert!(
        said.contains("warning: skill attribution OFF, entry windows only")
            && said.contains("keeps no ledger"),
        "{said}"
    );
    let explain = fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explain.contains("- skill attribution: OFF, entry windows only"),
        "{explain}"
    );
    assert!(!explain.contains("by skill:"), "{explain}");
    assert!(!folder.join("skills.csv").exists());
    // The entries are still measured.
    let commands = csv_rows(&folder.join("commands.csv"));
    let mixed = &commands[1];
    assert!(cell::<u64>(mixed, "minflt") >= 2 * 256, "{mixed:?}");
    assert_eq!(
        mixed["marks_hits"], "",
        "a probe that did not attach writes empty cells"
    );

    // skillhost without its symbol table still keeps its ledger: the default mode's rows
    // need no symbol, only exact mode's per-fault attribution does.
    let stripped = common::stripped_skillhost(dir.path());
    let (_, folder) = run_ok(
        &workload,
        &dir.path().join("stripped-runs"),
        &["--host-bin", stripped.to_str().unwrap()],
    );
    let skills = csv_rows(&folder.join("skills.csv"));
    let called = skills
        .iter()
        .find(|row| {
            cell::<u64>(row, "entry") == 1 && row["skill"] == "sample_rs1" && row["phase"] == "call"
        })
        .unwrap_or_else(|| panic!("no call row of sample_rs1: {skills:#?}"));
    assert_eq!(cell::<u64>(called, "runs"), 2, "{called:?}");
    assert!(cell::<u64>(called, "task_minflt") >= 256, "{called:?}");
}

#[test]
fn stacks_name_the_wasm_function_that_touched_the_pages() {
    require_root(ROOT);
    let dir = tempfile::tempdir().unwrap();
    let kb = 4096;
    let workload = write_cmds(
        dir.path(),
        "skills.cmds",
        &format!("add_rs\np_execute 2 sample_rs1:{kb}\n"),
    );
    let out = dir.path().join("runs");
    let (_, folder) = run_ok(&workload, &out, &["--stacks"]);
    let folded = fs::read_to_string(folder.join("stacks/1.folded")).unwrap();
    // `skill;kind;outermost;...;innermost COUNT`, a line per stack.
    let stacks = || {
        folded.lines().map(|line| {
            let (stack, count) = line.rsplit_once(' ').unwrap();
            (stack, count.parse::<u64>().unwrap())
        })
    };
    let in_function: u64 = stacks()
        .filter(|(stack, _)| {
            stack.starts_with("sample_rs1;fault;") && stack.contains("resident_chunk")
        })
        .map(|(_, count)| count)
        .sum();
    let pages = 2 * kb / PAGE_KB;
    // The allocator writes a chunk's header before resident_chunk writes its pages: at most
    // one page per chunk (>= 100 KiB) is faulted in by the allocator instead.
    let chunks = 2 * kb.div_ceil(100);
    assert!(
        in_function >= pages - chunks,
        "resident_chunk wrote {pages} pages; the folded stacks give it {in_function} faults:\n{}",
        folded.lines().take(40).collect::<Vec<_>>().join("\n")
    );
    let in_skill: u64 = stacks()
        .filter(|(stack, _)| stack.starts_with("sample_rs1;fault;"))
        .map(|(_, count)| count)
        .sum();
    let commands = csv_rows(&folder.join("commands.csv"));
    let entry = &commands[1];
    // Where the rest went, should a run ever give the skill fewer: by skill and kind.
    let mut by_label = std::collections::BTreeMap::<String, u64>::new();
    for (stack, count) in stacks() {
        let label = stack.splitn(3, ';').take(2).collect::<Vec<_>>().join(";");
        *by_label.entry(label).or_default() += count;
    }
    assert!(
        in_skill >= pages,
        "{in_skill} faults in sample_rs1's stacks, {pages} pages written; the entry's stacks by \
         skill and kind: {by_label:?}; samples {}, lost {}, the entry's faults: {} by the \
         kernel's count, {} user-mode by the probe",
        entry["stacks_samples"],
        entry["stacks_lost"],
        entry["minflt"],
        entry["faults_user"]
    );
    assert!(folder.join("stacks/1.svg").exists());
    let (samples, named) = (
        cell::<u64>(entry, "stacks_samples"),
        cell::<u64>(entry, "stacks_top_named"),
    );
    println!(
        "stacks: {samples} samples, {named} with a named innermost frame ({:.1}%), {} lost",
        100.0 * named as f64 / samples as f64,
        entry["stacks_lost"]
    );
    assert!(samples >= pages, "{entry:?}");
    assert!(named * 100 >= samples * 90, "{entry:?}");
    // A walk can fail (the kernel could not read a frame); rarely, and counted.
    assert!(
        cell::<u64>(entry, "stacks_lost") * 100 <= samples,
        "{entry:?}"
    );
    // The share with a named innermost frame is printed at the head of explain.md.
    let explain = fs::read_to_string(folder.join("explain.md")).unwrap();
    let head = explain
        .lines()
        .find(|line| line.starts_with("- stacks (--stacks): "))
        .unwrap_or_else(|| panic!("no stacks line at the head:\n{explain}"));
    assert!(head.contains("% with a named innermost frame"), "{head}");
}
