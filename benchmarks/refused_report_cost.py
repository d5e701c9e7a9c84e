"""What a refused agent report costs Redis in token mode (issue 22, item 5): before, the
report's scripts read and decoded the whole job before they looked at the token, so a
stranger's PATCH on a job holding MiBs of env_vars and output cost Redis a full decode; now
they decide from the token and the node's index of jobs (access.lua job_access) first.

    .venv/bin/python benchmarks/refused_report_cost.py [--env-bytes 1048576]
        [--output-bytes 1048576] [--calls 20] [--runs 3] [--before REV]

Before: the scripts of git revision --before (default: the last one without job_access),
taken from this repository with `git archive` and assembled by that version's own code in a
subprocess; after: this checkout's. Both run side by side on one redis-server, each on a
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
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import Any

import msgspec
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from new_jobs import creation  # noqa: E402

from scheduler.models.job import JobCreate, JobUpdate, new_job  # noqa: E402
from scheduler.nodes.placement import Placement  # noqa: E402
from scheduler.store.keys import Keys  # noqa: E402
from scheduler.store.scripts import codes  # noqa: E402
from scheduler.store.scripts import jobs as job_scripts  # noqa: E402
from scheduler.store.scripts.retry import RetryPolicy  # noqa: E402
from tests.redis_server import redis_server  # noqa: E402

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

# Run by the version measured as "before" (its tree first on sys.path): each case's calls as
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
    archive = subprocess.run(
        ["git", "archive", rev, "scheduler"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryDirectory(prefix="refused-report-") as tree:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
        cases = json.dumps([[job_id, caller] for _, job_id, caller in CASES])
        done = subprocess.run(
            [sys.executable, "-c", DUMP, cases],
            cwd=tree,
            env={"PYTHONPATH": tree, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        )
    return [[(text, args) for text, args in case] for case in json.loads(done.stdout)]


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
    sha = client.script_load(text)
    client.config_resetstat()
    pipe = client.pipeline(transaction=False)
    for _ in range(calls):
        pipe.evalsha(sha, 1, keys.root, *args)
    pipe.execute()
    stats: Any = client.info("commandstats")
    return float(stats["cmdstat_evalsha"]["usec_per_call"])


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
    with redis_server() as url, deployments(url, args) as (client, before, after):
        where = {"before": before, "after": after}
        for step, script in enumerate(("CHECK_REPORT", "TRANSITION")):
            for case, (name, _, _) in enumerate(CASES):
                times: dict[str, list[float]] = {"before": [], "after": []}
                for run in range(args.runs):
                    # Swapped every run: this machine is shared and noisy.
                    for version in ("before", "after") if run % 2 == 0 else ("after", "before"):
                        text, call_args = versions[version][case][step]
                        times[version].append(
                            measure(client, where[version], text, call_args, args.calls)
                        )
                b, a = (statistics.median(times[v]) for v in ("before", "after"))
                codes = [answer(client, where[v], *versions[v][case][step]) for v in where]
                print(
                    f"{script}, {name}  before {b:.1f} µs/call (answer {codes[0]})"
                    f"  after {a:.1f} µs/call (answer {codes[1]})  before / after: {b / a:.3g}"
                )


if __name__ == "__main__":
    main()
