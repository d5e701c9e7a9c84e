"""What a job's life costs Redis against the floor (issue 26, item 2: at most 2x; a heartbeat
and a poll at most 1.5x their own floors), plain and with the scheduling and placement
features on, at --stored jobs stored; with --against REF, the version REF beside this one.

    .venv/bin/python -m benchmarks.life_cost [--stored 100000] [--lives 2000] [--rounds 5]
        [--sections plain,features] [--against REF] [--no-http-floors]

Each version runs as a real `scheduler serve` process (one worker, AGENT_AUTH=open, its code
checked out for REF in a temporary directory: harness.checkout) against a
redis-server of its own (free loopback port, no persistence), started afresh per section. A
life is four requests, one at a time from one keep-alive httpx client: POST /jobs, the
agent's poll GET /jobs?node_id=M&status=pending (which must answer exactly that job), PATCH
running, PATCH done (exit 0, "hi" on stdout). A heartbeat is POST /nodes/heartbeat of M, a
poll alone the same poll finding nothing. Only the HTTP API and plain Redis commands (INFO,
CONFIG RESETSTAT) are used, so any version runs.

The floor (life_floor.py) is the least Redis work of the same: four Lua scripts per life,
one for a heartbeat and one for an empty poll, by EVALSHA over one connection to the Redis of
this version, under keys of its own ({floor}). Its figures serve as the floor of REF too.
The verdict is ours / that floor, as the issue states it. Besides what our scripts do in
excess, two things widen that gap, and each section's second table splits them out with
three more floors, in the same rounds, on the same Redis:
  featured        the floor plus one least command for each feature this scheduler keeps
                  exact at every change (placement, the listings by status and node, the
                  snapshot's changed set, the dashboard, long-polls, cancels, capacity, the
                  timeout sweep, attempts): 41 commands a life against 15, a heartbeat 4
                  against 2, an empty poll 2 against 1 (life_floor.py, FeaturedFloor)
  floor http,     each floor's scripts one call per HTTP request (floor_app.py, Starlette on
  featured http   uvicorn, one worker, one connection), driven as the API is: the pace. A
                  tight loop keeps Redis busy and its caches hot; the API's calls come one a
                  request, Redis idle (its caches cold) between them, and the same script
                  costs more (--no-http-floors leaves these out)
with the ratios ours / featured and featured / floor (tight), ours / featured http and
featured http / floor http (both at the API's pace), and floor http / floor (what pace alone
does to the issue's floor). ours / featured http is what our scripts cost beyond the least the
features need at the same pace; featured http / floor http is what the features themselves
cost. The floor app's Python is far less than the API's per request, so its Redis is idle a
little less between calls: its pace is the API's request by request, a little faster.

Where the jobs land: --stored jobs are submitted first (over HTTP, 32 connections) while
only the other compute nodes are registered, so they are queued there; the measured node M
registers after them and holds nothing (NODE_TTL_SECS is a day: every node stays live
without heartbeats but M's measured ones). Plain: a job that asks nothing goes to the live
node holding the fewest jobs (docs/GUIDE.md, Placement), which is M (it holds at most the one job
of the life in progress). Features: the stored jobs mix plain ones, delayed ones (a day
ahead) and ones asking cpus, memory, a priority, a retry policy and a node_selector of the
other nodes; besides, two nodes are drained and a schedule exists; the lives' jobs ask
priority 5, cpus 1, memory_mb 64, max_retries 2, retry_backoff_secs 5 and the node_selector
{"pool": "measured"} that only M's labels match. Every submit's answer is checked to name M,
every poll to find exactly its job: a version placing elsewhere stops the run rather than
measuring another life.

Rounds interleave the subjects (this version, REF, the floors) phase by phase (the lives,
the heartbeats, the polls), and within a phase in turns of a tenth of it each (with --lives
2000, 200 lives of each subject, then 200 of the next, in an order that turns at every
turn), with CONFIG RESETSTAT before each turn: a subject and its floor are measured seconds
apart, so the load of other tenants of this machine moves both. Each figure is per life (or
heartbeat, or poll):
  in scripts          usec of every eval*, evalsha* and fcall* entry of INFO commandstats
                      (the commands a script calls run inside its time)
  Redis CPU           the change of INFO cpu used_cpu_user + used_cpu_sys (every thread),
                      less Redis's idle draw over the turn's time (below)
  Redis CPU, main     the same of the main thread (used_cpu_*_main_thread), where Redis has it
  all commands        usec of every commandstats entry but INFO and CONFIG (the benchmark's):
                      a script's inner commands count twice, in its time and their own, for
                      the floor as for the API; commands sent outside scripts count once
The table prints the median of the rounds of each, the median of the rounds' ratios (each
round's subject / its floor), the bar and pass or over; with REF, REF's figure, its ratio to
the same floor and verdict, and this version / REF. The split's table, the featured floor's
and the HTTP floors' medians and the medians of the rounds' ratios above.

An idle redis-server draws CPU (its cron: about 1.5 ms a second here), which a turn of the
API, slower per life than the floor's calls, would count several times over: each round
first measures every Redis doing nothing for 2 s (the APIs connected, quiet), and the median
of those rates times a turn's duration is taken off its CPU figures.

What it cannot isolate: the API's work by the second rather than by the request. Its request
metrics' flush (a script of about 200 µs each METRICS_FLUSH_SECS while there were requests:
about 1 µs a life at this pace) is put off past the run (METRICS_FLUSH_SECS=3600), since it
would land in whichever turn runs then; its check of the old layout (a few commands every
10 s) lands where it falls. The Redis CPU figures include reading and answering the sockets,
which a busy Redis amortises over more commands per read than one caller at a time gives it,
for the API and the floor alike; the API and this client share the machine's 2 cores with
Redis. The stored count grows by --lives a round (done jobs are kept).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import redis

from benchmarks import harness
from benchmarks.life_api import deployment, http_floors
from benchmarks.life_floor import FLOORS, Tight
from benchmarks.life_stats import Figures, Sample, idle, sampled
from benchmarks.report import Column, Table
from benchmarks.timing import chunks, in_turn, median, median_ratio

PHASES = ("life", "heartbeat", "poll")
BARS = {"life": 2.0, "heartbeat": 1.5, "poll": 1.5}
METRICS = ("in scripts", "Redis CPU", "Redis CPU, main", "all commands")


class Subject(Protocol):
    name: str
    stats: redis.Redis  # the Redis whose counters are its figures
    redis_name: str  # which Redis that is (the floor shares this version's)

    def lives(self, count: int) -> object: ...
    def heartbeats(self, count: int) -> None: ...
    def polls(self, count: int) -> None: ...


@dataclass
class FloorSubject:
    name: str
    stats: redis.Redis
    redis_name: str
    floor: Tight

    def lives(self, count: int) -> None:
        self.floor.lives(count)

    def heartbeats(self, count: int) -> None:
        self.floor.heartbeats(count)

    def polls(self, count: int) -> None:
        self.floor.polls(count)


def measure(subject: Subject, phase: str, count: int) -> Sample:
    run: Callable[[int], object] = {
        "life": subject.lives,
        "heartbeat": subject.heartbeats,
        "poll": subject.polls,
    }[phase]

    def operations() -> int:
        run(count)
        return count

    return sampled({subject.redis_name: subject.stats}, operations)[subject.redis_name]


def one_round(subjects: list[Subject], phase: str, lives: int, turn: int) -> list[Sample]:
    """Each subject's `lives` operations of `phase`, the subjects taking turns a chunk at a
    time (in an order that turns each chunk): one Sample each."""
    parts: list[list[Sample]] = [[] for _ in subjects]
    for i, size in enumerate(chunks(lives)):
        for k in in_turn(range(len(subjects)), turn + i):
            parts[k].append(measure(subjects[k], phase, size))
    return [sum(samples[1:], samples[0]) for samples in parts]


def rounds(subjects: list[Subject], lives: int, count: int) -> Figures:
    redises = {s.redis_name: s.stats for s in subjects}
    for subject in subjects:  # unmeasured: scripts loaded, connections open, caches warm
        subject.lives(min(lives, 20))
        subject.heartbeats(min(lives, 20))
        subject.polls(min(lives, 20))
    figures = Figures(
        {s.name: {p: [] for p in PHASES} for s in subjects},
        {name: [] for name in redises},
        {s.name: s.redis_name for s in subjects},
    )
    for turn in range(count):
        for name, rates in idle(redises).items():
            figures.idles[name].append(rates)
        for phase in PHASES:
            for subject, sample in zip(
                subjects, one_round(subjects, phase, lives, turn), strict=True
            ):
                figures.samples[subject.name][phase].append(sample)
    return figures


def verdict(ratio: float, bar: float) -> str:
    return "pass" if ratio <= bar else "over"


def table(section: str, figures: Figures, args: argparse.Namespace) -> None:
    against = "before" in figures.samples
    idles = ", ".join(
        f"{name} {figures.idle_rate(name)[0] * 1e3:.1f} ms/s" for name in figures.idles
    )
    print(
        f"{section}: {args.stored} stored, {args.lives} lives, heartbeats and polls a round, "
        f"{args.rounds} rounds; medians, the ratio of each round's / the floor's. Redis idle "
        f"({idles}) is taken off the CPU figures"
    )
    columns = [Column("ours µs", "9.1f"), Column("floor µs", "9.1f"), Column("ratio", "6.2f")]
    columns += [Column("bar", "4.1f"), Column("verdict", "7s")]
    if against:
        columns += [Column(f"{args.against} µs", "12.1f"), Column("ratio", "6.2f")]
        columns += [Column("verdict", "7s"), Column("ours/before", "11.2f")]
    rows = Table(*columns)
    rows.header()
    for phase in PHASES:
        bar = BARS[phase]
        for metric in METRICS:
            ours, floor = (figures.values(s, phase, metric) for s in ("ours", "floor"))
            ratio = median_ratio(ours, floor)
            values: list[float | str] = [median(ours), median(floor), ratio, bar]
            values.append(verdict(ratio, bar))
            if against:
                before = figures.values("before", phase, metric)
                theirs = median_ratio(before, floor)
                values += [median(before), theirs, verdict(theirs, bar)]
                values.append(median_ratio(ours, before))
            rows.row(f"{phase}, {metric}", *values)


def split(section: str, figures: Figures) -> None:
    """The gap's parts: the featured floor and the floors over HTTP beside ours, tight and at
    the API's pace (without the HTTP floors, their columns left out)."""
    http = "floor http" in figures.samples
    print(
        f"{section}, the gap split: features (featured: the floor and one least command a "
        "feature) and pace (http: a floor's calls one per HTTP request, as the API's)"
    )
    columns = [Column("featured µs", "11.1f"), Column("ours/feat", "9.2f")]
    columns.append(Column("feat/floor", "10.2f"))
    if http:
        columns += [Column("floor http µs", "13.1f"), Column("feat http µs", "12.1f")]
        columns += [Column("ours/feat http", "14.2f"), Column("feat/floor http", "15.2f")]
        columns.append(Column("floor http/tight", "16.2f"))
    rows = Table(*columns)
    rows.header()
    for phase in PHASES:
        for metric in METRICS:
            value = {s: figures.values(s, phase, metric) for s in figures.samples}
            ours, floor, featured = value["ours"], value["floor"], value["featured"]
            values = [median(featured), median_ratio(ours, featured)]
            values.append(median_ratio(featured, floor))
            if http:
                floor_http, featured_http = value["floor http"], value["featured http"]
                values += [median(floor_http), median(featured_http)]
                values += [median_ratio(ours, featured_http)]
                values += [median_ratio(featured_http, floor_http)]
                values.append(median_ratio(floor_http, floor))
            rows.row(f"{phase}, {metric}", *values)


def section(name: str, args: argparse.Namespace, before: Path | None) -> None:
    features = name == "features"
    with contextlib.ExitStack() as stack:
        ours = stack.enter_context(deployment(harness.ROOT, "ours", args.stored, features))
        subjects: list[Subject] = [ours]
        if before is not None:
            subjects.append(
                stack.enter_context(deployment(before, "before", args.stored, features))
            )
        for floor_name, kind in FLOORS.items():  # "floor", "featured": tight
            floor = stack.enter_context(contextlib.closing(Tight(kind(), ours.url)))
            subjects.append(FloorSubject(floor_name, ours.stats, ours.redis_name, floor))
        if args.http_floors:  # "floor http", "featured http"
            subjects += stack.enter_context(http_floors(ours.url, ours.stats, ours.redis_name))
        figures = rounds(subjects, args.lives, args.rounds)
    table(name, figures, args)
    split(name, figures)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=100_000, help="jobs stored first")
    parser.add_argument("--lives", type=int, default=2000, help="lives, beats, polls a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sections", default="plain,features", help="plain, features or both")
    parser.add_argument("--against", default="", metavar="REF", help="a commit to compare")
    parser.add_argument(
        "--no-http-floors",
        dest="http_floors",
        action="store_false",
        help="leave out the floors over HTTP (floor_app.py) and their columns",
    )
    args = parser.parse_args()
    sections = args.sections.split(",")
    if not set(sections) <= {"plain", "features"}:
        parser.error("--sections: plain, features, or plain,features")
    with contextlib.ExitStack() as stack:
        before = stack.enter_context(harness.checkout(args.against)) if args.against else None
        for name in sections:
            section(name, args, before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
