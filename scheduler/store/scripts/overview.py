"""OVERVIEW: what the web UI's nodes page and /metrics read, in one round trip, with its call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.store.scripts.replies import pairs
from scheduler.store.scripts.script import Call, Script


@dataclass(frozen=True, slots=True)
class Overview:
    """The web UI's nodes page and /metrics (OVERVIEW)."""

    nodes: dict[str, bytes]  # node id -> node JSON (built-in registry)
    last_seen: dict[str, float]
    queues: dict[str, tuple[int, int]]  # node id -> (pending, running)
    by_status: dict[str, int]
    stats: dict[str, int]
    outbox: int
    drained: dict[str, str]  # node id -> who drained it


def _overview(reply: list[Any]) -> Overview:
    nodes, seen, counts, by_status, stats, outbox, drained = reply
    queues = {
        str(counts[i], "utf-8"): (counts[i + 1], counts[i + 2]) for i in range(0, len(counts), 3)
    }
    return Overview(
        nodes=pairs(nodes),
        last_seen={k: float(v) for k, v in pairs(seen).items()},
        queues=queues,
        by_status=pairs(by_status),
        stats={k: int(v) for k, v in pairs(stats).items()},
        outbox=outbox,
        drained={k: str(v, "utf-8") for k, v in pairs(drained).items()},
    )


OVERVIEW = Script(
    "OVERVIEW",
    "*statuses",
    """
-- What the web UI's nodes page shows, read in one round trip: every node (the built-in
-- registry's, and those the sweep saw in an external one), each with its pending and running
-- jobs, the jobs by status, the background counters, the outbox length and the drains.
-- Returns {nodes hash (flat), last heartbeats (flat), {id, pending, running, ...},
--   {status, count, ...}, stats hash (flat), outbox length, drained hash (flat)}
local nodes = redis.call("HGETALL", K.nodes)
local seen = redis.call("ZRANGE", K.nodes_seen, 0, -1, "WITHSCORES")
local listed, known = {}, {}
for i = 1, #nodes, 2 do listed[#listed + 1] = nodes[i]; known[nodes[i]] = true end
for _, id in ipairs(redis.call("ZRANGE", K.nodes_compute, 0, -1)) do
  if not known[id] then listed[#listed + 1] = id; known[id] = true end
end
local counts = {}
for _, id in ipairs(listed) do
  counts[#counts + 1] = id
  counts[#counts + 1] = redis.call("ZCARD", K.node_status(id, "pending"))
  counts[#counts + 1] = redis.call("ZCARD", K.node_status(id, "running"))
end
local by_status = {}
for _, status in ipairs(statuses) do
  by_status[#by_status + 1] = status
  by_status[#by_status + 1] = redis.call("ZCARD", K.status(status))
end
return {nodes, seen, counts, by_status, redis.call("HGETALL", K.stats),
  redis.call("LLEN", K.outbox), redis.call("HGETALL", K.drained_nodes)}
""",
    _overview,
    read_only=True,
)


def overview(statuses: Sequence[str]) -> Call[Overview]:
    return OVERVIEW.call(statuses=statuses)


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
        nodes={k: v for part in shards for k, v in part.nodes.items()},
        last_seen={k: v for part in shards for k, v in part.last_seen.items()},
        queues={k: v for part in shards for k, v in part.queues.items()},
        by_status=_added([part.by_status for part in shards]),
        stats=_added([part.stats for part in shards]),
        outbox=sum(part.outbox for part in shards),
        drained={k: v for part in shards for k, v in part.drained.items()},
    )
