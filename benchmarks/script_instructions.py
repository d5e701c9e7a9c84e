"""Redis's instructions per script call, counted by callgrind: the work of script_cost.py
(create, the poll, a job's transitions, a cancel) as a count that does not move with the
load of this shared machine, so two versions of the scripts compare exactly.

    .venv/bin/python benchmarks/script_instructions.py [--jobs 2000] [--against REF]

Starts its own redis-server under `valgrind --tool=callgrind` (valgrind must be installed)
and zeroes and dumps its counters around each phase (callgrind_control), so a figure is
what Redis executed for that phase's calls, reading and answering them included, divided by
the calls. With --against, the commit REF (e.g. the version before a change) is checked out
in a temporary git worktree and measured the same way, in a process and a redis-server of its
own, and the ratio this / REF is printed beside each figure.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import inspect
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent

# Created at the creations' `now` (1.0), as the API stamps a job: its claim (at 2.0) waits
# 1 s, the same day's, as nearly every claim does (the dashboard's wait buckets, series.lua).
BODY = (
    b'{"command":"echo hello","env_vars":{"GREETING":"hi"},"status":"pending",'
    b'"retry_count":0,"created_at":"1970-01-01T00:00:01.000000Z"}'
)


def _free_port() -> int:
    """A port no one listens on now (the suite's own redis-servers take random ones)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def callgrind_redis(workdir: str) -> Iterator[tuple[redis.Redis, int]]:
    """A redis-server under callgrind, and its pid (for callgrind_control)."""
    port = _free_port()
    server = subprocess.Popen(
        [
            *("valgrind", "--tool=callgrind", f"--callgrind-out-file={workdir}/cg.%p"),
            *("redis-server", "--port", str(port), "--save", "", "--appendonly", "no"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    try:
        for _ in range(600):
            if server.poll() is not None:
                raise RuntimeError(f"redis-server under callgrind exited ({server.returncode})")
            with contextlib.suppress(redis.ConnectionError):
                client.ping()
                break
            time.sleep(0.1)
        yield client, server.pid
    finally:
        client.close()
        server.terminate()
        server.wait()


def counted(pid: int, workdir: str, work: Callable[[], None]) -> int:
    """Redis's instructions while `work` runs."""
    control = {"check": True, "capture_output": True, "timeout": 60}
    subprocess.run(["callgrind_control", "-z", str(pid)], **control)  # type: ignore[call-overload]
    work()
    before = set(glob.glob(f"{workdir}/cg.*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], **control)  # type: ignore[call-overload]
    for _ in range(100):
        dumped = sorted(set(glob.glob(f"{workdir}/cg.*")) - before)
        if dumped:
            break
        time.sleep(0.1)
    with open(dumped[-1]) as dump:
        for line in dump:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError("callgrind wrote no total")


class Scripts:
    """The calls of the checkout on sys.path, whichever layout it has: one Script object
    per script against the root (since issue 21), or the named scripts with their KEYS."""

    def __init__(self, prefix: str) -> None:
        from scheduler.store.keys import Keys

        self.keys = Keys(prefix)
        try:
            from scheduler.models.job import JobUpdate
            from scheduler.store.scripts import jobs

            self.calls: Any = jobs
            self.front: tuple[Any, ...] = ()
            try:  # the retry rule as one object, since issue 23
                from scheduler.store.scripts.retry import RetryPolicy

                self.retries: Any = RetryPolicy(1, 0, 3600)
            except ImportError:
                self.retries = 1
        except ImportError:  # the layout before: commands.py, scripts.py
            from scheduler.models import JobUpdate  # type: ignore[no-redef]
            from scheduler.store import commands, scripts

            self.calls, self.front, self.texts = commands, (self.keys,), scripts
            self.retries = 1
        self.update = JobUpdate
        # Where a retry goes off a drained node needs NODE_TTL_SECS (since issue 24).
        takes_ttl = "node_ttl" in inspect.signature(self.calls.transition).parameters
        self.ttl: dict[str, Any] = {"node_ttl": 30.0} if takes_ttl else {}

    def parts(self, call: Any) -> tuple[str, list[Any], list[Any]]:
        """(script text, KEYS, ARGV) of a call."""
        if not self.front:
            return call.script.text, [self.keys.root], list(call.args)
        return getattr(self.texts, call.script), list(call.keys), list(call.args)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        build = getattr(self.calls, name)
        return lambda *args, **kwargs: build(*self.front, *args, **kwargs)


def measure(jobs: int) -> dict[str, float]:
    """Instructions per call of each phase, with the checkout on sys.path."""
    from scheduler.nodes.placement import Placement

    s = Scripts("cg")
    placement = Placement.among([f"n{i}" for i in range(10)])
    update = s.update
    steps = [
        ("running", update(status="running")),
        ("failed, retried", update(status="failed", exit_code=1, stdout="out", stderr="err")),
        ("running again", update(status="running")),
        ("done", update(status="done", exit_code=0, stdout="hello")),
    ]
    numbers = range(1, jobs + 1)
    phases: list[tuple[str, Callable[[], list[Any]]]] = [
        ("CREATE_JOB", lambda: [s.create_job(BODY, placement, 1.0, 30) for _ in numbers]),
        ("POLL, finds a job", lambda: [s.poll(f"n{n % 10}", 1, "open") for n in numbers]),
    ]
    for i, (name, step) in enumerate(steps):
        phases.append(
            (
                f"TRANSITION, {name}",
                lambda step=step: [
                    s.transition(f"job-{n}", step, 2.0, s.retries, "open", **s.ttl) for n in numbers
                ],
            )
        )
        if i == 0:
            phases.append(
                ("POLL, at capacity", lambda: [s.poll(f"n{n % 10}", 1, "open") for n in numbers])
            )
    phases.append(
        ("CANCEL_JOB, finished", lambda: [s.cancel_job(f"job-{n}", 3.0) for n in numbers])
    )
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as workdir, callgrind_redis(workdir) as (client, pid):
        client.set(s.keys.initialised, "benchmark")
        library = _library()
        if library:  # as the stores call them since issue 26: FCALL of the function library
            client.function_load(library, replace=True)
        for label, build in phases:
            calls = build()
            text, _, _ = s.parts(calls[0])
            how = getattr(calls[0].script, "function", "") or client.script_load(text)
            run = "fcall" if library else "evalsha"

            def send(calls: list[Any] = calls, how: str = how, run: str = run) -> None:
                for start in range(0, len(calls), 500):
                    pipe = client.pipeline(transaction=False)
                    for call in calls[start : start + 500]:
                        _, keys, args = s.parts(call)
                        getattr(pipe, run)(how, len(keys), *keys, *args)
                    pipe.execute()

            figures[label] = counted(pid, workdir, send) / len(calls)
    return figures


def _library() -> str:
    """The scripts' function library's code, or "" for a checkout that runs scripts by
    EVALSHA (before issue 26)."""
    try:
        from scheduler.store.scripts import functions
    except ImportError:
        return ""
    code: str = functions.library().code
    return code


def measured(code: Path, jobs: int) -> dict[str, float]:
    """`measure` in a process of its own with the checkout at `code` first on its path."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, __file__, "--measure", "--jobs", str(jobs)],
        env=env,
        cwd=code,
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


@contextlib.contextmanager
def checkout(ref: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as parent:
        path = Path(parent) / "checkout"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", str(path), ref], check=True)
        try:
            yield path
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(path)], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--against", default="", metavar="REF", help="a commit to compare")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.jobs)))
        return 0
    ours = measured(ROOT, args.jobs)
    theirs: dict[str, float] = {}
    if args.against:
        with checkout(args.against) as other:
            theirs = measured(other, args.jobs)
    for label, figure in ours.items():
        line = f"{label:28s} {figure:10.0f} instructions/call"
        if label in theirs:
            line += f"   {args.against}: {theirs[label]:10.0f}   ratio {figure / theirs[label]:.3f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
