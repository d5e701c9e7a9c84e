"""What a refused agent report costs Redis in token mode (issue 22, item 5): before, the
report's scripts read and decoded the whole job before they looked at the token, so a
stranger's PATCH on a job holding MiBs of env_vars and output cost Redis a full decode; now
they decide from the token and the node's index of jobs (access.lua job_access) first.

    .venv/bin/python -m benchmarks.refused_report_cost [--env-bytes 1048576]
        [--output-bytes 1048576] [--calls 20] [--runs 3] [--before REV]

Before: the scripts of git revision --before (default: the last one without job_access),
checked out from this repository (harness.checkout) and assembled by that version's own code
in a subprocess; after: this checkout's. Both run side by side on one redis-server, each on a
deployment of its own holding the same job: job-1 of node n1, done, with --env-bytes of
env_vars (variables of about 64 bytes) and --output-bytes of stdout and of stderr (as the
limits allow: MAX_BODY_BYTES, OUTPUT_LIMIT_BYTES). Nodes n1 and n2 hold tokens.

Each case is a refused report: a stranger's token (not a node's) and n2's token, on job-1
and on a job that does not exist, through CHECK_REPORT (what the API runs first in token
mode: the refusal is there) and TRANSITION (which checks again); then n1's own report on its
job for comparison (TRANSITION answers FINISHED: the job is done). Prints, per script and
case, the median over --runs of Redis' own time per call (INFO commandstats usec_per_call of
EVALSHA; --calls calls pipelined), before and after, and their ratio; and each version's
answers, which must not tell an existing job from a missing one after the change.

Starts its own redis-server on a free loopback port; touches nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import redis

from benchmarks import harness
from benchmarks.new_jobs import creation
from benchmarks.report import Column, Table
from benchmarks.timing import median, ratio, rounds, script_usec
from scheduler.models.job import JobCreate, JobUpdate, new_job
from scheduler.nodes.placement import Placement
from scheduler.store.keys import Keys
from scheduler.store.scripts import codes
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.scripts.retry import RetryPolicy

# The last revision whose report scripts decoded the job before checking the token.
BEFORE = "014c29005097f88c6e2e67a4c5dd9087718c68a1"
POLICY = RetryPolicy(1, 0, 3600)
SEED = 0.5
TOKENS = {"n1": "a" * 64, "n2": "b" * 64}  # token hashes, as Redis holds them
STRANGER = "c" * 64  # the hash of a token no node holds
CASES = [
    ("stranger, the job", "job-1", STRANGER),
    ("stranger, no such job", "job-999999", STRANGER),
    ("n2's token, n1's job", "job-1", TOKENS["n2"]),
    ("n2's token, no such job", "job-999999", TOKENS["n2"]),
    ("n1's token, its job (allowed)", "job-1", TOKENS["n1"]),
]
CLAIM = JobUpdate(status="running")
CODE_NAMES = {v: k for k, v in vars(codes).items() if k.isupper() and isinstance(v, int)}

# Run by the version measured as "before" (its tree first on the path): each case's calls as
# [script text, args] pairs, CHECK_REPORT's then TRANSITION's.
DUMP = """
import inspect, json, sys
from scheduler.models.job import JobUpdate
from scheduler.store.scripts import jobs
from scheduler.store.scripts.retry import RetryPolicy
policy, cases = RetryPolicy(1, 0, 3600), json.loads(sys.argv[1])
# Where a retry goes off a drained node needs NODE_TTL_SECS (since issue 24).
ttl = (30,) if "node_ttl" in inspect.signature(jobs.transition).parameters else ()
out = []
for job_id, caller in cases:
    calls = (jobs.check_report(job_id, caller),
             jobs.transition(job_id, JobUpdate(status="running"), 1.0, policy, caller, *ttl))
    out.append([[call.script.text, call.args] for call in calls])
print(json.dumps(out))
"""

Calls = list[list[tuple[str, list[Any]]]]  # per case: (script text, args) per script


def before_calls(rev: str) -> Calls:
    """The calls of CASES as revision `rev` makes them."""
    cases = json.dumps([[job_id, caller] for _, job_id, caller in CASES])
    with harness.checkout(rev) as tree:
        out = harness.child(tree, "-c", DUMP, cases)
    return [[(text, args) for text, args in case] for case in json.loads(out)]


def after_calls() -> Calls:
    out = []
    for _, job_id, caller in CASES:
        calls = (
            job_scripts.check_report(job_id, caller),
            job_scripts.transition(job_id, CLAIM, 1.0, POLICY, caller, node_ttl=30),
        )
        out.append([(call.script.text, call.args) for call in calls])
    return out


def big_job(env_bytes: int) -> tuple[bytes, dict[str, Any]]:
    """A new job's create arguments (new_jobs.py) with about `env_bytes` of env_vars."""
    count = max(1, env_bytes // 64)
    env = {f"VAR_{i:06}": "v" * 50 for i in range(count)}
    request = msgspec.convert({"command": "deploy", "env_vars": env}, JobCreate)
    return creation(new_job(request, "2026-01-01T00:00:00.000000Z"))


def store_job(
    client: redis.Redis, keys: Keys, created: tuple[bytes, dict[str, Any]], output_bytes: int
) -> int:
    """Nodes n1, n2 with their tokens, and job-1 of n1 run and done with its output, through
    the scripts the API runs; returns the stored record's size."""
    client.set(keys.initialised, "benchmark")
    client.hset(keys.tokens, mapping={token: node for node, token in TOKENS.items()})
    done = JobUpdate(
        status="done", exit_code=0, stdout="o" * output_bytes, stderr="e" * output_bytes
    )
    for call in (
        job_scripts.create_job(created[0], Placement.fixed("n1"), time.time(), 30.0, **created[1]),
        job_scripts.transition("job-1", CLAIM, time.time(), POLICY, "key", node_ttl=30),
        job_scripts.transition("job-1", done, time.time(), POLICY, "key", node_ttl=30),
    ):
        client.eval(call.script.text, 1, keys.root, *call.args)
    # Every part of its record (models/record.py; one value in versions before).
    parts = [keys.job("job-1") + part for part in ("", ":spec", ":stdout", ":stderr")]
    return sum(int(client.strlen(key)) for key in parts)


def measure(client: redis.Redis, keys: Keys, text: str, args: list[Any], calls: int) -> float:
    """Redis µs per call of `calls` calls of the script, pipelined. A fresh Lua state first:
    the garbage of the calls before (MBs of a decoded job) would otherwise be collected, and
    counted, during these."""
    client.script_flush("SYNC")
    return script_usec(client, keys.root, text, [args] * calls)


def answer(client: redis.Redis, keys: Keys, text: str, args: list[Any]) -> str:
    """The script's return code, by name."""
    reply = client.evalsha(client.script_load(text), 1, keys.root, *args)
    return CODE_NAMES[reply[0] if isinstance(reply, list) else reply]


@contextmanager
def deployments(url: str, args: argparse.Namespace) -> Iterator[tuple[redis.Redis, Keys, Keys]]:
    client = redis.Redis.from_url(url)
    record = big_job(args.env_bytes)
    before, after = (Keys(f"bench-{name}-{uuid.uuid4().hex[:6]}") for name in ("b", "a"))
    for keys in (before, after):
        size = store_job(client, keys, record, args.output_bytes)
    print(f"job-1 holds {size / 1e6:.1f} MB", file=sys.stderr)
    try:
        yield client, before, after
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-bytes", type=int, default=1024 * 1024)
    parser.add_argument("--output-bytes", type=int, default=1024 * 1024)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", default=BEFORE, help="git revision measured as before")
    args = parser.parse_args()
    versions = {"before": before_calls(args.before), "after": after_calls()}
    table = Table(
        Column("before", "7.1f", "µs/call"),
        Column("answer", "15s"),
        Column("after", "7.1f", "µs/call"),
        Column("answer", "15s"),
        Column("before / after", "8.3g"),
        label_width=40,
    )
    table.header()
    with harness.redis_server() as url, deployments(url, args) as (client, before, after):
        where = {"before": before, "after": after}
        for step, script in enumerate(("CHECK_REPORT", "TRANSITION")):
            for case, (name, _, _) in enumerate(CASES):
                # Taking turns run by run: this machine is shared and noisy.
                def run(version: str, case: int = case, step: int = step) -> float:
                    text, call_args = versions[version][case][step]
                    return measure(client, where[version], text, call_args, args.calls)

                times = rounds({v: lambda v=v: run(v) for v in ("before", "after")}, args.runs)
                b, a = (median(times[v]) for v in ("before", "after"))
                said = [answer(client, where[v], *versions[v][case][step]) for v in where]
                table.row(f"{script}, {name}", b, said[0], a, said[1], ratio(b, a))


if __name__ == "__main__":
    main()
