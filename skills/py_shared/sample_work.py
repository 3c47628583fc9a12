"""What both Python sample skills do once their input is valid, shared so that sample_py and
sample_py_pydantic differ only in how they validate it: allocate `memory_kb` KiB in chunks of
`chunk_kb` KiB, or of random size between 100 and 300 KiB when it is 0, make every page resident, spend `burn_ms` on the CPU,
sleep `wait_ms` through WASI, and answer in JSON.

Neither componentize-py's `Err` nor the WIT error types appear in the skills: each world's
binding layer (skills/py_worlds) passes its own to `answer`, which is all that differs between
the builds of one skill for two worlds.
"""

import json
import random
import time

# The host backs linear memory with 4 KiB pages: one write per page makes a chunk resident.
PAGE = 4096
CHUNK_MIN_KB = 100
CHUNK_MAX_KB = 300
# The same bounds as sample_rs: a 32-bit linear memory holds 4 GiB, and wait_time is a u32
# there.
MAX_MEMORY_KB = 4 * 1024 * 1024
MAX_WAIT_MS = 2**32 - 1
MAX_BURN_MS = 2**32 - 1


class InvalidInput(ValueError):
    """The request's input is not what the skill accepts: WIT `error::invalid-input`."""


def answer(run, input: bytes, err, invalid_input, internal) -> bytes:
    """`run(input)`, its failures raised as the world's `err(invalid_input(...))` or
    `err(internal(...))`."""
    try:
        return run(input)
    except InvalidInput as e:
        raise err(invalid_input(str(e)))
    except MemoryError:
        # The host's memory limit: an `internal` error rather than a trap, as in sample_rs.
        raise err(internal("out of memory allocating the chunks"))


def work(
    skill: str, topic: str, memory_kb: int, wait_ms: int, burn_ms: int = 0, chunk_kb: int = 0
) -> bytes:
    """The reply of `skill`; raises MemoryError when the host's memory limit is reached."""
    # A fresh generator per call: componentize-py snapshots the interpreter at build time,
    # and a module-level seed would be baked into every instance.
    sizes = chunk_sizes(memory_kb, chunk_kb, random.Random())
    chunks = [resident_chunk(kb) for kb in sizes]
    burn(burn_ms)
    # CPython on WASI sleeps through wasi:clocks + wasi:io/poll, so an async host can run
    # other requests meanwhile.
    time.sleep(wait_ms / 1000)
    reply = json.dumps({
        "greeting": f"Hello {topic}, from {skill}",
        "chunks": len(chunks),
        "memory_kb": memory_kb,
        "wait_ms": wait_ms,
        "burn_ms": burn_ms,
    }).encode()
    # The memory stays resident until the reply exists, as a real skill's working set does.
    del chunks
    return reply


def chunk_sizes(total_kb: int, chunk_kb: int, rng: random.Random) -> list[int]:
    """Sizes of `chunk_kb`, or random ones when it is 0, while at least a full chunk is left;
    the last chunk takes the remainder. `chunk_kb` = `total_kb` is one allocation of the
    whole: the 2024 study's single-chunk twin of mem_chunks_2."""
    sizes = []
    left = total_kb
    full = chunk_kb or CHUNK_MAX_KB
    while left >= full:
        kb = chunk_kb or rng.randint(CHUNK_MIN_KB, CHUNK_MAX_KB)
        sizes.append(kb)
        left -= kb
    if left > 0:
        sizes.append(left)
    return sizes


def resident_chunk(kb: int) -> bytearray:
    """A chunk of `kb` KiB with every page written non-zero: fresh linear memory reads as
    zero without being resident."""
    chunk = bytearray(kb * 1024)
    pages = range(0, len(chunk), PAGE)
    chunk[0::PAGE] = b"\x01" * len(pages)
    chunk[-1] = 1  # the page the chunk ends in
    return chunk


def burn(ms: int) -> None:
    """Spins on the CPU for `ms` milliseconds in the interpreter: the clock, a host call, is
    read once per 10,000 rounds."""
    until = time.monotonic() + ms / 1000
    mixed = 0
    while time.monotonic() < until:
        for round in range(10_000):
            mixed = (mixed * 31 + round) & 0xFFFFFFFF
