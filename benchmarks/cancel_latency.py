"""How long a running job's cancel takes to end it, with the reference agent: DELETE
/jobs/{id} -> the job ended (`failed`, failure_reason `cancelled`), side by side in one run:

- "long-poll": the agent as shipped (AGENT_POLL_WAIT_SECS=20): it polls even with every slot
  taken, and the scheduler answers that held poll as soon as one of its jobs is cancelled
  (X-Cancel-Jobs);
- "heartbeat only": AGENT_POLL_WAIT_SECS=0, the path before (a full agent did not poll): the
  cancel rides the next heartbeat's answer (AGENT_HEARTBEAT_SECS, 10 s as shipped).

    .venv/bin/python benchmarks/cancel_latency.py [--jobs 5]

Starts its own redis-server, one `scheduler serve` and one agent per variant (MAX_JOBS_PER_NODE
1, so the agent is at capacity while its job runs), the variants taking turns job by job.
Times are the client's wall clock, the end seen with `GET /jobs/{id}?wait=` (answered when
the job changes).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.dispatch import _env, _scheduler  # noqa: E402
from tests.processes import stop, wait_http  # noqa: E402
from tests.redis_server import free_port, redis_server  # noqa: E402

VARIANTS = {"long-poll": "20", "heartbeat only": "0"}


def _wait_status(http: httpx.Client, job_id: str, wanted: tuple[str, ...]) -> dict[str, object]:
    status = ""
    while True:
        params = {"wait": 10, "status_not": status} if status else {}
        job: dict[str, object] = http.get(f"/jobs/{job_id}", params=params).json()
        if job["status"] in wanted:
            return job
        status = str(job["status"])


def cancel_once(http: httpx.Client, begun: Path) -> float:
    begun.unlink(missing_ok=True)
    command = f"touch {begun}; sleep 60"
    job_id = str(http.post("/jobs", json={"command": command}).json()["job_id"])
    _wait_status(http, job_id, ("running",))
    while not begun.exists():  # the job's process has started
        time.sleep(0.01)
    time.sleep(0.5)  # a poll cycle that began with the job is held by now
    start = time.perf_counter()
    http.delete(f"/jobs/{job_id}")
    job = _wait_status(http, job_id, ("done", "failed"))
    took = time.perf_counter() - start
    if job.get("failure_reason") != "cancelled":
        raise RuntimeError(f"{job_id} ended {job}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=5)
    args = parser.parse_args()
    with redis_server() as redis_url:
        procs, clients, marks = [], {}, {}
        try:
            for name, wait in VARIANTS.items():
                port = free_port()
                url = f"http://127.0.0.1:{port}"
                env = _env(redis_url, url)
                env.update(REDIS_PREFIX=f"cancel-{wait}", AGENT_POLL_WAIT_SECS=wait)
                env.update(MAX_JOBS_PER_NODE="1", CANCEL_GRACE_SECS="120")
                procs.append(_scheduler(["serve", "--host", "127.0.0.1", "--port", str(port)], env))
                wait_http(f"{url}/health")
                procs.append(_scheduler(["agent", "--node-id", f"cancel-{wait}"], env))
                clients[name] = httpx.Client(base_url=url, timeout=30)
                marks[name] = Path(env["AGENT_WORK_DIR"]).parent / "begun"
                while not clients[name].get("/nodes").json():
                    time.sleep(0.05)
            times: dict[str, list[float]] = {name: [] for name in VARIANTS}
            for _ in range(args.jobs):
                for name in VARIANTS:
                    times[name].append(cancel_once(clients[name], marks[name]))
        finally:
            for client in clients.values():
                client.close()
            for proc in reversed(procs):
                stop(proc, timeout=40)
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        shown = " ".join(f"{v:.2f}" for v in values)
        print(f"{name:15s} cancel -> ended: median {medians[name]:6.2f} s  ({shown})")
    print(f"heartbeat only / long-poll: {medians['heartbeat only'] / medians['long-poll']:.1f}x")


if __name__ == "__main__":
    main()
