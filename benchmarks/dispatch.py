"""End-to-end dispatch: how long a job waits to start, and `submit --wait` as a person runs it.

One `scheduler serve` and one reference agent (`scheduler agent`, settings as shipped but
AGENT_LIMITS=off) on a prefix of their own. Jobs are submitted one at a time, each after a
random pause of up to 3 s (so at a random point of the agent's poll cycle); submit ->
running is the job's own `running_at - created_at` (both stamped by the API, one clock);
submit -> done is the client's wall clock, waiting with `GET /jobs/{id}?wait=` (one request
that the API answers when the job changes). `scheduler submit 'echo hello' --wait` is timed as
a subprocess, so it includes the interpreter's start, shown on its own line. Run by
`python -m benchmarks.api_bench --dispatch N`.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import tempfile
import time
from collections.abc import Iterator

import httpx

from benchmarks import harness
from benchmarks.report import Column, Table
from benchmarks.timing import median, timed
from scheduler.models.wire import parse_rfc3339

NODE = "bench-agent"
GAP_SECS = 3.0  # the reference agent's default AGENT_POLL_SECS


@contextlib.contextmanager
def api_and_agent(redis_url: str, prefix: str, node: str, **env: str) -> Iterator[httpx.Client]:
    """`scheduler serve` under `prefix` and the reference agent as `node` (work directory of
    its own, `env` added to both), once the node is registered; a client of the API."""
    work = tempfile.mkdtemp(prefix="bench-dispatch-")
    agent_env = {"AGENT_WORK_DIR": os.path.join(work, "work"), "AGENT_LIMITS": "off", **env}
    # serve's own default processes (one per core), as an operator runs it
    quiet = subprocess.DEVNULL
    with harness.scheduler_api(redis_url, prefix, workers=None, stderr=quiet, **agent_env) as api:
        environ = harness.scheduler_env(redis_url, prefix, SCHEDULER_URL=api.url, **agent_env)
        with (
            harness.agent(environ, node),
            httpx.Client(base_url=api.url, timeout=30) as http,
        ):
            while node not in http.get("/nodes").json():
                time.sleep(0.05)
            yield http


def wait_ended(http: httpx.Client, job_id: str) -> dict[str, object]:
    status = "pending"
    while True:
        params = {"wait": 10, "status_not": status}
        job: dict[str, object] = http.get(f"/jobs/{job_id}", params=params).json()
        if job["status"] in ("done", "failed"):
            return job
        if job["status"] == status:  # the wait ran out, or an API without long-poll
            time.sleep(0.002)
        status = str(job["status"])


TABLE = Table(
    Column("p50", "7.1f", "ms"),
    Column("p90", "7.1f", "ms"),
    Column("max", "7.1f", "ms"),
    Column("jobs", "4d"),
    label_width=40,
)


def row(name: str, seconds: list[float]) -> None:
    values = sorted(seconds)
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    TABLE.row(name, 1000 * median(values), 1000 * p90, 1000 * values[-1], len(values))


def submit_cli(env: dict[str, str]) -> float:
    """Seconds of `scheduler submit 'echo hello' --wait`, the interpreter's start included."""
    cmd = harness.scheduler_cmd("submit", "echo hello", "--wait")
    done, took = timed(lambda: subprocess.run(cmd, env=env, capture_output=True, text=True))
    if done.returncode != 0 or not done.stdout.strip().endswith("hello"):
        raise RuntimeError(f"submit --wait printed {done.stdout!r} {done.stderr!r}")
    return took


def measure_dispatch(redis_url: str, count: int, cli_runs: int = 5) -> None:
    gaps = random.Random(13)
    with api_and_agent(redis_url, "dispatch", NODE) as http:
        started, finished = [], []
        for _ in range(count):
            # Land at a random point of the agent's poll cycle, not right after its last
            # report (when it polls again at once).
            time.sleep(gaps.uniform(0, GAP_SECS))
            begin = time.perf_counter()
            job_id = str(http.post("/jobs", json={"command": "echo hello"}).json()["job_id"])
            job = wait_ended(http, job_id)
            finished.append(time.perf_counter() - begin)
            running_at, created_at = str(job["running_at"]), str(job["created_at"])
            started.append(parse_rfc3339(running_at) - parse_rfc3339(created_at))
        TABLE.header()
        row("dispatch: submit -> running", started)
        row("dispatch: submit -> done (client)", finished)
        env = {**os.environ, "SCHEDULER_URL": str(http.base_url).rstrip("/")}
        env.pop("TINYAWS_API_KEY", None)
        help_cmd = harness.scheduler_cmd("submit", "--help")
        cli = [submit_cli(env) for _ in range(cli_runs)]
        bare = [timed(lambda: subprocess.run(help_cmd, capture_output=True))[1] for _ in cli]
        row("submit 'echo hello' --wait (CLI)", cli)
        row("  of which: the CLI start (submit --help)", bare)
