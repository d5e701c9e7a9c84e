"""Live output (docs/GUIDE.md, Watching jobs): a followed line's latency, CPU and memory.

Each comparison is measured side by side in one run (this machine's 2 cores are shared and
noisy: rounds take turns, medians and ratios are printed, never a target).

    .venv/bin/python -m benchmarks.live_logs [--quick] [--parts 1,2,3,4,5]

--quick runs every part briefly (under a minute; the full run takes 2 to 3).

Starts its own redis-server and two `scheduler serve` processes on it (replicas A and B, one
API process each, AGENT_AUTH open as on loopback, MAX_JOBS_PER_NODE 100); the parts that
measure a process's memory start fresh serve processes of their own on the same Redis. Jobs
are "running" by the API alone where no agent is named: a node registered, a job submitted
to it (`node_selector` node.id) and claimed (PATCH running), its output POSTed as an agent
does. Five parts, each printed as it is measured:

1. A line printed -> shown by a follower (GET /jobs/{id}/logs?follow=1 on replica B): a job
   of the reference agent (pointed at replica A) prints its wall clock every 100 ms. With
   the agent's default chunking and, where the agent has the setting, with
   AGENT_OUTPUT_FLUSH_SECS=0.1 (two agents, jobs in turn); and the server's part alone (a
   chunk POSTed to A, stamped as it is sent). Without an output event before the job ends
   the agent sends no live output: said, and its rows left out.
2. One chunk's cost: API CPU (/proc/PID/task/*/schedstat) and Redis CPU (INFO used_cpu_*)
   per request of a one-line chunk (100 bytes), beside GET /jobs/{id} (served by the hot
   lane) and the same GET through ASGI (`?status_not=` keeps it off the lane: the chunk's
   path); and a chunk with one follower on B, whose CPU is B's column. Redis time of
   APPEND_OUTPUT below its job's cap and at it (each chunk trims one), and Redis memory of
   a 1 MiB log.
3. 1,000 running jobs each sending a line a second: chunks paced at 1,000 a second over
   both replicas, beside GET /jobs/{id} at the same pace: the processes' CPU and whether the
   pace held.
4. Slow followers: 50 that connect (SO_RCVBUF 4 KiB) and read nothing, beside one that
   reads, on a fresh replica, and one that reads on another fresh replica without slow
   ones, while 64 KiB chunks are POSTed to A: each replica's RSS; the bytes the readers
   missed (`dropped`); what one slow follower gets once it reads again.
5. 1,000 idle followers of a job that prints nothing against 1,000 idle long-polls
   (GET /jobs/{id}?wait=60), each on a fresh replica, at once: RSS per connection, the
   processes' CPU over an idle window against the same window before they came, Redis'
   clients and commands.

What it cannot isolate: everything shares the 2 cores (the load generator, the followers'
parsing, both replicas, Redis, the agent's job), so a latency includes waiting for a core
and a CPU figure includes cache effects of its neighbours; RSS includes what the allocator
keeps after freeing (a process's growth is an upper bound of what it holds); Redis's CPU
and memory are the whole server's (each replica's metrics flush every second lands in
them); and a slow follower's bytes waiting in the kernel (its socket buffers) are not the
API's RSS: part 4 prints the kernel's TCP memory beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from benchmarks import harness
from benchmarks.idle import raise_file_limit
from benchmarks.live_clients import (
    DEADLINE_SECS,
    SLOW_RCVBUF,
    Conn,
    Follower,
    Idle,
    Job,
    KiB,
    MiB,
    RawStream,
    claimed,
    connect,
    ended,
    event_data,
    finish,
    followed,
    follower_client,
    many_claimed,
    read_to,
    register,
    sent_all,
    slow_follower,
    submit,
    until,
)
from benchmarks.redis_ceiling import redis_cpu
from benchmarks.report import Column, Table
from benchmarks.report_flood import rss_mib
from benchmarks.timing import calls_usec, evalsha_many, in_turn, median, median_ratio
from scheduler.config import Settings
from scheduler.models.log import CHUNK_MAX_BYTES
from scheduler.store.keys import Keys
from scheduler.store.scripts import logs as log_scripts

PREFIX = "live"
LOG_MAX_BYTES = Settings().log_max_bytes  # a job's log's cap: the replicas keep the default
FLUSH_SETTING = "AGENT_OUTPUT_FLUSH_SECS"
LINE = ("a line of a job's output, as a program logs it " * 3)[:99] + "\n"  # 100 bytes
BIG = "y" * (CHUNK_MAX_BYTES - 1) + "\n"  # the largest chunk an agent sends
CONNECTIONS = 8  # part 2's connections (and its jobs of each kind, one a connection)


@dataclass(frozen=True)
class Plan:
    """How much of each part a run measures (--quick: a short run of every part)."""

    job_secs: int  # 1: how long the agent's job prints
    latency_rounds: int
    direct_chunks: int  # 1: chunks of the server-alone case, per round
    cost_requests: int  # 2: requests of each subject, per round
    cost_rounds: int
    script_calls: int  # 2: APPEND_OUTPUT calls per round
    memory_jobs: int
    load_secs: int  # 3: one round's window, per subject
    load_rounds: int
    flood_mib: int  # 4: output POSTed while the slow followers read nothing
    slow_followers: int
    idle_connections: int  # 5: of each kind
    idle_secs: float  # 5: the idle window (a keepalive every 15 s: 16 s holds one each)


FULL = Plan(
    job_secs=10,
    latency_rounds=2,
    direct_chunks=60,
    cost_requests=2000,
    cost_rounds=5,
    script_calls=2000,
    memory_jobs=20,
    load_secs=5,
    load_rounds=2,
    flood_mib=50,
    slow_followers=50,
    idle_connections=1000,
    idle_secs=16.0,
)
QUICK = Plan(
    job_secs=3,
    latency_rounds=1,
    direct_chunks=20,
    cost_requests=400,
    cost_rounds=2,
    script_calls=500,
    memory_jobs=5,
    load_secs=2,
    load_rounds=1,
    flood_mib=12,
    slow_followers=50,
    idle_connections=1000,
    idle_secs=3.0,
)


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def process_cpu(pid: int) -> float:
    """CPU seconds of a process's threads, to the ns (/proc/PID/task/*/schedstat): the 10 ms
    ticks of /proc/PID/stat are too coarse for a round of a few hundred requests. A thread
    that ended is no longer counted (the API's work runs on its main thread)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


async def settled(pids: Sequence[int], step: float = 0.5) -> None:
    """Until the processes are idle (under 30 ms of CPU each in a half second, twice): what
    a burst of connections set off is done before a memory figure is read."""
    calm, last = 0, [process_cpu(pid) for pid in pids]
    deadline = time.monotonic() + 30
    while calm < 2 and time.monotonic() < deadline:
        await asyncio.sleep(step)
        now = [process_cpu(pid) for pid in pids]
        calm = calm + 1 if all(b - a < 0.03 for a, b in zip(last, now, strict=True)) else 0
        last = now


def serve(redis_url: str) -> contextlib.AbstractContextManager[harness.Served]:
    """One `scheduler serve` process (a replica) of the deployment. 1,000 running jobs on 20
    nodes need 50 a node (MAX_JOBS_PER_NODE is 1 by default); the nodes the benchmark
    registers never heartbeat (nor does a worker sweep them)."""
    return harness.scheduler_api(
        redis_url,
        PREFIX,
        stderr=subprocess.DEVNULL,
        MAX_JOBS_PER_NODE="100",
        NODE_TTL_SECS="3600",
    )


# Part 1: latency, line printed -> line shown.

LATENCY = Table(
    Column("p50", "7.1f", "ms"),
    Column("p95", "7.1f", "ms"),
    Column("max", "7.1f", "ms"),
    Column("lines", "6d"),
    label_width=56,
)


def printer(secs: int, every: float) -> str:
    """A job printing its wall clock every `every` s for `secs` seconds, a line each, flushed."""
    program = (
        f"import time\nfor _ in range({max(1, round(secs / every))}):\n"
        f"    print(repr(time.time()), flush=True)\n    time.sleep({every})\n"
    )
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(program)}"


def agent_has_flush_setting() -> bool:
    """Whether this checkout's agent reads AGENT_OUTPUT_FLUSH_SECS (its code names it)."""
    code = harness.ROOT / "scheduler"
    return any(FLUSH_SETTING in path.read_text() for path in code.rglob("*.py"))


@contextlib.contextmanager
def agents(redis_url: str, api: harness.Served, flushes: dict[str, str]) -> Iterator[None]:
    """A reference agent per node of `flushes` (node -> its AGENT_OUTPUT_FLUSH_SECS, "": the
    default), pointed at `api`, once each is registered."""
    work = tempfile.mkdtemp(prefix="bench-live-")
    with contextlib.ExitStack() as stack, httpx.Client(base_url=api.url, timeout=30) as http:
        for node, flush in flushes.items():
            env = harness.scheduler_env(
                redis_url,
                PREFIX,
                SCHEDULER_URL=api.url,
                AGENT_WORK_DIR=os.path.join(work, node),
                AGENT_LIMITS="off",
                **({FLUSH_SETTING: flush} if flush else {}),
            )
            stack.enter_context(harness.agent(env, node))
        deadline = time.monotonic() + DEADLINE_SECS
        while not all(node in http.get("/nodes").json() for node in flushes):
            if time.monotonic() > deadline:
                raise RuntimeError("the agents did not register")
            time.sleep(0.05)
        yield


async def agent_job(
    conn: Conn, b: httpx.AsyncClient, node: str, secs: int, every: float
) -> list[float] | None:
    """Each line's latency of a job printing every `every` s that the agent `node` runs,
    followed on B; None when no output came before the job ended (the agent sends none while
    it runs)."""
    job_id = await submit(conn, node, printer(secs, every))
    follower = await followed(b, job_id, timed=True)
    end = await ended(follower, secs + DEADLINE_SECS)
    if end.get("status") != "done":
        raise RuntimeError(f"the agent's job {job_id} ended {end}")
    return follower.latencies if follower.outputs else None


async def direct_posts(conn: Conn, b: httpx.AsyncClient, node: str, count: int) -> list[float]:
    """The server's part alone: chunks POSTed to A as an agent sends them, each stamped with
    the time it is sent, every 50 ms, followed on B."""
    job = await claimed(conn, node)
    follower = await followed(b, job.id, timed=True)
    for _ in range(count):
        await conn.expect("POST", job.output, job.chunk(f"{time.time()!r}\n"))
        await asyncio.sleep(0.05)
    await finish(conn, job)
    await ended(follower)
    return follower.latencies


async def measure_latency(plan: Plan, a: harness.Served, b: harness.Served) -> None:
    has_setting = agent_has_flush_setting()
    subjects = {
        "agent, default chunking (1 s), a line per 100 ms": ("live-default", 0.1),
        "agent, default chunking (1 s), a line per 1 s": ("live-default", 1.0),
    }
    if has_setting:
        subjects[f"agent, {FLUSH_SETTING}=0.1, a line per 100 ms"] = ("live-fast", 0.1)
    direct = "server alone: POST to A -> shown on B"
    results: dict[str, list[float]] = {name: [] for name in [*subjects, direct]}
    silent = False
    conn = await Conn.open(a.url)
    await register(conn, "live-direct")
    async with follower_client(b.url) as b_http:
        for turn in range(plan.latency_rounds):
            for name in in_turn(list(results), turn):
                if name == direct:
                    results[name] += await direct_posts(
                        conn, b_http, "live-direct", plan.direct_chunks
                    )
                elif not silent:
                    node, every = subjects[name]
                    got = await agent_job(conn, b_http, node, plan.job_secs, every)
                    silent = got is None
                    results[name] += got or []
    conn.close()
    LATENCY.header("line printed -> shown by a follower on B")
    if silent:
        print("agent sends no live output on this checkout", flush=True)
    elif not has_setting:
        print(f"(the agent has no {FLUSH_SETTING} on this checkout: its default only)")
    for name, values in results.items():
        if values:
            ms = [1000 * v for v in values]
            LATENCY.row(name, median(ms), percentile(ms, 0.95), max(ms), len(ms))


def latency_part(plan: Plan, redis_url: str, a: harness.Served, b: harness.Served) -> None:
    print(
        f"1. latency, through two replicas (the agent's job prints every 100 ms or 1 s for "
        f"{plan.job_secs} s; {plan.latency_rounds} round(s) taking turns)",
        flush=True,
    )
    flushes = {"live-default": ""}
    if agent_has_flush_setting():
        flushes["live-fast"] = "0.1"
    with agents(redis_url, a, flushes):
        asyncio.run(measure_latency(plan, a, b))
    print(flush=True)


# Part 2: the cost of one chunk.

Cpu = tuple[float, float, float]  # per request: API A, API B, Redis (µs)

COST = Table(
    Column("API A", "6.1f", "µs"),
    Column("API B", "6.1f", "µs"),
    Column("Redis", "6.1f", "µs"),
    Column("API/GET", "7.2f"),
    Column("Redis/GET", "9.2f"),
    label_width=44,
)


async def burst(conns: Sequence[Conn], work: Sequence[Sequence[tuple[str, str, bytes]]]) -> int:
    """Each connection's requests in order, the connections at once; every answer a 200."""

    async def run(conn: Conn, requests: Sequence[tuple[str, str, bytes]]) -> None:
        for method, path, body in requests:
            await conn.expect(method, path, body)

    await asyncio.gather(*(run(c, w) for c, w in zip(conns, work, strict=True)))
    return sum(len(w) for w in work)


async def cpu_per_request(
    run: Callable[[], Awaitable[int]], pids: Sequence[int], client: redis.Redis
) -> Cpu:
    apis, redis_before = [process_cpu(pid) for pid in pids], redis_cpu(client)
    count = await run()
    used = [process_cpu(pid) - before for pid, before in zip(pids, apis, strict=True)]
    redis_used = redis_cpu(client) - redis_before
    return used[0] / count * 1e6, used[1] / count * 1e6, redis_used / count * 1e6


async def measure_cost(
    plan: Plan, a: harness.Served, b: harness.Served, client: redis.Redis
) -> None:
    conns = [await Conn.open(a.url) for _ in range(CONNECTIONS)]
    await register(conns[0], "cost-node")
    plain = [await claimed(conns[0], "cost-node") for _ in range(CONNECTIONS)]
    watched = [await claimed(conns[0], "cost-node") for _ in range(CONNECTIONS)]
    per = plan.cost_requests // CONNECTIONS

    def gets(query: str) -> Callable[[], Awaitable[int]]:
        paths = [[("GET", f"/jobs/{job.id}{query}", b"")] * per for job in plain]
        return lambda: burst(conns, paths)

    def chunks(jobs: list[Job], readers: list[Follower]) -> Callable[[], Awaitable[int]]:
        async def run() -> int:
            wanted = [reader.outputs + per for reader in readers]
            work = [[("POST", job.output, job.chunk(LINE)) for _ in range(per)] for job in jobs]
            sent = await burst(conns, work)
            # Until each follower was sent every chunk: B's part of them is in the window.
            await until(sent_all(readers, wanted), "the followers")
            return sent

        return run

    async with follower_client(b.url) as b_http:
        readers = [await followed(b_http, job.id) for job in watched]
        subjects = {
            "GET /jobs/{id} (the hot lane)": gets(""),
            "GET /jobs/{id}?status_not=done (ASGI)": gets("?status_not=done"),
            "POST /jobs/{id}/output, one line": chunks(plain, []),
            "the same, followed on B (1 follower a job)": chunks(watched, readers),
        }
        pids = (a.pid, b.pid)
        results: dict[str, list[Cpu]] = {name: [] for name in subjects}
        for turn in range(plan.cost_rounds + 1):  # the first round warms up, not counted
            for name in in_turn(list(subjects), turn):
                figures = await cpu_per_request(subjects[name], pids, client)
                if turn:
                    results[name].append(figures)
        for job in watched:
            await finish(conns[0], job)
        for reader in readers:
            await ended(reader)
    base = results["GET /jobs/{id} (the hot lane)"]
    COST.header(f"{CONNECTIONS} connections to A, {per * CONNECTIONS} requests a round")
    for name, rows in results.items():
        api_a, api_b, in_redis = ([row[i] for row in rows] for i in range(3))
        COST.row(
            name,
            median(api_a),
            median(api_b),
            median(in_redis),
            median_ratio(api_a, [row[0] for row in base]),
            median_ratio(in_redis, [row[2] for row in base]),
        )
    for conn in conns:
        conn.close()


async def fill_logs(a: harness.Served, client: redis.Redis, count: int) -> float:
    """Redis memory (MiB) per job whose log was filled past its cap with 64 KiB chunks."""
    conn = await Conn.open(a.url)
    await register(conn, "memory-node")
    jobs = [await claimed(conn, "memory-node") for _ in range(count)]
    before = used_memory(client)
    chunks = LOG_MAX_BYTES // len(BIG) + 4  # past the cap: the oldest trimmed
    for job in jobs:
        for _ in range(chunks):
            await conn.expect("POST", job.output, job.chunk(BIG))
    after = used_memory(client)
    for job in jobs:
        await finish(conn, job)
    conn.close()
    return (after - before) / count / MiB


def used_memory(client: redis.Redis) -> int:
    info: Any = client.info("memory")
    return int(info["used_memory"])


SCRIPT = Table(Column("Redis", "6.2f", "µs/call"), Column("ratio", "6.2f"), label_width=44)


def append_calls(job: Job, count: int) -> list[Any]:
    """`count` one-line APPEND_OUTPUT calls of the job's, in order (its offset moves on)."""
    calls = []
    for _ in range(count):
        calls.append(
            log_scripts.append_output(
                job.id, "open", job.node, "stdout", job.offset, LINE, LOG_MAX_BYTES
            )
        )
        job.offset += len(LINE)
    return calls


def measure_script(plan: Plan, client: redis.Redis, below: Job, at: Job) -> float:
    """Redis µs of APPEND_OUTPUT (EVALSHA, pipelined, INFO commandstats) on a log below its
    cap and on one at it (each chunk trims the oldest), rounds taking turns; prints them and
    returns the MiB of Redis memory the full log of one-line chunks took."""
    root = Keys(PREFIX).root
    before = used_memory(client)
    fill = append_calls(at, LOG_MAX_BYTES // len(LINE) + 10)
    evalsha_many(client, root, fill[0].script.text, [call.args for call in fill])
    full_log = (used_memory(client) - before) / MiB
    subjects = {
        "APPEND_OUTPUT, one line, log below its cap": below,
        "APPEND_OUTPUT, one line, log at its cap": at,
    }
    results: dict[str, list[float]] = {name: [] for name in subjects}
    for turn in range(plan.cost_rounds + 1):
        for name in in_turn(list(subjects), turn):
            usec = calls_usec(client, root, append_calls(subjects[name], plan.script_calls))
            if turn:
                results[name].append(usec)
    SCRIPT.header(f"{plan.script_calls} calls a round, pipelined")
    first = next(iter(results.values()))
    for name, values in results.items():
        SCRIPT.row(name, median(values), median_ratio(values, first))
    return full_log


def cost_part(plan: Plan, a: harness.Served, b: harness.Served, client: redis.Redis) -> None:
    print(
        f"2. one chunk's cost (CPU per request, median of {plan.cost_rounds} rounds taking "
        "turns after one to warm up; ratios to the lane's GET)",
        flush=True,
    )
    asyncio.run(measure_cost(plan, a, b, client))

    async def two_jobs() -> list[Job]:
        conn = await Conn.open(a.url)
        await register(conn, "script-node")
        jobs = [await claimed(conn, "script-node") for _ in range(2)]
        conn.close()
        return jobs

    below, at = asyncio.run(two_jobs())
    full_log = measure_script(plan, client, below, at)
    per_job = asyncio.run(fill_logs(a, client, plan.memory_jobs))
    memory = Table(Column("Redis memory", "7.2f", "MiB"), label_width=44)
    memory.header(f"a {LOG_MAX_BYTES // MiB} MiB capped log (INFO used_memory)")
    memory.row(f"per job, 64 KiB chunks ({plan.memory_jobs} jobs)", per_job)
    memory.row(f"one job, {len(LINE)}-byte lines ({LOG_MAX_BYTES // len(LINE)} of them)", full_log)
    print(flush=True)


# Part 3: 1,000 jobs each printing a line a second.

LOAD = Table(
    Column("rate", "7.0f", "/s"),
    Column("lag p99", "7.1f", "ms"),
    Column("API A", "6.1f", "%"),
    Column("API B", "6.1f", "%"),
    Column("Redis", "6.1f", "%"),
    Column("sender", "6.1f", "%"),
    label_width=44,
)
LOAD_NODES = 20
LOAD_CONNECTIONS = 20  # each replica's


@dataclass
class Paced:
    requests: int
    secs: float
    lags: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # % of a core: API A, API B, Redis, sender


async def pace(
    conns: Sequence[Conn],
    jobs: Sequence[Job],
    make: Callable[[Job], tuple[str, str, bytes]],
    secs: int,
) -> Paced:
    """One request per job per second for `secs` seconds, spread evenly over each second,
    each connection taking its share of the jobs; a request late behind its time goes at
    once (its lag counted)."""
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05
    rate = len(jobs)
    paced = Paced(0, 0.0)

    async def send(index: int, conn: Conn) -> None:
        mine = jobs[index :: len(conns)]
        for second in range(secs):
            for k, job in enumerate(mine):
                due = start + second + (index + k * len(conns)) / rate
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                paced.lags.append(loop.time() - due)
                await conn.expect(*make(job))

    await asyncio.gather(*(send(i, conn) for i, conn in enumerate(conns)))
    paced.requests, paced.secs = len(paced.lags), loop.time() - start
    return paced


async def measure_load(
    plan: Plan, a: harness.Served, b: harness.Served, client: redis.Redis, count: int
) -> None:
    nodes = [f"load-{i}" for i in range(LOAD_NODES)]
    setup = await Conn.open(a.url)
    for node in nodes:
        await register(setup, node)
    setup.close()
    jobs = await many_claimed(a.url, nodes, count)
    conns = [await Conn.open(url) for _ in range(LOAD_CONNECTIONS) for url in (a.url, b.url)]
    subjects: dict[str, Callable[[Job], tuple[str, str, bytes]]] = {
        "POST /jobs/{id}/output, a line each": lambda job: ("POST", job.output, job.chunk(LINE)),
        "GET /jobs/{id}, the same pace": lambda job: ("GET", f"/jobs/{job.id}", b""),
    }
    results: dict[str, list[Paced]] = {name: [] for name in subjects}

    def readings() -> list[float]:
        apis = [process_cpu(pid) for pid in (a.pid, b.pid)]
        return [*apis, redis_cpu(client), process_cpu(os.getpid())]

    for turn in range(plan.load_rounds):
        for name in in_turn(list(subjects), turn):
            before = readings()
            paced = await pace(conns, jobs, subjects[name], plan.load_secs)
            after = readings()
            paced.cpu = [100 * (y - x) / paced.secs for x, y in zip(before, after, strict=True)]
            results[name].append(paced)
    LOAD.header(f"{count} jobs on {LOAD_NODES} nodes, {count}/s over A and B")
    for name, runs in results.items():
        LOAD.row(
            name,
            median(r.requests / r.secs for r in runs),
            median(1000 * percentile(r.lags, 0.99) for r in runs),
            *(median(r.cpu[i] for r in runs) for i in range(4)),
        )
    chunk_runs, get_runs = results.values()
    apis = [[r.cpu[0] + r.cpu[1] for r in runs] for runs in (chunk_runs, get_runs)]
    in_redis = [[r.cpu[2] for r in runs] for runs in (chunk_runs, get_runs)]
    print(
        f"chunks / GETs at the same pace: API {median_ratio(*apis):.2f}x, "
        f"Redis {median_ratio(*in_redis):.2f}x; pace held: "
        + ", ".join(f"{min(r.requests / r.secs for r in runs):.0f}/s" for runs in results.values())
        + f" at the slowest round (of {count}/s)",
        flush=True,
    )
    for conn in conns:
        conn.close()  # the jobs are left running: the Redis is the benchmark's, thrown away


def load_part(plan: Plan, a: harness.Served, b: harness.Served, client: redis.Redis) -> None:
    secs, rounds = plan.load_secs, plan.load_rounds
    print(
        f"3. 1,000 jobs each sending a line a second ({rounds} round(s) of {secs} s per "
        "subject, taking turns; CPU as % of one core)",
        flush=True,
    )
    asyncio.run(measure_load(plan, a, b, client, 1000))
    print(flush=True)


# Part 4: slow followers.

FLOOD = Table(
    Column("connected", "7.1f", "MiB"),
    Column("halfway", "7.1f", "MiB"),
    Column("end", "7.1f", "MiB"),
    Column("growth", "6.1f", "MiB"),
    Column("dropped", "9d", "B"),
    label_width=44,
)


def tcp_kernel_mib() -> float:
    """The kernel's memory in TCP socket buffers, every socket's (/proc/net/sockstat)."""
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            fields = line.split()
            pages = int(fields[fields.index("mem") + 1])
            return pages * os.sysconf("SC_PAGE_SIZE") / MiB
    return 0.0


async def measure_flood(
    plan: Plan, a: harness.Served, slowed: harness.Served, alone: harness.Served
) -> None:
    conn = await Conn.open(a.url)
    await register(conn, "flood-node")
    job = await claimed(conn, "flood-node")
    pids = (slowed.pid, alone.pid)
    async with follower_client(slowed.url) as h1, follower_client(alone.url) as h2:
        readers = [await followed(h1, job.id), await followed(h2, job.id)]
        await settled(pids)
        before = [rss_mib(pid) for pid in pids]
        kernel_before = tcp_kernel_mib()
        slow = [slow_follower(slowed.url, job.id) for _ in range(plan.slow_followers)]
        await settled(pids)
        connected = [rss_mib(pid) for pid in pids]
        total, posted, halfway = plan.flood_mib * MiB, 0, [0.0, 0.0]
        while posted < total:
            # Each reader keeps up (at most 8 chunks behind): what it misses is the slow
            # ones' doing, not its own.
            await until(read_to(readers, posted - 8 * len(BIG)), "the readers")
            await conn.expect("POST", job.output, job.chunk(BIG))
            posted += len(BIG)
            if not halfway[0] and posted >= total // 2:
                halfway = [rss_mib(pid) for pid in pids]
        await until(read_to(readers, posted), "the readers")
        end = [rss_mib(pid) for pid in pids]
        kernel_end = tcp_kernel_mib()
        # One slow follower reads again: what it was still owed, then a gap, not the lot.
        stream = RawStream(slow[0])
        owed, gap = await asyncio.to_thread(stream.find, b"event: dropped", 64 * MiB)
        await finish(conn, job)
        for reader in readers:
            await ended(reader)
        _, last = await asyncio.to_thread(stream.find, b"event: end", 64 * MiB)
        for sock in slow:
            sock.close()
    conn.close()
    FLOOD.header(f"RSS of the followers' replica; {plan.flood_mib} MiB posted to A")
    labels = (f"{plan.slow_followers} slow + 1 reading follower", "1 reading follower alone")
    for i, label in enumerate(labels):
        growth = end[i] - before[i]
        FLOOD.row(label, connected[i], halfway[i], end[i], growth, readers[i].dropped)
    added = (end[0] - before[0]) - (end[1] - before[1])
    print(
        f"per slow follower: {added / plan.slow_followers:.2f} MiB of the replica's RSS "
        f"(its growth past the other's); halfway -> end: {end[0] - halfway[0]:+.1f} MiB "
        f"with them, {end[1] - halfway[1]:+.1f} MiB without; kernel TCP buffers "
        f"{kernel_before:.1f} -> {kernel_end:.1f} MiB",
        flush=True,
    )
    if gap is None:
        print(f"a slow follower reading again got {owed / MiB:.1f} MiB and no `dropped` event")
    else:
        lost = event_data(gap)["bytes"]
        print(
            f"a slow follower reading again: {owed / KiB:.0f} KiB of its stream, then "
            f"`dropped` {lost / MiB:.1f} MiB, then "
            + ("the `end`" if last is not None else "no `end` (a problem)"),
            flush=True,
        )


def flood_part(plan: Plan, redis_url: str, a: harness.Served) -> None:
    print(
        f"4. slow followers' memory ({plan.slow_followers} that read nothing, SO_RCVBUF "
        f"{SLOW_RCVBUF // KiB} KiB; two fresh replicas side by side)",
        flush=True,
    )
    with serve(redis_url) as slowed, serve(redis_url) as alone:
        asyncio.run(measure_flood(plan, a, slowed, alone))
    print(flush=True)


# Part 5: idle followers against idle long-polls.

IDLE = Table(
    Column("RSS/conn", "6.1f", "KiB"),
    Column("CPU idle", "7.2f", "%"),
    Column("before", "6.2f", "%"),
    Column("Redis clients", "+13d"),
    label_width=44,
)
WARM = 20  # connections of each kind made before the baseline of memory


def clients(client: redis.Redis) -> int:
    info: Any = client.info("clients")
    return int(info["connected_clients"])


def commands(client: redis.Redis) -> int:
    info: Any = client.info("stats")
    return int(info["total_commands_processed"])


async def window(pids: Sequence[int], client: redis.Redis, secs: float) -> list[float]:
    """% of a core of each process and of Redis over `secs`, and Redis's commands a second."""
    before = [process_cpu(pid) for pid in pids] + [redis_cpu(client), commands(client)]
    await asyncio.sleep(secs)
    after = [process_cpu(pid) for pid in pids] + [redis_cpu(client), commands(client)]
    spent = [y - x for x, y in zip(before, after, strict=True)]
    return [100 * s / secs for s in spent[:-1]] + [spent[-1] / secs]


async def measure_idle(
    plan: Plan,
    a: harness.Served,
    followers: harness.Served,
    polls: harness.Served,
    client: redis.Redis,
) -> None:
    conn = await Conn.open(a.url)
    await register(conn, "idle-node")
    job = await claimed(conn, "idle-node")
    pids = (followers.pid, polls.pid)
    await settled(pids)
    idle_before = await window(pids, client, plan.idle_secs)
    count, rest = plan.idle_connections, plan.idle_connections - WARM
    kinds = ((Idle.follower, followers.url), (Idle.long_poll, polls.url))
    held: list[list[Idle]] = [[], []]
    # The first few of each kind make what any connection of that kind needs once (the
    # process's pub/sub subscription, the channel's): the baseline of memory comes after.
    first_clients, later_clients = [], []
    for i, (opener, url) in enumerate(kinds):
        start = clients(client)
        held[i] += await connect(opener, url, job.id, WARM)
        await settled(pids)
        first_clients.append(clients(client) - start)
    warm = [rss_mib(pid) for pid in pids]
    for i, (opener, url) in enumerate(kinds):
        start = clients(client)
        held[i] += await connect(opener, url, job.id, rest)
        await settled(pids)
        later_clients.append(clients(client) - start)
    full = [rss_mib(pid) for pid in pids]
    keepalives = sum(idle.keepalives for idle in held[0])
    busy = await window(pids, client, plan.idle_secs)
    keepalives = sum(idle.keepalives for idle in held[0]) - keepalives
    IDLE.header(f"{count} idle connections of each kind, {plan.idle_secs:.0f} s windows")
    labels = ("followers (GET /jobs/{id}/logs?follow=1)", "long-polls (GET /jobs/{id}?wait=60)")
    for i, label in enumerate(labels):
        per = (full[i] - warm[i]) * KiB / rest
        IDLE.row(label, per, busy[i], idle_before[i], later_clients[i])
    rss_ratio = (full[0] - warm[0]) / (full[1] - warm[1])
    print(
        f"(the first {WARM} of each: {first_clients[0]:+d} and {first_clients[1]:+d} Redis "
        f"clients; keepalives sent in the window: {keepalives} to {count} followers; closed "
        f"or answered early: {sum(idle.closed for idle in held[0])} followers, "
        f"{sum(idle.closed or idle.later > 0 for idle in held[1])} long-polls)",
        flush=True,
    )
    print(
        f"followers / long-polls, RSS per connection: {rss_ratio:.2f}; "
        f"Redis: {busy[2]:.2f}% of a core and {busy[3]:.0f} commands/s during the window, "
        f"{idle_before[2]:.2f}% and {idle_before[3]:.0f}/s before",
        flush=True,
    )
    for idle in held[0] + held[1]:
        idle.close()
    await finish(conn, job)
    conn.close()


def idle_part(plan: Plan, redis_url: str, a: harness.Served, client: redis.Redis) -> None:
    print("5. idle followers against idle long-polls (two fresh replicas, at once)", flush=True)
    with serve(redis_url) as followers, serve(redis_url) as polls:
        asyncio.run(measure_idle(plan, a, followers, polls, client))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run of every part")
    parser.add_argument(
        "--parts", default="1,2,3,4,5", help="the parts to run, comma-separated (default: all)"
    )
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    parts = {part.strip() for part in args.parts.split(",")}
    raise_file_limit()  # 2,000 idle connections here and in the replicas (which inherit it)
    with (
        harness.redis_server() as redis_url,
        harness.connected(redis_url) as client,
        serve(redis_url) as a,
        serve(redis_url) as b,
    ):
        runs: dict[str, Callable[[], None]] = {
            "1": lambda: latency_part(plan, redis_url, a, b),
            "2": lambda: cost_part(plan, a, b, client),
            "3": lambda: load_part(plan, a, b, client),
            "4": lambda: flood_part(plan, redis_url, a),
            "5": lambda: idle_part(plan, redis_url, a, client),
        }
        for part, run in runs.items():
            if part in parts:
                run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
