"""API throughput and latency: submit, poll and update, with 1 000 and 100 000 jobs stored,
against the ceiling of the stack (the same Starlette + uvicorn answering constant JSON).

    .venv/bin/python benchmarks/api_bench.py [--duration 5] [--connections 32] [--workers 1]

Needs `wrk` (Debian: apt-get install wrk). Starts its own redis-server, API process and bare
app on free loopback ports; touches nothing else. Prints one line per measurement and the
ratios the targets are about: submit and poll throughput at least half of the ceiling's, poll
and update latency at 100 000 stored jobs within 10% of that at 1 000.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler import commands, scripts  # noqa: E402
from scheduler.commands import Placement  # noqa: E402
from scheduler.keys import Keys  # noqa: E402
from tests.processes import stop, wait_http  # noqa: E402
from tests.redis_server import free_port, redis_server  # noqa: E402

NODES = [f"bench-node-{i}" for i in range(10)]
PREFIX = "bench"

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
local i, window = 0, %(window)d
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


def preload(redis_url: str, count: int) -> None:
    """Store `count` pending jobs through the real create script, pipelined."""
    client = redis.Redis.from_url(redis_url)
    keys = Keys(PREFIX)
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
    cmd = [
        sys.executable,
        "-m",
        "uvicorn",
        app,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
        "--workers",
        str(workers),
    ]
    return [*cmd, "--factory"] if factory else cmd


def bench_stored(redis_url: str, stored: int, args: argparse.Namespace) -> dict[str, Result]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "REDIS_PREFIX": PREFIX,
        "NODE_TTL_SECS": "86400",
        "MAX_JOB_RETRIES": "1000000000",
        "MAX_JOBS_PER_NODE": "1",
    }
    port = free_port()
    api = start(
        uvicorn_cmd("scheduler.app:create_app", port, args.workers, factory=True), env, port
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for node in NODES:
            httpx.post(f"{url}/nodes/register", json={"id": node}).raise_for_status()
        preload(redis_url, stored)
        window = min(stored, 5000)
        results = {
            "update": run_wrk(
                url, UPDATE_LUA % {"window": window}, args.duration, args.connections
            ),
            "poll": run_wrk(url, POLL_LUA, args.duration, args.connections),
            "submit": run_wrk(f"{url}/jobs", SUBMIT_LUA, args.duration, args.connections),
        }
    finally:
        stop(api)
    return results


def bench_ceiling(args: argparse.Namespace) -> dict[str, Result]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "benchmarks")}
    bare = start(uvicorn_cmd("bare_app:app", port, args.workers), env, port)
    url = f"http://127.0.0.1:{port}"
    try:
        return {
            "submit": run_wrk(f"{url}/jobs", SUBMIT_LUA, args.duration, args.connections),
            "poll": run_wrk(url, POLL_LUA, args.duration, args.connections),
        }
    finally:
        stop(bare)


def line(name: str, r: Result, ceiling: Result | None = None) -> str:
    ratio = f"  {r.rps / ceiling.rps:5.2f} of ceiling" if ceiling else ""
    errors = f"  NON-2XX {r.errors}" if r.errors else ""
    return (
        f"{name:28s} {r.rps:9.0f} req/s  p50 {r.p50_ms:7.2f} ms  p99 {r.p99_ms:7.2f} ms"
        f"{ratio}{errors}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--stored", type=int, nargs="+", default=[1000, 100_000])
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    print(
        f"# {args.connections} connections, {args.duration:g} s each, "
        f"{args.workers} uvicorn worker(s), {os.cpu_count()} cores"
    )
    ceiling = bench_ceiling(args)
    for name, r in ceiling.items():
        print(line(f"ceiling {name}", r))
    by_stored: dict[int, dict[str, Result]] = {}
    with redis_server() as redis_url:
        for stored in args.stored:
            by_stored[stored] = results = bench_stored(redis_url, stored, args)
            for name, r in results.items():
                print(line(f"{name} @ {stored} stored", r, ceiling.get(name)))
    if len(args.stored) >= 2:
        low, high = by_stored[min(args.stored)], by_stored[max(args.stored)]
        for name in ("poll", "update"):
            print(
                f"{name} p50 latency at {max(args.stored)} / at {min(args.stored)} stored: "
                f"{high[name].p50_ms / low[name].p50_ms:.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
