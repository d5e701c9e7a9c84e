"""Redis CPU per script call (INFO commandstats), the part of a request Redis spends: create,
the poll (finding a job, then at capacity) and the transitions running, retry, running, done,
over N jobs; first, a script that only returns 1, what any script call costs.

    .venv/bin/python benchmarks/script_cost.py [--jobs 20000]

Starts its own redis-server. Calls are pipelined from one client, so the figure is Redis'
own time per call (usec_per_call), not a latency. Run it with PYTHONPATH pointing at another
checkout to compare versions of the scripts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: another checkout can be measured

from scheduler.models.job import JobUpdate  # noqa: E402
from scheduler.nodes.placement import Placement  # noqa: E402
from scheduler.store.keys import Keys  # noqa: E402
from scheduler.store.scripts import Call  # noqa: E402
from scheduler.store.scripts import jobs as job_scripts  # noqa: E402
from scheduler.store.scripts.retry import RetryPolicy  # noqa: E402
from tests.redis_server import redis_server  # noqa: E402

BODY = b'{"command":"echo hello","env_vars":{"GREETING":"hi"},"status":"pending","retry_count":0,"created_at":"2026-01-01T00:00:00.000000Z"}'  # noqa: E501
STEPS = [
    JobUpdate(status="running"),
    JobUpdate(status="failed", exit_code=1, stdout="out", stderr="err"),
    JobUpdate(status="running"),
    JobUpdate(status="done", exit_code=0, stdout="hello"),
]


def usec_per_call(client: redis.Redis) -> float:
    stats = client.info("commandstats")
    entry = stats.get("cmdstat_evalsha", {"usec_per_call": 0.0})
    return float(entry["usec_per_call"])


def run(client: redis.Redis, keys: Keys, text: str, calls: list[Call[Any]]) -> float:
    sha = client.script_load(text)
    client.config_resetstat()
    for start in range(0, len(calls), 1000):
        pipe = client.pipeline(transaction=False)
        for call in calls[start : start + 1000]:
            pipe.evalsha(sha, 1, keys.root, *call.args)
        pipe.execute()
    return usec_per_call(client)


def poll(client: redis.Redis, keys: Keys, count: int) -> float:
    """The agent's poll (MAX_JOBS_PER_NODE 1) of the 10 nodes in turn, `count` times."""
    calls = [job_scripts.poll(f"n{n % 10}", 1, "open") for n in range(count)]
    return run(client, keys, job_scripts.POLL.text, calls)


# What any script call costs Redis, whatever it does: the floor under every row below.
EMPTY_SCRIPT = "return 1"


def empty(client: redis.Redis, keys: Keys, count: int) -> float:
    calls = [job_scripts.POLL.call(node="", max_jobs=0, caller="") for _ in range(count)]
    return run(client, keys, EMPTY_SCRIPT, calls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    keys = Keys("cost")
    with redis_server() as url:
        client = redis.Redis.from_url(url)
        client.set(keys.initialised, "bench")
        now = time.time()
        placement = Placement.among([f"n{i}" for i in range(10)])
        create = [job_scripts.create_job(BODY, placement, now, 30) for _ in range(args.jobs)]
        at_capacity = 0.0
        print(f"(a script: return 1)   {empty(client, keys, args.jobs):6.2f} us/call")
        created = run(client, keys, job_scripts.CREATE_JOB.text, create)
        print(f"CREATE_JOB             {created:6.2f} us/call")
        print(f"POLL, finds a job      {poll(client, keys, args.jobs):6.2f} us/call")
        for step in STEPS:
            calls = [
                job_scripts.transition(
                    f"job-{n}", step, now, RetryPolicy(1, 0, 3600), "open", node_ttl=30
                )
                for n in range(1, args.jobs + 1)
            ]
            cost = run(client, keys, job_scripts.TRANSITION.text, calls)
            print(f"TRANSITION -> {step.status:8s} {cost:6.2f} us/call")
            if step.status == "running" and not at_capacity:
                at_capacity = poll(client, keys, args.jobs)
                print(f"POLL, node at capacity {at_capacity:6.2f} us/call")
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
