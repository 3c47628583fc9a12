"""The binding layer for the world skillprof:skill (skills/wit/skillprof): a world-level
`run`. The skill itself is module `app` on the Python path; see sample_work.answer."""

import app
import wit_world
from sample_work import answer
from wit_world.imports.types import Err, Error_Internal, Error_InvalidInput


class WitWorld(wit_world.WitWorld):
    def run(self, input: bytes) -> bytes:
        return answer(app.run, input, Err, Error_InvalidInput, Error_Internal)
