"""What hostile report bodies cost the API: peak memory (RSS) of one API process while
`--senders` clients each send a MAX_REPORT_BYTES PATCH body at once, in four cases:

  unknown job          PATCH /jobs/job-999999 (the job does not exist)
  stranger, token      a real pending job, no token, AGENT_AUTH=token
  stranger, open       a real pending job, no key, AGENT_AUTH=open (bodies are read: the
                       budget REPORT_BYTES_IN_FLIGHT is all that bounds them)
  own node, open       the same, as the case a legitimate agent would hit

    .venv/bin/python -m benchmarks.report_flood [--senders 6] [--mib 64] [--budget-mib 128]

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

from benchmarks import harness
from benchmarks.report import Column, Table
from tests.keys import API_KEY as KEY

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
        f"PATCH {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
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


TABLE = Table(
    Column("RSS", "6.0f", "MiB"),
    Column("peak", "6.0f", "MiB"),
    Column("added", "5.0f", "MiB"),
    Column("answers", "24s"),
    Column("took", "5.1f", "s"),
    label_width=16,
)


def flood(args: argparse.Namespace, redis_url: str, case: str) -> None:
    mode = "token" if "token" in case else "open"
    # (stderr too: in open mode with a key the API's start-up warning would fill the table.)
    with harness.uvicorn_api(
        redis_url,
        f"flood{harness.free_port()}",
        stderr=subprocess.DEVNULL,
        AGENT_AUTH=mode,
        TINYAWS_API_KEY=KEY,
        MAX_REPORT_BYTES=str(args.mib * MiB),
        REPORT_BYTES_IN_FLIGHT=str(args.budget_mib * MiB),
    ) as api:
        auth = {"Authorization": f"Bearer {KEY}"}
        node = httpx.post(f"{api.url}/nodes/register", json={"id": "n1"}, headers=auth).json()
        httpx.post(f"{api.url}/jobs", json={"command": "x"}, headers=auth)
        path = "/jobs/job-999999" if case == "unknown job" else "/jobs/job-1"
        headers = {"Authorization": f"Bearer {node['token']}"} if case == "own node, open" else {}
        time.sleep(0.5)
        base = rss_mib(api.pid)
        statuses: list[int] = []
        port = int(api.url.rsplit(":", 1)[1])
        senders = [
            threading.Thread(target=send, args=(port, path, args.mib * MiB, headers, statuses))
            for _ in range(args.senders)
        ]
        peak, started = base, time.monotonic()
        for thread in senders:
            thread.start()
        while any(t.is_alive() for t in senders):
            peak = max(peak, rss_mib(api.pid))
            time.sleep(0.01)
        took = time.monotonic() - started
        counts = {s: statuses.count(s) for s in sorted(set(statuses))}
        TABLE.row(case, base, peak, peak - base, str(counts), took)


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
    TABLE.header()
    with harness.redis_server() as redis_url:
        for case in ("unknown job", "stranger, token", "stranger, open", "own node, open"):
            flood(args, redis_url, case)


if __name__ == "__main__":
    main()
