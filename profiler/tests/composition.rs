//! What holds a process's memory, read from a real process whose layout is built on purpose:
//! a 16-core machine's malloc arenas (many of them, adjacent, which look like a wasm memory's
//! reservation by layout) beside one wasm-like memory. The heap must cover what malloc
//! reports, the wasm part must be the wasm memory alone, and every arena must be counted.

use std::path::Path;

use skillprof::record::composition::Composition;

mod common;
use common::exercise::Exercise;

/// `key=value` of an exercise answer, as bytes.
fn figure(answer: &str, key: &str) -> u64 {
    answer
        .split_whitespace()
        .find_map(|word| word.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {answer:?}"))
        .parse()
        .unwrap()
}

#[test]
fn a_many_core_machines_arenas_are_heap_and_only_wasm_memory_is_wasm() {
    const ARENAS: u64 = 24;
    const MIB_EACH: u64 = 8;
    const WASM_MIB: u64 = 24;
    // 24 arenas of 64 MiB windows: 1.5 GiB of open parts beside inaccessible ones, adjacent.
    let mut exercise = Exercise::start_with_env(&[("MALLOC_ARENA_MAX", "128")]);
    let before = Composition::read(Path::new("/proc"), exercise.pid()).unwrap();
    let answer = exercise.cmd(&format!("arenas {ARENAS} {MIB_EACH}"));
    exercise.cmd(&format!("wasm-memory {WASM_MIB}"));
    let after = Composition::read(Path::new("/proc"), exercise.pid()).unwrap();
    let malloc_kb = (figure(&answer, "in_use") + figure(&answer, "free")) / 1024;
    let heap_kb = after.heap_kb - before.heap_kb;
    // Every chunk was touched before half were freed: malloc's in-use and free bytes are
    // resident, in its heaps.
    assert!(
        heap_kb * 100 >= malloc_kb * 95,
        "the heap grew {heap_kb} KiB; malloc reports {malloc_kb} KiB in use and free: {after:?}"
    );
    assert_eq!(
        after.wasm_kb - before.wasm_kb,
        WASM_MIB * 1024,
        "only the wasm memory is wasm: {after:?}"
    );
    assert_eq!(after.arenas, Some(ARENAS), "{after:?}");
    assert_eq!(
        after.parts().iter().map(|(_, kb)| kb).sum::<u64>(),
        after.rss_kb
    );
}
