"""End-to-end dispatch: how long a job waits to start, and `submit --wait` as a person runs it.

One `scheduler serve` and one reference agent (`scheduler agent`, settings as shipped but
AGENT_LIMITS=off) on a prefix of their own. Jobs are submitted one at a time, each after a
random pause of up to 3 s (so at a random point of the agent's poll cycle); submit ->
running is the job's own `running_at - created_at` (both stamped by the API, one clock);
submit -> done is the client's wall clock, waiting with `GET /jobs/{id}?wait=` (one request
that the API answers when the job changes). `scheduler submit 'echo hello' --wait` is timed as
a subprocess, so it includes the interpreter's start, shown on its own line.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from scheduler.models.wire import parse_rfc3339
from tests.processes import stop, wait_http
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent
NODE = "bench-agent"
GAP_SECS = 3.0  # the reference agent's default AGENT_POLL_SECS


def _env(redis_url: str, url: str) -> dict[str, str]:
    tmp = tempfile.mkdtemp(prefix="bench-dispatch-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "REGISTRY_"))}
    env.update(
        REDIS_URL=redis_url,
        REDIS_PREFIX="dispatch",
        SCHEDULER_DB=os.path.join(tmp, "scheduler.db"),
        SCHEDULER_URL=url,
        AGENT_WORK_DIR=os.path.join(tmp, "work"),
        AGENT_LIMITS="off",
    )
    env.pop("TINYAWS_API_KEY", None)
    return env


def _scheduler(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "scheduler", *args]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=subprocess.DEVNULL)


def _wait_done(http: httpx.Client, job_id: str) -> dict[str, object]:
    status = "pending"
    while True:
        params = {"wait": 10, "status_not": status}
        job: dict[str, object] = http.get(f"/jobs/{job_id}", params=params).json()
        if job["status"] in ("done", "failed"):
            return job
        if job["status"] == status:  # the wait ran out, or an API without long-poll
            time.sleep(0.002)
        status = str(job["status"])


def _line(name: str, values: list[float]) -> str:
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    return (
        f"{name:34s} p50 {1000 * statistics.median(values):7.1f} ms  p90 {1000 * p90:7.1f} ms"
        f"  max {1000 * values[-1]:7.1f} ms  ({len(values)} jobs)"
    )


def measure_dispatch(redis_url: str, count: int, cli_runs: int = 5) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = _env(redis_url, url)
    api = _scheduler(["serve", "--host", "127.0.0.1", "--port", str(port)], env)
    agent = None
    gaps = random.Random(13)
    try:
        wait_http(f"{url}/health")
        agent = _scheduler(["agent", "--node-id", NODE], env)
        with httpx.Client(base_url=url, timeout=30) as http:
            while NODE not in http.get("/nodes").json():
                time.sleep(0.05)
            started, finished = [], []
            for _ in range(count):
                # Land at a random point of the agent's poll cycle, not right after its
                # last report (when it polls again at once).
                time.sleep(gaps.uniform(0, GAP_SECS))
                begin = time.perf_counter()
                job_id = str(http.post("/jobs", json={"command": "echo hello"}).json()["job_id"])
                job = _wait_done(http, job_id)
                finished.append(time.perf_counter() - begin)
                running_at, created_at = str(job["running_at"]), str(job["created_at"])
                started.append(parse_rfc3339(running_at) - parse_rfc3339(created_at))
        print(_line("dispatch: submit -> running", started))
        print(_line("dispatch: submit -> done (client)", finished))
        cli, bare = [], []
        for _ in range(cli_runs):
            begin = time.perf_counter()
            cmd = [sys.executable, "-m", "scheduler", "submit", "echo hello", "--wait"]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
            cli.append(time.perf_counter() - begin)
            if not out.strip().endswith("hello"):
                raise RuntimeError(f"submit --wait printed {out!r}")
            begin = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "scheduler", "submit", "--help"],
                env=env,
                capture_output=True,
            )
            bare.append(time.perf_counter() - begin)
        print(_line("submit 'echo hello' --wait (CLI)", cli))
        print(_line("  of which: the CLI start (submit --help)", bare))
    finally:
        if agent is not None:
            stop(agent, timeout=40)
        stop(api)
