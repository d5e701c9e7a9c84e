"""The pure parts of benchmarks/makespan.py: the jobs and nodes of a run, its ideal makespan,
and what the job events say happened (each node's jobs and idle time, every job ended once).

Work is in seconds on a node of speed 1: a job of work w runs w / s seconds on a node of
speed s (its command sleeps that long, reading s from its agent's environment: SPEED_ENV).
Every node runs at most `slots` jobs at once (MAX_JOBS_PER_NODE, the same for every node:
the scheduler caps each node's poll with it), so a node's capacity is slots x speed, in work
seconds per second.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.models.job import FINAL_STATUSES

SPEED_ENV = "MAKESPAN_SPEED"  # set in each agent's environment, which its jobs inherit


def speeds(nodes: int) -> list[float]:
    """Node i's speed, (nodes - i) / nodes: 4 nodes run at 1, 0.75, 0.5 and 0.25."""
    return [(nodes - i) / nodes for i in range(nodes)]


def works(jobs: int, low: float, high: float, seed: int) -> list[float]:
    """Each job's work, uniform in [low, high] to the hundredth, the same for every arm and
    round of a run (one seed)."""
    draw = random.Random(seed)
    return [round(draw.uniform(low, high), 2) for _ in range(jobs)]


def command(work: float) -> str:
    """A job of `work`: it sleeps work / speed seconds, the speed its agent's (SPEED_ENV)."""
    quotient = f'awk -v w={work} -v s="${SPEED_ENV}" \'BEGIN {{ printf "%.3f", w / s }}\''
    return f'sleep "$({quotient})"'


@dataclass(frozen=True)
class Ideal:
    """The least makespan any scheduler could reach (a lower bound), the larger of:
    - `fluid`: the time the nodes' capacity takes to do all the work with none idle and
      jobs divisible, the dead node counting until it died: W / C while that is before
      its death at t_d, else t_d + (W - C * t_d) / C', where W is the work, C the slots
      times the sum of the speeds and C' the same without the dead node;
    - `longest`: the longest job on the fastest node (a job is not divisible).
    It leaves out what any real run pays: dispatch (a poll, a claim, a report per job), the
    time before a dead node is known lost (NODE_LOST_SECS and a sweep), and the work of the
    jobs the dead node was running, done again elsewhere."""

    fluid: float
    longest: float

    @property
    def secs(self) -> float:
        return max(self.fluid, self.longest)


def ideal(
    work: Sequence[float], speed: Sequence[float], slots: int, dead: int, died_at: float
) -> Ideal:
    """The ideal of `work` over nodes of `speed` with `slots` each, node `dead` dying
    `died_at` seconds after the start (Ideal says how)."""
    total = sum(work)
    rate = slots * sum(speed)
    after = rate - slots * speed[dead]
    if total <= rate * died_at or after <= 0:
        fluid = total / rate
    else:
        fluid = died_at + (total - rate * died_at) / after
    return Ideal(fluid=fluid, longest=max(work) / max(speed))


@dataclass(frozen=True)
class Event:
    """A job event of GET /events (models/event.py), its time as epoch seconds."""

    number: int
    job_id: str
    status: str
    node_id: str
    at: float
    old_status: str = ""
    old_node_id: str = ""


@dataclass
class NodeRun:
    """What one node did in a run."""

    done: int = 0  # jobs it ran to their end
    lost: int = 0  # attempts it was running when it died (run again elsewhere)
    busy: float = 0.0  # seconds of its done jobs' runs (running -> done)
    work: float = 0.0  # their work (work / busy: the speed its jobs saw)
    # Its longest stretch running nothing while a job waited on another node (or on none),
    # and the slot-seconds it left free meanwhile (slots - running, over that time).
    longest_idle: float = 0.0
    free_slot_secs: float = 0.0


@dataclass
class Timeline:
    """What a run's events say: the start (the first job made), the end (the last ending),
    each node's run, and what went wrong (empty when every job ended once, done)."""

    start: float
    end: float
    nodes: dict[str, NodeRun]
    problems: list[str] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return self.end - self.start


class _Sweep:
    """The jobs running and pending on each node ("" for none) through the events, and each
    node's idle time while a job waited elsewhere, between one event and the next."""

    def __init__(self, nodes: Sequence[str], slots: int, dead: str, died_at: float) -> None:
        self.runs = {node: NodeRun() for node in nodes}
        self.slots = slots
        self.until = {node: died_at if node == dead else float("inf") for node in nodes}
        self.idle = dict.fromkeys(nodes, 0.0)  # each node's idle stretch so far
        self.running: Counter[str] = Counter()
        self.pending: Counter[str] = Counter()
        self.where: dict[str, tuple[str, str]] = {}  # job -> (status, node)

    def move(self, event: Event) -> None:
        old = self.where.get(event.job_id)
        if old is not None:
            self._count(*old, -1)
        self.where[event.job_id] = (event.status, event.node_id)
        self._count(event.status, event.node_id, 1)

    def _count(self, status: str, node: str, step: int) -> None:
        if status == "running":
            self.running[node] += step
        elif status == "pending":
            self.pending[node] += step

    def advance(self, begin: float, end: float) -> None:
        """Each node over [begin, end) (a dead one until it died): its free slots and idle
        stretch while a job waited on another node or on none."""
        waiting = sum(self.pending.values())
        for node, run in self.runs.items():
            span = min(end, self.until[node]) - begin
            if span <= 0:
                continue
            if waiting - self.pending[node] <= 0 or self.running[node]:
                self.idle[node] = 0.0
            else:
                self.idle[node] += span
                run.longest_idle = max(run.longest_idle, self.idle[node])
            if waiting - self.pending[node] > 0:
                run.free_slot_secs += max(0, self.slots - self.running[node]) * span


def timeline(
    events: Iterable[Event],
    work: Mapping[str, float],
    nodes: Sequence[str],
    slots: int,
    dead: str,
    died_at: float,
) -> Timeline:
    """The run of the jobs `work` (id -> work) from their events, node `dead` killed at epoch
    `died_at`: it is counted until then only (its jobs' runs after it are not runs)."""
    ordered = sorted(events, key=lambda event: event.number)
    if not ordered:
        return Timeline(0.0, 0.0, {n: NodeRun() for n in nodes}, ["no events"])
    sweep = _Sweep(nodes, slots, dead, died_at)
    runs = sweep.runs
    started: dict[str, float] = {}
    clock = ordered[0].at
    for event in ordered:
        # Events of two processes (the API, the worker's sweep) may be stamped a few ms out
        # of their order: time never runs back.
        now = max(clock, event.at)
        sweep.advance(clock, now)
        clock = now
        if event.status == "running":
            started[event.job_id] = event.at
        elif event.status == "done" and event.job_id in started and event.node_id in runs:
            run = runs[event.node_id]
            run.done += 1
            run.busy += event.at - started[event.job_id]
            run.work += work.get(event.job_id, 0.0)
        elif event.old_status == "running" and event.status == "pending":
            runs.setdefault(event.old_node_id, NodeRun()).lost += 1
        sweep.move(event)
    ends = [event.at for event in ordered if event.status in FINAL_STATUSES]
    result = Timeline(ordered[0].at, max(ends, default=ordered[-1].at), runs)
    result.problems = problems(ordered, work, dead)
    return result


def problems(events: Sequence[Event], work: Mapping[str, float], dead: str) -> list[str]:
    """Every job of `work` ended exactly once, done; it ran once, or once more only after its
    first run was on the dead node; no event of a job not submitted. One line per fault."""
    endings: dict[str, list[str]] = {job: [] for job in work}
    starts: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    found = []
    for event in events:
        if event.job_id not in work:
            found.append(f"{event.job_id}: an event of a job this run did not make")
            continue
        if event.status in FINAL_STATUSES:
            endings[event.job_id].append(event.status)
        if event.status == "running":
            starts[event.job_id] += 1
        elif event.old_status == "running" and event.status not in FINAL_STATUSES:
            if event.old_node_id != dead or event.status != "pending":
                found.append(
                    f"{event.job_id}: left running on {event.old_node_id} for {event.status}"
                )
            lost[event.job_id] += 1
    for job, ended in endings.items():
        if ended != ["done"]:
            found.append(f"{job}: ended {ended or 'never'}, not once done")
        if starts[job] != 1 + lost[job]:
            found.append(f"{job}: ran {starts[job]} times, {lost[job]} of them lost")
    return found
