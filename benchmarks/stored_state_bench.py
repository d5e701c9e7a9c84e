"""Whether a path's Redis work stays bounded whatever is stored (issue 23, item 10): the
per-call cost of the submit (CREATE_JOB, pending and delayed), the agent's poll (POLL), the
worker's promotion of due jobs (PROMOTE_DUE) and the schedules' due read (DUE_SCHEDULES) in a
deployment holding nothing else against one holding --delayed (100 000) delayed jobs and
--schedules (10 000) schedules, measured side by side in one run on one redis-server.

    .venv/bin/python -m benchmarks.stored_state_bench [--delayed 100000] [--schedules 10000]
        [--calls 2000] [--runs 7]

Both deployments have the same 10 live nodes. The stored one's delayed jobs (made through
CREATE_JOB, as a submit makes them) are due tomorrow and its schedules (CREATE_SCHEDULE, as
POST /schedules stores them) every day from the next midnight, so none is due during the run: they
are what the paths must not pay for. Each run measures every phase once per deployment,
the order of the two swapped every run (this machine is shared and noisy); a phase is
--calls calls pipelined from one client. Prints, per phase and deployment, the median over
the runs of Redis' own time per call (INFO commandstats usec_per_call of EVALSHA) and the
Redis commands per call (those the script runs included: INFO total_commands_processed),
each beside its ratio stored / empty: near 1 for bounded work.

Starts its own redis-server on a free loopback port; touches nothing else.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import redis

from benchmarks import harness
from benchmarks.new_jobs import creation
from benchmarks.report import Column, Table
from benchmarks.timing import (
    commands_processed,
    evalsha_many,
    median,
    ratio,
    rounds,
    script_usec,
)
from scheduler.models.job import JobCreate, due_of, new_job, stamped
from scheduler.models.schedule import ScheduleRequest, new_schedule, schedule_encoder
from scheduler.nodes.placement import Placement
from scheduler.store.keys import Keys
from scheduler.store.scripts import Call
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.scripts.schedules import create_schedule, due_schedules
from scheduler.store.scripts.upkeep import promote_due

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

    def send(self, calls: list[Call[Any]]) -> None:
        evalsha_many(self.client, self.keys.root, calls[0].script.text, [c.args for c in calls])

    def measured(self, calls: list[Call[Any]]) -> tuple[float, float]:
        """(Redis µs per call, Redis commands per call) of `calls`."""
        text, args = calls[0].script.text, [call.args for call in calls]
        usec = script_usec(self.client, self.keys.root, text, args)
        # INFO commandstats and INFO stats count themselves; RESETSTAT zeroed the count
        # before the calls.
        return usec, (commands_processed(self.client) - 2) / len(calls)

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
        return [harness.poll_call(job_scripts, NODES[i % len(NODES)]) for i in range(calls)]

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
        return [due_schedules(now, 0, 100) for _ in range(calls)]

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
    with harness.redis_server() as url, harness.connected(url) as client:
        empty, stored = Deployment(client, "empty", now), Deployment(client, "stored", now)
        stored.store_state(args.delayed, args.schedules)
        print(f"empty store against {args.delayed} delayed + {args.schedules} schedules")
        table = Table(
            Column("empty µs/call", "7.2f"),
            Column("stored µs/call", "7.2f"),
            Column("x µs", "5.2f"),
            Column("empty commands", "6.1f"),
            Column("stored commands", "6.1f"),
            Column("x commands", "5.2f"),
            label_width=26,
        )
        table.header("stored / empty: x")
        for name, build in phases(args.calls, now):
            # The two deployments take turns, run by run: this machine is shared and noisy.
            runs = rounds(
                {d.label: lambda d=d, b=build: d.measured(b(d)) for d in (empty, stored)},
                args.runs,
            )
            (eu, ec), (su, sc) = (
                (median(u for u, _ in runs[who]), median(c for _, c in runs[who]))
                for who in ("empty", "stored")
            )
            table.row(name, eu, su, ratio(su, eu), ec, sc, ratio(sc, ec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
