//! The sample skill: it holds a requested amount of resident memory for a requested time, and
//! spends a requested time on the CPU, so the profiler has known memory, CPU and wait costs to
//! find and attribute.
//!
//! Input: `{"topic": str, "memory": KiB, "chunk_kb": KiB, "wait_time": ms, "burn_ms": ms}`, all
//! optional.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use serde::Deserialize;
use skill_world::Failure;

/// The host backs linear memory with 4 KiB pages: one write per page makes a chunk resident.
const PAGE: usize = 4096;
/// Chunk sizes in KiB. Many mid-sized chunks, rather than one large one, make the skill's
/// allocator grow memory step by step, as a real skill's does.
const CHUNK_MIN_KB: u32 = 100;
const CHUNK_MAX_KB: u32 = 300;
/// A 32-bit linear memory holds 4 GiB: a request for more can never succeed.
const MAX_MEMORY_KB: u32 = 4 * 1024 * 1024;

#[derive(Deserialize)]
struct Input {
    topic: Option<String>,
    /// KiB to hold resident.
    #[serde(default)]
    memory: u32,
    /// KiB per chunk; 0 (the default) draws each chunk's size from 100-300 KiB, as the 2024
    /// skill did. `chunk_kb` = `memory` makes one allocation of the whole: the 2024 study's
    /// single-chunk twin of mem_chunks_2.
    #[serde(default)]
    chunk_kb: u32,
    /// Milliseconds to wait while holding it.
    #[serde(default)]
    wait_time: u32,
    /// Milliseconds to spend on the CPU first, in a function of the skill's own.
    #[serde(default)]
    burn_ms: u32,
}

fn run(input: Vec<u8>) -> Result<Vec<u8>, Failure> {
    let input: Input =
        serde_json::from_slice(&input).map_err(|e| Failure::InvalidInput(e.to_string()))?;
    if input.memory > MAX_MEMORY_KB {
        return Err(Failure::InvalidInput(format!(
            "memory must be at most {MAX_MEMORY_KB} KiB, the size of a 32-bit linear memory"
        )));
    }
    let chunks = chunk_sizes(input.memory, input.chunk_kb, &mut XorShift::seeded())
        .into_iter()
        .map(resident_chunk)
        .collect::<Result<Vec<_>, _>>()?;
    burn(input.burn_ms);
    // On wasm32-wasip2 this is wasi:clocks + wasi:io/poll, so an async host can run other
    // requests meanwhile.
    std::thread::sleep(Duration::from_millis(input.wait_time.into()));
    let reply = serde_json::json!({
        "greeting": format!("Hello {}, from sample_rs", input.topic.as_deref().unwrap_or("world")),
        "chunks": chunks.len(),
        "memory_kb": input.memory,
        "wait_ms": input.wait_time,
        "burn_ms": input.burn_ms,
    });
    // The memory stays resident until the reply exists, as a real skill's working set does.
    drop(chunks);
    Ok(reply.to_string().into_bytes())
}

skill_world::export_skill!(run);

/// Sizes of `chunk_kb`, or random ones when it is 0, while at least a full chunk is left; the
/// last chunk takes the remainder.
fn chunk_sizes(total_kb: u32, chunk_kb: u32, rng: &mut XorShift) -> Vec<u32> {
    let mut sizes = Vec::new();
    let mut left = total_kb;
    let full = if chunk_kb == 0 { CHUNK_MAX_KB } else { chunk_kb };
    while left >= full {
        let kb = match chunk_kb {
            0 => rng.between(CHUNK_MIN_KB, CHUNK_MAX_KB),
            kb => kb,
        };
        sizes.push(kb);
        left -= kb;
    }
    if left > 0 {
        sizes.push(left);
    }
    sizes
}

/// A chunk of `kb` KiB with every page written. Allocation failure (the host's memory limit)
/// is reported as `internal` rather than left to trap, so the host can tell the two apart.
/// Never inlined: the function that takes the skill's page faults keeps its own name in the
/// host's perf map, so `skillprof run --stacks` can show it (the stacks test looks for it).
#[inline(never)]
fn resident_chunk(kb: u32) -> Result<Vec<u8>, Failure> {
    let len = kb as usize * 1024;
    let mut chunk: Vec<u8> = Vec::new();
    chunk
        .try_reserve_exact(len)
        .map_err(|_| Failure::Internal(format!("out of memory allocating a {kb} KiB chunk")))?;
    // Every page start, and the last byte for the page the chunk ends in. Fresh linear memory
    // reads as zero without being resident, so the byte written must not be zero.
    for offset in (0..len).step_by(PAGE).chain([len - 1]) {
        // SAFETY: `offset < len <= capacity`, and writing a u8 into a Vec's spare capacity
        // through its pointer is allowed. Volatile, because nothing ever reads these bytes
        // and the optimiser would otherwise drop the writes.
        unsafe { chunk.as_mut_ptr().add(offset).write_volatile(1u8) };
    }
    Ok(chunk)
}

/// Spins on the CPU for `ms` milliseconds in this function's own code: a known hot wasm
/// function for the time profile to find by name (its test looks for it). The clock, a host
/// call, is read once per 100,000 rounds, so nearly all the time is spent here. Never
/// inlined, so it keeps its own name.
#[inline(never)]
fn burn(ms: u32) {
    if ms == 0 {
        return;
    }
    let until = Instant::now() + Duration::from_millis(ms.into());
    let mut mixed = 0x9e37_79b9_7f4a_7c15_u64;
    while Instant::now() < until {
        for round in 0..100_000_u64 {
            mixed = (mixed ^ round).rotate_left(7).wrapping_mul(0x2545_f491_4f6c_dd1d);
        }
        mixed = std::hint::black_box(mixed);
    }
}

/// xorshift64: chunk sizes need variety, not quality, and this spares a `rand` dependency.
struct XorShift(u64);

impl XorShift {
    /// `RandomState`'s keys come from wasi:random, so every instance sees other sizes.
    fn seeded() -> Self {
        Self(RandomState::new().build_hasher().finish() | 1)
    }

    fn between(&mut self, low: u32, high: u32) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        low + (self.0 % u64::from(high - low + 1)) as u32
    }
}
