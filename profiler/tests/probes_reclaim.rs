//! Reclaim, safely: the workload runs in its own memory cgroup with a small limit and reads a
//! file larger than the limit. Only clean page cache is reclaimed (no anonymous memory over
//! the limit, so no OOM kill, and nothing outside the cgroup is pressed). The probes must see
//! memcg reclaim and LRU shrinking in the workload's own context, in the right entry; and,
//! where function probes attach (`SKILLPROF_EXPECT_MECHANISMS=preferred`), shrink_node too.
//!
//! Root only (CI runs it as root); without root it fails loudly.

mod common;

use std::{
    fs,
    io::Write as _,
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
};

use common::exercise::{
    Exercise, KernelKind, Selection, assert_attached, assert_mechanisms, cell_json, int,
    kernel_kind, mechanisms_json, row, save_result,
};
use common::require_root;
use serde_json::json;
use skillprof::record::probes::ProbeMode;
use skillprof::{
    producers::probes::{ProbeOptions, ProbeSession},
    producers::system::cgroup::MemoryCgroup,
};

/// What these tests do that needs root.
const ROOT: &str = "the probe tests load BPF programs";

const MIB: u64 = 1 << 20;
const LIMIT: u64 = 32 * MIB;
const FILE: u64 = 160 * MIB;

/// A file of `len` bytes on a disk-backed filesystem, written, synced and dropped from the
/// page cache, so reading it charges every page to the reader's cgroup.
fn cold_file(dir: &Path, len: u64) -> PathBuf {
    let path = dir.join("cold.bin");
    let mut file = fs::File::create(&path).unwrap();
    let chunk = vec![0x5au8; MIB as usize];
    for _ in 0..len / MIB {
        file.write_all(&chunk).unwrap();
    }
    file.sync_all().unwrap();
    // SAFETY: advice on our own open fd.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise(DONTNEED) failed");
    path
}

#[test]
fn memcg_reclaim_and_lru_shrinking_are_seen_and_attributed() {
    require_root(ROOT);
    // Not tmpfs: shmem pages could not be reclaimed without swap.
    // SKILLPROF_TEST_SCRATCH: a writable disk-backed folder where the target dir is not
    // writable (a VM guest sharing the host's files read-only).
    let scratch = std::env::var_os("SKILLPROF_TEST_SCRATCH")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from);
    let dir = tempfile::tempdir_in(&scratch).unwrap();
    let file = cold_file(dir.path(), FILE);

    // skillprof's own cgroup code, as `--memory-max` uses it: on v1 or v2, whichever holds
    // the memory controller here, and removed by its guardian on every exit path.
    let cgroup =
        MemoryCgroup::create(&format!("skillprof-test-{}", std::process::id()), LIMIT).unwrap();
    println!(
        "memory cgroup {} at {}",
        cgroup.cgroup().version(),
        cgroup.cgroup().dir().display()
    );
    let mut exercise = Exercise::start();
    write!(cgroup.cgroup().procs().unwrap(), "{}", exercise.pid()).unwrap();
    let limit_hits = || cgroup.read().unwrap().limit_hits;
    let session = ProbeSession::start(
        exercise.pid(),
        &ProbeOptions {
            mode: ProbeMode::Exact,
            max_entries: 3,
            ..ProbeOptions::default()
        },
    )
    .unwrap();
    assert_attached(session.statuses(), &["memcg_reclaim", "lru_shrink"]);
    assert_mechanisms(session.statuses(), Selection::All);

    let failcnt_before = limit_hits();
    session.begin_entry(1).unwrap();
    let answer = exercise.cmd(&format!("readfile {}", file.display()));
    assert_eq!(answer, format!("ok read={FILE}"));
    session.begin_entry(2).unwrap();
    exercise.cmd("faults");
    let failcnt = limit_hits() - failcnt_before;

    let idle = row(&session.entry(0).unwrap());
    let read = row(&session.entry(1).unwrap());
    let after = row(&session.entry(2).unwrap());
    let show = |name: &str| {
        [
            "memcg_reclaim_count",
            "memcg_reclaim_pages",
            "memcg_reclaim_ms",
            "memcg_reclaim_max_ms",
            "lru_memcg_calls",
            "lru_memcg_scanned",
            "lru_memcg_reclaimed",
            "lru_host_calls",
            "lru_host_reclaimed",
            "lru_kswapd_calls",
            "slab_shrinks",
            "shrink_node_memcg_calls",
            "shrink_node_host_calls",
        ]
        .map(|c| format!("{c}={}", read.csv(c).unwrap_or("?".into())))
        .join(" ")
            + &format!(" ({name})")
    };
    println!("{}", show("read entry"));
    println!("cgroup limit hits during the read: {failcnt}");
    let saved = [
        "memcg_reclaim_count",
        "memcg_reclaim_pages",
        "lru_memcg_calls",
        "lru_memcg_scanned",
        "lru_memcg_reclaimed",
        "lru_host_calls",
        "lru_host_reclaimed",
        "shrink_node_memcg_calls",
        "shrink_node_host_calls",
    ];
    save_result(
        "reclaim",
        json!({
            "file_bytes": FILE,
            "limit_bytes": LIMIT,
            "limit_hits": failcnt,
            "mechanisms": mechanisms_json(session.statuses()),
            "read_entry": saved
                .iter()
                .map(|c| (c.to_string(), cell_json(&read, c)))
                .collect::<serde_json::Map<_, _>>(),
        }),
    );

    assert!(
        failcnt > 0,
        "reading {FILE} bytes never hit the cgroup's {LIMIT}-byte limit: the scratch folder's \
         filesystem does not charge page cache to the reader (9p/virtiofs without cache?); \
         point SKILLPROF_TEST_SCRATCH at a block-backed filesystem"
    );
    // Memcg reclaim happened in the workload's context, during the read entry only.
    let reclaims = int(&read, "memcg_reclaim_count");
    assert!(reclaims > 0, "no memcg reclaim seen: {}", show("read"));
    assert_eq!(int(&idle, "memcg_reclaim_count"), 0);
    assert_eq!(int(&after, "memcg_reclaim_count"), 0);
    // The cgroup never holds more than its limit, so at least the excess was reclaimed.
    let excess_pages = (FILE - LIMIT) / 4096;
    let reclaimed = int(&read, "memcg_reclaim_pages");
    assert!(
        reclaimed * 10 >= excess_pages * 9,
        "{reclaimed} pages reclaimed; reading {FILE} bytes under a {LIMIT}-byte limit needs \
         about {excess_pages}"
    );
    // LRU shrinking classified as memcg reclaim, and as the host's own.
    assert!(int(&read, "lru_memcg_calls") > 0, "{}", show("read"));
    assert!(int(&read, "lru_memcg_scanned") >= int(&read, "lru_memcg_reclaimed"));
    assert!(int(&read, "lru_memcg_reclaimed") > 0, "{}", show("read"));
    assert!(int(&read, "lru_host_calls") > 0, "{}", show("read"));
    // The LRU pages the workload reclaimed itself are memcg-context reclaim, and they make up
    // most of what its memcg reclaims reported (the rest: slab).
    let host_lru = int(&read, "lru_host_reclaimed");
    assert!(
        host_lru <= int(&read, "lru_memcg_reclaimed"),
        "host LRU reclaim not classified as memcg: {}",
        show("read")
    );
    assert!(
        host_lru * 2 >= reclaimed && host_lru <= reclaimed,
        "LRU pages reclaimed in the workload's context ({host_lru}) do not match its memcg \
         reclaims ({reclaimed})"
    );

    // shrink_node: function probes only. Where they attach, memcg reclaim goes through it, in
    // the workload's own context; elsewhere its columns are empty, never a made-up 0.
    match kernel_kind() {
        KernelKind::Preferred => {
            assert!(
                int(&read, "shrink_node_memcg_calls") > 0,
                "{}",
                show("read")
            );
            assert!(int(&read, "shrink_node_host_calls") > 0, "{}", show("read"));
            assert_eq!(int(&idle, "shrink_node_host_calls"), 0);
            assert_eq!(int(&after, "shrink_node_host_calls"), 0);
        }
        KernelKind::Fallback => {
            assert_eq!(
                read.csv("shrink_node_host_calls").as_deref(),
                Some(""),
                "{}",
                show("read")
            );
        }
    }

    drop(session);
    exercise.send("exit");
    let _ = exercise.child.wait();
    cgroup.remove().unwrap();
}
