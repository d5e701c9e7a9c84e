"""What idle long-polling agents cost the API: GET /jobs/{id} throughput without and with N
agents holding a long-poll open on the same API process (benchmarks/idle_pollers.py, another
process), rounds interleaved, medians reported. The pollers' own CPU (re-polling every WAIT
seconds) shares the machine too, so the figure is an upper bound of the API's cost."""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from bench_state import preload
from load import GET_LUA, Result, run_wrk

HERE = Path(__file__).resolve().parent
STORED = 1000
WAIT = "20"


def raise_file_limit() -> None:
    """N pollers need N sockets in the API process (which inherits this limit) and here."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def measure_idle(
    redis_url: str, args: argparse.Namespace, start_api: Callable[..., tuple[Any, str]]
) -> None:
    client = redis.Redis.from_url(redis_url)
    proc, url = start_api(redis_url, "idle", args.workers)
    preload(client, "idle", STORED)
    without: list[Result] = []
    held: list[Result] = []
    try:
        for _ in range(args.rounds):
            lua = GET_LUA % {"stored": STORED}
            without.append(run_wrk(url, lua, args.duration, args.connections))
            cmd = [sys.executable, str(HERE / "idle_pollers.py"), url, str(args.idle), WAIT]
            pollers = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            try:
                assert pollers.stdout is not None
                if pollers.stdout.readline().strip() != "ready":
                    raise RuntimeError("the idle pollers did not start")
                time.sleep(1)
                held.append(run_wrk(url, lua, args.duration, args.connections))
            finally:
                pollers.kill()
                pollers.wait()
    finally:
        client.close()
        proc.terminate()
        proc.wait()
    base = statistics.median(r.rps for r in without)
    loaded = statistics.median(r.rps for r in held)
    print(f"GET /jobs/{{id}} @ {STORED} stored, no long-polls      {base:9.0f} req/s")
    print(
        f"GET /jobs/{{id}} with {args.idle} idle long-polls (wait={WAIT}) {loaded:9.0f} req/s"
        f"  cost {100 * (1 - loaded / base):5.1f}% of throughput"
    )
