"""Redis time of the web UI's jobs page: its search (SEARCH, looking through SEARCH_SCAN jobs,
the page's bound) and its counts per status (COUNTS), from INFO commandstats.

    .venv/bin/python -m benchmarks.ui_search_cost [--jobs 5000] [--stdout-bytes 16384]

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
from typing import Any

import msgspec
import redis

from benchmarks import harness
from benchmarks.report import Column, Table
from benchmarks.timing import calls_usec, evalsha_many
from scheduler.api.ui_jobs import PAGE_SIZE, SEARCH_SCAN
from scheduler.models.job import STATUSES, JobUpdate
from scheduler.nodes.placement import Placement
from scheduler.store.keys import Keys
from scheduler.store.scripts import Call, listing
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.scripts.retry import RetryPolicy

ROUNDS = 20
TABLE = Table(Column("Redis", "7.2f", "ms/call"), label_width=58)


def ms_per_call(client: redis.Redis, keys: Keys, call: Call[Any]) -> float:
    """Redis's own ms per call of `call`, ROUNDS calls pipelined (its time inside the call
    is the same however the calls arrive)."""
    return calls_usec(client, keys.root, [call] * ROUNDS) / 1000


def pipelined(client: redis.Redis, keys: Keys, calls: list[Call[Any]]) -> None:
    evalsha_many(client, keys.root, calls[0].script.text, [call.args for call in calls])


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=SEARCH_SCAN)
    parser.add_argument("--stdout-bytes", type=int, default=16384)
    args = parser.parse_args()
    short, long = Keys("uisearch"), Keys("uisearch-long")
    budget = 32 << 20
    with harness.redis_server() as url, harness.connected(url) as client:
        store_jobs(client, short, args.jobs, "python3 train.py --epochs 10", args.stdout_bytes)
        store_jobs(client, long, args.jobs, "x" * 3000, args.stdout_bytes)
        print(f"{args.jobs} done jobs stored, {args.stdout_bytes} bytes of stdout each")
        page = PAGE_SIZE + 1
        miss = listing.search(
            listing.SearchQuery(listing.JobQuery("", "", 0, page), "nowhere", SEARCH_SCAN), budget
        )
        TABLE.row(
            f"SEARCH, nothing found, {SEARCH_SCAN} commands of 28 chars",
            ms_per_call(client, short, miss),
        )
        TABLE.row(
            f"SEARCH, nothing found, {SEARCH_SCAN} commands of 3000 chars",
            ms_per_call(client, long, miss),
        )
        TABLE.row("COUNTS (every node)", ms_per_call(client, short, listing.counts("", STATUSES)))
        listed = listing.list_jobs(listing.JobQuery("", "", 0, page, newest=True), budget)
        TABLE.row(f"LIST, a page of {page} (for comparison)", ms_per_call(client, short, listed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
