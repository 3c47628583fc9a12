"""sample_py's work with a native dependency, as the 2024 study's skill had: the input is a
pydantic model, validated by pydantic-core (Rust compiled to WASI, from the wheel the published
pharia-skill package ships). Built by componentize-py 0.17 (CPython 3.12), which that wheel
needs. A world's binding layer (skills/py_worlds) calls `run`.

Input: {"topic": str, "memory": KiB, "chunk_kb": KiB, "wait_time": ms, "burn_ms": ms}, all
optional.
"""

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from sample_work import MAX_BURN_MS, MAX_MEMORY_KB, MAX_WAIT_MS, InvalidInput, work


class Input(BaseModel):
    """The 2024 harness's skill input. Strict: `true` is not a number, "5" is not one either."""

    model_config = ConfigDict(extra="ignore")

    topic: StrictStr = "world"
    memory: StrictInt = Field(0, ge=0, le=MAX_MEMORY_KB)
    wait_time: StrictInt = Field(0, ge=0, le=MAX_WAIT_MS)
    burn_ms: StrictInt = Field(0, ge=0, le=MAX_BURN_MS)
    chunk_kb: StrictInt = Field(0, ge=0, le=MAX_MEMORY_KB)


def run(input: bytes) -> bytes:
    try:
        doc = Input.model_validate_json(input)
    except ValidationError as e:
        raise InvalidInput(str(e))
    return work("sample_py_pydantic", doc.topic, doc.memory, doc.wait_time, doc.burn_ms, doc.chunk_kb)
