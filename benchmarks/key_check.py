"""What the key check costs on the hot lane since named keys (issue 41), against today's rule
(commit 65de260, the admin key only), side by side in one run.

    .venv/bin/python -m benchmarks.key_check [--calls 20000] [--rounds 25]
        [--lane-requests 5000] [--requests 3000] [--connections 4] [--e2e-rounds 9]
        [--before 65de260] [--no-e2e]

The door's decision, in this process (no Redis, no HTTP): what lane.Lane.refused asks per
request of a key's route (GET /jobs/{id}: a reader's). Today's rule is reproduced below
(TodaysRule: `Credentials.refuses` -> `holds_key`, one hmac.compare_digest with
TINYAWS_API_KEY); the new one is `Credentials.door` (the admin key's comparison, then for
any other bearer a prefix check and a SHA-256 looked up in the keyring, api/keyring.py),
with the lines the lane adds after it. Cases: the admin key (with no named key and with
1000), a named key among 1, 10 and 1000 (MAX_KEYS), and a wrong key (none made; a wrong
`tka_` one among 1000: the only wrong key that is hashed). Each subject runs --calls calls a
turn, the subjects taking turns (timing.rounds) for --rounds rounds; prints ns per check
(the median of the rounds, and the fastest; the loop and the call are in it: "an empty
call" is that floor) and the ratio to today's rule with the same kind of bearer (the right
key, or a wrong one): the median of the rounds' ratios, and their least and greatest.

The lane's Python per request (benchmarks.lane_cost's: serve's protocol fed whole requests,
Redis's replies set at once), this checkout's: GET /jobs/{id} with the admin key and with a
named submitter's key among 1000 (the same path after the door), --lane-requests a turn,
taking turns for --rounds rounds; µs per request and the named key's ratio. Both in-process
parts time this thread's CPU (time.thread_time), not the wall: on a shared machine a turn
the core is taken from would count the other load.

End to end: a real `scheduler serve` (one process, the hot lane) of this checkout, and one
of --before (today's: harness.checkout; `--before ""` leaves it out), each with
TINYAWS_API_KEY, on the benchmark's own redis-server (a prefix each), answering GET
/jobs/{id} of one job. Cases:
today's API with the admin key; this one with the admin key; with a named submitter's key
(the same path: the record's bytes passed through); and a named reader's (another path: its
env_vars' values hidden, the record decoded and encoded again). Each turn sends --requests
requests over --connections keep-alive connections (a bare asyncio client:
tests/processes.request_many's, with the key); the cases take turns for --e2e-rounds rounds.
Prints µs per request (the wall time; the client shares the 2 cores), the API process's CPU
per request (every thread's time on a CPU, from /proc/PID/task/*/schedstat: what the
machine's load moves least) and their ratios to the first case (today's, or this API's admin
key without --before), medians of the rounds' ratios with their least and greatest; then
this API's named keys against its admin key.

What it cannot isolate: end to end, a few hundred ns of the door are ~1% of a request's
CPU, within this shared machine's noise between turns; the door's figures are the cost.
Under a loaded machine a turn may be descheduled: quote the medians, not the extremes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import uvloop

from benchmarks import harness, lane_cost
from benchmarks.report import Column, Table, Value
from benchmarks.timing import median, ratio, rounds
from scheduler.api.client_address import Headers
from scheduler.api.guesses import UNAUTHORIZED, Credentials, Refusal, bearer_token
from scheduler.api.routing import Access
from scheduler.models.access_key import (
    ADMIN,
    ANYONE,
    MAX_KEYS,
    KeyRequest,
    Principal,
    Role,
    new_key,
    new_record,
)

BEFORE = "65de260"  # today's: the admin key only (the commit before named keys)
GET_ROLE = Role.READER  # GET /jobs/{id}'s least role (routes.TABLE)
ADMIN_KEY = secrets.token_urlsafe(32)
PREFIX = "key-check"
NODE = {"id": "bench-node", "hostname": "bench-node", "cpu_count": 64, "role": "compute"}
JOB = {"command": "echo hello", "env_vars": {"GREETING": "hi", "TOKEN": "s3cret"}}


# The door, in this process.


class TodaysRule:
    """Today's key rule (65de260's guesses.Credentials.refuses and holds_key), copied: a key
    route is refused unless the first Authorization header is `Bearer <TINYAWS_API_KEY>`,
    compared in constant time. bearer_token is the same function in both versions."""

    def __init__(self, api_key: str) -> None:
        self.has_key = bool(api_key)
        self._key = api_key.encode()

    def refuses(self, access: Access, headers: Headers) -> bool:
        return access is Access.KEY and self.has_key and not self.holds_key(headers)

    def holds_key(self, headers: Headers) -> bool:
        token = bearer_token(headers)
        return token is not None and self._is_key(token)

    def _is_key(self, secret: bytes) -> bool:
        return self.has_key and hmac.compare_digest(secret, self._key)


def todays_refusal(rule: TodaysRule, headers: Headers) -> Callable[[], bool]:
    """What 65de260's Lane.refused asked of a key route."""
    return lambda: rule.refuses(Access.KEY, headers)


@dataclass
class Kept:
    """What Lane.refused keeps on the request (lane.HotRequest's two fields)."""

    caller: Principal = ANYONE
    forbidden: Refusal | None = None


def new_refusal(credentials: Credentials, headers: Headers) -> Callable[[], bool]:
    """What Lane.refused asks now of a key route: the door, then who it let in kept on the
    request, or a right key's 403 told from a wrong one's 401 (the lane's lines, copied)."""
    request = Kept()

    def refused() -> bool:
        let_in = credentials.door(Access.KEY, GET_ROLE, headers)
        if isinstance(let_in, Principal):
            request.caller = let_in
            return False
        if let_in is not UNAUTHORIZED:
            request.forbidden = let_in
        return True

    return refused


def headers_with(key: str) -> Headers:
    """A GET's headers as uvicorn's parser hands them to the lane, bearing `key`."""
    return [
        (b"host", b"127.0.0.1:8080"),
        (b"user-agent", b"bench"),
        (b"accept", b"*/*"),
        (b"authorization", f"Bearer {key}".encode()),
    ]


def with_named_keys(count: int) -> tuple[Credentials, str]:
    """Credentials with ADMIN_KEY and `count` named keys in the keyring (the last a
    submitter's), and the last one's key ("" when none)."""
    credentials = Credentials(ADMIN_KEY)
    records, key = [], ""
    for n in range(count):
        key = new_key()
        records.append(new_record(KeyRequest(f"key-{n}", Role.SUBMITTER), key, 0.0, ADMIN))
    credentials.keyring.take(1, records)
    return credentials, key


Subject = tuple[str, str, Callable[[], bool], bool]  # label, baseline, check, refused?


def door_subjects() -> list[Subject]:
    """Each case of the door: its label, the name of its baseline, the check, and whether
    it must refuse (checked before timing)."""
    today = TodaysRule(ADMIN_KEY)
    wrong = "W" + ADMIN_KEY[1:]  # as long as the key, one byte apart
    rings = {count: with_named_keys(count) for count in (0, 1, 10, MAX_KEYS)}
    none, full = rings[0][0], rings[MAX_KEYS][0]

    def door(label: str, credentials: Credentials, key: str, refused: bool) -> Subject:
        baseline = "wrong" if refused else "right"
        return f"door, {label}", baseline, new_refusal(credentials, headers_with(key)), refused

    return [
        ("today's rule, the admin key", "", todays_refusal(today, headers_with(ADMIN_KEY)), False),
        ("today's rule, a wrong key", "", todays_refusal(today, headers_with(wrong)), True),
        door("admin key, 0 named keys", none, ADMIN_KEY, False),
        door(f"admin key, {MAX_KEYS} named keys", full, ADMIN_KEY, False),
        *(door(f"a named key of {n}", *rings[n], False) for n in (1, 10, MAX_KEYS)),
        door("wrong key, 0 named keys", none, wrong, True),
        door(f"wrong key, {MAX_KEYS} named keys", full, wrong, True),
        door(f"wrong tka_ key, {MAX_KEYS} named", full, new_key(), True),
    ]


def per_call_ns(check: Callable[[], bool], calls: int) -> float:
    """ns per call of `check`, of this thread's CPU time: a turn the machine's other load
    takes the core from is not counted the longer (wall time was, by up to 10x)."""
    loop = range(calls)
    started = time.thread_time_ns()
    for _ in loop:
        check()
    return (time.thread_time_ns() - started) / calls


def measure_door(args: argparse.Namespace) -> None:
    subjects = door_subjects()
    for label, _, check, refused in subjects:
        if check() is not refused:
            raise SystemExit(f"{label}: refused is {check()}, not {refused}")
    timed: dict[str, Callable[[], float]] = {
        label: partial(per_call_ns, check, args.calls) for label, _, check, _ in subjects
    }
    timed["an empty call"] = lambda: per_call_ns(lambda: False, args.calls)
    took = rounds(timed, args.rounds)
    print(
        f"# the door per request: {args.calls} calls a turn, {args.rounds} rounds taking "
        "turns; ns per check (this thread's CPU) the median of the rounds (and the fastest); "
        "ratios to today's "
        "rule with the same kind of key, the median of the rounds' (least, greatest)"
    )
    table = Table(
        Column("ns/check", "8.0f"),
        Column("fastest", "7.0f"),
        *spread_columns(),
        label_width=32,
    )
    table.header()
    baselines = {"right": "today's rule, the admin key", "wrong": "today's rule, a wrong key"}
    for label, baseline, _, _ in subjects:
        base = took[baselines[baseline]] if baseline else None
        table.row(label, median(took[label]), min(took[label]), *spread(took[label], base))
    table.row("an empty call", median(took["an empty call"]), min(took["an empty call"]))


# The lane's Python per request (lane_cost.py's: no sockets, Redis's replies set at once).


async def lane_turns(args: argparse.Namespace) -> dict[str, list[float]]:
    """GET /jobs/{id} through serve's protocol and this checkout's lane, with the admin key
    and with a named submitter's among MAX_KEYS (the same path after the door): µs of the
    API's Python per request, each turn --lane-requests requests, in rounds taking turns."""
    redis = lane_cost.AnsweringRedis()
    app = lane_cost.lane_app(redis, "", ADMIN_KEY)
    credentials: Credentials = app.state.credentials
    full, submitter = with_named_keys(MAX_KEYS)
    credentials.keyring = full.keyring
    protocol, transport = lane_cost.serving(app)
    gets = {
        "lane, the admin key": lane_cost.cases(ADMIN_KEY)[0],
        f"lane, a named submitter of {MAX_KEYS}": lane_cost.cases(submitter)[0],
    }
    subjects: dict[str, Callable[[], float]] = {
        label: partial(
            lane_cost.run, protocol, transport, redis, get, args.lane_requests, time.thread_time
        )
        for label, get in gets.items()
    }
    for measure in subjects.values():  # warm, and checked: each answers 200 (run raises)
        measure()
    took = rounds(subjects, args.rounds)
    protocol.connection_lost(None)
    return took


def measure_lane(args: argparse.Namespace) -> None:
    took = uvloop.run(lane_turns(args))
    print(
        f"# the lane's Python per GET /jobs/{{id}}, in process (lane_cost.py's): "
        f"{args.lane_requests} requests a turn, {args.rounds} rounds taking turns; µs the "
        "median of the rounds (and the fastest), this thread's CPU; ratio to the admin key's"
    )
    table = Table(
        Column("µs/req", "6.2f"), Column("fastest", "6.2f"), *spread_columns(), label_width=32
    )
    table.header()
    admin, *named = took
    for label, turns in took.items():
        base = took[admin] if label in named else None
        table.row(label, median(turns), min(turns), *spread(turns, base))


# The whole request, end to end.

NOW_ADMIN = "now, the admin key"


@dataclass(frozen=True)
class Turn:
    secs: float  # wall
    api_cpu: float  # the API process's CPU seconds


@dataclass(frozen=True)
class Target:
    """One API answering GET /jobs/{id} of `job` to a bearer of `key`."""

    api: harness.Served
    job: str
    key: str


def cpu_secs(pid: int) -> float:
    """A process's CPU time so far, every thread's, from the scheduler's own count in /proc
    (schedstat: ns on a CPU; /proc/PID/stat's clock ticks of 10 ms are too coarse for a
    turn)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        # A thread that ended meanwhile is left out.
        with (
            contextlib.suppress(FileNotFoundError),
            open(f"/proc/{pid}/task/{task}/schedstat") as stat,
        ):
            total += int(stat.read().split()[0])
    return total / 1e9


async def get_many(target: Target, requests: int, connections: int) -> list[int]:
    """GET /jobs/{job} `requests` times over `connections` keep-alive connections; the
    statuses. A bare asyncio client (tests/processes.request_many's, with the key): httpx
    would cost more than the API per request on this machine."""
    host, port = target.api.url.removeprefix("http://").split(":")
    request = (
        f"GET /jobs/{target.job} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {target.key}\r\n\r\n"
    ).encode()
    statuses: list[int] = []
    left = iter(range(requests))

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for _ in left:
                writer.write(request)
                statuses.append(await read_status(reader))
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(connections)))
    return statuses


async def read_status(reader: asyncio.StreamReader) -> int:
    status_line = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(status_line.split()[1])


def turn(target: Target, requests: int, connections: int) -> Turn:
    cpu, began = cpu_secs(target.api.pid), time.perf_counter()
    statuses = uvloop.run(get_many(target, requests, connections))
    took = Turn(time.perf_counter() - began, cpu_secs(target.api.pid) - cpu)
    if statuses.count(200) != requests:
        raise SystemExit(f"GET /jobs/{target.job}: not 200 each time ({set(statuses)})")
    return took


def prepared(api: harness.Served) -> str:
    """Node bench-node registered and one job submitted, by the admin key; its id."""
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=api.url, headers=auth, timeout=30.0) as http:
        http.post("/nodes/register", json=NODE).raise_for_status()
        made = http.post("/jobs", json=JOB)
        made.raise_for_status()
        return str(made.json()["job_id"])


def named_key(api: harness.Served, name: str, role: Role) -> str:
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=api.url, headers=auth, timeout=30.0) as http:
        made = http.post("/keys", json={"name": name, "role": role.value})
        made.raise_for_status()
        return str(made.json()["key"])


def api(
    redis_url: str, prefix: str, code: Path = harness.ROOT
) -> contextlib.AbstractContextManager[harness.Served]:
    """`scheduler serve` of the checkout at `code` with ADMIN_KEY, quiet (its start's lines
    and AGENT_AUTH=open's warning)."""
    return harness.scheduler_api(
        redis_url,
        prefix,
        code=code,
        stderr=subprocess.DEVNULL,
        TINYAWS_API_KEY=ADMIN_KEY,
        AGENT_AUTH="open",
        NODE_TTL_SECS="86400",
        METRICS_FLUSH_SECS="3600",
    )


@contextlib.contextmanager
def targets(redis_url: str, before: str) -> Iterator[dict[str, Target]]:
    """The cases of the whole request, by label: today's API (unless `before` is "") and
    this one's, both serving one job each."""
    with contextlib.ExitStack() as stack:
        found: dict[str, Target] = {}
        if before:
            old = stack.enter_context(
                api(redis_url, "before", stack.enter_context(harness.checkout(before)))
            )
            found[f"{before}, the admin key"] = Target(old, prepared(old), ADMIN_KEY)
        now = stack.enter_context(api(redis_url, PREFIX))
        job = prepared(now)
        found[NOW_ADMIN] = Target(now, job, ADMIN_KEY)
        submitter = named_key(now, "bench-submitter", Role.SUBMITTER)
        found["now, a named submitter"] = Target(now, job, submitter)
        reader = named_key(now, "bench-reader", Role.READER)
        found["now, a named reader"] = Target(now, job, reader)
        yield found


def measure_requests(args: argparse.Namespace) -> None:
    with harness.redis_server() as redis_url, targets(redis_url, args.before) as found:
        for target in found.values():  # warm: connections, caches, the keyring
            turn(target, 200, args.connections)
        subjects: dict[str, Callable[[], Turn]] = {
            label: partial(turn, target, args.requests, args.connections)
            for label, target in found.items()
        }
        took = rounds(subjects, args.e2e_rounds)
    first = next(iter(took))
    print(
        f"# GET /jobs/{{id}} end to end: {args.requests} requests a turn over "
        f"{args.connections} connections, {args.e2e_rounds} rounds taking turns, one "
        f"`scheduler serve` process each, {os.cpu_count()} cores; µs per request the "
        f"median of the rounds; ratios to {first!r}, the median of the rounds' (least, "
        "greatest)"
    )
    table = Table(
        Column("µs/req", "6.1f"),
        *spread_columns(),
        Column("API CPU µs/req", "6.1f"),
        *spread_columns(),
        label_width=32,
    )
    table.header()
    for label, turns in took.items():
        base = took[first] if label != first else None
        wall = median(t.secs for t in turns) / args.requests * 1e6
        cpu = median(t.api_cpu for t in turns) / args.requests * 1e6
        table.row(label, wall, *both_spreads(turns, base, cpu))
    print("# this API's named keys / its admin key (the same process)")
    for label in ("now, a named submitter", "now, a named reader"):
        table.row(f"{label} / admin", None, *both_spreads(took[label], took[NOW_ADMIN]))


def both_spreads(
    turns: list[Turn], base: list[Turn] | None, cpu: float | None = None
) -> list[Value]:
    """The spreads of the wall time and of the API's CPU against `base`, as the table's
    columns after the first (`cpu`: the API's CPU µs per request, between them)."""
    wall = spread([t.secs for t in turns], None if base is None else [t.secs for t in base])
    api_cpu = None if base is None else [t.api_cpu for t in base]
    return [*wall, cpu, *spread([t.api_cpu for t in turns], api_cpu)]


# Printing.


def spread(ours: list[float], base: list[float] | None) -> list[Value]:
    """The median of the rounds' ratios of `ours` to `base`, and their least and greatest
    (nothing when there is no base)."""
    if base is None:
        return [None, None, None]
    ratios = [ratio(a, b) for a, b in zip(ours, base, strict=True)]
    return [median(ratios), min(ratios), max(ratios)]


def spread_columns() -> list[Column]:
    """spread's three figures."""
    return [Column("ratio", "5.2f"), Column("least", "5.2f"), Column("most", "5.2f")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="door checks a turn")
    parser.add_argument("--rounds", type=int, default=25, help="rounds of the door's cases")
    parser.add_argument("--lane-requests", type=int, default=5000, help="lane GETs a turn")
    parser.add_argument("--requests", type=int, default=3000, help="GETs a turn, end to end")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--e2e-rounds", type=int, default=9, help="rounds of the whole request")
    parser.add_argument("--before", default=BEFORE, help='today\'s commit, end to end ("": none)')
    parser.add_argument("--no-e2e", action="store_true", help="in process only")
    args = parser.parse_args()
    measure_door(args)
    measure_lane(args)
    if not args.no_e2e:
        measure_requests(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
