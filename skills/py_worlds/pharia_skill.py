"""The binding layer for the world pharia:skill@0.2 (skills/wit/pharia), which the 2024 host
runs: `run` in the exported interface skill-handler. The skill itself is module `app` on the
Python path; see sample_work.answer."""

import app
from sample_work import answer
from wit_world import exports
from wit_world.exports.skill_handler import Err, Error_Internal, Error_InvalidInput


class SkillHandler(exports.SkillHandler):
    def run(self, input: bytes) -> bytes:
        return answer(app.run, input, Err, Error_InvalidInput, Error_Internal)
