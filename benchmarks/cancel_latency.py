"""How long a running job's cancel takes to end it, with the reference agent: DELETE
/jobs/{id} -> the job ended (`failed`, failure_reason `cancelled`), side by side in one run:

- "long-poll": the agent as shipped (AGENT_POLL_WAIT_SECS=20): it polls even with every slot
  taken, and the scheduler answers that held poll as soon as one of its jobs is cancelled
  (X-Cancel-Jobs);
- "heartbeat only": AGENT_POLL_WAIT_SECS=0, the path before (a full agent did not poll): the
  cancel rides the next heartbeat's answer (AGENT_HEARTBEAT_SECS, 10 s as shipped).

    .venv/bin/python -m benchmarks.cancel_latency [--jobs 5]

Starts its own redis-server, one `scheduler serve` and one agent per variant (MAX_JOBS_PER_NODE
1, so the agent is at capacity while its job runs), the variants taking turns job by job.
Times are the client's wall clock, the end seen with `GET /jobs/{id}?wait=` (answered when
the job changes).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks import harness
from benchmarks.dispatch import api_and_agent
from benchmarks.report import Column, Table
from benchmarks.timing import median, ratio, rounds

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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5)
    args = parser.parse_args()
    marks = Path(tempfile.mkdtemp(prefix="bench-cancel-"))
    with harness.redis_server() as redis_url, contextlib.ExitStack() as stack:
        clients = {
            name: stack.enter_context(
                api_and_agent(
                    redis_url,
                    f"cancel-{wait}",
                    f"cancel-{wait}",
                    AGENT_POLL_WAIT_SECS=wait,
                    MAX_JOBS_PER_NODE="1",
                    CANCEL_GRACE_SECS="120",
                )
            )
            for name, wait in VARIANTS.items()
        }
        times = rounds(
            {
                # Named by the variant's wait: the job's shell command takes it unquoted.
                name: lambda name=name: cancel_once(
                    clients[name], marks / f"{VARIANTS[name]}.begun"
                )
                for name in VARIANTS
            },
            args.jobs,
        )
    table = Table(Column("median", "6.2f", "s"), Column("each", "s"), label_width=30)
    table.header()
    for name, values in times.items():
        table.row(f"{name} cancel -> ended", median(values), " ".join(f"{v:.2f}" for v in values))
    slow, fast = (median(times[name]) for name in ("heartbeat only", "long-poll"))
    Table(Column("ratio", "6.1f", "x"), label_width=30).row(
        "heartbeat only / long-poll", ratio(slow, fast)
    )


if __name__ == "__main__":
    main()
