"""The sample skill in Python: the same contract and behaviour as sample_rs, so the profiler
can compare the two runtimes on the same work.

Input: {"topic": str, "memory": KiB, "wait_time": ms}, all optional.
"""

import json
import random
import time

import wit_world
from componentize_py_types import Err
from wit_world.imports.types import Error_Internal, Error_InvalidInput

# The host backs linear memory with 4 KiB pages: one write per page makes a chunk resident.
PAGE = 4096
CHUNK_MIN_KB = 100
CHUNK_MAX_KB = 300
# The same bounds as sample_rs: a 32-bit linear memory holds 4 GiB, and wait_time is a u32
# there.
MAX_MEMORY_KB = 4 * 1024 * 1024
MAX_WAIT_MS = 2**32 - 1


class WitWorld(wit_world.WitWorld):
    def run(self, input: bytes) -> bytes:
        topic, memory_kb, wait_ms = parse(input)
        # A fresh generator per call: componentize-py snapshots the interpreter at build
        # time, and a module-level seed would be baked into every instance.
        try:
            chunks = [resident_chunk(kb) for kb in chunk_sizes(memory_kb, random.Random())]
        except MemoryError:
            # The host's memory limit: an `internal` error rather than a trap, as in sample_rs.
            raise Err(Error_Internal("out of memory allocating the chunks"))
        # CPython on WASI sleeps through wasi:clocks + wasi:io/poll, so an async host can
        # run other requests meanwhile.
        time.sleep(wait_ms / 1000)
        reply = json.dumps({
            "greeting": f"Hello {topic}, from sample_py",
            "chunks": len(chunks),
            "memory_kb": memory_kb,
            "wait_ms": wait_ms,
        }).encode()
        # The memory stays resident until the reply exists, as a real skill's working set does.
        del chunks
        return reply


def parse(input: bytes) -> tuple[str, int, int]:
    """Raises the WIT `invalid-input` error for anything but the documented input."""
    try:
        doc = json.loads(input)
    except ValueError as e:  # covers invalid UTF-8 too
        raise Err(Error_InvalidInput(f"input is not JSON: {e}"))
    if not isinstance(doc, dict):
        raise Err(Error_InvalidInput("input must be a JSON object"))
    topic = doc.get("topic", "world")
    if not isinstance(topic, str):
        raise Err(Error_InvalidInput("topic must be a string"))
    return topic, count(doc, "memory", MAX_MEMORY_KB), count(doc, "wait_time", MAX_WAIT_MS)


def count(doc: dict, key: str, maximum: int) -> int:
    value = doc.get(key, 0)
    # bool is an int subclass in Python, but `true` is not a number in JSON.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= maximum:
        raise Err(Error_InvalidInput(f"{key} must be an integer from 0 to {maximum}"))
    return value


def chunk_sizes(total_kb: int, rng: random.Random) -> list[int]:
    """Random sizes while at least a full chunk is left; the last chunk takes the remainder."""
    sizes = []
    left = total_kb
    while left >= CHUNK_MAX_KB:
        kb = rng.randint(CHUNK_MIN_KB, CHUNK_MAX_KB)
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
