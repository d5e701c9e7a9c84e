"""What hostile report bodies cost the API: peak memory (RSS) of one API process while
`--senders` clients each send a MAX_REPORT_BYTES PATCH body at once, in four cases:

  unknown job          PATCH /jobs/job-999999 (the job does not exist)
  stranger, token      a real pending job, no token, AGENT_AUTH=token
  stranger, open       a real pending job, no key, AGENT_AUTH=open (bodies are read: the
                       budget REPORT_BYTES_IN_FLIGHT is all that bounds them)
  own node, open       the same, as the case a legitimate agent would hit

    .venv/bin/python benchmarks/report_flood.py [--senders 6] [--mib 64] [--budget-mib 128]

Starts its own redis-server and one API process per case on free loopback ports. Each
sender streams its body in 1 MiB writes for as long as the API reads; RSS is sampled from
/proc every 10 ms. It cannot isolate the allocator: freed memory that glibc keeps shows as
RSS until it is reused, so the figure is an upper bound of what the bodies cost.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.keys import API_KEY as KEY  # noqa: E402
from tests.processes import scheduler_env, stop, wait_http  # noqa: E402
from tests.redis_server import free_port, redis_server  # noqa: E402

MiB = 1024 * 1024


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def send(port: int, path: str, size: int, headers: dict[str, str], out: list[int]) -> None:
    """One PATCH of `size` declared bytes; records the status (0 if none came back)."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (
        f"PATCH {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n{head}\r\n"
    ).encode()
    body_head = json.dumps({"status": "running", "stdout": ""}).encode()[:-2]
    chunk = b"x" * MiB
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(60)
        try:
            sock.sendall(request + body_head)
            sent = len(body_head)
            while sent < size - 2:
                piece = chunk[: min(MiB, size - 2 - sent)]
                sock.sendall(piece)
                sent += len(piece)
            sock.sendall(b'"}')
        except OSError:
            pass  # the API answered early and closed: the body was never read
        try:
            status = sock.recv(64).split(b" ", 2)[1]
            out.append(int(status))
        except (OSError, IndexError, ValueError):
            out.append(0)


def flood(args: argparse.Namespace, redis_url: str, case: str) -> str:
    mode = "token" if "token" in case else "open"
    env = scheduler_env(
        redis_url,
        f"flood{free_port()}",
        AGENT_AUTH=mode,
        TINYAWS_API_KEY=KEY,
        MAX_REPORT_BYTES=str(args.mib * MiB),
        REPORT_BYTES_IN_FLIGHT=str(args.budget_mib * MiB),
    )
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "scheduler.api.app:create_app", "--factory"]
    cmd += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
    # (stderr too: in open mode with a key the API's start-up warning would fill the table.)
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health")
        auth = {"Authorization": f"Bearer {KEY}"}
        node = httpx.post(f"{url}/nodes/register", json={"id": "n1"}, headers=auth).json()
        httpx.post(f"{url}/jobs", json={"command": "x"}, headers=auth)
        path = "/jobs/job-999999" if case == "unknown job" else "/jobs/job-1"
        headers = {"Authorization": f"Bearer {node['token']}"} if case == "own node, open" else {}
        time.sleep(0.5)
        base = rss_mib(proc.pid)
        statuses: list[int] = []
        senders = [
            threading.Thread(target=send, args=(port, path, args.mib * MiB, headers, statuses))
            for _ in range(args.senders)
        ]
        peak, started = base, time.monotonic()
        for thread in senders:
            thread.start()
        while any(t.is_alive() for t in senders):
            peak = max(peak, rss_mib(proc.pid))
            time.sleep(0.01)
        took = time.monotonic() - started
        counts = {s: statuses.count(s) for s in sorted(set(statuses))}
        return (
            f"{case:16s} RSS {base:6.0f} -> peak {peak:6.0f} MiB (+{peak - base:4.0f})"
            f"  answers {counts}  {took:5.1f} s"
        )
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--senders", type=int, default=6)
    parser.add_argument("--mib", type=int, default=64, help="body size = MAX_REPORT_BYTES")
    parser.add_argument("--budget-mib", type=int, default=128, help="REPORT_BYTES_IN_FLIGHT")
    args = parser.parse_args()
    print(
        f"{args.senders} senders x {args.mib} MiB at once; REPORT_BYTES_IN_FLIGHT "
        f"{args.budget_mib} MiB; python {sys.version.split()[0]}, {os.cpu_count()} cores"
    )
    with redis_server() as redis_url:
        for case in ("unknown job", "stranger, token", "stranger, open", "own node, open"):
            print(flood(args, redis_url, case), flush=True)


if __name__ == "__main__":
    main()
