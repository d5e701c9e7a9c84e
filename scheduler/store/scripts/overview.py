"""What the web UI's nodes page and dashboard and /metrics read: the deployment's counts
(OVERVIEW, one small script) and every node's queue and heartbeat (NODE_LOADS), read in
pieces of PIECE nodes, so no script grows with the deployment: one script that read every
node's record took 100 ms of Redis with 3,000 nodes of 16 labels (issue 36), time no other
client was served (benchmarks/nodes_scrape_cost.py). Nothing here reads a node's record:
these pages need none of its labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from scheduler.store.scripts.replies import pairs
from scheduler.store.scripts.script import Call, Script

T = TypeVar("T")

# Nodes a NODE_LOADS script reads (ZSCAN's COUNT, a hint it keeps to within a few): about
# 2 ms of Redis (three ZCARDs and an SCARD a node).
PIECE = 500


class Queue(NamedTuple):
    """A node's jobs: pending, running (services too), the run-jobs holding one of its
    MAX_JOBS_PER_NODE slots (running or cancelling: places.py BUSY), and its services
    (running or cancelling), which hold none."""

    pending: int
    running: int
    slots: int
    services: int


@dataclass(frozen=True, slots=True)
class Overview:
    """The web UI's nodes page and /metrics: each node (the built-in registry's, and those
    the sweep saw in an external one) with its heartbeat (built-in only) and its pending and
    running jobs; the jobs by status, the background counters, the outbox, the drains."""

    last_seen: dict[str, float]
    queues: dict[str, Queue]
    by_status: dict[str, int]
    stats: dict[str, int]
    outbox: int
    drained: dict[str, str]  # node id -> who drained it


@dataclass(frozen=True, slots=True)
class Counts:
    """OVERVIEW's answer: the deployment's counts, no node's."""

    by_status: dict[str, int]
    stats: dict[str, int]
    outbox: int
    drained: dict[str, str]


def _counts(reply: list[Any]) -> Counts:
    by_status, stats, outbox, drained = reply
    return Counts(
        by_status=pairs(by_status),
        stats={k: int(v) for k, v in pairs(stats).items()},
        outbox=outbox,
        drained={k: str(v, "utf-8") for k, v in pairs(drained).items()},
    )


OVERVIEW = Script(
    "OVERVIEW",
    "*statuses",
    _counts,
    read_only=True,
)


@dataclass(frozen=True, slots=True)
class Piece:
    """NODE_LOADS' answer: where the scan goes on ("0": it is over) and its nodes."""

    cursor: str
    last_seen: dict[str, float]
    queues: dict[str, Queue]


def _piece(reply: list[Any]) -> Piece:
    cursor, rows = str(reply[0], "utf-8"), reply[1]
    seen, queues = {}, {}
    for i in range(0, len(rows), 6):
        node = str(rows[i], "utf-8")
        queues[node] = Queue(*(int(count) for count in rows[i + 1 : i + 5]))
        if rows[i + 5]:
            seen[node] = float(rows[i + 5])
    return Piece(cursor, seen, queues)


NODE_LOADS = Script(
    "NODE_LOADS",
    "which cursor count",
    _piece,
    read_only=True,
)


def counts(statuses: Sequence[str]) -> Call[Counts]:
    return OVERVIEW.call(statuses=statuses)


def node_loads(which: str, cursor: str) -> Call[Piece]:
    return NODE_LOADS.call(which=which, cursor=cursor, count=PIECE)


def _added(counts: Sequence[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for part in counts:
        for name, count in part.items():
            total[name] = total.get(name, 0) + count
    return total


def merged(shards: Sequence[Overview]) -> Overview:
    """The overviews of a deployment's shards (store/jobs.py) as one: each node is on one
    shard; the counts add up."""
    return Overview(
        last_seen={k: v for part in shards for k, v in part.last_seen.items()},
        queues={k: v for part in shards for k, v in part.queues.items()},
        by_status=_added([part.by_status for part in shards]),
        stats=_added([part.stats for part in shards]),
        outbox=sum(part.outbox for part in shards),
        drained={k: v for part in shards for k, v in part.drained.items()},
    )
