"""The sample skill in pure Python: the same contract and behaviour as sample_rs, so the
profiler can compare the two runtimes on the same work. It validates its input by hand;
sample_py_pydantic does the same work and validates with pydantic, as 2024's skills did.
A world's binding layer (skills/py_worlds) calls `run`.

Input: {"topic": str, "memory": KiB, "chunk_kb": KiB, "wait_time": ms, "burn_ms": ms}, all
optional.
"""

import json

from sample_work import MAX_BURN_MS, MAX_MEMORY_KB, MAX_WAIT_MS, InvalidInput, work


def run(input: bytes) -> bytes:
    topic, memory_kb, wait_ms, burn_ms, chunk_kb = parse(input)
    return work("sample_py", topic, memory_kb, wait_ms, burn_ms, chunk_kb)


def parse(input: bytes) -> tuple[str, int, int, int, int]:
    """Raises InvalidInput for anything but the documented input."""
    try:
        doc = json.loads(input)
    except ValueError as e:  # covers invalid UTF-8 too
        raise InvalidInput(f"input is not JSON: {e}")
    if not isinstance(doc, dict):
        raise InvalidInput("input must be a JSON object")
    topic = doc.get("topic", "world")
    if not isinstance(topic, str):
        raise InvalidInput("topic must be a string")
    return (
        topic,
        count(doc, "memory", MAX_MEMORY_KB),
        count(doc, "wait_time", MAX_WAIT_MS),
        count(doc, "burn_ms", MAX_BURN_MS),
        count(doc, "chunk_kb", MAX_MEMORY_KB),
    )


def count(doc: dict, key: str, maximum: int) -> int:
    value = doc.get(key, 0)
    # bool is an int subclass in Python, but `true` is not a number in JSON.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= maximum:
        raise InvalidInput(f"{key} must be an integer from 0 to {maximum}")
    return value
