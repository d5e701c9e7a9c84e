"""API throughput and latency: submit, poll and update, with 1 000 and 100 000 jobs stored,
against the ceiling of the stack (the same Starlette + uvicorn answering constant JSON).

    .venv/bin/python benchmarks/api_bench.py [--duration 5] [--connections 32] [--workers 1]

Needs `wrk` (Debian: apt-get install wrk). Starts its own redis-server, two API processes
(one per stored size) and the bare app on free loopback ports; touches nothing else. The
machine's speed drifts (a shared VM), so every round runs the ceiling and both sizes back to
back, and figures are medians over the rounds. Prints one line per measurement and the
ratios the targets are about: submit and poll throughput at least half of the ceiling's, poll
and update latency at 100 000 stored jobs within 10% of that at 1 000.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler.nodes.placement import Placement  # noqa: E402
from scheduler.store import commands, scripts  # noqa: E402
from scheduler.store.keys import Keys  # noqa: E402
from tests.processes import stop, wait_http  # noqa: E402
from tests.redis_server import free_port, redis_server  # noqa: E402

NODES = [f"bench-node-{i}" for i in range(10)]

# wrk scripts. Updates alternate running and failed (a retry back to pending, with retries
# unbounded) over a window of jobs far wider than the connections in flight, so every PATCH
# is a valid transition.
SUBMIT_LUA = """
wrk.method = "POST"
wrk.body = '{"command":"echo hello","env_vars":{"GREETING":"hi"}}'
wrk.headers["Content-Type"] = "application/json"
"""
POLL_LUA = """
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", "/jobs?node_id=bench-node-" .. (i % 10) .. "&status=pending")
end
"""
UPDATE_LUA = """
-- wrk calls request() once at start-up without sending it: start one below zero.
local i, window = -1, %(window)d
local bodies = {
  '{"status":"running","exit_code":null,"stdout":"","stderr":""}',
  '{"status":"failed","exit_code":1,"stdout":"out","stderr":"err"}',
}
request = function()
  local job = (i %% window) + 1
  local body = bodies[(math.floor(i / window) %% 2) + 1]
  i = i + 1
  return wrk.format("PATCH", "/jobs/job-" .. job, {["Content-Type"] = "application/json"}, body)
end
"""


@dataclass
class Result:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int


def run_wrk(url: str, lua: str, duration: float, connections: int) -> Result:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua)
    try:
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{max(1, round(duration))}s",
                "--latency",
                "-s",
                script.name,
                url,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(script.name)
    return Result(
        rps=float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        p50_ms=_ms(re.search(r"50%\s+([\d.]+\w+)", out).group(1)),  # type: ignore[union-attr]
        p99_ms=_ms(re.search(r"99%\s+([\d.]+\w+)", out).group(1)),  # type: ignore[union-attr]
        errors=int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", out)) else 0,
    )


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def preload(redis_url: str, prefix: str, count: int) -> None:
    """Store `count` pending jobs through the real create script, pipelined."""
    client = redis.Redis.from_url(redis_url)
    keys = Keys(prefix)
    sha = client.script_load(scripts.CREATE_JOB)
    body = b'{"command":"echo preloaded","status":"pending","retry_count":0,"created_at":"x"}'
    placement = Placement.among(NODES)
    done = 0
    while done < count:
        pipe = client.pipeline(transaction=False)
        for _ in range(min(2000, count - done)):
            call = commands.create_job(keys, body, placement, time.time(), 30)
            pipe.evalsha(sha, len(call.keys), *call.keys, *call.args)
        done += len(pipe.execute())
    client.close()


def start(cmd: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{port}/health")
    return proc


def uvicorn_cmd(app: str, port: int, workers: int, factory: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--log-level", "warning", "--no-access-log", "--workers", str(workers)]
    return [*cmd, "--factory"] if factory else cmd


def start_api(redis_url: str, prefix: str, workers: int) -> tuple[Any, str]:
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "REDIS_PREFIX": prefix,
        "SCHEDULER_DB": os.path.join(tempfile.mkdtemp(), "scheduler.db"),
        "NODE_TTL_SECS": "86400",
        "MAX_JOB_RETRIES": "1000000000",
        "MAX_JOBS_PER_NODE": "1",
    }
    port = free_port()
    app = "scheduler.api.app:create_app"
    proc = start(uvicorn_cmd(app, port, workers, factory=True), env, port)
    url = f"http://127.0.0.1:{port}"
    for node in NODES:
        httpx.post(f"{url}/nodes/register", json={"id": node}).raise_for_status()
    return proc, url


def settle(url: str) -> None:
    """Put every job an update run left running back to pending (a failed report retries),
    so the next update run starts from the same state."""
    running = httpx.get(f"{url}/jobs", params={"status": "running", "limit": 10_000}).json()
    with httpx.Client(base_url=url) as http:
        for job in running:
            http.patch(f"/jobs/{job['job_id']}", json={"status": "failed", "exit_code": 1})


def measure(url: str, op: str, args: argparse.Namespace, window: int) -> Result:
    lua = {"submit": SUBMIT_LUA, "poll": POLL_LUA, "update": UPDATE_LUA % {"window": window}}
    result = run_wrk(
        f"{url}/jobs" if op == "submit" else url, lua[op], args.duration, args.connections
    )
    if op == "update" and not url.endswith(str(args.ceiling_port)):
        settle(url)
    return result


def median(results: list[Result]) -> Result:
    return Result(
        rps=statistics.median(r.rps for r in results),
        p50_ms=statistics.median(r.p50_ms for r in results),
        p99_ms=statistics.median(r.p99_ms for r in results),
        errors=sum(r.errors for r in results),
    )


def line(name: str, r: Result, ceiling: Result | None = None) -> str:
    ratio = f"  {r.rps / ceiling.rps:5.2f} of ceiling" if ceiling else ""
    errors = f"  NON-2XX {r.errors}" if r.errors else ""
    return (
        f"{name:24s} {r.rps:9.0f} req/s  p50 {r.p50_ms:7.2f} ms  p99 {r.p99_ms:7.2f} ms"
        f"{ratio}{errors}"
    )


OPS = ("submit", "poll", "update")


def run_rounds(args: argparse.Namespace) -> dict[tuple[str, str], list[Result]]:
    small, large = args.stored
    args.ceiling_port = free_port()
    bare_env = {**os.environ, "PYTHONPATH": str(ROOT / "benchmarks")}
    procs = [
        start(
            uvicorn_cmd("bare_app:app", args.ceiling_port, args.workers),
            bare_env,
            args.ceiling_port,
        )
    ]
    runs: dict[tuple[str, str], list[Result]] = {}
    try:
        with redis_server() as redis_url:
            targets = {"ceiling": f"http://127.0.0.1:{args.ceiling_port}"}
            for stored in (small, large):
                proc, url = start_api(redis_url, f"bench{stored}", args.workers)
                procs.append(proc)
                preload(redis_url, f"bench{stored}", stored)
                targets[str(stored)] = url
            for _ in range(args.rounds):
                for op in args.ops:
                    for name, url in targets.items():
                        result = measure(url, op, args, window=min(small, 5000))
                        runs.setdefault((op, name), []).append(result)
    finally:
        for proc in procs:
            stop(proc)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--rounds", type=int, default=3, help="medians over this many rounds")
    parser.add_argument("--stored", type=int, nargs=2, default=[1000, 100_000])
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    print(
        f"# {args.connections} connections, {args.duration:g} s per run, median of "
        f"{args.rounds} interleaved rounds, {args.workers} uvicorn worker(s), "
        f"{os.cpu_count()} cores"
    )
    runs = run_rounds(args)
    small, large = args.stored
    for op in args.ops:
        ceiling = median(runs[(op, "ceiling")])
        print(line(f"{op} ceiling", ceiling))
        for stored in (small, large):
            print(line(f"{op} @ {stored} stored", median(runs[(op, str(stored))]), ceiling))
    for op in [op for op in ("poll", "update") if op in args.ops]:
        low, high = median(runs[(op, str(small))]), median(runs[(op, str(large))])
        print(f"{op} p50 latency at {large} / at {small} stored: {high.p50_ms / low.p50_ms:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
