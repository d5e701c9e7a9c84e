"""What the schedules' firing task costs with many schedules stored: 10 against --stored
(10 000) schedules, measured side by side in one run, taking turns, on one redis-server.

    .venv/bin/python -m benchmarks.schedules_bench [--stored 10000] [--runs 30]

Each deployment holds 10 schedules due every second and the rest active but due tomorrow.
A run is one `workers.firing.fire_due` at an injected time: with nothing due (the cost of
looking), and with the 10 due (10 jobs made and 10 schedules advanced). Prints the median
wall time and the Redis commands of each (those the scripts run included), and the ratio
stored/10: the firing reads the due index only, so it should stay near 1 whatever the
number stored.

Starts its own redis-server on a free loopback port; touches nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import httpx
import msgspec

from benchmarks import harness
from benchmarks.report import Column, Table
from benchmarks.timing import commands_processed, in_turn, median, ratio
from scheduler.config import Settings
from scheduler.models.schedule import ScheduleRequest, new_schedule, schedule_encoder
from scheduler.nodes.registry import BuiltinRegistry
from scheduler.store.scripts.schedules import create_schedule
from scheduler.store.scripts.snapshot import finish_restore
from scheduler.store.sync_store import SyncJobStore
from workers.context import Context
from workers.firing import fire_due

DUE = 10


def deployment(url: str, stored: int, start: int) -> Context:
    """A deployment with `stored` schedules: DUE of them every second from `start`, the rest
    daily, due a day later; one live node."""
    settings = Settings.from_env(
        {},
        redis_url=url,
        redis_prefix=f"bench-{uuid.uuid4().hex[:8]}",
        scheduler_db=":memory:",
        node_ttl_secs=86400,
        max_jobs_per_node=1,
        max_schedules=stored + 1,
    )
    store = SyncJobStore.connect(settings)
    store.run(finish_restore(0, "benchmark"))
    store.redis.zadd(store.keys.nodes_compute, {"bench-node": start})
    for i in range(stored):
        every = 1 if i < DUE else 86400
        body = {"name": f"s{i:06}", "every_secs": every, "job": {"command": "true"}}
        request = msgspec.convert(body, ScheduleRequest)
        schedule = new_schedule(request, uuid.uuid4().hex, start - 1)
        if every == 1:
            schedule = msgspec.structs.replace(schedule, next_tick=start)
        record = schedule_encoder.encode(schedule)
        store.run(create_schedule(schedule.name, record, schedule.next_tick, stored + 1))
    return Context(settings, store, httpx.Client())


def one_run(ctx: Context, now: float) -> tuple[float, int]:
    before = commands_processed(ctx.redis)
    began = time.perf_counter()
    counts = asyncio.run(fire_due(ctx, now, BuiltinRegistry()))
    took = time.perf_counter() - began
    # The INFO call itself is one command.
    assert sum(counts.values()) in (0, DUE), counts
    return took, commands_processed(ctx.redis) - before - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stored", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    start = int(time.time()) + 10
    labels = ("10", str(args.stored))
    with harness.redis_server() as url:
        contexts = dict(
            zip(
                labels,
                (deployment(url, DUE, start), deployment(url, args.stored, start)),
                strict=True,
            )
        )
        results: dict[tuple[str, str], list[tuple[float, int]]] = {}
        for k in range(args.runs):
            tick = start + k
            for label in in_turn(labels, k):
                # Nothing due just before the tick, then the 10 due at it: side by side.
                ctx = contexts[label]
                results.setdefault((label, "nothing due"), []).append(one_run(ctx, tick - 0.5))
                results.setdefault((label, f"{DUE} due"), []).append(one_run(ctx, tick))
        for ctx in contexts.values():
            ctx.close()
    table = Table(Column("ms per run", "7.3f"), Column("Redis commands", "14.0f"), label_width=34)
    table.header()
    for case in ("nothing due", f"{DUE} due"):
        medians = {}
        for label in labels:
            runs = results[(label, case)]
            medians[label] = median(t for t, _ in runs) * 1000
            table.row(
                f"{case}, {label} schedules stored", medians[label], median(c for _, c in runs)
            )
        stored_over = ratio(medians[labels[1]], medians["10"])
        Table(Column("ratio", "7.2f"), label_width=34).row(
            f"{case}: {args.stored} stored / 10 stored", stored_over
        )


if __name__ == "__main__":
    main()
