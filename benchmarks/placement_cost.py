"""Redis time (INFO commandstats) of a submit and of the agent's poll with 10, 100 and 1 000
registered compute nodes and 100 000 pending jobs, for this version and another (--against
REF, the version before placement by fit, say), side by side in one run, with the ratios.

    .venv/bin/python -m benchmarks.placement_cost [--jobs 100000] [--calls 2000]
        [--nodes 10,100,1000] [--against REF]

Each version runs in a process of its own (the checkout first on its path; REF checked out
in a temporary directory, harness.checkout) against a redis-server of its own: it registers
10 nodes, submits `--jobs` jobs (they stay pending: no agent takes them), then measures,
registers nodes up to 100 and measures, then up to 1 000. Calls are pipelined from one
client, so a figure is Redis's own time per call, not a latency. Besides the plain submit
(CREATE_JOB of a job that asks nothing) and the poll (POLL, a node's head), this version's
submits that ask cpus (placed), name a node (the label sets), ask more than any node offers
(no_fit) or more than any has free (full) are measured too, and a placement pass over 200
waiting jobs; the version before has no such figure (no ratio). Each figure is the median of
3 measures. The machine is shared: figures move by 10 to 30% between runs (the poll, whose
script is unchanged, shows how much), so compare the versions of one run, or count
instructions (script_instructions.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from benchmarks import harness
from benchmarks.report import Column, Table
from benchmarks.timing import calls_usec, evalsha_usec, median

NODE_COUNTS = "10,100,1000"
RUNS = 3  # each case measured so often; its median is the figure
BODY = (
    b'{"command":"echo hello","status":"pending","retry_count":0,'
    b'"created_at":"2026-01-01T00:00:00.000000Z"}'
)


def _register(client: redis.Redis, root: str, first: int, last: int, now: float) -> None:
    """Nodes n<first> .. n<last - 1>, each offering 1024 cpus (room for every job measured),
    through REGISTER_NODE."""
    import msgspec

    from scheduler.models.registry import Node
    from scheduler.store.scripts import nodes
    from scheduler.store.scripts.retry import RetryPolicy

    who = nodes.Registration("key", "open", False, 100_000, 30.0, RetryPolicy(1, 0, 3600))
    calls = []
    for i in range(first, last):
        record = msgspec.json.encode(
            Node(id=f"n{i}", hostname=f"h{i}", cpu_count=1024, role="compute")
        )
        calls.append(nodes.register_node(f"n{i}", record, "compute", now, who, f"t{i}", 1000))
    calls_usec(client, root, calls)


def _submits(now: float, count: int, **asks: Any) -> list[Any]:
    """`count` CREATE_JOB calls of one job (asking `asks`, with this version's Asks)."""
    from scheduler.nodes.placement import Placement
    from scheduler.store.scripts import jobs

    extra: dict[str, Any] = {}
    record = BODY
    if asks:  # the record says what the job asks, as a submit's does (models.job order)
        extra["asks"] = jobs.Asks(**asks)  # type: ignore[attr-defined,unused-ignore]
        record = BODY[:-1] + b"," + json.dumps(asks, separators=(",", ":")).encode()[1:]
    return [jobs.create_job(record, Placement.live(), now, 30.0, **extra) for _ in range(count)]


def _named_submits(now: float, count: int) -> list[Any]:
    return _submits(now, count, node_selector={"node.id": "n3"})


def _pass_time(client: redis.Redis, now: float) -> float:
    """µs of one PLACE_UNPLACED call over 200 waiting jobs that fit no node (the submits of
    "fits no node"), flagged as after room appeared: the median of RUNS."""
    from scheduler.store.keys import Keys
    from scheduler.store.scripts import upkeep

    keys = Keys("bench")
    call = upkeep.place_unplaced(now, 30.0, 200)  # type: ignore[attr-defined,unused-ignore]
    sha = client.script_load(call.script.text)
    runs = []
    for _ in range(RUNS):
        client.set(keys.unplaced_retry, "-inf")  # type: ignore[attr-defined,unused-ignore]
        client.config_resetstat()
        client.evalsha(sha, 1, keys.root, *call.args)
        runs.append(evalsha_usec(client))
    return median(runs)


def measure(jobs: int, calls: int, counts: list[int]) -> dict[str, float]:
    """This checkout's figures (the one first on the path), against a redis-server of its own."""
    from scheduler.store.keys import Keys
    from scheduler.store.scripts import jobs as job_scripts

    asks_fit = hasattr(job_scripts, "Asks")
    keys = Keys("bench")
    now = time.time()
    figures: dict[str, float] = {}
    with harness.redis_server() as url, harness.connected(url) as client:
        client.set(keys.initialised, "benchmark")
        registered = 0
        for count in counts:
            _register(client, keys.root, registered, count, now)
            registered = count
            if count == counts[0]:
                calls_usec(client, keys.root, _submits(now, jobs))
            cases: list[tuple[str, Callable[[], list[Any]]]] = [
                ("submit", lambda: _submits(now, calls)),
                (
                    "poll",
                    lambda count=count: [
                        harness.poll_call(job_scripts, f"n{i % count}") for i in range(calls)
                    ],
                ),
            ]
            if asks_fit:
                cases.append(("submit, asks 1 cpu", lambda: _submits(now, calls, cpus=1)))
                cases.append(("submit, names a node", lambda: _named_submits(now, calls)))
                cases.append(("submit, fits no node", lambda: _submits(now, calls, cpus=2048)))
                # Every node offers 1024 and holds some of the 1-cpu jobs: none has room.
                cases.append(("submit, nodes full", lambda: _submits(now, calls, cpus=1024)))
            for name, build in cases:
                runs = [calls_usec(client, keys.root, build()) for _ in range(RUNS)]
                figures[f"{name}, {count} nodes"] = median(runs)
            if asks_fit:
                figures[f"placement pass, 200 waiting, {count} nodes"] = _pass_time(client, now)
    return figures


def measured(code: Path, jobs: int, calls: int, counts: str) -> dict[str, float]:
    """`measure` in a process of its own on the checkout at `code`."""
    argv = ["--measure", "--jobs", str(jobs), "--calls", str(calls), "--nodes", counts]
    out = harness.run_module("placement_cost", *argv, code=code)
    figures: dict[str, float] = json.loads(out.splitlines()[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="pending jobs stored")
    parser.add_argument("--calls", type=int, default=2000, help="calls measured per case")
    parser.add_argument("--against", default="", metavar="REF", help="a commit to compare")
    parser.add_argument("--nodes", default=NODE_COUNTS, help="node counts, ascending")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.jobs, args.calls, [int(n) for n in args.nodes.split(",")])))
        return 0
    ours = measured(harness.ROOT, args.jobs, args.calls, args.nodes)
    theirs: dict[str, float] = {}
    if args.against:
        with harness.checkout(args.against) as other:
            theirs = measured(other, args.jobs, args.calls, args.nodes)
    columns = [Column("µs/call", "8.2f")]
    if args.against:
        columns += [Column(f"{args.against} µs/call", "8.2f"), Column("ratio", "6.2f")]
    table = Table(*columns, label_width=32)
    table.header()
    for label, figure in ours.items():
        before = theirs.get(label)
        table.row(label, figure, *([] if before is None else [before, figure / before]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
