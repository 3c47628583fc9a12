"""sample_py's work with a native dependency, as the 2024 study's skill had: the input is a
pydantic model, validated by pydantic-core (Rust compiled to WASI, from the wheel PyPI's
pharia-skill package ships). Built by componentize-py 0.17 (CPython 3.12), which that wheel
needs.

Input: {"topic": str, "memory": KiB, "wait_time": ms}, all optional.
"""

import wit_world
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from sample_work import MAX_MEMORY_KB, MAX_WAIT_MS, work
from wit_world.imports.types import Error_Internal, Error_InvalidInput
from wit_world.types import Err


class Input(BaseModel):
    """The 2024 harness's skill input. Strict: `true` is not a number, "5" is not one either."""

    model_config = ConfigDict(extra="ignore")

    topic: StrictStr = "world"
    memory: StrictInt = Field(0, ge=0, le=MAX_MEMORY_KB)
    wait_time: StrictInt = Field(0, ge=0, le=MAX_WAIT_MS)


class WitWorld(wit_world.WitWorld):
    def run(self, input: bytes) -> bytes:
        try:
            doc = Input.model_validate_json(input)
        except ValidationError as e:
            raise Err(Error_InvalidInput(str(e)))
        try:
            return work("sample_py_pydantic", doc.topic, doc.memory, doc.wait_time)
        except MemoryError:
            # The host's memory limit: an `internal` error rather than a trap, as in sample_rs.
            raise Err(Error_Internal("out of memory allocating the chunks"))
