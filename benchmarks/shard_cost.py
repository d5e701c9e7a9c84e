"""What a job's life costs each primary of a sharded deployment against what it costs an
unsharded one on the same Redis Cluster (issue 26, item 4: "a job's life costs each primary
what it costs a single shard").

    .venv/bin/python -m benchmarks.shard_cost [--lives 2000] [--rounds 3]

A Redis Cluster of three primaries of its own (tests/redis_cluster.py: free loopback ports,
no persistence, the slots in three equal runs) carries four deployments, each a real
`scheduler serve` (one worker, AGENT_AUTH=open, started as life_api.py starts it): one of
SCHEDULER_SHARDS=3, each shard's hash tag on a primary of its own (checked), and three of
SCHEDULER_SHARDS=1, one on each primary. Each has the same six compute nodes, two of each
shard of the sharded one (ids picked by store/shards.py node_shard). A life is life_api.py's:
POST /jobs, the poll of the node it was placed on (which must find exactly that job), PATCH
running, PATCH done, one at a time from one keep-alive client. Three subjects live jobs:
  sharded   the sharded deployment (which places new jobs on its shards in turn: each
            primary holds a third)
  in turn   the three unsharded ones, a life on each in turn: each primary is as busy as
            under the sharded one, but with no sharding code
  alone     the unsharded one on the first primary it found, every life: the single shard
A primary that serves one life in three costs more per life on this machine than one
serving every life (its caches cold again after the other two primaries' turns on the two
cores they share with the API and this client): "in turn" tells that apart from what the
sharded code adds; "alone" is the single shard the issue names.

Rounds interleave the subjects in turns of a tenth of --lives (life_stats.chunks, the order
turning each turn), with CONFIG RESETSTAT on every primary before each turn. Of every
primary in every turn: µs in scripts (fcall*, eval*: a script's inner commands run inside
its time, as life_cost.py counts them) and Redis CPU (all threads) less the primary's idle
draw over the turn (cron, cluster bus, the quiet APIs; measured 2 s a round). A primary's
figure is divided by the lives whose records it holds (the sharded ones from their ids:
job-N is shard N mod 3, and a shard's primary the owner of its tag's slot).

Printed, for each primary: its share of the sharded lives; its µs per life of its own in
scripts and CPU under each subject (alone: on its one primary), sharded / in turn and
sharded / alone (each the median of the rounds'); then the three primaries' sum per life of
each subject (alone's other two primaries idle), and the ceiling the busiest primary sets on
the sharded deployment's lives per second of Redis CPU against one primary's alone.

What it cannot isolate: the sharded API asks every shard for its live nodes once a second
(a new job's placement, ShardPlacement.live_shards), which lands on all three primaries in
whichever sharded turn it falls: part of the sharded cost, spread over the lives of about a
second. The APIs, this client and the three primaries share the machine's cores.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import redis

from benchmarks import harness
from benchmarks.life_api import Api, api, register
from benchmarks.life_stats import Figures, Sample, idle, sampled
from benchmarks.report import Column, Table
from benchmarks.timing import chunks, in_turn, median_ratio
from scheduler.config import Settings
from scheduler.config.shards import key_slot
from scheduler.store.shards import Layout, node_shard

SHARDS = 3
NODES_PER_SHARD = 2
SHARDED, IN_TURN, ALONE = "sharded", "in turn", "alone"
SUBJECTS = (SHARDED, IN_TURN, ALONE)
SHARDED_PREFIX, UNSHARDED_PREFIX = "shcost", "single"
CLUSTER = "cluster"  # the three primaries' sum, as a Redis name of Figures
METRICS = ("in scripts", "Redis CPU")
WARM_LIVES = 20


def node_ids() -> list[str]:
    """NODES_PER_SHARD node ids of each shard."""
    found: dict[int, list[str]] = {k: [] for k in range(SHARDS)}
    i = 0
    while any(len(ids) < NODES_PER_SHARD for ids in found.values()):
        node = f"node-{i}"
        i += 1
        if len(ids := found[node_shard(node, SHARDS)]) < NODES_PER_SHARD:
            ids.append(node)
    return [node for ids in found.values() for node in ids]


@dataclass
class Deployment:
    """One `scheduler serve` and where its jobs' records are: the primary (its index in the
    cluster's) of each of its shards, shard 0 first."""

    api: Api
    primaries: list[int]
    layout: Layout

    def home(self, job_id: str) -> int:
        return self.primaries[self.layout.job_shard(job_id)]


@dataclass
class Subject:
    """Lives sent to its deployments in turn, one life each."""

    name: str
    deployments: list[Deployment]
    _turn: Iterator[int] = dataclasses.field(default_factory=itertools.count)

    def lives(self, count: int) -> list[int]:
        """`count` lives: how many had their records on each primary."""
        counts = [0] * SHARDS
        for _ in range(count):
            d = self.deployments[next(self._turn) % len(self.deployments)]
            counts[d.home(d.api.lives(1)[0])] += 1
        return counts


def primary_of(cluster: harness.Cluster, prefix: str) -> int:
    return cluster.nodes.index(cluster.owner(key_slot(prefix)))


@contextlib.contextmanager
def deployment(
    cluster: harness.Cluster, prefix: str, shards: int, nodes: list[str]
) -> Iterator[Deployment]:
    env = {"SCHEDULER_SHARDS": str(shards)}
    settings = Settings.from_env({"REDIS_PREFIX": prefix, **env})
    prefixes = [settings.for_shard(k).redis_prefix for k in range(shards)]
    owners = [primary_of(cluster, p) for p in prefixes]
    if len(set(owners)) != shards:
        raise SystemExit(f"{prefix}: the shards' tags {prefixes} share primaries {owners}")
    with (
        api(harness.ROOT, cluster.url, prefix, **env) as served,
        httpx.Client(base_url=served.url, timeout=30.0) as http,
    ):
        for node in nodes:
            register(http, node, False, "measured", 4)
        stats = cluster.nodes[owners[0]].client()  # life_api's; this benchmark reads all three
        subject = Api(prefix, stats, cluster.url, served.url, False, tuple(nodes))
        subject.lives(WARM_LIVES)  # unmeasured: functions loaded, connections open, caches warm
        yield Deployment(subject, owners, Layout(shards))
        subject.http.close()


def unsharded_prefixes(cluster: harness.Cluster) -> list[str]:
    """A prefix on each primary, in the cluster's order."""
    found: dict[int, str] = {}
    for i in itertools.count():
        found.setdefault(primary_of(cluster, f"{UNSHARDED_PREFIX}-{i}"), f"{UNSHARDED_PREFIX}-{i}")
        if len(found) == len(cluster.nodes):
            return [found[k] for k in range(len(cluster.nodes))]
    raise AssertionError("unreachable")


@contextlib.contextmanager
def subjects(cluster: harness.Cluster) -> Iterator[list[Subject]]:
    """The sharded deployment; the three unsharded ones in turn; the first of those alone."""
    nodes = node_ids()
    with contextlib.ExitStack() as stack:
        sharded = stack.enter_context(deployment(cluster, SHARDED_PREFIX, SHARDS, nodes))
        unsharded = [
            stack.enter_context(deployment(cluster, prefix, 1, nodes))
            for prefix in unsharded_prefixes(cluster)
        ]
        yield [
            Subject(SHARDED, [sharded]),
            Subject(IN_TURN, unsharded),
            Subject(ALONE, unsharded[:1]),
        ]


def turn(subject: Subject, clients: dict[str, redis.Redis], count: int) -> dict[str, Sample]:
    """`count` lives: a Sample of each primary counting the lives whose records it holds,
    and of the cluster (their sums, counting every life)."""
    per: list[int] = []

    def lives() -> int:
        per.extend(subject.lives(count))
        return count

    samples = sampled(clients, lives)
    names = list(clients)
    total = [sum(getattr(s, f) for s in samples.values()) for f in ("scripts", "every", "cpu")]
    main = sum(s.main for s in samples.values())
    found = {n: dataclasses.replace(samples[n], count=per[i]) for i, n in enumerate(names)}
    return {**found, CLUSTER: Sample(count, *total, main, samples[names[0]].wall)}


def name(subject: str, redis_name: str) -> str:
    return f"{subject}@{redis_name}"


@dataclass(frozen=True)
class Where:
    shards: list[int]  # the sharded deployment's primary of each shard
    alone: int  # the alone subject's primary


def measured(cluster: harness.Cluster, lives: int, count: int) -> tuple[Figures, Where]:
    clients = {f"p{i}": node.client() for i, node in enumerate(cluster.nodes)}
    redises = [*clients, CLUSTER]
    figures = Figures(
        {name(s, r): {"life": []} for s in SUBJECTS for r in redises},
        {r: [] for r in redises},
        {name(s, r): r for s in SUBJECTS for r in redises},
    )
    with subjects(cluster) as every:
        for round_ in range(count):
            rates = idle(clients)
            summed = (sum(r[0] for r in rates.values()), sum(r[1] for r in rates.values()))
            for redis_name, rate in {**rates, CLUSTER: summed}.items():
                figures.idles[redis_name].append(rate)
            parts: dict[str, list[Sample]] = {}
            for i, size in enumerate(chunks(lives)):
                for subject in in_turn(every, round_ + i):
                    for r, sample in turn(subject, clients, size).items():
                        parts.setdefault(name(subject.name, r), []).append(sample)
            for key, samples in parts.items():
                figures.samples[key]["life"].append(sum(samples[1:], samples[0]))
        sharded, _, alone = every
    where = Where(sharded.deployments[0].primaries, alone.deployments[0].primaries[0])
    return figures, where


def share(figures: Figures, redis_name: str) -> float:
    """The part of the sharded deployment's jobs whose records `redis_name` holds."""
    ran = sum(s.count for s in figures.samples[name(SHARDED, redis_name)]["life"])
    return ran / sum(s.count for s in figures.samples[name(SHARDED, CLUSTER)]["life"])


def median(figures: Figures, subject: str, redis_name: str, metric: str) -> float:
    return statistics.median(figures.values(name(subject, redis_name), "life", metric))


def row(figures: Figures, redis_name: str, alone: str) -> list[float | str]:
    """µs per life of a primary (or of the cluster): its share, then of each metric sharded,
    in turn on the same one and their ratio, alone (on `alone`) and sharded / alone."""
    values: list[float | str] = [f"{share(figures, redis_name) * 100:5.1f}%"]
    for metric in METRICS:
        ours = figures.values(name(SHARDED, redis_name), "life", metric)
        in_turn_ = figures.values(name(IN_TURN, redis_name), "life", metric)
        by_itself = figures.values(name(ALONE, alone), "life", metric)
        values += [statistics.median(ours), statistics.median(in_turn_)]
        values += [median_ratio(ours, in_turn_), statistics.median(by_itself)]
        values.append(median_ratio(ours, by_itself))
    return values


def table(figures: Figures, where: Where, args: argparse.Namespace) -> None:
    alone = f"p{where.alone}"
    idles = ", ".join(f"{r} {figures.idle_rate(r)[0] * 1e3:.1f} ms/s" for r in figures.idles)
    print(
        f"3-primary Redis Cluster, {args.lives} lives of each subject a round, {args.rounds} "
        f"rounds: medians of the rounds, ratios the median of each round's. Redis idle "
        f"({idles}) is taken off the CPU figures"
    )
    shards = ", ".join(f"shard {k} on p{p}" for k, p in enumerate(where.shards))
    print(
        f"sharded: {shards}; in turn: one unsharded deployment on each; alone: the one on {alone}"
    )
    columns = [Column("share", "6s")]
    for metric in METRICS:
        columns += [Column(f"{metric}: sharded", "8.1f"), Column("in turn", "8.1f")]
        columns += [Column("ratio", "5.2f"), Column("alone", "8.1f"), Column("ratio", "5.2f")]
    rows = Table(*columns, label_width=22)
    rows.header("µs per life")
    primaries = [f"p{i}" for i in range(SHARDS)]
    for primary in primaries:
        rows.row(f"{primary}, its own lives", *row(figures, primary, alone))
    rows.row("sum of the primaries", *row(figures, CLUSTER, CLUSTER))
    # The cluster's ceiling is its busiest primary's: that one's CPU per life of the whole.
    busiest = max(share(figures, p) * median(figures, SHARDED, p, "Redis CPU") for p in primaries)
    single = median(figures, ALONE, alone, "Redis CPU")
    print(
        f"Redis CPU ceiling: sharded {1e6 / busiest:.0f} lives/s (its busiest primary, "
        f"{busiest:.1f} µs a life of the deployment), alone {1e6 / single:.0f} lives/s "
        f"(one primary): {single / busiest:.2f}x",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lives", type=int, default=2000, help="lives of each subject a round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with harness.redis_cluster(SHARDS) as cluster:
        figures, where = measured(cluster, args.lives, args.rounds)
    table(figures, where, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
