"""Redis's instructions per script call, counted by callgrind: the work of script_cost.py
(create, the poll, a job's transitions, a cancel) as a count that does not move with the
load of this shared machine, so two versions of the scripts compare exactly.

    .venv/bin/python -m benchmarks.script_instructions [--jobs 2000] [--against REF]

Starts its own redis-server under `valgrind --tool=callgrind` (valgrind must be installed)
and zeroes and dumps its counters around each phase (callgrind_control), so a figure is
what Redis executed for that phase's calls, reading and answering them included, divided by
the calls. With --against, the commit REF (e.g. the version before a change) is checked out
in a temporary directory (harness.checkout) and measured the same way, in a process and a
redis-server of its own, and the ratio this / REF is printed beside each figure.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.report import Column, Table

# Created at the creations' `now` (1.0), as the API stamps a job: its claim (at 2.0) waits
# 1 s, the same day's, as nearly every claim does (the dashboard's wait buckets, series.lua).
BODY = (
    b'{"command":"echo hello","env_vars":{"GREETING":"hi"},"status":"pending",'
    b'"retry_count":0,"created_at":"1970-01-01T00:00:01.000000Z"}'
)


def counted(pid: int, workdir: str, work: Callable[[], None]) -> int:
    """Redis's instructions while `work` runs."""
    harness.callgrind_zero(pid)
    work()
    return harness.callgrind_total(pid, workdir)


class Scripts:
    """The calls of the checkout first on the path, whichever layout it has: one Script object
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

    def poll(self, node: str, limit: int, caller: str) -> Any:
        """The poll as an agent of the original makes it (a Poller and work stealing on, since
        issue 40)."""
        if self.front:
            return self.calls.poll(*self.front, node, limit, caller)
        return harness.poll_call(self.calls, node, limit, caller)

    def parts(self, call: Any) -> tuple[str, list[Any], list[Any]]:
        """(script text, KEYS, ARGV) of a call."""
        if not self.front:
            return call.script.text, [self.keys.root], list(call.args)
        return getattr(self.texts, call.script), list(call.keys), list(call.args)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        build = getattr(self.calls, name)
        return lambda *args, **kwargs: build(*self.front, *args, **kwargs)


def measure(jobs: int) -> dict[str, float]:
    """Instructions per call of each phase, with the checkout first on the path."""
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
    with (
        tempfile.TemporaryDirectory() as workdir,
        harness.callgrind_redis(workdir) as (client, pid),
    ):
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
    """`measure` in a process of its own on the checkout at `code`."""
    out = harness.run_module("script_instructions", "--measure", "--jobs", str(jobs), code=code)
    figures: dict[str, float] = json.loads(out.splitlines()[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--against", default="", metavar="REF", help="a commit to compare")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.jobs)))
        return 0
    ours = measured(harness.ROOT, args.jobs)
    theirs: dict[str, float] = {}
    if args.against:
        with harness.checkout(args.against) as other:
            theirs = measured(other, args.jobs)
    columns = [Column("instructions/call", "10.0f")]
    if args.against:
        columns += [Column(args.against, "10.0f"), Column("ratio", "6.3f")]
    table = Table(*columns)
    table.header()
    for label, figure in ours.items():
        before = theirs.get(label)
        table.row(label, figure, *([] if before is None else [before, figure / before]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
