"""What idle long-polling agents cost the API: GET /jobs/{id} throughput without and with N
agents holding a long-poll open on the same API process (benchmarks/idle_pollers.py, another
process), rounds interleaved, medians reported. The pollers' own CPU (re-polling every WAIT
seconds) shares the machine too, so the figure is an upper bound of the API's cost. Run by
`python -m benchmarks.api_bench --idle N`."""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

from benchmarks import harness
from benchmarks.load import GET_LUA, Result, run_wrk
from benchmarks.report import Column, Table
from benchmarks.timing import median, ratio

STORED = 1000
WAIT = "20"


def raise_file_limit() -> None:
    """N pollers need N sockets in the API process (which inherits this limit) and here."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def with_pollers(url: str, args: argparse.Namespace) -> Result:
    """GET /jobs/{id} throughput while args.idle agents hold their long-polls."""
    cmd = [sys.executable, "-m", "benchmarks.idle_pollers", url, str(args.idle), WAIT]
    with harness.running(cmd, stdout=subprocess.PIPE) as pollers:
        assert pollers.stdout is not None
        if pollers.stdout.readline().strip() != b"ready":
            raise RuntimeError("the idle pollers did not start")
        time.sleep(1)
        return run_wrk(url, GET_LUA % {"stored": STORED}, args.duration, args.connections)


def measure_idle(url: str, args: argparse.Namespace) -> None:
    """Rounds of throughput without, then with, the idle pollers, on the API at `url`
    holding STORED jobs."""
    without: list[Result] = []
    held: list[Result] = []
    for _ in range(args.rounds):
        without.append(run_wrk(url, GET_LUA % {"stored": STORED}, args.duration, args.connections))
        held.append(with_pollers(url, args))
    base = median(r.rps for r in without)
    loaded = median(r.rps for r in held)
    columns = (Column("req/s", "9.0f"), Column("cost", "5.1f", "% of throughput"))
    table = Table(*columns, label_width=50)
    table.row(f"GET /jobs/{{id}} @ {STORED} stored, no long-polls", base)
    cost = 100 * (1 - ratio(loaded, base))
    table.row(f"GET /jobs/{{id}} with {args.idle} idle long-polls (wait={WAIT})", loaded, cost)
