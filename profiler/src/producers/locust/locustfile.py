"""skillprof's Locust users, written into each run folder and loaded by the master and every
worker. The plan (which requests to send) is a JSON file skillprof writes from the host
profile's dialect, named by SKILLPROF_LOAD_PLAN, so this file knows no host API.

l_execute_all (SkillUser, a closed loop): each user is given one request (one skill) in turn,
and sends it again as soon as it is answered: the skill's own WAIT_MS is the think time.

lo_execute (ScheduleUser, an open loop): one user per worker sends its share of the rate on
a schedule of its own, each request in a greenlet of its own so that a slow answer never
delays the next send, and reports each request's time from its scheduled send, so that a
stall is charged to every request it delayed; the master merges the workers' histograms.
At its end the user writes what Locust's figures cannot hold (sends, late sends, the send
lag) beside the plan, and stops."""

import itertools
import json
import os
import random
import time

import gevent
import gevent.pool
import locust.stats
from locust import FastHttpUser, constant, task
from locust.exception import StopUser

# The master's /stats/requests reports these per skill and in total (its default is 95 and
# 99); the median is reported apart.
locust.stats.PERCENTILES_TO_STATISTICS = [0.5, 0.9, 0.99]

with open(os.environ["SKILLPROF_LOAD_PLAN"], encoding="utf-8") as plan_file:
    PLAN = json.load(plan_file)

_turn = itertools.count()


def send(client, request, due=None):
    """One request of the plan; with `due`, its time counts from that scheduled instant."""
    success = request["success"]
    # The host profile's statuses of success, or else Locust's own rule (below 400).
    with client.request(
        request["method"],
        request["path"],
        data=request["body"],
        headers=request["headers"],
        name=request["skill"],
        catch_response=True,
    ) as response:
        if due is not None:
            response.request_meta["response_time"] = (time.monotonic() - due) * 1e3
        if success and response.status_code in success:
            response.success()
        elif success:
            response.failure(f"status {response.status_code}, expected one of {success}")


class SkillUser(FastHttpUser):
    abstract = "schedule" in PLAN
    wait_time = constant(0)
    # A request sleeps WAIT_MS in the skill; a timeout shorter than that would fail them all.
    network_timeout = PLAN["timeout_s"]
    connection_timeout = PLAN["timeout_s"]

    def on_start(self):
        requests = PLAN["requests"]
        self.request = requests[next(_turn) % len(requests)]

    @task
    def execute(self):
        send(self.client, self.request)


# A send this much after its scheduled time is late. gevent's timers wake within about a
# millisecond of the time asked (its loop waits in whole milliseconds), so a worker that keeps
# up was 1.1-1.4 ms late on its 99th percentile (cmds/locust_open.cmds); skillprof's own
# generator's rule is 1 ms.
LATE_S = 0.002


class ScheduleUser(FastHttpUser):
    abstract = "schedule" not in PLAN
    wait_time = constant(0)
    network_timeout = PLAN["timeout_s"]
    connection_timeout = PLAN["timeout_s"]
    # Connections on the wire at once: past them, sends wait for one (their time still counts
    # from the schedule).
    concurrency = 256

    @task
    def schedule(self):
        plan = PLAN["schedule"]
        request = PLAN["requests"][0]
        rate = plan["rps"]
        # Each worker's own seed: the workers' Poisson arrivals are independent, so their sum
        # is Poisson at the whole rate.
        rng = random.Random(os.getpid())
        start = time.monotonic() + 0.02
        end = start + plan["seconds"]
        lags = []
        late = 0
        pool = gevent.pool.Pool()
        due = start
        while due < end:
            delay = due - time.monotonic()
            if delay > 0:
                gevent.sleep(delay)
            lag = time.monotonic() - due
            lags.append(lag)
            late += lag > LATE_S
            pool.spawn(send, self.client, request, due)
            due += rng.expovariate(rate) if plan["poisson"] else 1.0 / rate
        pool.join(timeout=PLAN["timeout_s"])
        lags.sort()
        summary = {
            "sent": len(lags),
            "late_sends": late,
            "send_lag_p99_ms": lags[int(0.99 * (len(lags) - 1))] * 1e3 if lags else 0.0,
            "unanswered": len(pool),
        }
        path = f"{plan['out']}.{os.getpid()}.json"
        with open(path + ".partial", "w", encoding="utf-8") as out:
            json.dump(summary, out)
        os.rename(path + ".partial", path)
        raise StopUser()
