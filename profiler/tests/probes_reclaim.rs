//! Reclaim, safely: the workload runs in its own memory cgroup with a small limit and reads a
//! file larger than the limit. Only clean page cache is reclaimed (no anonymous memory over
//! the limit, so no OOM kill, and nothing outside the cgroup is pressed). The probes must see
//! memcg reclaim and LRU shrinking in the workload's own context, in the right entry; and,
//! where function probes attach (`SKILLPROF_EXPECT_MECHANISMS=preferred`), shrink_node too.
//!
//! Root only (CI runs it as root); without root it fails loudly.

mod probes_support;

use std::{
    fs,
    io::Write as _,
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
};

use probes_support::{
    Exercise, KernelKind, Selection, assert_attached, assert_mechanisms, cell_json, int,
    kernel_kind, mechanisms_json, require_root, row, save_result,
};
use serde_json::json;
use skillprof::probes::{ProbeOptions, ProbeSession};

const MIB: u64 = 1 << 20;
const LIMIT: u64 = 32 * MIB;
const FILE: u64 = 160 * MIB;

/// A memory cgroup with a limit, removed on drop (after its processes are gone).
struct MemoryCgroup {
    dir: PathBuf,
    version: u8,
}

impl MemoryCgroup {
    /// Uses whatever memory-controller hierarchy is mounted: cgroup v1's `memory`
    /// hierarchy, or a cgroup v2 mount whose root lists the memory controller.
    fn create(limit: u64) -> MemoryCgroup {
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
        let v1 = mounts.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (fields[2] == "cgroup" && fields[3].split(',').any(|o| o == "memory"))
                .then(|| PathBuf::from(fields[1]))
        });
        let v2 = mounts.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let path = PathBuf::from(fields[1]);
            (fields[2] == "cgroup2"
                && fs::read_to_string(path.join("cgroup.controllers"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory")))
            .then_some(path)
        });
        let name = format!("skillprof-test-{}", std::process::id());
        let (dir, version) = match (v1, v2) {
            (Some(root), _) => (root.join(name), 1),
            (None, Some(root)) => {
                // cgroup v2: children get memory.max only if the parent delegates the
                // controller (a no-op when it already does, as under systemd).
                let subtree = root.join("cgroup.subtree_control");
                let enabled = fs::read_to_string(&subtree).unwrap_or_default();
                if !enabled.split_whitespace().any(|c| c == "memory") {
                    fs::write(&subtree, "+memory").unwrap_or_else(|e| {
                        panic!(
                            "enabling the memory controller in {}: {e}",
                            subtree.display()
                        )
                    });
                }
                (root.join(name), 2)
            }
            (None, None) => panic!(
                "no memory cgroup hierarchy is mounted (neither cgroup v1 `memory` nor cgroup2 \
                 with the memory controller); mounts:\n{mounts}"
            ),
        };
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let cgroup = MemoryCgroup { dir, version };
        let limit_file = if version == 1 {
            "memory.limit_in_bytes"
        } else {
            "memory.max"
        };
        fs::write(cgroup.dir.join(limit_file), limit.to_string()).unwrap();
        if version == 1 {
            // No swap here, but make sure anonymous memory is never pushed out either.
            let _ = fs::write(cgroup.dir.join("memory.swappiness"), "0");
        }
        println!("memory cgroup v{version} at {}", cgroup.dir.display());
        cgroup
    }

    fn add(&self, pid: u32) {
        fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }

    fn stat(&self, key: &str) -> Option<u64> {
        let file = if self.version == 1 {
            "memory.failcnt"
        } else {
            "memory.events"
        };
        let text = fs::read_to_string(self.dir.join(file)).ok()?;
        if self.version == 1 {
            text.trim().parse().ok()
        } else {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        }
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir(&self.dir) {
            eprintln!("warning: removing {}: {e}", self.dir.display());
        }
    }
}

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
    require_root();
    // Not tmpfs: shmem pages could not be reclaimed without swap.
    // SKILLPROF_TEST_SCRATCH: a writable disk-backed folder where the target dir is not
    // writable (a VM guest sharing the host's files read-only).
    let scratch = std::env::var_os("SKILLPROF_TEST_SCRATCH")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from);
    let dir = tempfile::tempdir_in(&scratch).unwrap();
    let file = cold_file(dir.path(), FILE);

    let cgroup = MemoryCgroup::create(LIMIT);
    let mut exercise = Exercise::start();
    cgroup.add(exercise.pid());
    let session = ProbeSession::start(
        exercise.pid(),
        &ProbeOptions {
            max_entries: 3,
            ..ProbeOptions::default()
        },
    )
    .unwrap();
    assert_attached(session.statuses(), &["memcg_reclaim", "lru_shrink"]);
    assert_mechanisms(session.statuses(), Selection::All);

    let failcnt_before = cgroup.stat("max").unwrap_or(0);
    session.begin_entry(1).unwrap();
    let answer = exercise.cmd(&format!("readfile {}", file.display()));
    assert_eq!(answer, format!("ok read={FILE}"));
    session.begin_entry(2).unwrap();
    exercise.cmd("faults");
    let failcnt = cgroup.stat("max").unwrap_or(0) - failcnt_before;

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
}
