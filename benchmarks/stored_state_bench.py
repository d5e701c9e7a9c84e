"""Whether a path's Redis work stays bounded whatever is stored (issue 23, item 10): the
per-call cost of the submit (CREATE_JOB, pending and delayed), the agent's poll (POLL), the
worker's promotion of due jobs (PROMOTE_DUE) and the schedules' due read (DUE_SCHEDULES) in a
deployment holding nothing else against one holding --delayed (100 000) delayed jobs and
--schedules (10 000) schedules, measured side by side in one run on one redis-server.

    .venv/bin/python benchmarks/stored_state_bench.py [--delayed 100000] [--schedules 10000]
        [--calls 2000] [--runs 7]

Both deployments have the same 10 live nodes. The stored one's delayed jobs (made through
CREATE_JOB, as a submit makes them) are due tomorrow and its schedules (CREATE_SCHEDULE, as
POST /schedules stores them) every day from tomorrow, so none is due during the run: they
are what the paths must not pay for. Each run measures every phase once per deployment,
the order of the two swapped every run (this machine is shared and noisy); a phase is
--calls calls pipelined from one client. Prints, per phase and deployment, the median over
the runs of Redis' own time per call (INFO commandstats usec_per_call of EVALSHA) and the
Redis commands per call (those the script runs included: INFO total_commands_processed),
then the ratios stored / empty: near 1 for bounded work.

Starts its own redis-server on a free loopback port; touches nothing else.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from new_jobs import creation  # noqa: E402

from scheduler.models.job import (  # noqa: E402
    JobCreate,
    due_of,
    new_job,
    stamped,
)
from scheduler.models.schedule import ScheduleRequest, new_schedule, schedule_encoder  # noqa: E402
from scheduler.nodes.placement import Placement  # noqa: E402
from scheduler.store.keys import Keys  # noqa: E402
from scheduler.store.scripts import Call  # noqa: E402
from scheduler.store.scripts import jobs as job_scripts  # noqa: E402
from scheduler.store.scripts.schedules import create_schedule, due_schedules  # noqa: E402
from scheduler.store.scripts.upkeep import promote_due  # noqa: E402
from tests.redis_server import redis_server  # noqa: E402

NODES = [f"n{i}" for i in range(10)]
TTL = 400 * 86400.0  # every node stays live whatever time a call says it is
DAY = 86400.0
PROMOTED = 10  # jobs made due per PROMOTE_DUE call of the "10 due" phase


def _record(now: float, delay: float) -> tuple[tuple[bytes, dict[str, Any]], float | None]:
    request = msgspec.convert({"command": "echo hello", "delay_secs": delay}, JobCreate)
    job = stamped(new_job(request), request, now)
    return creation(job), due_of(job)


class Deployment:
    """A deployment (its own prefix) on the shared server, and how to run calls on it."""

    def __init__(self, client: redis.Redis, label: str, now: float) -> None:
        self.client, self.label, self.now = client, label, now
        self.keys = Keys(f"bench-{label}-{uuid.uuid4().hex[:6]}")
        client.set(self.keys.initialised, "benchmark")
        client.zadd(self.keys.nodes_compute, dict.fromkeys(NODES, now))
        self.shas: dict[str, str] = {}

    def sha(self, call: Call[Any]) -> str:
        text = call.script.text
        return self.shas.get(text) or self.shas.setdefault(text, self.client.script_load(text))

    def send(self, calls: list[Call[Any]]) -> None:
        sha = self.sha(calls[0])
        for start in range(0, len(calls), 1000):
            pipe = self.client.pipeline(transaction=False)
            for call in calls[start : start + 1000]:
                pipe.evalsha(sha, 1, self.keys.root, *call.args)
            pipe.execute()

    def measured(self, calls: list[Call[Any]]) -> tuple[float, float]:
        """(Redis µs per call, Redis commands per call) of `calls`."""
        self.sha(calls[0])
        self.client.config_resetstat()
        self.send(calls)
        stats: Any = self.client.info("commandstats")
        usec = float(stats["cmdstat_evalsha"]["usec_per_call"])
        # INFO stats counts itself; RESETSTAT zeroed the count before the calls.
        total: Any = self.client.info("stats")
        return usec, (int(total["total_commands_processed"]) - 2) / len(calls)

    def store_state(self, delayed: int, schedules: int) -> None:
        record, due = _record(self.now, DAY)
        placement = Placement.among(NODES)
        for start in range(0, delayed, 10_000):
            count = min(10_000, delayed - start)
            # Due tomorrow, spread over an hour: a real delayed index, not one score.
            self.send(
                [
                    job_scripts.create_job(
                        record[0], placement, self.now, TTL, due=(due or 0) + i, **record[1]
                    )
                    for i in range(start % 3600, start % 3600 + count)
                ]
            )
        calls = []
        for i in range(schedules):
            body = {"name": f"s{i:06}", "every_secs": 86400, "job": {"command": "true"}}
            schedule = new_schedule(
                msgspec.convert(body, ScheduleRequest), uuid.uuid4().hex, self.now
            )
            record_ = schedule_encoder.encode(schedule)
            calls.append(create_schedule(schedule.name, record_, schedule.next_tick, schedules))
        if calls:
            self.send(calls)


def phases(calls: int, now: float) -> list[tuple[str, Callable[[Deployment], list[Call[Any]]]]]:
    """(name, the calls of one measurement given the deployment); setup happens in the
    builder, before the measurement."""
    pending, _ = _record(now, 0)
    delayed, due = _record(now, 3600)
    placement = Placement.among(NODES)

    def create_pending(_: Deployment) -> list[Call[Any]]:
        return [
            job_scripts.create_job(pending[0], placement, now, TTL, **pending[1])
            for _ in range(calls)
        ]

    def create_delayed(_: Deployment) -> list[Call[Any]]:
        return [
            job_scripts.create_job(delayed[0], placement, now, TTL, due=due, **delayed[1])
            for _ in range(calls)
        ]

    def poll(_: Deployment) -> list[Call[Any]]:
        return [job_scripts.poll(NODES[i % len(NODES)], 1, "open") for i in range(calls)]

    def promote_none(_: Deployment) -> list[Call[Any]]:
        # Before the jobs the other phases delay by an hour are due.
        return [promote_due(now + 1800, TTL, PROMOTED) for _ in range(calls)]

    def promote_ten(d: Deployment) -> list[Call[Any]]:
        # PROMOTED jobs due in an hour per call to come, made now (not measured).
        d.send(
            [
                job_scripts.create_job(delayed[0], placement, now, TTL, due=due, **delayed[1])
                for _ in range(calls * PROMOTED)
            ]
        )
        return [promote_due(now + 7200, TTL, PROMOTED) for _ in range(calls)]

    def schedules_none(_: Deployment) -> list[Call[Any]]:
        return [due_schedules(now + 3600, 0, 100) for _ in range(calls)]

    return [
        ("CREATE_JOB, pending", create_pending),
        ("CREATE_JOB, delayed", create_delayed),
        ("POLL, finds a job", poll),
        ("PROMOTE_DUE, none due", promote_none),
        (f"PROMOTE_DUE, {PROMOTED} due", promote_ten),
        ("DUE_SCHEDULES, none due", schedules_none),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delayed", type=int, default=100_000)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    now = time.time()
    with redis_server() as url:
        client = redis.Redis.from_url(url)
        empty, stored = Deployment(client, "empty", now), Deployment(client, "stored", now)
        stored.store_state(args.delayed, args.schedules)
        label = f"{args.delayed} delayed + {args.schedules} schedules"
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for run in range(args.runs):
            for name, build in phases(args.calls, now):
                pair = (empty, stored) if run % 2 == 0 else (stored, empty)
                for deployment in pair:
                    calls = build(deployment)
                    results.setdefault((name, deployment.label), []).append(
                        deployment.measured(calls)
                    )
        for name, _ in phases(0, now):
            medians = {}
            for who in ("empty", "stored"):
                runs = results[(name, who)]
                usec = statistics.median(u for u, _ in runs)
                cmds = statistics.median(c for _, c in runs)
                medians[who] = (usec, cmds)
                what = "empty store" if who == "empty" else label
                print(f"{name:26s}  {usec:7.2f} µs/call  {cmds:6.1f} commands/call  {what}")
            (eu, ec), (su, sc) = medians["empty"], medians["stored"]
            print(f"{name:26s}  stored / empty: {su / eu:.2f} x µs, {sc / ec:.2f} x commands")
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
