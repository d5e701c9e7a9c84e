"""Redis's instructions per script call, counted by callgrind: the work of script_cost.py
(create, the poll, a job's transitions, a cancel) as a count that does not move with the
load of this shared machine, so two versions of the scripts compare exactly. Then the calls
of life_cost.py's plain life as the API makes them (the built-in registry, "live": a node
registered, four others holding --jobs jobs): a heartbeat, an empty poll, and a job's
four calls (create, the poll that finds it, PATCH running, PATCH done), with their sum.

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

    def poll_of(self, node: str, max_jobs: int) -> Any:
        """The poll of `node` by an agent with AGENT_AUTH=open, as the API calls it: with work
        stealing on (the default, since issue 40: the poll's Poller) or before it."""
        poller = getattr(self.calls, "Poller", None)
        if poller is None:
            return self.poll(node, max_jobs, "open")
        return self.poll(poller(node, "open"), max_jobs, True)

    def parts(self, call: Any) -> tuple[str, list[Any], list[Any]]:
        """(script text, KEYS, ARGV) of a call."""
        if not self.front:
            return call.script.text, [self.keys.root], list(call.args)
        return getattr(self.texts, call.script), list(call.keys), list(call.args)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        build = getattr(self.calls, name)
        return lambda *args, **kwargs: build(*self.front, *args, **kwargs)


# The API's plain life (life_cost.py, life_api.py): the measured node and the others.
NODE = "measured-node"
OTHERS = [f"stored-node-{i}" for i in range(4)]
# The API's times: now is an epoch of today's (a call's minute, its claim's wait: series.lua),
# created 1 ms before its claim.
T0 = 1_767_225_600.25  # 2026-01-01T00:00:00.25Z
LIFE_BODY = (
    b'{"command":"echo hi","status":"pending","retry_count":0,'
    b'"created_at":"2026-01-01T00:00:00.250000Z"}'
)
LIFE = (
    "CREATE_JOB, live",
    "POLL, finds a job, live",
    "TRANSITION, running, live",
    "TRANSITION, done, live",
)
LIFE_SUM = "a life (the four above)"
LIVES = "a life, one after another"


def _register(node: str, cpus: int) -> Any:
    """REGISTER_NODE of a compute node as the API makes it (AGENT_AUTH=open)."""
    from scheduler.store.scripts import nodes
    from scheduler.store.scripts.retry import RetryPolicy

    record = json.dumps({"id": node, "hostname": node, "cpu_count": cpus, "role": "compute"})
    who = nodes.Registration("open", "open", False, 1000, 86400.0, RetryPolicy(1, 0, 3600), True)
    return nodes.register_node(node, record.encode(), "compute", T0, who, "", 1000)


def life_phases(s: Scripts, jobs: int, first: int) -> list[tuple[str, Callable[[], list[Any]]]]:
    """The API's calls of life_cost.py's plain life, `jobs` of each, the lives' jobs numbered
    from `first`: a heartbeat and an empty poll of the measured node, then each job's four."""
    from scheduler.nodes.placement import Placement
    from scheduler.store.scripts import nodes

    numbers, live, update = range(first, first + jobs), Placement.live(), s.update
    running, done = update(status="running"), update(status="done", exit_code=0, stdout="hi\n")
    return [
        ("HEARTBEAT", lambda: [nodes.heartbeat(NODE, T0, "open", 86400.0, True) for _ in numbers]),
        ("POLL, empty", lambda: [s.poll_of(NODE, 4) for _ in numbers]),
        (
            "CREATE_JOB, live",
            lambda: [s.create_job(LIFE_BODY, live, T0, 86400.0) for _ in numbers],
        ),
        ("POLL, finds a job, live", lambda: [s.poll_of(NODE, 1) for _ in numbers]),
        (
            "TRANSITION, running, live",
            lambda: [
                s.transition(f"job-{n}", running, T0 + 0.001, s.retries, "open", **s.ttl)
                for n in numbers
            ],
        ),
        (
            "TRANSITION, done, live",
            lambda: [
                s.transition(f"job-{n}", done, T0 + 0.5, s.retries, "open", **s.ttl)
                for n in numbers
            ],
        ),
    ]


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
        ("POLL, finds a job", lambda: [s.poll_of(f"n{n % 10}", 1) for n in numbers]),
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
                ("POLL, at capacity", lambda: [s.poll_of(f"n{n % 10}", 1) for n in numbers])
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
        runner = Runner(client, pid, workdir, bool(library))
        for label, build in phases:
            figures[label] = runner.per_call(s, build())
        if library:  # the built-in registry's scripts as FCALLs (since issue 26)
            figures |= live_life(runner, jobs)
    return figures


class Runner:
    """Sends a phase's calls (FCALL, or EVALSHA before issue 26) in pipelines of 500 and
    counts Redis's instructions meanwhile."""

    def __init__(self, client: Any, pid: int, workdir: str, library: bool) -> None:
        self.client, self.pid, self.workdir, self.library = client, pid, workdir, library
        self.loaded: dict[str, str] = {}  # a script's text -> its SHA-1 (EVALSHA)

    def _how(self, s: Scripts, call: Any) -> str:
        """What runs `call`: its function's name, or its script's SHA-1."""
        function: str = getattr(call.script, "function", "")
        if function:
            return function
        text, _, _ = s.parts(call)
        if text not in self.loaded:
            self.loaded[text] = self.client.script_load(text)
        return self.loaded[text]

    def send(self, s: Scripts, calls: list[Any]) -> list[Any]:
        hows = [self._how(s, call) for call in calls]  # loaded before anything is counted
        run = "fcall" if self.library else "evalsha"
        replies: list[Any] = []
        for start in range(0, len(calls), 500):
            pipe = self.client.pipeline(transaction=False)
            chunk = zip(calls[start : start + 500], hows[start : start + 500], strict=True)
            for call, how in chunk:
                _, keys, args = s.parts(call)
                getattr(pipe, run)(how, len(keys), *keys, *args)
            replies += pipe.execute()
        return replies

    def per_call(self, s: Scripts, calls: list[Any]) -> float:
        return counted(self.pid, self.workdir, lambda: self.send(s, calls)) / len(calls)


def live_life(runner: Runner, jobs: int) -> dict[str, float]:
    """life_phases under a root of their own: the other nodes registered and holding more
    than `jobs` jobs each, then the measured node, so every life's job goes to it (each
    phase's calls one after another here: the node holds up to `jobs` jobs, and its running
    ones are a sorted set of `jobs`, not of one or two as in life_cost.py's lives); then
    `jobs` more lives one after another, each job's four calls in turn, as life_cost.py's
    (the node holds one job at most), counted together: the figure to compare a life by."""
    from scheduler.nodes.placement import Placement

    s = Scripts("cgl")
    runner.client.set(s.keys.initialised, "benchmark")
    for node in OTHERS:
        runner.send(s, [_register(node, 64)])
    stored = [
        s.create_job(BODY, Placement.live(), 1.0, 86400.0) for _ in range(len(OTHERS) * (jobs + 1))
    ]
    runner.send(s, stored)
    runner.send(s, [_register(NODE, 4)])
    first = int(runner.client.get(s.keys.job_seq)) + 1
    phases = life_phases(s, jobs, first)
    figures = {label: runner.per_call(s, build()) for label, build in phases}
    figures[LIFE_SUM] = sum(figures[label] for label in LIFE)
    placed = runner.client.zcard(s.keys.node_status(NODE, "done"))
    if placed != jobs:
        raise RuntimeError(f"{placed} of {jobs} lives ended done on {NODE}")
    built = [build() for label, build in life_phases(s, jobs, first + jobs) if label in LIFE]
    lives = [call for calls in zip(*built, strict=True) for call in calls]
    figures[LIVES] = runner.per_call(s, lives) * len(LIFE)
    placed = runner.client.zcard(s.keys.node_status(NODE, "done"))
    if placed != 2 * jobs:
        raise RuntimeError(f"{placed - jobs} of {jobs} lives in turn ended done on {NODE}")
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
