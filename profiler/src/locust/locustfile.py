"""skillprof's Locust user, written into each run folder and loaded by the master and every
worker. The plan (which requests to send) is a JSON file skillprof writes from the host
profile's dialect, named by SKILLPROF_LOAD_PLAN, so this file knows no host API.

Each user is given one request (one skill) in turn, and sends it again as soon as it is
answered: the skill's own WAIT_MS is the think time."""

import itertools
import json
import os

import locust.stats
from locust import FastHttpUser, constant, task

# The master's /stats/requests reports these per skill and in total (its default is 95 and
# 99); the median is reported apart.
locust.stats.PERCENTILES_TO_STATISTICS = [0.5, 0.9, 0.99]

with open(os.environ["SKILLPROF_LOAD_PLAN"], encoding="utf-8") as plan_file:
    PLAN = json.load(plan_file)

_turn = itertools.count()


class SkillUser(FastHttpUser):
    wait_time = constant(0)
    # A request sleeps WAIT_MS in the skill; a timeout shorter than that would fail them all.
    network_timeout = PLAN["timeout_s"]
    connection_timeout = PLAN["timeout_s"]

    def on_start(self):
        requests = PLAN["requests"]
        self.request = requests[next(_turn) % len(requests)]

    @task
    def execute(self):
        request = self.request
        success = request["success"]
        # The host profile's statuses of success, or else Locust's own rule (below 400).
        with self.client.request(
            request["method"],
            request["path"],
            data=request["body"],
            headers=request["headers"],
            name=request["skill"],
            catch_response=True,
        ) as response:
            if success and response.status_code in success:
                response.success()
            elif success:
                response.failure(f"status {response.status_code}, expected one of {success}")
