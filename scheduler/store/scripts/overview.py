"""What the web UI's nodes page and dashboard and /metrics read: the deployment's counts
(OVERVIEW, one small script) and every node's queue and heartbeat (NODE_LOADS), read in
pieces of PIECE nodes, so no script grows with the deployment: one script that read every
node's record took 100 ms of Redis with 3,000 nodes of 16 labels (issue 36), time no other
client was served (benchmarks/nodes_scrape_cost.py). Nothing here reads a node's record:
these pages need none of its labels."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from scheduler.store.scripts.replies import pairs
from scheduler.store.scripts.script import Call, Script

T = TypeVar("T")
Run = Callable[[Call[T]], Awaitable[T]]

# Nodes a NODE_LOADS script reads (ZSCAN's COUNT, a hint it keeps to within a few): about
# 1 ms of Redis (two ZCARDs a node).
PIECE = 500


@dataclass(frozen=True, slots=True)
class Overview:
    """The web UI's nodes page and /metrics: each node (the built-in registry's, and those
    the sweep saw in an external one) with its heartbeat (built-in only) and its pending and
    running jobs; the jobs by status, the background counters, the outbox, the drains."""

    last_seen: dict[str, float]
    queues: dict[str, tuple[int, int]]  # node id -> (pending, running)
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
    queues: dict[str, tuple[int, int]]


def _piece(reply: list[Any]) -> Piece:
    cursor, rows = str(reply[0], "utf-8"), reply[1]
    seen, queues = {}, {}
    for i in range(0, len(rows), 4):
        node = str(rows[i], "utf-8")
        queues[node] = (int(rows[i + 1]), int(rows[i + 2]))
        if rows[i + 3]:
            seen[node] = float(rows[i + 3])
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


async def overview(run: Run[Any], statuses: Sequence[str]) -> Overview:
    """A shard's overview through `run` (JobStore.run): its counts, and its nodes a piece a
    round trip, the two scans side by side (a deployment of PIECE nodes or fewer: one round
    trip in all)."""
    head, *scans = await asyncio.gather(
        run(counts(statuses)), _scan(run, "seen"), _scan(run, "compute")
    )
    seen = {k: v for piece in scans for k, v in piece.last_seen.items()}
    queues = {k: v for piece in scans for k, v in piece.queues.items()}
    return Overview(seen, queues, head.by_status, head.stats, head.outbox, head.drained)


async def _scan(run: Run[Any], which: str) -> Piece:
    """Every node of one of NODE_LOADS' scans, as one piece."""
    seen: dict[str, float] = {}
    queues: dict[str, tuple[int, int]] = {}
    cursor = "0"
    while True:
        piece: Piece = await run(node_loads(which, cursor))
        seen.update(piece.last_seen)
        queues.update(piece.queues)
        cursor = piece.cursor
        if cursor == "0":
            return Piece(cursor, seen, queues)


def _added(counts: Sequence[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for part in counts:
        for name, count in part.items():
            total[name] = total.get(name, 0) + count
    return total


def merged(shards: Sequence[Overview]) -> Overview:
    """The overviews of a deployment's shards (store/sharded.py) as one: each node is on one
    shard; the counts add up."""
    return Overview(
        last_seen={k: v for part in shards for k, v in part.last_seen.items()},
        queues={k: v for part in shards for k, v in part.queues.items()},
        by_status=_added([part.by_status for part in shards]),
        stats=_added([part.stats for part in shards]),
        outbox=sum(part.outbox for part in shards),
        drained={k: v for part in shards for k, v in part.drained.items()},
    )
