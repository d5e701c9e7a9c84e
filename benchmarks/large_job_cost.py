"""What the largest job the limits allow costs Redis, call by call over HTTP (issue 26, item
1): no Redis call on it should take over 1 ms, beside normal traffic, and GET /jobs/{id}
should stay one command; with --against REF, the same against the version REF, side by side.

    .venv/bin/python -m benchmarks.large_job_cost [--lives 2] [--rounds 2] [--scale 1.0]
        [--small-lives 100] [--against REF] [--no-pin]

The big job is as large as scheduler/config's limits allow: a submit body just under
MAX_BODY_BYTES, nine tenths of it env_vars (about 9 000 variables of 90 bytes: a table of
many entries is what decoding it in a script cost most) and the rest a long command; reports
carrying a stdout and a stderr of OUTPUT_LIMIT_BYTES each. --scale multiplies every size
(the version before may need smaller jobs to finish in reasonable time). Two lives of such a
job, over HTTP, on a node of their own (node_selector):

  done:   submit, poll, running, done with the outputs, GET /jobs/{id}, GET .../attempts
  failed: submit, poll, running, failed with the outputs and a retry left (requeued), poll,
          running, failed with the outputs and none left, GET, POST .../retry, poll, running,
          DELETE (the cancel of a running job)

A round starts its own redis-server (free loopback port, no persistence) and one `scheduler
serve` process (AGENT_AUTH=open; METRICS=off, whose flush, a script a second, would land among
the measured calls) from the checkout measured; Redis gets the last CPU to itself, this
process and the API the others (not with --no-pin). After one pair of lives unmeasured (every
script loaded), it runs two phases of --lives pairs of lives:

  alone:  nothing else runs; SLOWLOG (at 0 µs) and INFO commandstats are reset before each
          call and read after it. The call's Redis time is the sum of its top-level commands'
          own time as SLOWLOG logs them (a script's inner commands are inside its EVALSHA or FCALL;
          commandstats counts them under their own names too, so it cannot tell a reader's
          MGET from a script's: it gives the scripts' time, and the commands a GET made).
  mixed:  the same lives while a second asyncio task runs small jobs' lives (submit, poll,
          running, done, GET, heartbeat) on four other nodes, at least --small-lives and on
          until the big lives end; SLOWLOG at 1 ms (slowlog-max-len 1024) reset before. Each
          entry is a command that held Redis over 1 ms, printed, and told as the big jobs'
          (it names their node or one of them, or carries an argument over 10 kB: a submit)
          or a small one's: the target is none.

With --against REF, REF is checked out in a temporary directory and every round runs an API
process from each, taking turns (ours then REF, REF then ours, ...), with the same sizes; a
call kind's figure is
the median over its rounds and lives, and the ratio REF / ours is printed beside it.

What it cannot isolate: a command's time in SLOWLOG leaves out reading its request and writing
its reply (2 MiB each way for a report or a GET of the big job: Redis's event loop pays them,
outside any figure here; redis_ceiling.py counts Redis's CPU instead); it is wall time, so a
command that lost its CPU to another process logs longer than it ran (the pinning keeps this
benchmark's own processes off Redis's CPU, not the machine's other users: a small call over
1 ms beside the big ones may be that, or the big ones' aftermath); the machine is shared, so a
figure of tens of µs moves by tens of % between runs (compare the versions of one run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from benchmarks import harness
from benchmarks.report import Column, Table
from benchmarks.timing import in_turn, median, ratio
from scheduler.config import Settings

PREFIX = "large"
BIG_NODE = "big-node"
SMALL_NODES = [f"small-node-{i}" for i in range(4)]
WATCHER = "large-job-cost"  # this process's Redis client name: its own commands are left out
OURS = "ours"
ENV_SHARE = 0.9  # of the submit body, in env_vars
ENV_VALUE_BYTES = 90
BODY_MARGIN = 64  # bytes under MAX_BODY_BYTES
SLOW_US = 1000
RUNNING = b'{"status":"running"}'
GET_ONE = "GET /jobs/{id}"


@dataclass(frozen=True)
class BigJob:
    """The big job's request bodies."""

    submit: bytes
    done: bytes
    failed: bytes
    env_vars: int
    command_bytes: int
    output_bytes: int


def big_job(settings: Settings, scale: float) -> BigJob:
    budget = int(settings.max_body_bytes * scale) - BODY_MARGIN
    entry = len(json.dumps({"VAR_00000": "v" * ENV_VALUE_BYTES})) - 1  # `"k":"v",`
    count = max(1, int(budget * ENV_SHARE) // entry)
    env = {f"VAR_{i:05d}": f"{i:05d}".ljust(ENV_VALUE_BYTES, "v") for i in range(count)}
    job = {"command": "", "env_vars": env, "node_selector": {"node.id": BIG_NODE}}
    room = max(16, budget - len(json.dumps(job, separators=(",", ":"))))
    job["command"] = "echo " + "c" * (room - 5)
    submit = json.dumps(job, separators=(",", ":")).encode()
    out_bytes = int(settings.output_limit_bytes * scale)

    def report(status: str, exit_code: int) -> bytes:
        stdout, stderr = _text("out", out_bytes), _text("err", out_bytes)
        body = {"status": status, "exit_code": exit_code, "stdout": stdout, "stderr": stderr}
        return json.dumps(body).encode()

    return BigJob(submit, report("done", 0), report("failed", 1), count, room, out_bytes)


def _text(name: str, size: int) -> str:
    """`size` bytes of ASCII lines."""
    line = f"a line of the big job's {name}, as long as many are in a build log\n"
    return (line * (size // len(line) + 1))[:size]


@dataclass
class Round:
    """One round's figures: µs lists per call kind (alone), slow entries (mixed)."""

    times: dict[str, list[float]] = field(default_factory=dict)
    evalsha: dict[str, list[float]] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    get_commands: list[dict[str, int]] = field(default_factory=list)
    slow: list[tuple[str, str]] = field(default_factory=list)  # whose ("big", "small"), entry
    big_ids: set[str] = field(default_factory=set)
    small_lives: int = 0
    mixed_secs: float = 0.0


class Calls:
    """Sends the big job's calls; with a watch (the alone phase), takes each one's Redis time."""

    def __init__(self, http: httpx.AsyncClient, watch: redis.Redis | None, got: Round) -> None:
        self.http, self.watch, self.got = http, watch, got

    async def send(self, kind: str, method: str, path: str, body: bytes = b"") -> httpx.Response:
        if self.watch is not None:
            self.watch.slowlog_reset()
            self.watch.config_resetstat()
        answer = await self.http.request(method, path, content=body)
        if answer.status_code >= 300:
            raise RuntimeError(f"{kind}: {answer.status_code} {answer.text[:300]}")
        if self.watch is not None:
            self._record(kind, self.watch)
        return answer

    def _record(self, kind: str, watch: redis.Redis) -> None:
        entries = top_level(watch.slowlog_get(1024))
        names = [e["command"].split(b" ", 1)[0].decode().upper() for e in reversed(entries)]
        self.got.times.setdefault(kind, []).append(sum(e["duration"] for e in entries))
        self.got.commands.setdefault(kind, "+".join(names))
        stats = watch.info("commandstats")
        names = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall", "cmdstat_fcall_ro")
        scripts = [stats[n] for n in names if n in stats]
        if scripts:
            self.got.evalsha.setdefault(kind, []).append(sum(s["usec"] for s in scripts))
        if kind == GET_ONE:
            theirs = {
                name.removeprefix("cmdstat_"): int(s["calls"])
                for name, s in stats.items()
                if not name.startswith(("cmdstat_config", "cmdstat_slowlog", "cmdstat_info"))
            }
            self.got.get_commands.append(theirs)


async def submit(calls: Calls, job: BigJob) -> str:
    answer = await calls.send("POST /jobs", "POST", "/jobs", job.submit)
    job_id: str = answer.json()["job_id"]
    calls.got.big_ids.add(job_id)
    return job_id


async def claim(calls: Calls, job_id: str, poll: str, running: str) -> None:
    found = await calls.send(poll, "GET", f"/jobs?node_id={BIG_NODE}&status=pending")
    if f'"job_id":"{job_id}"'.encode() not in found.content:
        raise RuntimeError(f"{poll}: {job_id} not handed out")
    await calls.send(running, "PATCH", f"/jobs/{job_id}", RUNNING)


async def life_done(calls: Calls, job: BigJob) -> None:
    job_id = await submit(calls, job)
    await claim(calls, job_id, "poll", "PATCH running")
    await calls.send("PATCH done, outputs", "PATCH", f"/jobs/{job_id}", job.done)
    await calls.send(GET_ONE, "GET", f"/jobs/{job_id}")
    await calls.send("GET /jobs/{id}/attempts", "GET", f"/jobs/{job_id}/attempts")


async def life_failed(calls: Calls, job: BigJob) -> None:
    job_id = await submit(calls, job)
    await claim(calls, job_id, "poll", "PATCH running")
    await calls.send("PATCH failed, requeued", "PATCH", f"/jobs/{job_id}", job.failed)
    await claim(calls, job_id, "poll, requeued", "PATCH running, requeued")
    await calls.send("PATCH failed, no retry left", "PATCH", f"/jobs/{job_id}", job.failed)
    await calls.send(GET_ONE, "GET", f"/jobs/{job_id}")
    await calls.send("POST /jobs/{id}/retry", "POST", f"/jobs/{job_id}/retry")
    await claim(calls, job_id, "poll, retried", "PATCH running, retried")
    await calls.send("DELETE /jobs/{id}, running", "DELETE", f"/jobs/{job_id}")


async def big_lives(calls: Calls, job: BigJob, lives: int) -> None:
    for _ in range(lives):
        await life_done(calls, job)
        await life_failed(calls, job)


async def small_traffic(base: str, big: asyncio.Task[None], at_least: int) -> int:
    """Small jobs' lives on SMALL_NODES, one worker a node, until at least `at_least` are
    done and the big lives have ended; how many were lived."""
    done = 0

    async def worker(http: httpx.AsyncClient, node: str) -> None:
        nonlocal done
        while done < at_least or not big.done():
            await small_life(http, node)
            done += 1

    async with httpx.AsyncClient(base_url=base, timeout=300) as http:
        await asyncio.gather(*(worker(http, node) for node in SMALL_NODES))
    return done


async def small_life(http: httpx.AsyncClient, node: str) -> None:
    body = {"command": "echo small", "node_selector": {"node.id": node}}
    created = _ok(await http.post("/jobs", json=body))
    job_id = created.json()["job_id"]
    _ok(await http.get(f"/jobs?node_id={node}&status=pending"))
    _ok(await http.patch(f"/jobs/{job_id}", content=RUNNING))
    report = {"status": "done", "exit_code": 0, "stdout": "hello\n", "stderr": ""}
    _ok(await http.patch(f"/jobs/{job_id}", json=report))
    _ok(await http.get(f"/jobs/{job_id}"))
    _ok(await http.post("/nodes/heartbeat", json={"id": node}))


def _ok(answer: httpx.Response) -> httpx.Response:
    if answer.status_code >= 300:
        raise RuntimeError(f"small traffic: {answer.request.url} {answer.status_code}")
    return answer


async def phases(base: str, watch: redis.Redis, job: BigJob, args: argparse.Namespace) -> Round:
    got = Round()
    async with httpx.AsyncClient(base_url=base, timeout=600) as http:
        for node in [BIG_NODE, *SMALL_NODES]:
            body = {"id": node, "hostname": node, "cpu_count": 64, "role": "compute"}
            _ok(await http.post("/nodes/register", json=body))
        # Every script loaded (a large report's check among them) and the API's connections
        # open before anything is measured.
        await big_lives(Calls(http, None, got), job, 1)
        watch.config_set("slowlog-log-slower-than", 0)
        await big_lives(Calls(http, watch, got), job, args.lives)
        watch.config_set("slowlog-log-slower-than", SLOW_US)
        watch.slowlog_reset()
        started = time.monotonic()
        big = asyncio.create_task(big_lives(Calls(http, None, got), job, args.lives))
        got.small_lives = await small_traffic(base, big, args.small_lives)
        await big
        got.mixed_secs = time.monotonic() - started
    for entry in top_level(watch.slowlog_get(1024)):
        shown = repr(entry["command"].decode(errors="replace")[:100])[1:-1]
        got.slow.append(
            (whose(entry["command"], got.big_ids), f"{entry['duration']:8d} µs  {shown}")
        )
    return got


LARGE_ARG = re.compile(rb"\((\d+) more bytes\)")  # SLOWLOG's cut of a long argument


def whose(command: bytes, big_ids: set[str]) -> str:
    """ "big" for a command on the big jobs: naming their node or one of them, or carrying
    an argument of over 10 kB (a submit, whose job has no id yet); else "small"."""
    words = set(re.split(rb"[\s:]", command))
    named = {BIG_NODE, *big_ids} & {w.decode(errors="replace") for w in words}
    if named or any(int(n) > 10_000 for n in LARGE_ARG.findall(command)):
        return "big"
    return "small"


def top_level(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries of the API's own commands: not this process's, and not those a script
    called (Redis 7 logs them too, from the client "?:0", and their time is inside the
    script's entry)."""
    return [
        e
        for e in entries
        if e.get("client_name") != WATCHER.encode() and e.get("client_address") != b"?:0"
    ]


@contextlib.contextmanager
def pinned(on: bool) -> Iterator[Callable[[int], None]]:
    """With `on` and two CPUs or more: this process and what it starts on all CPUs but the
    last, and a way to give a process (Redis) the last to itself. Restored at the end."""
    cpus = sorted(os.sched_getaffinity(0))
    if not on or len(cpus) < 2:
        yield lambda pid: None
        return
    os.sched_setaffinity(0, cpus[:-1])
    try:
        yield lambda pid: os.sched_setaffinity(pid, cpus[-1:])
    finally:
        os.sched_setaffinity(0, cpus)


def run_round(code: Path, job: BigJob, args: argparse.Namespace) -> Round:
    """One round against a redis-server of its own, the API process running from `code`."""
    with (
        pinned(args.pin) as own_cpu,
        harness.redis_server() as url,
        harness.connected(url, client_name=WATCHER) as watch,
        tempfile.TemporaryFile() as log,
    ):
        own_cpu(int(watch.info("server")["process_id"]))
        watch.config_set("slowlog-max-len", 1024)
        try:
            with harness.scheduler_api(
                url,
                PREFIX,
                code=code,
                stdout=log,
                stderr=log,
                AGENT_AUTH="open",
                METRICS="off",
                MAX_JOBS_PER_NODE="1000",
                MAX_JOB_RETRIES="1",
                RETRY_BACKOFF_SECS="0",
                NODE_TTL_SECS="3600",
                SWEEP_INTERVAL_SECS="3600",
            ) as api:
                return asyncio.run(phases(api.url, watch, job, args))
        except BaseException:
            log.seek(0)
            sys.stderr.write(log.read()[-4000:].decode(errors="replace"))
            raise


def merged(rounds: list[Round]) -> Round:
    """The rounds of one version as one: their samples together, their slow entries all."""
    out = Round()
    for got in rounds:
        for kind, values in got.times.items():
            out.times.setdefault(kind, []).extend(values)
        for kind, values in got.evalsha.items():
            out.evalsha.setdefault(kind, []).extend(values)
        for kind, names in got.commands.items():
            out.commands.setdefault(kind, names)
        out.get_commands += got.get_commands
        out.slow += got.slow
        out.big_ids |= got.big_ids
        out.small_lives += got.small_lives
        out.mixed_secs += got.mixed_secs
    return out


def report(versions: dict[str, Round], job: BigJob, args: argparse.Namespace) -> None:
    print(
        f"big job: submit body {len(job.submit)} bytes ({job.env_vars} env_vars, command "
        f"{job.command_bytes} bytes), stdout and stderr {job.output_bytes} bytes each; "
        f"scale {args.scale}, {args.lives} lives of each kind a phase, {args.rounds} rounds"
    )
    ours, other = versions[OURS], versions.get(args.against)
    print("Redis time of each call on the big job, alone (SLOWLOG; median over lives, rounds):")
    columns = [Column(OURS, "9.0f", "µs"), Column("commands", "14s")]
    if other is not None:
        columns += [Column(args.against, "9.0f", "µs"), Column("commands", "14s")]
        columns.append(Column(f"{args.against} / {OURS}", "6.1f"))
    table = Table(*columns, label_width=30)
    table.header()
    for kind, values in ours.times.items():
        cells: list[float | str] = [median(values), ours.commands[kind]]
        if other is not None and kind in other.times:
            before = median(other.times[kind])
            cells += [before, other.commands[kind], ratio(before, max(median(values), 1))]
        table.row(kind, *cells)
    print("INFO commandstats, the scripts' µs a call (EVALSHA or FCALL), alone:")
    scripts = Table(*columns[:1] + ([columns[2]] if other is not None else []), label_width=30)
    for kind, values in ours.evalsha.items():
        cells = [median(values)]
        if other is not None and kind in other.evalsha:
            cells.append(median(other.evalsha[kind]))
        scripts.row(kind, *cells)
    for name, got in versions.items():
        one = sum(1 for counts in got.get_commands if sum(counts.values()) == 1)
        seen = sorted(
            {f"{n.upper()} {c}" for counts in got.get_commands for n, c in counts.items()}
        )
        print(
            f"{GET_ONE} on the big job, {name}: one Redis command in {one} of "
            f"{len(got.get_commands)} GETs (commandstats: {', '.join(seen)})"
        )
    for name, got in versions.items():
        big = sum(1 for who, _ in got.slow if who == "big")
        said = f"{len(got.slow)}: {big} on the big jobs, {len(got.slow) - big} on small ones"
        print(
            f"slow calls (over 1 ms) among normal traffic, {name}: {said if got.slow else 'none'} "
            f"({got.small_lives} small lives beside the big ones, {got.mixed_secs:.1f} s)"
        )
        for who, entry in got.slow:
            print(f"  {who:5s} {entry}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lives", type=int, default=2, help="lives of each kind a phase")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each version")
    parser.add_argument("--scale", type=float, default=1.0, help="of every size the limits allow")
    parser.add_argument("--small-lives", type=int, default=100, help="at least, beside")
    parser.add_argument("--against", default="", metavar="REF", help="a commit to compare")
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false", help="Redis shares the CPUs with the rest"
    )
    args = parser.parse_args()
    job = big_job(Settings.from_env(), args.scale)
    codes = {OURS: harness.ROOT}
    rounds: dict[str, list[Round]] = {OURS: []}
    with contextlib.ExitStack() as stack:
        if args.against:
            codes[args.against] = stack.enter_context(harness.checkout(args.against))
            rounds[args.against] = []
        for turn in range(args.rounds):
            for name in in_turn(list(codes), turn):
                rounds[name].append(run_round(codes[name], job, args))
    report({name: merged(got) for name, got in rounds.items()}, job, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
