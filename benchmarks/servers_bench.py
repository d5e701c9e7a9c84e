"""The ASGI servers compared with the real app: GET /jobs/{id}, the agent poll, submit and
update with 1 000 jobs stored, each against the same server's bare ceiling (bare_app.py, a
Starlette app answering constant JSON). scheduler-lane is `scheduler serve`'s default: its
hot lane answers those four calls without Starlette, so the real app can pass that ceiling;
scheduler-one-write is the same protocol with every request through ASGI.

    .venv/bin/python -m benchmarks.servers_bench [--servers scheduler-lane ...]
        [--duration 5] [--rounds 3] [--connections 32]

Servers not installed are skipped (granian and hypercorn are not dependencies: `pip install
granian hypercorn` into the venv to measure them). One process per server and app, one
prefix per server; rounds interleave every server and both apps, medians reported. Every
run starts from exactly 1 000 pending jobs (api_bench.measure). What it cannot isolate: wrk,
Redis and the server share the cores (and other tenants' load).

Last it prints the lane against plain ASGI, from the same run: for each operation the
lane's median over uvicorn-httptools' and over granian's (the real app), and for reads (GET
and the poll) and writes (submit, update) the lane over the best ASGI server of each
operation. docs/PERFORMANCE.md ("The hot lane") keeps the lane only while that read ratio is
above KEEP_LANE_ABOVE.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator

import httpx
import redis

from benchmarks import harness
from benchmarks.api_bench import API_SETTINGS, measure
from benchmarks.bench_state import NODES, preload
from benchmarks.load import GET_LUA, Result, run_wrk
from benchmarks.report import Column, Table
from benchmarks.timing import median

STORED = 1000

# name -> (the module that must be importable, the command; APP and PORT are filled in)
SERVERS = {
    # `scheduler serve`'s default: uvicorn with the hot lane (scheduler/api/lane.py)
    "scheduler-lane": (
        "httptools",
        "uvicorn APP --port PORT --http scheduler.api.server:LaneProtocol --loop uvloop"
        " --no-access-log --log-level warning",
    ),
    "scheduler-one-write": (
        "httptools",
        "uvicorn APP --port PORT --http scheduler.api.server:OneWriteProtocol --loop uvloop"
        " --no-access-log --log-level warning",
    ),
    "uvicorn-httptools": (
        "httptools",
        "uvicorn APP --port PORT --http httptools --loop uvloop --no-access-log"
        " --log-level warning",
    ),
    "uvicorn-h11": (
        "h11",
        "uvicorn APP --port PORT --http h11 --loop asyncio --no-access-log --log-level warning",
    ),
    "granian": (
        "granian",
        "granian --interface asgi --port PORT --loop uvloop --no-ws --log-level warning APP",
    ),
    "hypercorn": (
        "hypercorn",
        "hypercorn --worker-class uvloop --bind 127.0.0.1:PORT --log-level warning APP",
    ),
}
REAL_APP = "benchmarks.real_app:app"
LANE = "scheduler-lane"
PLAIN_ASGI = ("uvicorn-httptools", "granian")  # the ratios printed for each operation
READS, WRITES = ("get", "poll"), ("submit", "update")
# The lane (a uvicorn protocol reaching into its internals, tests/api/test_uvicorn_guard.py)
# is kept only while it beats the best ASGI server on reads by more than this.
KEEP_LANE_ABOVE = 1.15
BARE_APP = "benchmarks.bare_app:app"


@contextlib.contextmanager
def server(name: str, app: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Server `name` serving `app` on a free port; its URL."""
    port = harness.free_port()
    command = SERVERS[name][1].replace("APP", app).replace("PORT", str(port))
    with harness.served([sys.executable, "-m", *command.split()], port, env) as served:
        yield served.url


def one_run(
    client: redis.Redis | None, url: str, op: str, args: argparse.Namespace, prefix: str
) -> Result:
    if op == "get":
        return run_wrk(url, GET_LUA % {"stored": STORED}, args.duration, args.connections)
    return measure(client, url, op, STORED, args, prefix)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", nargs="+", default=list(SERVERS), choices=list(SERVERS))
    parser.add_argument("--ops", nargs="+", default=["get", "poll", "submit", "update"])
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--update-window", type=int, default=STORED)
    parser.add_argument("--update-requests", type=int, default=20_000)
    args = parser.parse_args()
    servers = [s for s in args.servers if importlib.util.find_spec(SERVERS[s][0])]
    for skipped in set(args.servers) - set(servers):
        print(f"# {skipped}: not installed, skipped")
    print(
        f"# {args.connections} connections, {args.duration:g} s runs, 1 process each, "
        f"median of {args.rounds} interleaved rounds, {os.cpu_count()} cores"
    )
    runs: dict[tuple[str, str, str], list[Result]] = {}
    with (
        harness.redis_server() as redis_url,
        harness.connected(redis_url) as client,
        contextlib.ExitStack() as stack,
    ):
        targets = []
        for name in servers:
            bare_url = stack.enter_context(server(name, BARE_APP))
            env = harness.scheduler_env(redis_url, f"srv-{name}", **API_SETTINGS)
            real_url = stack.enter_context(server(name, REAL_APP, env))
            for node in NODES:
                httpx.post(f"{real_url}/nodes/register", json={"id": node}).raise_for_status()
            preload(client, f"srv-{name}", STORED)
            targets.append((name, bare_url, real_url))
        for _ in range(args.rounds):
            for op in args.ops:
                for name, bare_url, real_url in targets:
                    runs.setdefault((op, name, "bare"), []).append(
                        one_run(None, bare_url, op, args, "")
                    )
                    runs.setdefault((op, name, "real"), []).append(
                        one_run(client, real_url, op, args, f"srv-{name}")
                    )
    table = Table(
        Column("ceiling", "8.0f", "req/s"),
        Column("app", "8.0f", "req/s"),
        Column("p50", "6.2f", "ms"),
        Column("of ceiling", "10.2f"),
        Column("non-2xx", "7d"),
        label_width=26,
    )
    table.header()
    for op in args.ops:
        for name in servers:
            bare = median(r.rps for r in runs[(op, name, "bare")])
            real = median(r.rps for r in runs[(op, name, "real")])
            p50 = median(r.p50_ms for r in runs[(op, name, "real")])
            errors = sum(r.errors for kind in ("bare", "real") for r in runs[(op, name, kind)])
            table.row(
                f"{op:7s} {name}", bare, real, p50, real / bare, *([errors] if errors else [])
            )
    medians = {
        (op, name): median(r.rps for r in runs[(op, name, "real")])
        for op in args.ops
        for name in servers
    }
    print("\n".join(lane_ratios(medians)))
    return 0


def lane_ratios(medians: dict[tuple[str, str], float]) -> list[str]:
    """The lane against plain ASGI, from one run's medians of the real app ((op, server) ->
    req/s): per operation over each of PLAIN_ASGI, then reads and writes over the best
    non-lane server of each operation, and whether the lane is worth keeping."""
    ops = sorted({op for op, _ in medians}, key=[*READS, *WRITES].index)
    lines = []
    for op in ops:
        lane = medians.get((op, LANE))
        if lane is None:
            continue
        over = [
            f"/ {name} {lane / medians[(op, name)]:5.2f}"
            for name in PLAIN_ASGI
            if (op, name) in medians
        ]
        lines.append(f"{op:7s} lane {lane:8.0f} req/s  " + "  ".join(over))
    for kind, kind_ops in (("reads", READS), ("writes", WRITES)):
        worst = worst_ratio(medians, [op for op in kind_ops if op in ops])
        if worst is not None:
            ratio, op, best = worst
            lines.append(
                f"{kind}: lane / best ASGI server at least {ratio:.2f} ({op}, over {best})"
            )
            if kind == "reads":
                keep = "keep" if ratio > KEEP_LANE_ABOVE else "REMOVE"
                lines.append(
                    f"decision: {keep} the lane (kept above {KEEP_LANE_ABOVE:.2f} on reads)"
                )
    return lines


def worst_ratio(
    medians: dict[tuple[str, str], float], ops: list[str]
) -> tuple[float, str, str] | None:
    """(the lowest lane / best-other ratio over `ops`, that op, that server), or None when the
    lane or every other server is missing."""
    found = []
    for op in ops:
        others = {name: rps for (o, name), rps in medians.items() if o == op and name != LANE}
        if (op, LANE) in medians and others:
            best = max(others, key=others.__getitem__)
            found.append((medians[(op, LANE)] / others[best], op, best))
    return min(found) if found else None


if __name__ == "__main__":
    sys.exit(main())
