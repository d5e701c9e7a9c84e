"""Makespan (issue 40): N jobs of known lengths over compute nodes of unequal speed, one node
killed (kill -9 of its agent) midway; the time until the last job ends against the ideal,
with work stealing off and on, side by side in one run.

    .venv/bin/python -m benchmarks.makespan [--jobs 100] [--nodes 4] [--rounds 3]
        [--set NAME=VALUE ...]

A turn takes under a minute (about 55 s without stealing, 30 s with it, and some 8 s to
start and stop its processes), the default run about 6 minutes. `--set` adds a setting to
every process of both arms (AGENT_POLL_WAIT_SECS=0: agents that do not long-poll).

Each turn starts a deployment of its own (a key prefix of its own on one redis-server):
`scheduler serve` (one process), `scheduler worker` (its sweep finds the dead node) and one
reference agent (`scheduler agent`) per node, with WORK_STEALING=off or on in all their
environments; the arms take turns (off on, on off, ...), and a turn's processes are stopped
before the next starts. Settings: MAX_JOBS_PER_NODE (--slots, 2) for every node;
NODE_TTL_SECS 3 and NODE_LOST_SECS 3, heartbeats every second and a sweep every half second,
so a dead node is known lost 3 to 4 s after its last heartbeat; MAX_JOB_RETRIES 1, so the
job it was running runs again elsewhere; AGENT_LIMITS and AGENT_LIVE_OUTPUT off; the rest as
shipped (the agents long-poll).

Unequal speed: node i of k has speed (k - i) / k (4 nodes: 1, 0.75, 0.5, 0.25), set as
MAKESPAN_SPEED in its agent's environment, which a job's command inherits; a job of work w
(uniform in --work-min..--work-max seconds, one seed: the same jobs in every turn) runs
`sleep w/speed`. The scheduler knows nothing of the speeds, as it knows nothing of a real
machine's: every node has the same slots, so a slow node is a node whose jobs take longer.
Sleeping jobs load no core, so the 2 shared cores do not slow the fast nodes' jobs; each
node's "speed seen" (its jobs' work over their running -> done time) shows it held.

The jobs are submitted one by one, as fast as the API answers (all within a second or so);
node n0, the fastest, is killed with SIGKILL --kill-at (0.5) of the way through the ideal
without its death, counted from the first submit. Makespan: the first job's creation to the
last job's end (the API's stamps in the job events, GET /events). The ideal: makespan_plan.py
Ideal (work / capacity, the dead node's capacity counted until it died, or the longest job
on the fastest node, whichever is more). From the events also: how many jobs each node ran
to their end (and the attempts lost with n0), the longest time a node ran nothing while a
job waited on another node (or on none), and the slot-seconds left free meanwhile. The run
fails (exit 1) unless every job ended exactly once, done, and ran once (or once more after
its first run was on the dead node).

What it cannot isolate: dispatch (a poll, a claim and a report per job) and the 3 to 4 s of
node-loss detection are in the makespan, not in the ideal, alike in both arms; the machine's
other load delays a poll or a report a little.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks import harness
from benchmarks.makespan_plan import (
    SPEED_ENV,
    Event,
    Ideal,
    Timeline,
    command,
    ideal,
    speeds,
    timeline,
    works,
)
from benchmarks.report import Column, Table
from benchmarks.timing import in_turn, median
from scheduler.models.job import FINAL_STATUSES
from scheduler.models.wire import parse_rfc3339

ARMS = {"stealing off": "off", "stealing on": "on"}
DEAD = 0  # the node killed: the fastest
SETTINGS = {
    "NODE_TTL_SECS": "3",
    "NODE_LOST_SECS": "3",
    "AGENT_HEARTBEAT_SECS": "1",
    "SWEEP_INTERVAL_SECS": "0.5",
    "MAX_JOB_RETRIES": "1",
    "AGENT_LIMITS": "off",
    "AGENT_LIVE_OUTPUT": "off",
}
WAIT_SECS = 10  # a long-poll of a job's change
DEADLINE_IDEALS = 10  # a turn fails once it runs this many ideals (and 2 minutes) long


@dataclass(frozen=True)
class Plan:
    jobs: int
    nodes: int
    slots: int
    rounds: int
    work_min: float
    work_max: float
    kill_at: float
    seed: int
    settings: tuple[tuple[str, str], ...] = ()  # --set: more settings of every process

    @property
    def names(self) -> list[str]:
        return [f"n{i}" for i in range(self.nodes)]

    @property
    def speeds(self) -> list[float]:
        return speeds(self.nodes)

    @property
    def work(self) -> list[float]:
        return works(self.jobs, self.work_min, self.work_max, self.seed)

    def undisturbed(self) -> float:
        """The ideal were no node to die."""
        return ideal(self.work, self.speeds, self.slots, DEAD, float("inf")).secs

    def kill_after(self) -> float:
        """Seconds from the first submit to the kill: --kill-at of the ideal without it."""
        return self.kill_at * self.undisturbed()


@dataclass(frozen=True)
class Turn:
    """One arm's run: what its events say, its ideal, when n0 died (from the start)."""

    timeline: Timeline
    ideal: Ideal
    died_after: float

    @property
    def ratio(self) -> float:
        return self.timeline.makespan / self.ideal.secs


@contextlib.contextmanager
def deployment(
    redis_url: str, prefix: str, stealing: str, plan: Plan, logs: Path
) -> Iterator[tuple[httpx.Client, list[subprocess.Popen[bytes]]]]:
    """serve, a worker and the nodes' agents under `prefix`, once every node is registered:
    a client of the API and the agents' processes (node i's at i)."""
    env = {**SETTINGS, "MAX_JOBS_PER_NODE": str(plan.slots), **dict(plan.settings)}
    env["WORK_STEALING"] = stealing
    with contextlib.ExitStack() as stack:
        log = stack.enter_context((logs / f"{prefix}.log").open("ab"))
        api = stack.enter_context(harness.scheduler_api(redis_url, prefix, stderr=log, **env))
        environ = harness.scheduler_env(redis_url, prefix, SCHEDULER_URL=api.url, **env)
        stack.enter_context(harness.running(harness.scheduler_cmd("worker"), environ, stderr=log))
        agents = []
        for name, speed in zip(plan.names, plan.speeds, strict=True):
            own = {SPEED_ENV: f"{speed:g}", "AGENT_WORK_DIR": str(logs / prefix / name)}
            cmd = harness.scheduler_cmd("agent", "--node-id", name)
            agents.append(stack.enter_context(harness.running(cmd, {**environ, **own}, stderr=log)))
        http = stack.enter_context(httpx.Client(base_url=api.url, timeout=30))
        deadline = time.monotonic() + harness.START_SECS
        while not set(plan.names) <= set(http.get("/nodes").json()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the agents did not register: see {logs}")
            time.sleep(0.1)
        yield http, agents


def submit(http: httpx.Client, work: Sequence[float]) -> dict[str, float]:
    """Each job, in order: its id -> its work."""
    made = {}
    for each in work:
        answer = http.post("/jobs", json={"command": command(each)})
        if answer.status_code != 201:
            raise RuntimeError(f"POST /jobs: {answer.status_code} {answer.text}")
        made[str(answer.json()["job_id"])] = each
    return made


def wait_ended(http: httpx.Client, job_ids: Sequence[str], deadline: float) -> dict[str, str]:
    """Until every job has ended (RuntimeError past `deadline`, monotonic); the ones that did
    not end done -> their status."""
    wrong = {}
    for job_id in job_ids:
        status = ""
        while status not in FINAL_STATUSES:
            params = {"wait": WAIT_SECS, "status_not": status} if status else {}
            job = http.get(f"/jobs/{job_id}", params=params).json()
            status = str(job["status"])
            if status not in FINAL_STATUSES and time.monotonic() > deadline:
                where = f"{status} on {job.get('node_id') or 'no node'}"
                raise RuntimeError(f"{job_id} has not ended ({where}): past the deadline")
        if status != "done":
            wrong[job_id] = status
    return wrong


def events(http: httpx.Client) -> list[Event]:
    """Every job event kept (GET /events from the oldest, not followed)."""
    body = http.get("/events", params={"after": "0", "follow": "0"}).text
    found = []
    for block in body.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if lines.get("event") != "job":
            continue
        data = json.loads(lines["data"])
        found.append(
            Event(
                number=int(data["number"]),
                job_id=data["job_id"],
                status=data["status"],
                node_id=data.get("node_id", ""),
                at=parse_rfc3339(data["at"]),
                old_status=data.get("old_status", ""),
                old_node_id=data.get("old_node_id", ""),
            )
        )
    return found


def turn(redis_url: str, plan: Plan, arm: str, round_no: int, logs: Path) -> Turn:
    prefix = f"makespan-{ARMS[arm]}-{round_no}"
    with deployment(redis_url, prefix, ARMS[arm], plan, logs) as (http, agents):
        begun = time.time()
        made = submit(http, plan.work)
        time.sleep(max(0.0, begun + plan.kill_after() - time.time()))
        agents[DEAD].kill()  # SIGKILL: no drain, no report, no deregistration
        died = time.time()
        agents[DEAD].wait()
        # A run this far past the ideal is broken, not slow.
        deadline = time.monotonic() + DEADLINE_IDEALS * plan.undisturbed() + 120
        wrong = wait_ended(http, list(made), deadline)
        seen = events(http)
    names = plan.names
    line = timeline(seen, made, names, plan.slots, names[DEAD], died)
    line.problems[:0] = [f"{job}: its record says {status}" for job, status in wrong.items()]
    died_after = died - line.start
    return Turn(line, ideal(plan.work, plan.speeds, plan.slots, DEAD, died_after), died_after)


TURNS = Table(
    Column("makespan", "6.1f", "s"),
    Column("ideal", "6.1f", "s"),
    Column("/ideal", "6.2f"),
    Column("n0 died", "5.1f", "s"),
    Column("longest idle", "6.1f", "s"),
    Column("free slots", "6.1f", "slot-s"),
    label_width=26,
)
NODES = Table(
    Column("speed", "5.2f"),
    Column("seen", "5.2f"),
    Column("done", "4d"),
    Column("lost", "4d"),
    Column("longest idle", "6.1f", "s"),
    Column("free slots", "6.1f", "slot-s"),
    label_width=26,
)
RATIO = Table(Column("median", "6.2f"), Column("each round", ""), label_width=26)


def show_turn(label: str, result: Turn) -> None:
    runs = result.timeline.nodes.values()
    TURNS.row(
        label,
        result.timeline.makespan,
        result.ideal.secs,
        result.ratio,
        result.died_after,
        max(run.longest_idle for run in runs),
        sum(run.free_slot_secs for run in runs),
    )


def show_nodes(plan: Plan, results: dict[str, list[Turn]]) -> None:
    """Each node of each arm, its figures medians of the rounds'."""
    NODES.header("node, medians of the rounds")
    for arm, turns in results.items():
        for i, name in enumerate(plan.names):
            runs = [t.timeline.nodes[name] for t in turns]
            seen = [run.work / run.busy for run in runs if run.busy]
            NODES.row(
                f"{arm}, {name}",
                plan.speeds[i],
                median(seen) if seen else None,
                round(median(run.done for run in runs)),
                round(median(run.lost for run in runs)),
                median(run.longest_idle for run in runs),
                median(run.free_slot_secs for run in runs),
            )


def show_ratios(results: dict[str, list[Turn]]) -> None:
    off, on = results["stealing off"], results["stealing on"]
    for what, figure in (
        ("makespan", lambda t: t.timeline.makespan),
        ("makespan / ideal", lambda t: t.ratio),
    ):
        each = [figure(a) / figure(b) for a, b in zip(off, on, strict=True)]
        spread = " ".join(f"{value:.2f}" for value in each)
        RATIO.row(f"{what}, off / on", median(each), spread)


def parse_plan() -> Plan:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=4, help="at least 2")
    parser.add_argument("--slots", type=int, default=2, help="MAX_JOBS_PER_NODE")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work-min", type=float, default=0.1, help="a job's least work, s")
    parser.add_argument("--work-max", type=float, default=1.5, help="a job's most work, s")
    parser.add_argument("--kill-at", type=float, default=0.5, help="of the way through")
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of every process of both arms, over the benchmark's own",
    )
    args = parser.parse_args()
    pairs = [pair.partition("=") for pair in args.set]
    if any(not name or not sep for name, sep, _ in pairs):
        parser.error("--set takes NAME=VALUE")
    if args.nodes < 2 or args.jobs < 1 or args.slots < 1 or args.rounds < 1:
        parser.error("--nodes at least 2, --jobs, --slots and --rounds at least 1")
    if not 0 < args.work_min <= args.work_max or args.kill_at < 0:
        parser.error("0 < --work-min <= --work-max, and --kill-at at least 0")
    options = {name: value for name, value in vars(args).items() if name != "set"}
    return Plan(**options, settings=tuple((name, value) for name, _, value in pairs))


def main() -> None:
    plan = parse_plan()
    settings = "".join(f"; {name}={value}" for name, value in plan.settings)
    print(
        f"{plan.jobs} jobs of {plan.work_min:g}-{plan.work_max:g} s of work "
        f"({sum(plan.work):.1f} s in all), {plan.nodes} nodes x {plan.slots} slots, speeds "
        f"{' '.join(f'{s:.2f}' for s in plan.speeds)}; n0 killed {plan.kill_after():.1f} s "
        f"after the first submit; {plan.rounds} rounds{settings}",
        flush=True,
    )
    logs = Path(tempfile.mkdtemp(prefix="bench-makespan-"))
    results: dict[str, list[Turn]] = {arm: [] for arm in ARMS}
    failed = []
    with harness.redis_server() as redis_url:
        TURNS.header()
        for round_no in range(plan.rounds):
            for arm in in_turn(list(ARMS), round_no):
                try:
                    result = turn(redis_url, plan, arm, round_no, logs)
                except Exception:
                    print(f"the processes' logs: {logs}", flush=True)
                    raise
                results[arm].append(result)
                show_turn(f"{arm}, round {round_no + 1}", result)
                failed += [f"{arm}, round {round_no + 1}: {p}" for p in result.timeline.problems]
    for arm, turns in results.items():
        TURNS.row(
            f"{arm}, median",
            median(t.timeline.makespan for t in turns),
            median(t.ideal.secs for t in turns),
            median(t.ratio for t in turns),
        )
    show_nodes(plan, results)
    show_ratios(results)
    if failed:
        print("\n".join(["FAILED: not every job ended exactly once, done:", *failed]), flush=True)
        print(f"the processes' logs: {logs}")
        raise SystemExit(1)
    shutil.rmtree(logs, ignore_errors=True)


if __name__ == "__main__":
    main()
