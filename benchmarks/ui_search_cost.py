"""Redis time of the web UI's jobs page: its search (SEARCH, looking through SEARCH_SCAN jobs,
the page's bound) and its counts per status (COUNTS), from INFO commandstats.

    .venv/bin/python benchmarks/ui_search_cost.py [--jobs 5000] [--stdout-bytes 16384]

Starts its own redis-server and stores `--jobs` done jobs (commands of ~40 characters, each
with `--stdout-bytes` of output), then times a search that finds nothing (the worst case:
every one of the SEARCH_SCAN jobs is looked at), a search whose commands are longer than
SEARCH's head (each record read whole), and COUNTS. Redis is single-threaded: this is the
time a page holds every other client back.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: another checkout can be measured

from scheduler.api.ui_jobs import PAGE_SIZE, SEARCH_SCAN  # noqa: E402
from scheduler.models.job import STATUSES, JobUpdate  # noqa: E402
from scheduler.nodes.placement import Placement  # noqa: E402
from scheduler.store.keys import Keys  # noqa: E402
from scheduler.store.scripts import Call, listing  # noqa: E402
from scheduler.store.scripts import jobs as job_scripts  # noqa: E402
from scheduler.store.scripts.retry import RetryPolicy  # noqa: E402
from tests.redis_server import redis_server  # noqa: E402

ROUNDS = 20


def ms_per_call(client: redis.Redis, keys: Keys, calls: list[Call[Any]]) -> float:
    client.config_resetstat()
    for call in calls:
        client.evalsha(client.script_load(call.script.text), 1, keys.root, *call.args)
    entry = client.info("commandstats")["cmdstat_evalsha"]
    return float(entry["usec_per_call"]) / 1000


def pipelined(client: redis.Redis, keys: Keys, calls: list[Call[Any]]) -> None:
    sha = client.script_load(calls[0].script.text)
    for start in range(0, len(calls), 500):
        pipe = client.pipeline(transaction=False)
        for call in calls[start : start + 500]:
            pipe.evalsha(sha, 1, keys.root, *call.args)
        pipe.execute()


def store_jobs(client: redis.Redis, keys: Keys, count: int, command: str, out: int) -> None:
    """`count` done jobs (job-1...) running `command`, each with `out` bytes of stdout."""
    client.set(keys.initialised, "bench")
    now = time.time()
    body = msgspec.json.encode({"command": command})
    placement = Placement.among([f"n{i}" for i in range(10)])
    pipelined(client, keys, [job_scripts.create_job(body, placement, now, 30)] * count)
    policy = RetryPolicy(1, 0, 3600)
    for update in (
        JobUpdate(status="running"),
        JobUpdate(status="done", exit_code=0, stdout="x" * out),
    ):
        calls = [
            job_scripts.transition(f"job-{n}", update, now, policy, "open", node_ttl=30)
            for n in range(1, count + 1)
        ]
        pipelined(client, keys, calls)


def line(name: str, ms: float) -> None:
    print(f"{name:58s} {ms:7.2f} ms/call")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=SEARCH_SCAN)
    parser.add_argument("--stdout-bytes", type=int, default=16384)
    args = parser.parse_args()
    short, long = Keys("uisearch"), Keys("uisearch-long")
    budget = 32 << 20
    with redis_server() as url:
        client = redis.Redis.from_url(url)
        store_jobs(client, short, args.jobs, "python3 train.py --epochs 10", args.stdout_bytes)
        store_jobs(client, long, args.jobs, "x" * 3000, args.stdout_bytes)
        print(f"{args.jobs} done jobs stored, {args.stdout_bytes} bytes of stdout each")
        page = PAGE_SIZE + 1
        miss = listing.search("", "", 0, "nowhere", SEARCH_SCAN, page, budget)
        took = ms_per_call(client, short, [miss] * ROUNDS)
        line(f"SEARCH, nothing found, {SEARCH_SCAN} commands of 28 chars", took)
        took = ms_per_call(client, long, [miss] * ROUNDS)
        line(f"SEARCH, nothing found, {SEARCH_SCAN} commands of 3000 chars", took)
        took = ms_per_call(client, short, [listing.counts("", STATUSES)] * ROUNDS)
        line("COUNTS (every node)", took)
        listed = listing.list_jobs("", "", 0, page, budget, True)
        line(
            f"LIST, a page of {page} (for comparison)",
            ms_per_call(client, short, [listed] * ROUNDS),
        )
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
